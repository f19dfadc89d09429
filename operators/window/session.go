package window

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// SessionWindow is one subtask of a session_window operator: event-time
// session windows, merged per key and fired by the watermark, as follows.
//
// A record of key k at event time ts (Batch.Times) opens the window
// [ts, ts+gap); windows of k that overlap or touch ([a, b) and [c, d) merge
// when a <= d and c <= b) merge into one session [min start, max end), and so
// do their accumulators. A session fires when the watermark reaches end-1,
// with one row: the key fields, window_start, window_end and the aggregates
// (the layout of the other windows), with event time end-1. Its state is kept
// until the watermark reaches end-1+allowedLateness.
//
// A record is late, and dropped (LateRecordsDropped, lateRows), when its
// window merges with no session still held and its own cleanup time
// ts+gap-1+allowedLateness is at or below the watermark: the window is merged
// first and only the merged window is tested, so a record behind the
// watermark that reaches a held session is merged into it. When a batch
// changes a session so that its end-1 is at or below the watermark (a
// session that fired and is within its allowed lateness), the session fires
// again at the end of the batch with the updated result. It fires once per
// batch, not once per such record: the records of a batch all arrive under
// one watermark, so the intermediate results are not emitted, and the last
// one is the same as firing per record would end with.
//
// The key is the input's keyBy key; without keyBy each subtask keeps one
// stream of sessions of the records it happens to receive (run it at
// parallelism 1 for a global session window).
//
// Results come in order of window end, then key value (nulls first), per
// call: the rows fired by one watermark before it is forwarded, and the
// rows re-fired by one batch at the end of ProcessBatch.
//
// All state is keyed state of the runtime's backend (see sessionstate.go).
// A SessionWindow is not safe for concurrent use, except
// LateRecordsDropped.
type SessionWindow struct {
	spec   *sessionSpec
	name   string // for errors, e.g. `session_window "visits"`
	r      *resolved
	in     *stream.Schema
	out    *stream.Schema
	keyed  bool
	layout sessionLayout

	backend statebackend.Backend
	timers  statebackend.TimerService
	state   statebackend.ValueState[*keySessions]
	keys    rowenc.Keys
	home    int // key group of the global key (without keyBy)

	wm int64

	// Per-batch scratch. acc holds one slot per session of the keys the
	// batch touches (nslots used); parent links a slot merged away to the
	// slot it merged into.
	acc    *accs
	nslots int32
	parent []int32
	groups []rowGroup
	next   []int32 // next row of the same group, -1 after the last
	table  []int32 // open addressing over groups: index+1, 0 = empty
	slots  []int32
	mask   []int32
	late   []int32
	cur    []wsess
	work   []wsess
	times  [2][]int64

	// Output: rows are gathered in pend, then sorted and sent by flush.
	res       *accs // one slot, for a session read from state
	pend      *stream.Batch
	keyHasStr bool
	arena     []byte // copies of string keys that pend's rows point into
	idx       []int32

	lateDropped atomic.Int64
}

var (
	_ stream.Operator           = (*SessionWindow)(nil)
	_ stream.KeyedStateful      = (*SessionWindow)(nil)
	_ stream.LateRecordsCounter = (*SessionWindow)(nil)
)

// globalKey is the key of the sessions of a session window without keyBy.
var globalKey = []byte{}

// wsess is a session being worked on: its interval and its accumulator
// slot in acc.
type wsess struct {
	session
	slot    int32
	touched bool // a record of the current batch went into it
}

// rowGroup is the rows of one key in a batch, and the key's sessions.
type rowGroup struct {
	first, last int32
	old         *keySessions // stored before the batch (nil: none)
	ws, we      int          // the key's sessions after the batch, in work
	changed     bool
}

// NewSessionWindow returns a session_window operator for a JSON
// SessionWindowConfig.
func NewSessionWindow(config []byte) (*SessionWindow, error) {
	spec, err := parseSessionConfig(config)
	if err != nil {
		return nil, err
	}
	return &SessionWindow{spec: spec, name: TypeSessionWindow, wm: stream.MinWatermark}, nil
}

// UsesKeyedState says the task runtime holds the sessions, also without
// keyBy (see sessionstate.go).
func (o *SessionWindow) UsesKeyedState() bool { return true }

// LateRecordsDropped returns how many records arrived too late for any
// session: they went to side output LateOutput, or nowhere if nothing reads
// it. It may be called from any goroutine.
func (o *SessionWindow) LateRecordsDropped() int64 { return o.lateDropped.Load() }

