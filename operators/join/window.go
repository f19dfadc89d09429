package join

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// WindowJoin is one subtask of window_join. Rows are assigned to the
// tumbling window [start, start+size) of their event time (Batch.Times, set
// by a watermarks operator upstream) and stored under their key, and an
// event-time timer is set for the key at the window's end-1. When the
// watermark reaches it, the key's pairs of that window are emitted — each
// left row (in arrival order) with each right row (in arrival order) — with
// event time end-1, and the window's rows are dropped; keys fire in the
// order of the backend's timers (by time, then key group and key). A row
// whose window has already fired is late: it is dropped and counted
// (LateRecordsDropped).
//
// The rows are keyed state (see base.go): per key one value with the rows
// of both inputs, whatever their window, which is deleted when the key's
// last window fires, so that state holds only keys of windows that have
// not fired. The watermark is union operator state: a restore takes the
// smallest of the checkpoint's subtasks, so no window that has not fired is
// lost when key groups move between subtasks.
type WindowJoin struct {
	joinBase
	state statebackend.ValueState[keyRows]
	wm    int64
	late  atomic.Int64
	out   stream.Collector // during ProcessWatermark
	// per-fire scratch: the key's rows and their windows, and the indexes
	// of decoded rows.
	fired   [2][]windowRow
	windows []int64
	pidx    [2][]int32
}

// windowRow is a stored row and the start of its window.
type windowRow struct {
	r     row
	start int64
}

var (
	_ stream.Operator      = (*WindowJoin)(nil)
	_ stream.Checkpointed  = (*WindowJoin)(nil)
	_ stream.KeyedStateful = (*WindowJoin)(nil)
)

// NewWindowJoin returns a window_join operator for a JSON Config.
func NewWindowJoin(config []byte) (*WindowJoin, error) {
	s, err := parse(TypeWindowJoin, config)
	if err != nil {
		return nil, err
	}
	return &WindowJoin{joinBase: joinBase{spec: s, name: TypeWindowJoin}, wm: stream.MinWatermark}, nil
}

// Open binds the operator to its two keyed inputs and its state.
func (o *WindowJoin) Open(_ context.Context, octx *stream.OperatorContext) error {
	if err := o.open(octx); err != nil {
		return err
	}
	var err error
	o.state, err = o.openRows()
	return err
}

// LateRecordsDropped returns how many rows arrived after their window had
// fired. It may be called from any goroutine.
func (o *WindowJoin) LateRecordsDropped() int64 { return o.late.Load() }

func (o *WindowJoin) windowStart(ts int64) int64 {
	r := (ts - o.spec.offset) % o.spec.size
	if r < 0 {
		r += o.spec.size
	}
	return ts - r
}

// ProcessBatch stores the rows of b under their keys and sets a timer per
// key and window.
func (o *WindowJoin) ProcessBatch(input int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d rows on input %d has no event timestamps (Batch.Times is empty); add a watermarks operator upstream of that input", o.name, n, input)
	}
	o.keys[input].Encode(b)
	lo, hi := int64(1), int64(0)
	var late int64
	o.rows = o.rows[:0]
	for i, ts := range b.Times[:n] {
		if ts < lo || ts >= hi {
			lo = o.windowStart(ts)
			hi = lo + o.spec.size
		}
		switch {
		case hi-1 <= o.wm:
			late++
		case !o.nullKey(b, input, i):
			o.rows = append(o.rows, int32(i))
		}
	}
	if late > 0 {
		o.late.Add(late)
	}
	g := &o.group
	g.group(&o.keys[input], o.rows, n)
	for k := range g.groups() {
		first := g.first[k]
		if err := o.setKey(input, int(first)); err != nil {
			return err
		}
		v, ok := o.state.Value()
		for i := first; i >= 0; i = g.next[i] {
			// A key's rows of one window mostly arrive together: set a
			// timer when the window is not the one of the key's last
			// timer (setting one twice keeps one).
			if w := o.windowStart(b.Times[i]); !ok || v.win != w {
				o.backend.Timers().RegisterEventTimeTimer(w + o.spec.size - 1)
				v.win, ok = w, true
			}
			v.sides[input] = o.blocks.add(v.sides[input], b, int(i))
		}
		o.state.Update(v)
	}
	return nil
}

// ProcessWatermark fires the timers up to wm, emitting and dropping the
// windows that end by then, and forwards wm.
func (o *WindowJoin) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= o.wm {
		return nil
	}
	o.wm = wm
	o.out = out
	err := o.backend.Timers().AdvanceWatermark(wm, o.fire)
	o.flush()
	o.resetDecoded()
	o.out = nil
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	out.EmitWatermark(wm)
	return nil
}

