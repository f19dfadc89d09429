package window

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// Window is one subtask of a tumbling_window or sliding_window operator.
//
// The key is the input's keyBy key (OperatorContext.InputKeys[0]); one row is
// emitted per key and window. Without a keyBy the window is global to the
// subtask — each subtask aggregates the records it happens to receive — so a
// global window should run at parallelism 1.
//
// Event time is read from Batch.Times, which a watermarks operator upstream
// sets; a batch without it fails the task. Results are emitted when the
// watermark reaches a window's end-1, ordered by window end and then key
// value, each with event time end-1, before the watermark is forwarded.
//
// A Window is not safe for concurrent use, except LateRecordsDropped.
type Window struct {
	spec *windowSpec
	name string // for errors, e.g. `tumbling_window "counts"`
	r    *resolved
	in   *stream.Schema
	out  *stream.Schema

	st *store
	// wm is the current watermark; panes starting before acceptFrom have had
	// all their windows cleaned up, so their records are late.
	wm         int64
	acceptFrom int64

	// Result scratch: res holds one merged accumulator per key of the window
	// being fired, outIdx maps key id → res slot (-1 when unused).
	res     *accs
	outIdx  []int32
	touched []int32
	pairs   []intPair

	// Per-batch scratch.
	hashes []uint64
	slots  []int32
	mask   []int32
	panes  []int64
	late   map[lateFire]struct{}

	cur     *stream.Batch // output batch being filled
	curRows int

	lateDropped atomic.Int64
}

var _ stream.Operator = (*Window)(nil)

// lateFire is a window that a late record changed after it fired.
type lateFire struct {
	key int32
	end int64
}

// NewTumblingWindow returns a tumbling_window operator for a JSON
// WindowConfig.
func NewTumblingWindow(config []byte) (*Window, error) {
	return newWindow(TypeTumblingWindow, config)
}

// NewSlidingWindow returns a sliding_window operator for a JSON
// WindowConfig.
func NewSlidingWindow(config []byte) (*Window, error) {
	return newWindow(TypeSlidingWindow, config)
}

func newWindow(op string, config []byte) (*Window, error) {
	spec, err := parseWindowConfig(op, config)
	if err != nil {
		return nil, err
	}
	return &Window{spec: spec, name: op, wm: stream.MinWatermark, acceptFrom: math.MinInt64}, nil
}

// LateRecordsDropped returns how many records arrived after all their
// windows had been cleaned up and were dropped. It may be called from any
// goroutine.
func (w *Window) LateRecordsDropped() int64 { return w.lateDropped.Load() }

// Open binds the operator to its input schema and key.
func (w *Window) Open(_ context.Context, octx *stream.OperatorContext) error {
	if octx.OperatorUID != "" {
		w.name = fmt.Sprintf("%s %q", w.spec.op, octx.OperatorUID)
	}
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("%s: got %d inputs, want 1", w.name, len(octx.InputSchemas))
	}
	var keys []string
	if len(octx.InputKeys) > 0 {
		keys = octx.InputKeys[0]
	}
	r, err := w.spec.resolve(octx.InputSchemas[0], keys)
	if err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	w.r, w.in, w.out = r, octx.InputSchemas[0], r.out
	if octx.OutputSchema != nil {
		if !octx.OutputSchema.Equal(r.out) {
			return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", w.name, octx.OutputSchema, r.out)
		}
		w.out = octx.OutputSchema
	}
	maxPar := octx.MaxParallelism
	if maxPar <= 0 {
		maxPar = stream.DefaultMaxParallelism
	}
	types := make([]stream.Type, len(r.keyCols))
	for j, c := range r.keyCols {
		types[j] = octx.InputSchemas[0].Fields[c].Type
	}
	w.st = newStore(newKeyTable(r.keyCols, types, maxPar), r.aggs)
	w.res = newAccs(r.aggs)
	return nil
}