// Open binds the operator to its input, key and keyed state.
func (o *SessionWindow) Open(_ context.Context, octx *stream.OperatorContext) error {
	if octx.OperatorUID != "" {
		o.name = fmt.Sprintf("%s %q", TypeSessionWindow, octx.OperatorUID)
	}
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("%s: got %d inputs, want 1", o.name, len(octx.InputSchemas))
	}
	var keys []string
	if len(octx.InputKeys) > 0 {
		keys = octx.InputKeys[0]
	}
	r, err := o.spec.win.resolve(octx.InputSchemas[0], keys)
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.r, o.in, o.out = r, octx.InputSchemas[0], r.out
	if octx.OutputSchema != nil {
		if !octx.OutputSchema.Equal(r.out) {
			return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", o.name, octx.OutputSchema, r.out)
		}
		o.out = octx.OutputSchema
	}
	o.keyed = len(r.keyCols) > 0
	for _, c := range r.keyCols {
		o.keyHasStr = o.keyHasStr || o.in.Fields[c].Type == stream.TypeString
	}
	maxPar := octx.MaxParallelism
	if maxPar <= 0 {
		maxPar = stream.DefaultMaxParallelism
	}
	o.keys = rowenc.Keys{Cols: r.keyCols, MaxParallelism: maxPar}
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.timers = o.backend.Timers()
	o.home = o.backend.KeyGroups().Start
	o.layout = newSessionLayout(r.aggs)
	if o.state, err = statebackend.GetValueState[*keySessions](o.backend, sessionsTable, newSessionsCodec(o.layout)); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.acc = newAccs(r.aggs)
	o.res = newAccs(r.aggs)
	o.res.grow(1)
	return nil
}

// ProcessBatch merges each record into its key's sessions, drops (and
// counts) the late ones, and re-fires the sessions that already fired and
// that the batch changed.
//
// It reads each key's sessions once, into accumulator slots, and runs the
// records of each key through them in arrival order; a record goes into a
// slot, and merging sessions links their slots (parent). The aggregates are
// then updated a column at a time over the whole batch, each record going
// to the slot its session ended up in, and each changed key is written
// back once.
func (o *SessionWindow) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d records has no event timestamps (Batch.Times is empty); add a %q operator upstream to assign event time from a timestamp field", o.name, n, TypeWatermarks)
	}
	if o.keyed {
		o.keys.Encode(b)
	}
	if cap(o.slots) < n {
		o.slots = make([]int32, n)
		o.mask = make([]int32, n)
		o.next = make([]int32, n)
	}
	slots := o.slots[:n]
	o.groupRows(n)
	owned := o.backend.KeyGroups()

	gap, wm := o.spec.gap, o.wm
	o.nslots = 0
	work, late := o.work[:0], o.late[:0]
	for gi := range o.groups {
		g := &o.groups[gi]
		key, kg := o.key(int(g.first))
		if !owned.Contains(kg) {
			return fmt.Errorf("%s: a record of key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", o.name, kg, owned)
		}
		o.backend.SetCurrentKey(key, kg)
		g.old, _ = o.state.Value()
		cur := o.loadSessions(o.cur[:0], g.old)
		for i := g.first; i >= 0; i = o.next[i] {
			ts := b.Times[i]
			end := satAdd(ts, gap)
			lo, hi := span(cur, ts, end)
			if lo == hi {
				if wm != stream.MinWatermark && o.cleanup(end) <= wm {
					slots[i] = -1
					late = append(late, i)
					continue
				}
				s := o.newSlot()
				cur = slices.Insert(cur, lo, wsess{session: session{ts, end}, slot: s, touched: true})
				slots[i] = s
			} else {
				var root int32
				cur, root = o.mergeSpan(cur, lo, hi, ts, end)
				slots[i] = root
			}
			g.changed = true
		}
		g.ws = len(work)
		work = append(work, cur...)
		g.we = len(work)
		o.cur = cur
	}
	o.work, o.late = work, late

	for i, s := range slots {
		if s >= 0 {
			slots[i] = o.find(s)
		}
	}
	o.acc.update(b, slots, o.mask[:n])

	refire := o.spec.lateness > 0 && wm != stream.MinWatermark
	for gi := range o.groups {
		g := &o.groups[gi]
		if !g.changed {
			continue
		}
		key, kg := o.key(int(g.first))
		o.backend.SetCurrentKey(key, kg)
		var old []session
		if g.old != nil {
			old = g.old.ss
		}
		sessions := work[g.ws:g.we]
		o.storeSessions(old, sessions)
		if !refire {
			continue
		}
		for _, w := range sessions {
			if w.touched && w.end-1 <= wm {
				o.appendRow(key, w.session, o.acc, w.slot)
			}
		}
	}
	o.lateRows(b, late, out)
	clear(o.groups) // do not pin the keys' old state
	o.flush(out)
	return nil
}

