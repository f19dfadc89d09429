package window

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
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
// State (see state.go) is keyed state in the backend the task runtime opened
// for the subtask: one accumulator slot per key and pane; on Pebble also,
// for each key not resident in memory, an event-time timer at the end of
// its next window. A Window is not safe for concurrent use, except
// LateRecordsDropped.
//
// A processing-time window (WindowConfig.Time "processing", tumbling only)
// instead puts each batch in the window of the task's clock
// (OperatorContext.ProcessingTime) when the batch arrives, registers a
// processing-time timer per key at the end of each window the key has data
// in, and emits a window's rows when the timer fires (OnProcessingTime), in
// (end, key) order and without event time; Finish fires the windows still
// pending.
type Window struct {
	spec *windowSpec
	name string // for errors, e.g. `tumbling_window "counts"`
	r    *resolved
	in   *stream.Schema
	out  *stream.Schema
	lay  *layout

	b     statebackend.Backend
	slots *statebackend.Slots
	// idx lists the resident slots by pane, so that windows fire pane by
	// pane; on Pebble the keys that are not resident fire on per-key
	// timers.
	idx    *paneIndex
	keys   rowenc.Keys
	keyed  bool
	global int // key group of a global window's state

	// wm is the current watermark.
	wm int64
	// clock is the task's processing time (processing-time windows).
	clock func() int64

	// Per-batch scratch. memo remembers the slots of recent rows of the
	// batch by key hash, so that a key's later rows skip the slot index.
	memo     [memoSize]memoEntry
	gen      uint32
	ws, mask [][]int64
	late     []lateFire
	lateIdx  []int32 // rows past their lateness

	// Results of the windows being fired, emitted in (end, key) order.
	pend     []pending
	pendKeys []byte  // the keys of pend
	pendAcc  []int64 // the merged accumulators of pend, lay.width each
	merged   []int64
	panes    []paneRef

	// Firing scratch of the pane index: res holds one merged accumulator
	// per key of the window being fired (lay.width words each), outIdx
	// maps key id → its position in touched (-1 when unused).
	res     []int64
	outIdx  []int32
	touched []int32
	pairs   []intPair

	cur     *stream.Batch // output batch being filled
	curRows int
	// queueing makes fireWindow queue its results in pend.
	queueing bool
	spilled  int64 // keys evict spilled

	lateDropped atomic.Int64
}

var (
	_ stream.Operator            = (*Window)(nil)
	_ stream.KeyedStateful       = (*Window)(nil)
	_ stream.ProcessingTimeAware = (*Window)(nil)
)

// memoSize is the number of entries of Window.memo (a power of two).
const memoSize = 1024

type memoEntry struct {
	hash uint64
	pane int64
	slot int32
	gen  uint32 // the batch it is of; 0 never is
}

// lateFire is a window that a late record changed after it fired.
type lateFire struct {
	key   []byte
	group int
	end   int64
}

// pending is one result row waiting to be emitted.
type pending struct {
	end    int64
	keyOff int // key bytes: pendKeys[keyOff:keyEnd]
	keyEnd int
	acc    int // accumulators: pendAcc[acc : acc+lay.width]
	row    int // its key's row in sortPending's decoded columns
}

// paneRef is one pane of a key found by Slots.Range.
type paneRef struct {
	start int64
	words []int64
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
	return &Window{spec: spec, name: op, wm: stream.MinWatermark}, nil
}

// UsesKeyedState says the task runtime holds the window's state.
func (w *Window) UsesKeyedState() bool { return true }

// LateRecordsDropped returns how many records arrived after all their
// windows had been cleaned up: they went to side output LateOutput, or
// nowhere if nothing reads it. It may be called from any goroutine.
func (w *Window) LateRecordsDropped() int64 { return w.lateDropped.Load() }