// ProcessBatch adds the records of b to their windows' accumulators and
// re-fires windows that late records (within allowedLateness) changed.
func (w *Window) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d records has no event timestamps (Batch.Times is empty); add a %q operator upstream to assign event time from a timestamp field", w.name, n, TypeWatermarks)
	}
	if cap(w.slots) < n {
		w.hashes = make([]uint64, n)
		w.slots = make([]int32, n)
		w.mask = make([]int32, n)
		w.panes = make([]int64, n)
	}
	hashes, slots, panes := w.hashes[:n], w.slots[:n], w.panes[:n]
	if len(w.r.keyCols) > 0 {
		rowenc.PadBatchNulls(b)
		stream.HashKeys(b, w.r.keyCols, hashes)
	} else {
		clear(hashes)
	}

	kt, st := w.st.keys, w.st
	slide, offset, acceptFrom := w.spec.slide, w.spec.offset, w.acceptFrom
	var intKeys []int64 // the key column, when findInt applies
	if kc := w.r.keyCols; kt.intKey && b.Cols[kc[0]].Nulls == nil {
		intKeys = b.Cols[kc[0]].Ints[:n]
	}
	// [lo, hi) is the pane of the previous record; most records share it.
	lo, hi := int64(1), int64(0)
	var dropped int64
	for i, ts := range b.Times[:n] {
		if ts < lo || ts >= hi {
			r := (ts - offset) % slide
			if r < 0 {
				r += slide
			}
			lo = ts - r
			hi = lo + slide
		}
		p := lo
		panes[i] = p
		if p < acceptFrom {
			slots[i] = -1
			dropped++
			continue
		}
		h := hashes[i]
		var k int32
		if intKeys != nil {
			k = kt.findInt(h, intKeys[i])
		} else {
			k = kt.find(h, b, i)
		}
		if k < 0 {
			k = kt.insert(h, b, i)
		}
		slots[i] = st.slot(k, p)
	}
	if dropped > 0 {
		w.lateDropped.Add(dropped)
	}
	st.acc.update(b, slots, w.mask[:n])

	if w.spec.lateness > 0 && w.wm != stream.MinWatermark {
		w.refireLate(slots, panes, out)
	}
	return nil
}

// refireLate emits the windows that have fired but are still within their
// allowed lateness and that records of this batch changed, as Flink's
// event-time trigger fires again on each late element.
func (w *Window) refireLate(slots []int32, panes []int64, out stream.Collector) {
	size, slide, wm := w.spec.size, w.spec.slide, w.wm
	for i, s := range slots {
		p := panes[i]
		if s < 0 || p+slide-1 > wm { // no window of this pane has fired
			continue
		}
		k := w.st.owner[s]
		for e := p + slide; e <= p+size && e-1 <= wm; e += slide {
			if !w.cleaned(e) {
				if w.late == nil {
					w.late = make(map[lateFire]struct{})
				}
				w.late[lateFire{k, e}] = struct{}{}
			}
		}
	}
	if len(w.late) == 0 {
		return
	}
	fires := make([]lateFire, 0, len(w.late))
	for f := range w.late {
		fires = append(fires, f)
	}
	clear(w.late)
	kt := w.st.keys
	slices.SortFunc(fires, func(a, b lateFire) int {
		if a.end != b.end {
			if a.end < b.end {
				return -1
			}
			return 1
		}
		return kt.compare(a.key, b.key)
	})
	w.res.grow(1)
	for _, f := range fires {
		w.res.reset(0)
		start := f.end - size
		for _, p := range w.st.panesIn(start, f.end) {
			if s, ok := w.st.lookup(f.key, p); ok {
				w.res.merge(0, w.st.acc, s)
			}
		}
		w.emitRow(f.key, start, f.end, 0, out)
	}
	w.flush(out)
}

// cleaned reports whether the window ending at end is past its allowed
// lateness at the current watermark.
func (w *Window) cleaned(end int64) bool {
	return end-1 <= satSub(w.wm, w.spec.lateness)
}

// ProcessWatermark fires every window whose end-1 the watermark reached, frees
// the state of windows past their allowed lateness, and forwards wm.
func (w *Window) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= w.wm {
		return nil // watermarks never go back; nothing to do
	}
	w.advance(wm, out)
	out.EmitWatermark(wm)
	return nil
}

// advance moves the watermark to wm, firing and cleaning up windows.
func (w *Window) advance(wm int64, out stream.Collector) {
	size, slide, prev := w.spec.size, w.spec.slide, w.wm
	// Fire, in order, the windows with data whose end-1 is in (prev, wm]:
	// step through aligned ends, jumping over stretches without panes.
	if order := w.st.order; len(order) > 0 {
		e := order[0] + slide // the first end with data
		if prev != stream.MinWatermark {
			e = max(e, w.alignUp(prev+2))
		}
		for e-1 <= wm {
			i, _ := slices.BinarySearch(order, e-size)
			if i == len(order) {
				break
			}
			if order[i] < e {
				w.fire(e, out)
				e += slide
			} else {
				e = max(e+slide, order[i]+slide)
			}
			if e > math.MaxInt64-slide {
				break // beyond any real timestamp
			}
		}
	}
	w.flush(out)

	w.wm = wm
	// A pane's last window ends at start+size; its state goes when the
	// watermark passes that end-1 plus the allowed lateness.
	if limit := satSub(wm, size+w.spec.lateness-1); limit > math.MinInt64 {
		w.acceptFrom = limit + 1
		w.st.dropThrough(limit, wm == stream.MaxWatermark)
	}
}