// lateRows takes the rows idx of b that are late: their window merged with
// no session held and its cleanup time (end-1+allowedLateness) is at or
// below the watermark. They are counted and go to side output LateOutput.
func (o *SessionWindow) lateRows(b *stream.Batch, idx []int32, out stream.Collector) {
	if len(idx) > 0 {
		o.lateDropped.Add(int64(len(idx)))
		sendLate(o.in, b, idx, out)
	}
}

// key returns row i's key and key group (the global key without keyBy).
func (o *SessionWindow) key(i int) ([]byte, int) {
	if !o.keyed {
		return globalKey, o.home
	}
	return o.keys.Key(i)
}

// groupRows groups the n rows of the batch being processed by key, in
// order of each key's first row, linking each group's rows through next in
// arrival order.
func (o *SessionWindow) groupRows(n int) {
	gs := o.groups[:0]
	next := o.next[:n]
	if !o.keyed {
		for i := range next {
			next[i] = int32(i + 1)
		}
		next[n-1] = -1
		o.groups = append(gs, rowGroup{first: 0, last: int32(n - 1)})
		return
	}
	size := 16
	for size < 2*n {
		size <<= 1
	}
	if len(o.table) != size {
		o.table = make([]int32, size)
	} else {
		clear(o.table)
	}
	mask := uint64(size - 1)
	prev := -1
	for i := range n {
		next[i] = -1
		key, _ := o.keys.Key(i)
		h := o.keys.Hash(i)
		g := -1
		// Rows of one key often come in runs.
		if prev >= 0 && o.keys.Hash(int(gs[prev].first)) == h && bytes.Equal(o.firstKey(gs, prev), key) {
			g = prev
		} else {
			for p := h & mask; ; p = (p + 1) & mask {
				x := o.table[p]
				if x == 0 {
					gs = append(gs, rowGroup{first: int32(i), last: int32(i)})
					o.table[p] = int32(len(gs))
					break
				}
				if o.keys.Hash(int(gs[x-1].first)) == h && bytes.Equal(o.firstKey(gs, int(x-1)), key) {
					g = int(x - 1)
					break
				}
			}
		}
		if g < 0 {
			prev = len(gs) - 1
			continue
		}
		next[gs[g].last] = int32(i)
		gs[g].last = int32(i)
		prev = g
	}
	o.groups = gs
}

func (o *SessionWindow) firstKey(gs []rowGroup, g int) []byte {
	k, _ := o.keys.Key(int(gs[g].first))
	return k
}

// newSlot returns an empty accumulator slot of acc.
func (o *SessionWindow) newSlot() int32 {
	s := o.nslots
	o.nslots++
	if o.acc.size() <= int(s) {
		o.acc.grow(int(s) + 1)
	}
	o.acc.reset(s)
	if len(o.parent) <= int(s) {
		o.parent = append(o.parent, make([]int32, int(s)+1-len(o.parent))...)
	}
	o.parent[s] = s
	return s
}

// find returns the slot that slot s merged into, directly or not.
func (o *SessionWindow) find(s int32) int32 {
	root := s
	for o.parent[root] != root {
		root = o.parent[root]
	}
	for o.parent[s] != root {
		o.parent[s], s = root, o.parent[s]
	}
	return root
}

// loadSessions appends the sessions of ks (nil: none) to dst, each in a
// new slot.
func (o *SessionWindow) loadSessions(dst []wsess, ks *keySessions) []wsess {
	if ks == nil {
		return dst
	}
	w := o.layout.width()
	for i, s := range ks.ss {
		slot := o.newSlot()
		o.layout.load(o.acc, slot, ks.words[i*w:(i+1)*w])
		dst = append(dst, wsess{session: s, slot: slot})
	}
	return dst
}

// span returns the sessions of cur (ascending, disjoint, not touching) that
// the window [start, end) intersects, touching included (two windows
// intersect when each starts at or before the other's end): cur[lo:hi].
func span(cur []wsess, start, end int64) (lo, hi int) {
	lo = sort.Search(len(cur), func(k int) bool { return cur[k].end >= start })
	hi = lo
	for hi < len(cur) && cur[hi].start <= end {
		hi++
	}
	return lo, hi
}