func (o *WindowJoin) flush() {
	o.emit(o.dec[0].cols, o.dec[1].cols, true, o.spec.bounds, o.spec.size, o.out)
}

// fire emits the pairs of the current key's windows that end by the
// watermark and drops their rows. It is called for the timer at a window's
// end-1; it fires every window of the key that has ended, so that the rows
// of a window always go, whatever timers there are (after a restore with
// another size, say), and sets timers for the windows it keeps.
func (o *WindowJoin) fire(_ []byte, _ int, _ int64) error {
	v, ok := o.state.Value()
	if !ok {
		return nil
	}
	size := o.spec.size
	first, single, open := int64(0), true, false
	for s := range 2 {
		o.fired[s] = o.fired[s][:0]
		for p := v.sides[s]; len(p) > 0; {
			var r row
			r, p = nextRow(p)
			w := o.windowStart(r.time())
			if len(o.fired[0])+len(o.fired[1]) == 0 {
				first = w
			}
			single = single && w == first
			open = open || w+size-1 > o.wm
			o.fired[s] = append(o.fired[s], windowRow{r, w})
		}
	}
	if single && !open {
		// The common case: the rows of one window, which has ended.
		o.pairs(first)
		o.state.Clear()
		return nil
	}
	// Windows in order; the open ones are kept, with a timer each.
	o.windows = o.windows[:0]
	for s := range 2 {
		for _, x := range o.fired[s] {
			if !slices.Contains(o.windows, x.start) {
				o.windows = append(o.windows, x.start)
			}
		}
	}
	slices.Sort(o.windows)
	var keep keyRows
	for _, w := range o.windows {
		if w+size-1 <= o.wm {
			o.pairs(w)
			continue
		}
		for s := range 2 {
			for _, x := range o.fired[s] {
				if x.start == w {
					keep.sides[s] = appendPrefixed(keep.sides[s], x.r)
				}
			}
		}
		o.backend.Timers().RegisterEventTimeTimer(w + size - 1)
		keep.win = w
	}
	if len(keep.sides[0])+len(keep.sides[1]) == 0 {
		o.state.Clear()
	} else {
		o.state.Update(keep)
	}
	return nil
}

// appendPrefixed appends r with its length prefix to block.
func appendPrefixed(block []byte, r row) []byte {
	block = binary.AppendUvarint(block, uint64(len(r)))
	return append(block, r...)
}

// pairs adds the pairs of window w of the rows in o.fired.
func (o *WindowJoin) pairs(w int64) {
	for s := range 2 {
		if !slices.ContainsFunc(o.fired[s], func(x windowRow) bool { return x.start == w }) {
			return // no pairs
		}
	}
	if !o.pending() {
		o.resetDecoded()
	}
	for s := range 2 {
		o.pidx[s] = o.pidx[s][:0]
		for _, x := range o.fired[s] {
			if x.start == w {
				o.pidx[s] = append(o.pidx[s], o.dec[s].add(x.r))
			}
		}
	}
	end := w + o.spec.size
	for _, a := range o.pidx[0] {
		for _, c := range o.pidx[1] {
			o.left = append(o.left, a)
			o.right = append(o.right, c)
			o.times = append(o.times, end-1)
			o.starts = append(o.starts, w)
			if len(o.left) == maxPairs {
				o.flush()
			}
		}
	}
}

// SnapshotState writes the watermark and the type signature as union
// state; the rows and timers are keyed state, which the runtime snapshots.
func (o *WindowJoin) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(watermarkState, binary.AppendVarint([]byte{watermarkVersion}, o.wm))
	return o.joinBase.SnapshotState(c)
}

// watermarkVersion is the first byte of the watermark state, followed by
// the watermark as a varint.
const watermarkVersion = 1

// RestoreState checks the type signature and takes the smallest watermark
// of the checkpoint.
func (o *WindowJoin) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	if err := o.joinBase.RestoreState(c); err != nil {
		return err
	}
	for i, item := range c.State.Union[watermarkState] {
		r := &rowenc.Reader{B: item}
		if v := r.Byte(); r.Err == nil && v != watermarkVersion {
			return fmt.Errorf("%s: restoring checkpoint %d: unknown watermark state version %d (this build reads %d)", o.name, c.CheckpointID, v, watermarkVersion)
		}
		wm := r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: restoring checkpoint %d: corrupt watermark state: %v", o.name, c.CheckpointID, err)
		}
		if i == 0 || wm < o.wm {
			o.wm = wm
		}
	}
	return nil
}

// Close lets go of the state; the runtime closes the backend.
func (o *WindowJoin) Close() error {
	o.state = nil
	return o.joinBase.Close()
}