// fire emits the results of the window ending at end for every key with
// data in it, in key order.
func (w *Window) fire(end int64, out stream.Collector) {
	st, res := w.st, w.res
	for len(w.outIdx) < len(st.keys.hash) {
		w.outIdx = append(w.outIdx, -1)
	}
	start := end - w.spec.size
	touched := w.touched[:0]
	for _, p := range st.panesIn(start, end) {
		for _, s := range st.panes[p].slots {
			k := st.owner[s]
			ri := w.outIdx[k]
			if ri < 0 {
				ri = int32(len(touched))
				touched = append(touched, k)
				w.outIdx[k] = ri
				if res.size() <= int(ri) {
					res.grow(int(ri) + 1)
				}
				res.reset(ri)
			}
			res.merge(ri, st.acc, s)
		}
	}
	w.touched = touched
	w.sortKeys()
	touched = w.touched
	for _, k := range touched {
		w.emitRow(k, start, end, w.outIdx[k], out)
		w.outIdx[k] = -1
	}
	w.touched = touched[:0]
}

// sortKeys sorts w.touched by key value.
func (w *Window) sortKeys() {
	kt := w.st.keys
	switch {
	case len(w.r.keyCols) == 0:
	case kt.intKey && kt.cols[0].Nulls == nil:
		// One non-null integer key: sort (value, id) pairs, much faster
		// than the general comparison.
		vals := kt.cols[0].Ints
		pairs := w.pairs[:0]
		for _, k := range w.touched {
			pairs = append(pairs, intPair{vals[k], k})
		}
		slices.SortFunc(pairs, func(a, b intPair) int { return cmp.Compare(a.v, b.v) })
		for i, p := range pairs {
			w.touched[i] = p.k
		}
		w.pairs = pairs[:0]
	default:
		slices.SortFunc(w.touched, kt.compare)
	}
}

type intPair struct {
	v int64
	k int32
}

// emitRow appends the result of key k for window [start, end), held in
// w.res slot ri, to the output batch, sending the batch when full.
func (w *Window) emitRow(k int32, start, end int64, ri int32, out stream.Collector) {
	if w.cur == nil {
		w.cur = stream.NewBatch(w.out, stream.DefaultBatchSize)
		w.curRows = 0
	}
	b, row := w.cur, w.curRows
	kt := w.st.keys
	for j := range kt.cols {
		appendValue(&b.Cols[j], row, &kt.cols[j], k)
	}
	nk := len(kt.cols)
	b.Cols[nk].Ints = append(b.Cols[nk].Ints, start)
	b.Cols[nk+1].Ints = append(b.Cols[nk+1].Ints, end)
	for j := range w.r.aggs {
		w.res.appendResult(j, ri, &b.Cols[nk+2+j], row)
	}
	b.Times = append(b.Times, end-1)
	w.curRows++
	if w.curRows == stream.DefaultBatchSize {
		w.flush(out)
	}
}

// flush sends the output batch being filled, if any.
func (w *Window) flush(out stream.Collector) {
	if w.cur == nil {
		return
	}
	b := w.cur
	w.cur = nil
	b.SetLen(w.curRows)
	rowenc.PadBatchNulls(b)
	out.Collect(b)
}

// Finish fires any window still open. The runtime sends stream.MaxWatermark
// before Finish, which has already fired everything; this is a safeguard for
// runtimes that do not, and emits no watermark.
func (w *Window) Finish(out stream.Collector) error {
	if w.wm < stream.MaxWatermark {
		w.advance(stream.MaxWatermark, out)
	}
	return nil
}

// Close releases the operator's state.
func (w *Window) Close() error {
	if w.cur != nil {
		w.cur.Release()
		w.cur = nil
	}
	w.st = nil
	w.res = nil
	return nil
}

// alignUp returns the least window end (or start) at or after x.
func (w *Window) alignUp(x int64) int64 {
	r := (x - w.spec.offset) % w.spec.slide
	if r < 0 {
		r += w.spec.slide
	}
	if r == 0 {
		return x
	}
	return x + w.spec.slide - r
}

// satSub returns a-b (b ≥ 0), saturating at math.MinInt64.
func satSub(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