// mergeSpan merges the sessions cur[lo:hi] (at least one) and the window
// [start, end) into one session, the cover of them all (from the least
// start to the greatest end), whose slot is cur[lo]'s; the other slots are
// merged into it.
func (o *SessionWindow) mergeSpan(cur []wsess, lo, hi int, start, end int64) ([]wsess, int32) {
	root := cur[lo].slot
	for _, w := range cur[lo+1 : hi] {
		o.acc.merge(root, o.acc, w.slot)
		o.parent[w.slot] = root
	}
	m := wsess{session: session{min(cur[lo].start, start), max(cur[hi-1].end, end)}, slot: root, touched: true}
	return slices.Replace(cur, lo, hi, m), root
}

// insert adds session w (its own slot) to cur, merging it with the sessions
// it intersects.
func (o *SessionWindow) insert(cur []wsess, w wsess) []wsess {
	lo, hi := span(cur, w.start, w.end)
	if lo == hi {
		return slices.Insert(cur, lo, w)
	}
	cur, root := o.mergeSpan(cur, lo, hi, w.start, w.end)
	o.acc.merge(root, o.acc, w.slot)
	o.parent[w.slot] = root
	return cur
}

// storeSessions writes sessions (ascending; slots of acc that merged into
// no other) as the current key's state, replacing old, and moves the key's
// timers from what old needed to what sessions need.
func (o *SessionWindow) storeSessions(old []session, sessions []wsess) {
	var ss []session
	if len(sessions) == 0 {
		o.state.Clear()
	} else {
		ks := &keySessions{ss: make([]session, len(sessions)), words: make([]int64, 0, len(sessions)*o.layout.width())}
		for i, w := range sessions {
			ks.ss[i] = w.session
			ks.words = o.layout.store(ks.words, o.acc, w.slot)
		}
		o.state.Update(ks)
		ss = ks.ss
	}
	before := o.timerTimes(o.times[0][:0], old)
	after := o.timerTimes(o.times[1][:0], ss)
	o.times[0], o.times[1] = before, after
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || i < len(before) && before[i] < after[j]:
			o.timers.DeleteEventTimeTimer(before[i])
			i++
		case i == len(before) || after[j] < before[i]:
			o.timers.RegisterEventTimeTimer(after[j])
			j++
		default:
			i++
			j++
		}
	}
}

// timerTimes appends to dst, sorted and without duplicates, the times at
// which the sessions ss of a key need a timer at the current watermark:
// end-1 for each session that has not fired, and each one's cleanup time.
func (o *SessionWindow) timerTimes(dst []int64, ss []session) []int64 {
	for _, s := range ss {
		if s.end-1 > o.wm {
			dst = append(dst, s.end-1)
		}
		dst = append(dst, o.cleanup(s.end))
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}

// cleanup returns the time at which the state of a session ending at end
// goes: end-1+allowedLateness, saturating at stream.MaxWatermark, so that a
// huge allowedLateness keeps the state until the end of input instead of
// overflowing.
func (o *SessionWindow) cleanup(end int64) int64 { return satAdd(end-1, o.spec.lateness) }

// ProcessWatermark fires the sessions whose end-1 wm reached, drops those
// past their allowed lateness, and forwards wm.
func (o *SessionWindow) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= o.wm {
		return nil
	}
	if err := o.advance(wm, out); err != nil {
		return err
	}
	out.EmitWatermark(wm)
	return nil
}

