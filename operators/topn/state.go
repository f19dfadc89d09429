package topn

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// State.
//
// With keyBy, the candidate rows are keyed state in the backend the task
// runtime opened (statebackend.KeyedBackend), which snapshots and restores
// them (and the timers) with the rest of the subtask's keyed state:
//
//   - value state panesTable: per key, a *keyPanes — the key's panes in
//     ascending start order, each with its best rows best first — encoded by
//     panesCodec (ID "topn.panes(<column types>;rank <column> <desc|asc>)");
//   - event-time timers at end-1 of the key's windows that have data, one
//     per key and window: set when a pane is created (for its first window
//     that has not fired, unless an earlier pane of the key is in that
//     window) and when a window fires (for the next window, if a pane of
//     this one remains). A timer emits its window and drops the panes whose
//     last window it was; the value is cleared with the last pane, so a key
//     has no state once its windows have fired.
//
// Without keyBy the top-n is per subtask (the local phase of a two-phase
// maximum, as in Nexmark q7, or a final phase at parallelism 1): its panes
// live in the operator and are operator list state globalState, one item
// per subtask: byte version = 2, then the panesCodec encoding (version 1
// was this package's own snapshot format before the task runtime owned
// keyed state; it is not read). A restore merges the items it gets (after
// a rescale, several subtasks' panes), trimming each pane to the top n
// again.
//
// Both write union operator state: signatureState, the key and row types,
// the ranking and the pane alignment, which a restore checks (as
// running_count does with its key types), and watermarkState: byte version
// = 1, the watermark (varint) and the next arrival number (varint). A
// restore takes the smallest watermark, so that no window that had not
// fired in some subtask is taken for fired, and the largest arrival number,
// so that rows arriving after the restore rank below equal rows restored.
const (
	panesTable     = "panes"
	globalState    = "global"
	signatureState = "signature"
	watermarkState = "watermark"
	stateVersion   = 1 // of watermarkState
	globalVersion  = 2 // of globalState
)

// cand is a candidate row: its rank key, its arrival number and the row.
type cand struct {
	sk  int64 // larger ranks higher (see TopN.sortKey)
	seq int64 // arrival number: among equal sk, the smaller ranks higher
	// row is every input column's value, rowenc.AppendExactValue-encoded.
	// It is immutable: state may hand it out again and output columns share
	// its string bytes.
	row []byte
}

// pane is the best rows of one key in the slide-long interval [start,
// start+slide), best first: the top n, or with ties every row at least as
// good as the n-th.
type pane struct {
	start int64
	rows  []cand
}

// keyPanes is the state of one key: its panes in ascending start order. A
// keyPanes stored in state is never modified: a change makes a new one,
// which may share the rows of the old.
type keyPanes struct {
	ps  []pane
	one [1]pane // holds ps when the key has one pane (the usual case)
}

// newKeyPanes returns a keyPanes for n panes; append them to ps.
func newKeyPanes(n int) *keyPanes {
	kp := &keyPanes{}
	if n <= len(kp.one) {
		kp.ps = kp.one[:0]
	} else {
		kp.ps = make([]pane, 0, n)
	}
	return kp
}

// panesCodec encodes a keyPanes, or the panes of a top-n without keyBy:
// uvarint number of panes, then per pane varint start, uvarint number of
// rows, then per row varint arrival number, uvarint length and the row.
// Decode checks every row against the input's column types and recomputes
// its rank key, so that state written for other types fails to restore
// instead of decoding as garbage.
type panesCodec struct {
	types []stream.Type
	col   int // ranked column
	asc   bool
	id    string
}

func newPanesCodec(in *stream.Schema, col int, asc bool) panesCodec {
	c := panesCodec{types: make([]stream.Type, in.Len()), col: col, asc: asc}
	names := make([]string, in.Len())
	for i, f := range in.Fields {
		c.types[i] = f.Type
		names[i] = f.Type.String()
	}
	order := "desc"
	if asc {
		order = "asc"
	}
	c.id = fmt.Sprintf("topn.panes(%s;rank %d %s)", strings.Join(names, ","), col, order)
	return c
}

func (c panesCodec) ID() string { return c.id }

func (c panesCodec) Append(dst []byte, v *keyPanes) []byte {
	if v == nil {
		return c.appendPanes(dst, nil)
	}
	return c.appendPanes(dst, v.ps)
}

func (c panesCodec) Decode(src []byte) (*keyPanes, error) {
	ps, err := c.decodePanes(src)
	if err != nil {
		return nil, err
	}
	kp := newKeyPanes(len(ps))
	kp.ps = append(kp.ps, ps...)
	return kp, nil
}

func (c panesCodec) appendPanes(dst []byte, ps []pane) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ps)))
	for _, p := range ps {
		dst = binary.AppendVarint(dst, p.start)
		dst = binary.AppendUvarint(dst, uint64(len(p.rows)))
		for _, r := range p.rows {
			dst = binary.AppendVarint(dst, r.seq)
			dst = binary.AppendUvarint(dst, uint64(len(r.row)))
			dst = append(dst, r.row...)
		}
	}
	return dst
}

