package window

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state of the window and watermarks operators.
//
// A keyed window writes one chunk of keyed state per key group that has
// data (SnapshotContext.WriteKeyGroup), in this format (varint and uvarint
// as in encoding/binary):
//
//	byte    version = 1
//	uvarint key group
//	uvarint number of key fields, then one stream.Type byte per field
//	uvarint number of aggregates, then one aggKind byte per aggregate
//	uvarint number of keys, then per key:
//	    per key field: byte 1 for null, else 0 and the value (int64 and
//	    timestamp: varint; float64: 8 bytes little-endian IEEE 754 bits;
//	    string: uvarint length and bytes; bool: one byte)
//	    uvarint number of panes, then per pane (latest first):
//	        varint pane start (ms), uvarint rows, then per aggregate the
//	        accumulator fields its kind uses, in this order: integer
//	        (varint), float (8 bytes), non-null count (uvarint)
//
// The key and aggregate types make a restore into a changed job fail loudly
// instead of misreading the state. A window without keyBy (global) writes
// the same chunk, with key group 0 and no key fields, as one item of operator
// list state "global".
//
// Every window subtask also writes one item of union state "watermark":
// byte version = 1, varint watermark, varint acceptFrom (the first pane
// start still accepted). A restore takes the smallest over all items, so no
// window that has not fired is skipped after rescaling.
//
// The watermarks operator writes one item of list state "maxTimestamp":
// byte version = 1, varint largest timestamp seen, varint last watermark
// emitted; a restore takes the largest over the items it gets.
const (
	stateVersion       = 1
	globalStateName    = "global"
	watermarkStateName = "watermark"
	maxTimestampState  = "maxTimestamp"
)

var (
	_ stream.Checkpointed = (*Window)(nil)
	_ stream.Checkpointed = (*Watermarks)(nil)
)

// SnapshotState writes the accumulators of every (key, pane) per key group,
// and the watermark.
func (w *Window) SnapshotState(c *stream.SnapshotContext) error {
	wmItem := binary.AppendVarint([]byte{stateVersion}, w.wm)
	c.AddUnionState(watermarkStateName, binary.AppendVarint(wmItem, w.acceptFrom))

	kt := w.st.keys
	if len(w.r.keyCols) == 0 {
		if len(kt.head) > 0 && kt.head[0] >= 0 {
			c.AddListState(globalStateName, w.appendKeys(w.chunkHeader(nil, 0, 1), 0))
		}
		return nil
	}
	// Count the keys with data per key group, then write each group.
	counts := make(map[int32]int)
	for k, s := range kt.head {
		if s >= 0 {
			counts[kt.group[k]]++
		}
	}
	chunks := make(map[int32][]byte, len(counts))
	for k, s := range kt.head {
		if s < 0 {
			continue
		}
		g := kt.group[k]
		buf, ok := chunks[g]
		if !ok {
			if !c.KeyGroups.Contains(int(g)) {
				return fmt.Errorf("%s: holds a key of key group %d, outside this subtask's range %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", w.name, g, c.KeyGroups)
			}
			buf = w.chunkHeader(make([]byte, 0, 64*counts[g]), int(g), counts[g])
		}
		chunks[g] = w.appendKeys(buf, int32(k))
	}
	for g, buf := range chunks {
		c.WriteKeyGroup(int(g), buf)
	}
	return nil
}

// chunkHeader appends the header of a chunk of n keys of key group g.
func (w *Window) chunkHeader(buf []byte, g, n int) []byte {
	buf = rowenc.AppendHeader(buf, stateVersion, g, w.st.keys.types)
	buf = binary.AppendUvarint(buf, uint64(len(w.r.aggs)))
	for _, a := range w.r.aggs {
		buf = append(buf, byte(a.kind))
	}
	return binary.AppendUvarint(buf, uint64(n))
}

// appendKeys appends key k and its panes.
func (w *Window) appendKeys(buf []byte, k int32) []byte {
	st := w.st
	for j := range st.keys.cols {
		buf = rowenc.AppendExactValue(buf, &st.keys.cols[j], int(k))
	}
	n := 0
	for s := st.keys.head[k]; s >= 0; s = st.next[s] {
		n++
	}
	buf = binary.AppendUvarint(buf, uint64(n))
	for s := st.keys.head[k]; s >= 0; s = st.next[s] {
		buf = binary.AppendVarint(buf, st.slotPane[s])
		buf = binary.AppendUvarint(buf, uint64(st.acc.rows[s]))
		for j, a := range w.r.aggs {
			c := &st.acc.cols[j]
			ui, uf, un := a.kind.fields()
			if ui {
				buf = binary.AppendVarint(buf, c.i[s])
			}
			if uf {
				buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(c.f[s]))
			}
			if un {
				buf = binary.AppendUvarint(buf, uint64(c.n[s]))
			}
		}
	}
	return buf
}

// fields reports which accumulator fields an aggregate kind uses: the
// integer, the float and the non-null count.
func (k aggKind) fields() (i, f, n bool) {
	switch k {
	case aggCount:
	case aggCountField:
		n = true
	case aggSumInt:
		i = true
	case aggSumFloat:
		f = true
	case aggAvgInt, aggMinInt, aggMaxInt:
		i, n = true, true
	case aggAvgFloat, aggMinFloat, aggMaxFloat:
		f, n = true, true
	}
	return i, f, n
}