// advance moves the watermark to wm, running the timers it reaches.
func (o *SessionWindow) advance(wm int64, out stream.Collector) error {
	o.wm = wm
	err := o.timers.AdvanceWatermark(wm, o.fire)
	o.flush(out)
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// fire runs the current key's timer at ts: it emits the sessions whose end-1
// is ts (a session fires when the watermark reaches its last instant, end-1)
// and drops those whose cleanup time has come. A session kept after it fired
// gets its cleanup timer again: that is a no-op unless allowedLateness changed
// since the timer was set (a restore into a job with another config).
func (o *SessionWindow) fire(key []byte, _ int, ts int64) error {
	ks, ok := o.state.Value()
	if !ok {
		return nil
	}
	w := o.layout.width()
	keep := 0
	for i, s := range ks.ss {
		if s.end-1 == ts {
			o.res.reset(0)
			o.layout.load(o.res, 0, ks.words[i*w:(i+1)*w])
			o.appendRow(key, s, o.res, 0)
		}
		if o.cleanup(s.end) > ts {
			keep++
		}
	}
	if keep == 0 {
		o.state.Clear()
		return nil
	}
	if keep < len(ks.ss) {
		rest := &keySessions{ss: make([]session, 0, keep), words: make([]int64, 0, keep*w)}
		for i, s := range ks.ss {
			if o.cleanup(s.end) > ts {
				rest.ss = append(rest.ss, s)
				rest.words = append(rest.words, ks.words[i*w:(i+1)*w]...)
			}
		}
		o.state.Update(rest)
		ks = rest
	}
	for _, s := range ks.ss {
		if s.end-1 <= ts {
			o.timers.RegisterEventTimeTimer(o.cleanup(s.end))
		}
	}
	return nil
}

// appendRow adds the result of session s of key (encoded; copied if
// needed), held in slot slot of a, to the pending output.
func (o *SessionWindow) appendRow(key []byte, s session, a *accs, slot int32) {
	if o.pend == nil {
		o.pend = stream.NewBatch(o.out, 64)
		o.arena = nil // pend's strings may point into the old one
	}
	b := o.pend
	row := b.Len()
	nk := len(o.r.keyCols)
	if nk > 0 {
		if o.keyHasStr {
			start := len(o.arena)
			o.arena = append(o.arena, key...)
			key = o.arena[start:len(o.arena):len(o.arena)]
		}
		rowenc.DecodeRow(b.Cols[:nk], row, key)
	}
	b.Cols[nk].Ints = append(b.Cols[nk].Ints, s.start)
	b.Cols[nk+1].Ints = append(b.Cols[nk+1].Ints, s.end)
	for j := range o.r.aggs {
		a.appendResult(j, slot, &b.Cols[nk+2+j], row)
	}
	b.Times = append(b.Times, s.end-1)
	b.SetLen(row + 1)
}

// flush sends the pending output, ordered by window end and then key value,
// in batches of at most stream.DefaultBatchSize rows.
func (o *SessionWindow) flush(out stream.Collector) {
	b := o.pend
	if b == nil {
		return
	}
	o.pend = nil
	n := b.Len()
	sorted := true
	for i := 1; i < n && sorted; i++ {
		sorted = o.compareOut(b, i-1, i) <= 0
	}
	if sorted && n <= stream.DefaultBatchSize {
		rowenc.PadBatchNulls(b)
		out.Collect(b)
		return
	}
	idx := o.idx[:0]
	for i := range n {
		idx = append(idx, int32(i))
	}
	if !sorted {
		slices.SortStableFunc(idx, func(x, y int32) int { return o.compareOut(b, int(x), int(y)) })
	}
	for lo := 0; lo < n; lo += stream.DefaultBatchSize {
		part := idx[lo:min(n, lo+stream.DefaultBatchSize)]
		nb := stream.NewBatch(o.out, len(part))
		for j := range nb.Cols {
			rowenc.Gather(&nb.Cols[j], &b.Cols[j], part)
		}
		for _, i := range part {
			nb.Times = append(nb.Times, b.Times[i])
		}
		nb.SetLen(len(part))
		rowenc.PadBatchNulls(nb)
		out.Collect(nb)
	}
	o.idx = idx[:0]
	b.Release()
}

// compareOut orders rows x and y of an output batch by window end, then by
// key value (column by column, nulls first).
func (o *SessionWindow) compareOut(b *stream.Batch, x, y int) int {
	nk := len(o.r.keyCols)
	ends := b.Cols[nk+1].Ints
	if c := cmp.Compare(ends[x], ends[y]); c != 0 {
		return c
	}
	return compareRows(b.Cols[:nk], x, y)
}

// Finish fires every session still open. The runtime sends
// stream.MaxWatermark before Finish, which has already done so; this is a
// safeguard for runtimes that do not, and emits no watermark.
func (o *SessionWindow) Finish(out stream.Collector) error {
	if o.wm < stream.MaxWatermark {
		return o.advance(stream.MaxWatermark, out)
	}
	return nil
}

// Close lets go of the state; the runtime closes the backend.
func (o *SessionWindow) Close() error {
	o.backend, o.timers, o.state = nil, nil, nil
	if o.pend != nil {
		o.pend.Release()
		o.pend = nil
	}
	o.arena = nil
	return nil
}

// satAdd returns a+b (b ≥ 0), saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