// Open binds the operator to its input schema, key and state.
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
	w.lay = newLayout(r.aggs)
	b, err := statebackend.KeyedBackend(octx)
	if err != nil {
		return err
	}
	w.b = b
	w.slots, err = statebackend.GetSlots(b, statebackend.SlotDescriptor{Name: panesTable, Words: w.lay.width, Init: w.lay.init})
	if err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	w.keyed = len(r.keyCols) > 0
	w.keys = rowenc.Keys{Cols: r.keyCols, MaxParallelism: octx.MaxParallelism}
	w.global = b.KeyGroups().Start
	types := make([]stream.Type, len(r.keyCols))
	for j, c := range r.keyCols {
		types[j] = w.in.Fields[c].Type
	}
	w.idx = newPaneIndex(w.slots, types)
	if w.spec.processing {
		// Processing-time windows fire on their keys' timers, not from
		// the pane index.
		w.clock = octx.ProcessingTime
		return nil
	}
	index := func(s int32) {
		key, g, ns := w.slots.SlotKey(s)
		w.idx.add(s, key, g, ns, nil, nil, 0)
	}
	w.slots.Each(index) // the restored slots, on the heap
	w.slots.SetLoadHook(index)
	return nil
}

// key returns row i's key and key group.
func (w *Window) key(i int) ([]byte, int) {
	if !w.keyed {
		return nil, w.global
	}
	return w.keys.Key(i)
}

// paneStart returns the start of the pane holding ts.
func (w *Window) paneStart(ts int64) int64 {
	r := (ts - w.spec.offset) % w.spec.slide
	if r < 0 {
		r += w.spec.slide
	}
	return ts - r
}

// ProcessBatch adds the records of b to their panes' accumulators and
// re-fires windows that late records (within allowedLateness) changed.
func (w *Window) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if w.spec.processing {
		w.processBatch(b)
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d records has no event timestamps (Batch.Times is empty); add a %q operator upstream to assign event time from a timestamp field", w.name, n, TypeWatermarks)
	}
	if cap(w.ws) < n {
		w.ws = make([][]int64, n)
		w.mask = make([][]int64, n)
	}
	ws := w.ws[:n]
	if w.keyed {
		w.keys.Encode(b)
	} else {
		rowenc.PadBatchNulls(b)
	}
	size, slide, wm := w.spec.size, w.spec.slide, w.wm
	w.gen++ // forget the slots of earlier batches
	// [lo, hi) is the pane of the previous record; most records share it.
	lo, hi := int64(1), int64(0)
	var dropped int64
	for i, ts := range b.Times[:n] {
		if ts < lo || ts >= hi {
			lo = w.paneStart(ts)
			hi = lo + slide
		}
		p := lo
		if w.cleaned(p + size) { // every window of the pane is gone
			ws[i] = nil
			dropped++
			w.lateIdx = append(w.lateIdx, int32(i))
			continue
		}
		key, g := w.key(i)
		var h uint64
		if w.keyed {
			h = w.keys.Hash(i)
		}
		m := &w.memo[h&(memoSize-1)]
		if m.gen == w.gen && m.hash == h && m.pane == p {
			if k, mg, ns := w.slots.SlotKey(m.slot); ns == p && mg == g && string(k) == string(key) {
				ws[i] = w.slots.Words(m.slot)
				continue // the slot of an earlier row of this batch
			}
		}
		slot, created := w.slots.Slot(key, g, p)
		*m = memoEntry{gen: w.gen, hash: h, pane: p, slot: slot}
		ws[i] = w.slots.Words(slot)
		if created {
			w.idx.add(slot, key, g, p, b.Cols, w.r.keyCols, i)
		}
		if p+slide-1 <= wm && wm != stream.MinWatermark {
			// A window of this pane has fired: each that is still within
			// its allowed lateness fires again with this record.
			for e := max(p+slide, w.alignUp(satSub(wm, w.spec.lateness)+2)); e <= p+size && e-1 <= wm; e += slide {
				w.late = append(w.late, lateFire{key: append([]byte(nil), key...), group: g, end: e})
			}
		}
	}
	if dropped > 0 {
		w.lateDropped.Add(dropped)
		sendLate(w.in, b, w.lateIdx, out)
		w.lateIdx = w.lateIdx[:0]
	}
	w.lay.update(b, ws, w.mask[:n])
	clear(ws)
	if len(w.late) > 0 {
		w.refireLate()
		w.emitPending(out)
	}
	w.evict()
	return nil
}