func (c panesCodec) decodePanes(src []byte) ([]pane, error) {
	buf := append([]byte(nil), src...) // the rows alias this copy
	r := &rowenc.Reader{B: buf}
	n := r.Count()
	out := make([]pane, 0, n)
	for range n {
		p := pane{start: r.Varint()}
		rows := r.Count()
		if r.Err != nil {
			break
		}
		if len(out) > 0 && p.start <= out[len(out)-1].start {
			return nil, fmt.Errorf("%s codec: pane starts out of order (%d after %d)", c.id, p.start, out[len(out)-1].start)
		}
		p.rows = make([]cand, 0, rows)
		for range rows {
			seq := r.Varint()
			row := r.Bytes()
			if r.Err != nil {
				break
			}
			sk, err := c.check(row)
			if err != nil {
				return nil, fmt.Errorf("%s codec: pane %d: row of %d bytes: %w", c.id, p.start, len(row), err)
			}
			p.rows = append(p.rows, cand{sk: sk, seq: seq, row: row[:len(row):len(row)]})
		}
		out = append(out, p)
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%s codec: %d bytes: %w", c.id, len(src), err)
	}
	return out, nil
}

// check reports whether row is a row of c's column types with a non-null
// ranked value, and returns its rank key.
func (c panesCodec) check(row []byte) (int64, error) {
	r := &rowenc.Reader{B: row}
	var sk int64
	for j, t := range c.types {
		null := r.Byte() == 1
		if j == c.col && null && r.Err == nil {
			return 0, fmt.Errorf("the ranked column is null")
		}
		if null {
			continue
		}
		switch t {
		case stream.TypeInt64, stream.TypeTimestamp:
			v := r.Varint()
			if j == c.col {
				sk = rankKey(v, c.asc)
			}
		case stream.TypeFloat64:
			v := r.Uint64()
			if j == c.col {
				sk = rankKey(floatKey(math.Float64frombits(v)), c.asc)
			}
		case stream.TypeString:
			r.Bytes()
		case stream.TypeBool:
			if r.Byte() > 1 && r.Err == nil {
				return 0, fmt.Errorf("bool byte out of range")
			}
		}
	}
	return sk, r.Done()
}

// floatKey maps f to an int64 whose order is f's (NaN above +Inf).
func floatKey(f float64) int64 {
	b := math.Float64bits(f)
	if b>>63 != 0 {
		b = ^b
	} else {
		b |= 1 << 63
	}
	return int64(b ^ 1<<63)
}

// rankKey is the rank key of a value's order key k: larger ranks higher.
func rankKey(k int64, asc bool) int64 {
	if asc {
		return ^k
	}
	return k
}

// appendRow appends row i of b (see cand.row) to dst.
func appendRow(dst []byte, b *stream.Batch, i int) []byte {
	for j := range b.Cols {
		dst = rowenc.AppendExactValue(dst, &b.Cols[j], i)
	}
	return dst
}

// signature names what the state was written for, e.g. "key (int64); rows
// (int64, float64, string); rank column 1 desc; panes of 2000ms at offset
// 0ms".
func (o *TopN) signature() string {
	types := func(cols []int) string {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = o.in.Fields[c].Type.String()
		}
		return "(" + strings.Join(names, ", ") + ")"
	}
	all := make([]int, o.in.Len())
	for i := range all {
		all[i] = i
	}
	key := "no key"
	if o.keyed {
		key = "key " + types(o.r.keyCols)
	}
	order := "desc"
	if o.spec.asc {
		order = "asc"
	}
	return fmt.Sprintf("%s; rows %s; rank column %d %s; panes of %dms at offset %dms", key, types(all), o.r.col, order, o.spec.slide, o.spec.offset)
}

// SnapshotState writes the signature, the watermark and the arrival number
// as union state and, without keyBy, the panes as list state; keyed panes
// and timers are keyed state, which the runtime snapshots.
func (o *TopN) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(signatureState, []byte(o.signature()))
	u := binary.AppendVarint([]byte{stateVersion}, o.wm)
	c.AddUnionState(watermarkState, binary.AppendVarint(u, o.seq))
	if !o.keyed && len(o.global) > 0 {
		c.AddListState(globalState, o.codec.appendPanes([]byte{globalVersion}, o.global))
	}
	return nil
}

// RestoreState checks the signature, takes the smallest watermark and the
// largest arrival number and, without keyBy, merges the panes it is given.
func (o *TopN) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	where := fmt.Sprintf("%s: restoring checkpoint %d", o.name, c.CheckpointID)
	want := o.signature()
	for _, sig := range c.State.Union[signatureState] {
		if string(sig) != want {
			return fmt.Errorf("%s: the state was written for another key, input, ranking or slide (%s); this operator has %s; restore it into the job that wrote it, or start without the checkpoint", where, sig, want)
		}
	}
	for i, item := range c.State.Union[watermarkState] {
		r := &rowenc.Reader{B: item}
		if v := r.Byte(); r.Err == nil && v != stateVersion {
			return fmt.Errorf("%s: unknown watermark state version %d (this build reads %d)", where, v, stateVersion)
		}
		wm, seq := r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt watermark state: %v", where, err)
		}
		if i == 0 || wm < o.wm {
			o.wm = wm
		}
		o.seq = max(o.seq, seq)
	}
	items := c.State.List[globalState]
	if len(items) > 0 && o.keyed {
		return fmt.Errorf("%s: the checkpoint holds the panes of a top-n without keyBy; this one is keyed; restore it into the job that wrote it, or start without the checkpoint", where)
	}
	for _, item := range items {
		switch {
		case len(item) > 0 && item[0] == 1:
			return fmt.Errorf("%s: the checkpoint holds window state in the format of an earlier Weir, which this build does not read; start the job without the checkpoint", where)
		case len(item) == 0 || item[0] != globalVersion:
			return fmt.Errorf("%s: global state: unknown version (this build reads %d)", where, globalVersion)
		}
		ps, err := o.codec.decodePanes(item[1:])
		if err != nil {
			return fmt.Errorf("%s: global state: %w", where, err)
		}
		for _, p := range ps {
			o.global = o.mergePane(o.global, p)
		}
	}
	return nil
}
