package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// State.
//
// A window's panes are keyed state in the backend the task runtime opened
// (statebackend.KeyedBackend), which snapshots and restores them, with the
// timers, as the rest of the subtask's keyed state:
//
//   - statebackend.Slots panesTable: per key and pane start, the pane's
//     accumulators as int64 words (see layout in agg.go);
//   - on Pebble, event-time timers of the keys that are not resident
//     (below): per key, at end-1 of the key's next window that has data,
//     or, when its panes' windows have all fired, at the end of their
//     allowed lateness. A timer emits the key's window ending at its
//     time+1, drops the panes whose last window and lateness ended, and
//     sets the key's next timer. A key has no state once its windows have
//     fired and their lateness passed.
//
// A window fires from a pane index (paneindex.go, derived from the slots,
// not snapshotted) that lists each pane's resident slots: a watermark fires
// the windows it passes pane by pane and drops the panes past their
// lateness, as a per-key timer would, at a fraction of the cost. On the
// heap every slot is resident. On Pebble the resident keys are a
// write-back cache of the panes table within a memory budget
// (statebackend.Slots.Evict): a key becomes resident when a record for it
// arrives, and a key that is spilled to keep the budget gets its timer,
// so that it fires from Pebble without coming back into memory. Snapshots
// see the resident keys written back, not their timers, so union state
// firingState says "panes": a restore onto Pebble sets the timers of every
// key (one scan of the table), and a restore onto the heap ignores the
// timers it finds. Checkpoints written by per-key timers alone ("timers")
// restore onto Pebble as they are.
//
// A processing-time window keeps the same slots (its panes are windows of
// the task's clock) and, per key and pending window, a processing-time
// timer at the window's end (proctime.go); it uses neither the pane index
// nor event-time timers, writes no firingState, and its signature ends in
// "; processing time", so that its state and an event-time window's never
// restore into each other.
//
// Without keyBy the window is per subtask: its panes are kept under the
// empty key in the first key group of the subtask's range.
//
// Every subtask also writes union operator state: signatureState, the key
// types, the aggregates and the pane alignment, which a restore checks, and
// watermarkState: byte version = 1 and the watermark (varint). A restore
// takes the smallest watermark, so that no window that had not fired in some
// subtask is taken for fired.
//
// The watermarks operator writes one item of list state maxTimestampState:
// byte version = 1, varint largest timestamp seen, varint last watermark
// emitted; a restore takes the largest over the items it gets.
const (
	panesTable        = "panes"
	signatureState    = "signature"
	watermarkState    = "watermark"
	maxTimestampState = "maxTimestamp"
	firingState       = "firing"
	firingPanes       = "panes" // fired from the pane index: not every key has its timer
	stateVersion      = 1       // of watermarkState and maxTimestampState
)

var (
	_ stream.Checkpointed = (*Window)(nil)
	_ stream.Checkpointed = (*Watermarks)(nil)
)

// signature describes what the state's meaning depends on.
func (w *Window) signature() string {
	var sb strings.Builder
	sb.WriteString("window(keys")
	for _, c := range w.r.keyCols {
		fmt.Fprintf(&sb, " %s", w.in.Fields[c].Type)
	}
	sb.WriteString("; aggregates")
	for _, a := range w.r.aggs {
		fmt.Fprintf(&sb, " %d", a.kind)
	}
	fmt.Fprintf(&sb, "; slide %d offset %d", w.spec.slide, w.spec.offset)
	if w.spec.processing {
		// Panes of processing time, with processing-time timers; the
		// event-time signature is unchanged from before the option.
		sb.WriteString("; processing time")
	}
	sb.WriteString(")")
	return sb.String()
}

// SnapshotState writes the signature and the watermark; the panes and
// timers are keyed state, which the runtime snapshots.
func (w *Window) SnapshotState(c *stream.SnapshotContext) error {
	w.slots.Flush()
	c.AddUnionState(signatureState, []byte(w.signature()))
	c.AddUnionState(watermarkState, binary.AppendVarint([]byte{stateVersion}, w.wm))
	if !w.spec.processing {
		c.AddUnionState(firingState, []byte(firingPanes))
	}
	return nil
}

// RestoreState checks the signature and takes the smallest watermark.
func (w *Window) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	where := fmt.Sprintf("%s: restoring checkpoint %d", w.name, c.CheckpointID)
	want := w.signature()
	for _, sig := range c.State.Union[signatureState] {
		if string(sig) != want {
			return fmt.Errorf("%s: the state was written for another key, aggregates, pane alignment or time domain (found %s, expected %s); restore it into the job that wrote it, or start without the checkpoint", where, sig, want)
		}
	}
	for i, item := range c.State.Union[watermarkState] {
		r := newStateReader(item)
		wm := r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: watermark state: %v", where, err)
		}
		if i == 0 || wm < w.wm {
			w.wm = wm
		}
	}
	if w.slots.Spills() && !w.spec.processing {
		for _, f := range c.State.Union[firingState] {
			if string(f) == firingPanes {
				// Resident keys were written without timers.
				w.scheduleAll()
				break
			}
		}
	}
	return nil
}

// sortPending orders the queued results by window end, then key value.
func (w *Window) sortPending() {
	if len(w.r.keyCols) == 0 {
		slices.SortStableFunc(w.pend, func(a, b pending) int { return cmp.Compare(a.end, b.end) })
		return
	}
	// Decode the keys into columns, one row per pending result.
	cols := make([]stream.Column, len(w.r.keyCols))
	for j, c := range w.r.keyCols {
		cols[j].Type = w.in.Fields[c].Type
	}
	for i := range w.pend {
		p := &w.pend[i]
		p.row = i
		rowenc.DecodeRow(cols, i, w.pendKeys[p.keyOff:p.keyEnd])
	}
	slices.SortFunc(w.pend, func(a, b pending) int {
		if c := cmp.Compare(a.end, b.end); c != 0 {
			return c
		}
		return compareRows(cols, a.row, b.row)
	})
}

// compareRows orders rows a and b of cols by their values, column by
// column; null sorts first.
func compareRows(cols []stream.Column, a, b int) int {
	for j := range cols {
		c := &cols[j]
		an, bn := rowenc.IsNull(c, a), rowenc.IsNull(c, b)
		switch {
		case an && bn:
			continue
		case an:
			return -1
		case bn:
			return 1
		}
		var r int
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			r = cmp.Compare(c.Ints[a], c.Ints[b])
		case stream.TypeFloat64:
			r = cmp.Compare(c.Floats[a], c.Floats[b])
		case stream.TypeString:
			r = strings.Compare(c.Strs[a], c.Strs[b])
		case stream.TypeBool:
			r = cmp.Compare(b2i(c.Bools[a]), b2i(c.Bools[b]))
		}
		if r != 0 {
			return r
		}
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
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
	if o.spec.interval > 0 && o.current() > o.wm && o.wm != stream.MaxWatermark {
		// An advance the checkpoint saw but had not emitted yet goes out
		// before the first record after the restore.
		o.due, o.pending = math.MinInt64, true
	}
	return nil
}

// newStateReader returns a reader of a state item after checking its
// version byte.
func newStateReader(b []byte) *rowenc.Reader {
	r := &rowenc.Reader{B: b}
	if v := r.Byte(); r.Err == nil && v != stateVersion {
		r.Err = fmt.Errorf("unknown format version %d (this build reads version %d)", v, stateVersion)
	}
	return r
}