// refireLate queues the results of the windows late records changed, once
// each, with their keys' current panes.
func (w *Window) refireLate() {
	seen := make(map[string]bool, len(w.late))
	for _, f := range w.late {
		id := fmt.Sprintf("%d/%d/%s", f.end, f.group, f.key)
		if seen[id] {
			continue
		}
		seen[id] = true
		// The late record made the key resident.
		w.panes = w.panes[:0]
		for _, p := range w.idx.panesIn(f.end-w.spec.size, f.end) {
			if words, ok := w.slots.Lookup(f.key, f.group, p); ok {
				w.panes = append(w.panes, paneRef{p, words})
			}
		}
		w.queue(f.key, f.end)
	}
	clear(w.late)
	w.late = w.late[:0]
}

// loadPanes sets w.panes to recs, the panes of a key that is not
// resident.
func (w *Window) loadPanes(recs []statebackend.SlotRecord) {
	w.panes = w.panes[:0]
	for _, r := range recs {
		w.panes = append(w.panes, paneRef{r.NS, r.Words})
	}
}

// queue merges the panes in w.panes that fall in the window ending at end
// and, if there are any, queues the window's row for key.
func (w *Window) queue(key []byte, end int64) {
	start := end - w.spec.size
	merged := append(w.merged[:0], w.lay.init...)
	any := false
	for _, p := range w.panes {
		if p.start >= start && p.start < end {
			w.lay.merge(merged, p.words)
			any = true
		}
	}
	w.merged = merged
	if !any {
		return
	}
	off := len(w.pendKeys)
	w.pendKeys = append(w.pendKeys, key...)
	acc := len(w.pendAcc)
	w.pendAcc = append(w.pendAcc, merged...)
	w.pend = append(w.pend, pending{end: end, keyOff: off, keyEnd: len(w.pendKeys), acc: acc})
}

// cleaned reports whether the window ending at end is past its allowed
// lateness at the current watermark.
func (w *Window) cleaned(end int64) bool {
	return w.wm != stream.MinWatermark && end-1 <= satSub(w.wm, w.spec.lateness)
}

// ProcessWatermark fires every window whose end-1 the watermark reached, frees
// the state of windows past their allowed lateness, and forwards wm. A
// processing-time window only forwards it.
func (w *Window) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= w.wm {
		return nil // watermarks never go back; nothing to do
	}
	if w.spec.processing {
		w.wm = wm
		out.EmitWatermark(wm)
		return nil
	}
	if err := w.advance(wm, out); err != nil {
		return err
	}
	out.EmitWatermark(wm)
	return nil
}

// advance moves the watermark to wm, firing windows and dropping panes.
func (w *Window) advance(wm int64, out stream.Collector) error {
	prev := w.wm
	w.wm = wm
	var err error
	if w.slots.Spills() {
		// The keys that are not resident fire on their timers (into
		// w.pend); the resident ones from the pane index.
		err = w.b.Timers().AdvanceWatermark(wm, w.fire)
	} else {
		// Timers come only from a checkpoint written on another backend;
		// the pane index has taken over their work.
		err = w.b.Timers().AdvanceWatermark(wm, func([]byte, int, int64) error { return nil })
	}
	w.queueing = len(w.pend) > 0
	w.fireIndexed(prev, wm, out)
	w.queueing = false
	w.emitPending(out)
	w.flush(out)
	if limit := satSub(wm, w.spec.size+w.spec.lateness-1); limit > math.MinInt64 {
		w.idx.dropThrough(limit)
	}
	w.evict()
	return err
}

// fireIndexed fires, in order, the windows with data whose end-1 is in
// (prev, wm], stepping through aligned ends and jumping over stretches
// without panes.
func (w *Window) fireIndexed(prev, wm int64, out stream.Collector) {
	size, slide, order := w.spec.size, w.spec.slide, w.idx.order
	if len(order) == 0 {
		return
	}
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
			w.fireWindow(e, out)
			e += slide
		} else {
			e = max(e+slide, order[i]+slide)
		}
		if e > math.MaxInt64-slide {
			break // beyond any real timestamp
		}
	}
}