// RestoreState loads the accumulators of the key groups in c.KeyGroups
// (chunks of other key groups are ignored) and the watermark.
func (w *Window) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	where := fmt.Sprintf("%s: restoring checkpoint %d", w.name, c.CheckpointID)
	first := true
	for _, item := range c.State.Union[watermarkStateName] {
		r := newStateReader(item)
		wm, from := r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt watermark state: %v", where, err)
		}
		if first || wm < w.wm {
			w.wm, w.acceptFrom = wm, from
		}
		first = false
	}
	if len(w.r.keyCols) == 0 {
		for _, item := range c.State.List[globalStateName] {
			if err := w.restoreChunk(item, -1); err != nil {
				return fmt.Errorf("%s: global window state: %w", where, err)
			}
		}
		return nil
	}
	for g, chunks := range c.State.Keyed {
		if !c.KeyGroups.Contains(g) {
			continue
		}
		for _, chunk := range chunks {
			if err := w.restoreChunk(chunk, g); err != nil {
				return fmt.Errorf("%s: key group %d: %w", where, g, err)
			}
		}
	}
	return nil
}

// restoreChunk loads one chunk of key group g (-1: the global window).
func (w *Window) restoreChunk(chunk []byte, g int) error {
	r := newStateReader(chunk)
	if cg := int(r.Uvarint()); r.Err == nil && g >= 0 && cg != g {
		return fmt.Errorf("the chunk says it holds key group %d", cg)
	}
	kt := w.st.keys
	nk, sameLayout := r.SameTypes(kt.types)
	na := int(r.Uvarint())
	sameLayout = sameLayout && na == len(w.r.aggs)
	for j := 0; j < na && r.Err == nil; j++ {
		k := aggKind(r.Byte())
		sameLayout = sameLayout && k == w.r.aggs[j].kind
	}
	if r.Err != nil {
		return fmt.Errorf("corrupt state: %v", r.Err)
	}
	if !sameLayout {
		return fmt.Errorf("the state was written for another key or other aggregates (%d key fields, %d aggregates; this operator has %d and %d); restore it into the job that wrote it, or start without the checkpoint",
			nk, na, len(kt.cols), len(w.r.aggs))
	}
	n := int(r.Uvarint())
	if r.Err != nil || n > len(r.B) {
		return fmt.Errorf("corrupt state: %v", rowenc.ErrTruncated)
	}
	// Each key is decoded as the only row of a batch of the input schema of
	// which only the key columns are filled: the key table and HashKeys read
	// nothing else.
	kb := stream.NewBatch(w.in, 1)
	defer kb.Release()
	tmp := newAccs(w.r.aggs)
	tmp.grow(1)
	var hash [1]uint64
	for i := 0; i < n && r.Err == nil; i++ {
		for _, col := range kt.src {
			c := &kb.Cols[col]
			c.Ints, c.Floats, c.Strs, c.Bools, c.Nulls = c.Ints[:0], c.Floats[:0], c.Strs[:0], c.Bools[:0], nil
			r.Value(c, 0)
		}
		kb.SetLen(1)
		if r.Err != nil {
			break
		}
		var h uint64 // the global window's one key has hash 0
		if nk > 0 {
			stream.HashKeys(kb, kt.src, hash[:])
			h = hash[0]
			if got := stream.KeyGroupForHash(h, kt.maxPar); got != g {
				return fmt.Errorf("a key in the chunk belongs to key group %d; the key hash or max parallelism changed since the checkpoint", got)
			}
		}
		k := kt.find(h, kb, 0)
		if k < 0 {
			k = kt.insert(h, kb, 0)
		}
		panes := int(r.Uvarint())
		for p := 0; p < panes && r.Err == nil; p++ {
			start := r.Varint()
			tmp.reset(0)
			tmp.rows[0] = int64(r.Uvarint())
			for j, a := range w.r.aggs {
				ui, uf, un := a.kind.fields()
				c := &tmp.cols[j]
				if ui {
					c.i[0] = r.Varint()
				}
				if uf {
					c.f[0] = math.Float64frombits(r.Uint64())
				}
				if un {
					c.n[0] = int64(r.Uvarint())
				}
			}
			if r.Err == nil {
				w.st.acc.merge(w.st.slot(k, start), tmp, 0)
			}
		}
	}
	if err := r.Done(); err != nil {
		return fmt.Errorf("corrupt state: %v", err)
	}
	return nil
}

// SnapshotState records the largest timestamp seen and the last watermark.
func (o *Watermarks) SnapshotState(c *stream.SnapshotContext) error {
	item := binary.AppendVarint([]byte{stateVersion}, o.maxTs)
	c.AddListState(maxTimestampState, binary.AppendVarint(item, o.wm))
	return nil
}

// RestoreState continues from the largest timestamp and watermark in the
// items it gets, so that its watermark never goes back.
func (o *Watermarks) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	for _, item := range c.State.List[maxTimestampState] {
		r := newStateReader(item)
		maxTs, wm := r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: restoring checkpoint %d: corrupt max timestamp state: %v", o.name, c.CheckpointID, err)
		}
		o.maxTs, o.wm = max(o.maxTs, maxTs), max(o.wm, wm)
	}
	return nil
}

// newStateReader returns a reader of a state item or chunk after checking
// its version byte.
func newStateReader(b []byte) *rowenc.Reader {
	r := &rowenc.Reader{B: b}
	if v := r.Byte(); r.Err == nil && v != stateVersion {
		r.Err = fmt.Errorf("unknown format version %d (this build reads version %d)", v, stateVersion)
	}
	return r
}