// fireWindow emits the results of the window ending at end for every key
// with data in it, in key order.
func (w *Window) fireWindow(end int64, out stream.Collector) {
	x, width := w.idx, w.lay.width
	for len(w.outIdx) < len(x.refs) {
		w.outIdx = append(w.outIdx, -1)
	}
	start := end - w.spec.size
	touched, res := w.touched[:0], w.res[:0]
	for _, p := range x.panesIn(start, end) {
		for _, s := range x.panes[p] {
			k := x.keyOf[s]
			ri := int(w.outIdx[k])
			if ri < 0 {
				ri = len(touched)
				touched = append(touched, k)
				w.outIdx[k] = int32(ri)
				res = append(res, w.lay.init...)
			}
			w.lay.merge(res[ri*width:(ri+1)*width], w.slots.Words(s))
		}
	}
	if w.queueing {
		// Keys fired on timers wait in w.pend: queue these too, so that
		// emitPending orders them all by (end, key).
		for _, k := range touched {
			ri := int(w.outIdx[k])
			w.outIdx[k] = -1
			off := len(w.pendKeys)
			w.pendKeys = append(w.pendKeys, x.key(k)...)
			acc := len(w.pendAcc)
			w.pendAcc = append(w.pendAcc, res[ri*width:(ri+1)*width]...)
			w.pend = append(w.pend, pending{end: end, keyOff: off, keyEnd: len(w.pendKeys), acc: acc})
		}
		w.touched, w.res = touched[:0], res[:0]
		return
	}
	w.pairs = x.sortKeys(touched, w.pairs)
	nk := len(x.cols)
	for _, k := range touched {
		ri := int(w.outIdx[k])
		w.outIdx[k] = -1
		if w.cur == nil {
			w.cur = stream.NewBatch(w.out, stream.DefaultBatchSize)
			w.curRows = 0
		}
		b, row := w.cur, w.curRows
		for j := range x.cols {
			appendValue(&b.Cols[j], row, &x.cols[j], k)
		}
		b.Cols[nk].Ints = append(b.Cols[nk].Ints, start)
		b.Cols[nk+1].Ints = append(b.Cols[nk+1].Ints, end)
		acc := res[ri*width : (ri+1)*width]
		for j := range w.r.aggs {
			w.lay.appendResult(j, acc, &b.Cols[nk+2+j], row)
		}
		b.Times = append(b.Times, end-1)
		w.curRows++
		if w.curRows == stream.DefaultBatchSize {
			w.flush(out)
		}
	}
	w.touched, w.res = touched[:0], res[:0]
}

// fire is a key's timer at ts: it queues the key's window ending at ts+1
// (if ts+1 is a window end and the key has data in it), drops the panes
// whose last window and allowed lateness end at or before ts, and sets the
// key's next timer.
//
// A resident key's timers are stale (the pane index fires its windows):
// fire ignores them. A timer of a key that is not resident is never
// stale in a way that matters: it is after the watermark at which the key
// was spilled, the pane index had fired the key's windows up to that
// watermark, and the key gets no panes while it is not resident, so the
// window ending at ts+1, if the key has data in it, is due now and has
// not fired.
func (w *Window) fire(key []byte, g int, ts int64) error {
	if w.slots.Resident(key, g) {
		return nil
	}
	size, lateness := w.spec.size, w.spec.lateness
	recs := w.slots.ReadKey(key, g)
	w.loadPanes(recs)
	if end := ts + 1; w.alignUp(end) == end {
		w.queue(key, end)
	}
	keep := recs[:0:0]
	for _, r := range recs {
		if r.NS+size-1+lateness > ts {
			keep = append(keep, r)
		}
	}
	if len(keep) != len(recs) {
		w.slots.WriteKey(key, g, keep)
	}
	w.schedule(key, g, ts)
	return nil
}

// evict spills resident keys while they take more memory than their
// budget (on Pebble), setting each spilled key's next timer.
func (w *Window) evict() {
	if w.spec.processing {
		// Every key with panes has its processing-time timers already.
		w.spilled += int64(w.slots.Evict(nil))
		return
	}
	n := w.slots.Evict(func(key []byte, g int, slots []int32) {
		w.panes = w.panes[:0]
		for _, s := range slots {
			_, _, ns := w.slots.SlotKey(s)
			w.panes = append(w.panes, paneRef{start: ns})
		}
		w.idx.remove(slots)
		// The pane index fired the key's windows up to the watermark.
		w.schedule(key, g, w.wm)
	})
	if n > 0 {
		w.idx.compact()
		w.spilled += int64(n)
	}
}

// schedule sets the timer key needs after time ts for its panes in
// w.panes (those not yet dropped): the earliest of each pane's first
// window end after ts, or, when all its windows have fired, the end of its
// allowed lateness.
func (w *Window) schedule(key []byte, g int, ts int64) {
	size, slide, lateness := w.spec.size, w.spec.slide, w.spec.lateness
	next := int64(math.MaxInt64)
	for _, p := range w.panes {
		t := p.start + size - 1 + lateness
		if t <= ts {
			continue // dropped
		}
		e := p.start + slide
		if ts != stream.MinWatermark {
			e = max(e, w.alignUp(ts+2))
		}
		if e <= p.start+size {
			t = min(t, e-1)
		}
		next = min(next, t)
	}
	if next != math.MaxInt64 {
		w.b.SetCurrentKey(key, g)
		w.b.Timers().RegisterEventTimeTimer(next)
	}
}

// scheduleAll sets the timers of every key with panes, after a restore of
// a checkpoint written with the pane index (which has no timers).
func (w *Window) scheduleAll() {
	kg := w.b.KeyGroups()
	var keys [][]byte
	for g := kg.Start; g <= kg.End; g++ {
		keys = keys[:0]
		w.b.Keys(panesTable, g, func(key []byte) bool {
			keys = append(keys, key)
			return true
		})
		for _, key := range keys {
			w.loadPanes(w.slots.ReadKey(key, g))
			w.schedule(key, g, w.wm)
		}
	}
}

// emitPending emits the queued rows ordered by window end and key value.
func (w *Window) emitPending(out stream.Collector) {
	if len(w.pend) == 0 {
		return
	}
	w.sortPending()
	nk := len(w.r.keyCols)
	for _, p := range w.pend {
		if w.cur == nil {
			w.cur = stream.NewBatch(w.out, stream.DefaultBatchSize)
			w.curRows = 0
		}
		b, row := w.cur, w.curRows
		if nk > 0 {
			rowenc.DecodeRow(b.Cols[:nk], row, w.pendKeys[p.keyOff:p.keyEnd])
		}
		start := p.end - w.spec.size
		b.Cols[nk].Ints = append(b.Cols[nk].Ints, start)
		b.Cols[nk+1].Ints = append(b.Cols[nk+1].Ints, p.end)
		acc := w.pendAcc[p.acc : p.acc+w.lay.width]
		for j := range w.r.aggs {
			w.lay.appendResult(j, acc, &b.Cols[nk+2+j], row)
		}
		if !w.spec.processing { // processing-time results have no event time
			b.Times = append(b.Times, p.end-1)
		}
		w.curRows++
		if w.curRows == stream.DefaultBatchSize {
			w.flush(out)
		}
	}
	w.flush(out)
	// The emitted strings share pendKeys: start a new one.
	w.pend, w.pendKeys, w.pendAcc = w.pend[:0], nil, w.pendAcc[:0]
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
// before Finish, which has already fired every event-time window; this is a
// safeguard for runtimes that do not, and emits no watermark. Processing-time
// windows still pending fire here, whatever the clock: the input has ended,
// so no record can join them, and every record is counted.
func (w *Window) Finish(out stream.Collector) error {
	if w.spec.processing {
		err := w.b.Timers().AdvanceProcessingTime(math.MaxInt64, w.fireProcessing)
		w.emitPending(out)
		return err
	}
	if w.wm < stream.MaxWatermark {
		return w.advance(stream.MaxWatermark, out)
	}
	return nil
}

// Close releases the operator's scratch; the runtime closes the state.
func (w *Window) Close() error {
	if w.cur != nil {
		w.cur.Release()
		w.cur = nil
	}
	w.slots = nil
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
