package topn

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// TopN is one subtask of window_topn or window_max. It is not safe for
// concurrent use, except LateRecordsDropped.
//
// Rows are kept per key and slide-long pane (see state.go): a row is
// encoded only if it enters its pane's top n. A batch is first grouped by
// (key, pane), so that each group costs one read of its key's state, and a
// write only if some row of the group entered the top n. A window fires on
// the key's event-time timer (with keyBy) or when the watermark passes its
// end (without): its panes' lists are merged and emitted, and the panes it
// was the last window of are dropped. With keyBy the results of one
// watermark come in the order the backend fires its timers (by window end,
// then key group and encoded key); without, window by window. Within a
// window and key, rows come best first.
type TopN struct {
	spec   *spec
	name   string
	r      *resolved
	in     *stream.Schema
	out    *stream.Schema
	maxPar int
	codec  panesCodec
	keyed  bool

	// With keyBy: the runtime's backend, the panes of each key.
	backend statebackend.Backend
	timers  statebackend.TimerService
	panes   statebackend.ValueState[*keyPanes]
	keys    rowenc.Keys
	// Without keyBy: the subtask's panes.
	global []pane

	wm  int64
	seq int64 // arrival number of the next row, for ordering equal values

	groups grouper
	local  []lrow        // group scratch: the group's best rows
	merged []ref         // merge scratch
	rowBuf []byte        // encoding scratch
	ends   []int         // end offsets of the rows in rowBuf
	arena  arena         // the bytes of rows entering a top n
	cands  []cand        // firing scratch: the rows of a window
	pos    []int         // firing scratch: the next row of each pane
	pend   *stream.Batch // output being built during ProcessWatermark
	emit   stream.Collector
	late   atomic.Int64
}

// lrow is a row of the batch being processed and its rank key.
type lrow struct {
	sk int64
	i  int32
}

// ref is a row of a merge: stored row i (local false) or local row i.
type ref struct {
	sk    int64
	i     int32
	local bool
}

var (
	_ stream.Operator      = (*TopN)(nil)
	_ stream.Checkpointed  = (*TopN)(nil)
	_ stream.KeyedStateful = (*TopN)(nil)
)

// New returns a window_topn (op TypeTopN) or window_max (TypeMax) operator
// for a JSON Config.
func New(op string, config []byte) (*TopN, error) {
	s, err := parse(op, config)
	if err != nil {
		return nil, err
	}
	return &TopN{spec: s, name: op, wm: stream.MinWatermark}, nil
}

// UsesKeyedState says the task runtime holds the panes. It is asked before
// Open, when the operator cannot tell whether its input is keyed: a top-n
// without keyBy gets a backend too, and leaves it empty.
func (o *TopN) UsesKeyedState() bool { return true }

// LateRecordsDropped returns how many rows arrived after all their windows
// had fired. It may be called from any goroutine.
func (o *TopN) LateRecordsDropped() int64 { return o.late.Load() }

// Open binds the operator to its input and, with keyBy, to its keyed state.
func (o *TopN) Open(_ context.Context, octx *stream.OperatorContext) error {
	if octx.OperatorUID != "" {
		o.name = fmt.Sprintf("%s %q", o.spec.op, octx.OperatorUID)
	}
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("%s: got %d inputs, want 1", o.name, len(octx.InputSchemas))
	}
	var keys []string
	if len(octx.InputKeys) > 0 {
		keys = octx.InputKeys[0]
	}
	r, err := o.spec.resolve(octx.InputSchemas[0], keys)
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
	o.maxPar = octx.MaxParallelism
	if o.maxPar <= 0 {
		o.maxPar = stream.DefaultMaxParallelism
	}
	o.codec = newPanesCodec(o.in, r.col, o.spec.asc)
	o.keyed = len(r.keyCols) > 0
	if !o.keyed {
		return nil
	}
	o.keys = rowenc.Keys{Cols: r.keyCols, MaxParallelism: o.maxPar}
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.timers = o.backend.Timers()
	if o.panes, err = statebackend.GetValueState[*keyPanes](o.backend, panesTable, o.codec); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// sortKey is the rank key of row i of c (not null).
func (o *TopN) sortKey(c *stream.Column, i int) int64 {
	if c.Type == stream.TypeFloat64 {
		return rankKey(floatKey(c.Floats[i]), o.spec.asc)
	}
	return rankKey(c.Ints[i], o.spec.asc)
}

func (o *TopN) paneStart(ts int64) int64 {
	r := (ts - o.spec.offset) % o.spec.slide
	if r < 0 {
		r += o.spec.slide
	}
	return ts - r
}

// ProcessBatch offers each row to its key's top n in its pane.
func (o *TopN) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	if len(b.Times) != n {
		return fmt.Errorf("%s: a batch of %d rows has no event timestamps (Batch.Times is empty); add a watermarks operator upstream", o.name, n)
	}
	if o.keyed {
		o.keys.Encode(b)
	}
	col := &b.Cols[o.r.col]
	g := &o.groups
	g.reset(n)
	lo, hi, open := int64(1), int64(0), false
	// Without keyBy, rows below the stored worst of a full pane are
	// dropped at once.
	full, worst, ties := false, int64(0), o.spec.ties
	var late int64
	for i, ts := range b.Times[:n] {
		if ts < lo || ts >= hi {
			lo = o.paneStart(ts)
			hi = lo + o.spec.slide
			open = lo+o.spec.size-1 > o.wm // some window of the pane is open
			if !o.keyed {
				full, worst = bar(o.global, lo, o.spec.n)
			}
		}
		if !open {
			late++
			continue
		}
		if rowenc.IsNull(col, i) {
			continue // nulls never rank
		}
		if !o.keyed {
			if full {
				if sk := o.sortKey(col, i); sk < worst || sk == worst && !ties {
					continue
				}
			}
			g.add(int32(i), lo, 0, nil)
			continue
		}
		key, _ := o.keys.Key(i)
		g.add(int32(i), lo, o.keys.Hash(i), key)
	}
	if late > 0 {
		o.late.Add(late)
	}
	var err error
	for k := range g.gs {
		if err = o.offerGroup(b, col, &g.gs[k]); err != nil {
			break
		}
	}
	o.seq += int64(n)
	return err
}

// offerGroup offers the rows of one (key, pane) group to the key's top n.
func (o *TopN) offerGroup(b *stream.Batch, col *stream.Column, gr *group) error {
	var cur []pane
	if o.keyed {
		key, kg := o.keys.Key(int(gr.first))
		if owned := o.backend.KeyGroups(); !owned.Contains(kg) {
			return fmt.Errorf("%s: a record of key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", o.name, kg, owned)
		}
		o.backend.SetCurrentKey(key, kg)
		if kp, ok := o.panes.Value(); ok {
			cur = kp.ps
		}
	} else {
		cur = o.global
	}
	at, found := slices.BinarySearchFunc(cur, gr.start, func(p pane, s int64) int { return cmp.Compare(p.start, s) })
	var stored []cand
	if found {
		stored = cur[at].rows
	}
	// The group's best rows, with the stored rows' worst as a first bar.
	nTop, ties := o.spec.n, o.spec.ties
	full, bar := len(stored) >= nTop, int64(0)
	if full {
		bar = stored[len(stored)-1].sk
	}
	local := o.local[:0]
	for i := gr.first; i >= 0; i = o.groups.next[i] {
		sk := o.sortKey(col, int(i))
		if full && (sk < bar || sk == bar && !ties) {
			continue
		}
		if len(local) >= nTop {
			if w := local[len(local)-1].sk; sk < w || sk == w && !ties {
				continue
			}
		}
		pos := len(local) // after every row ranking at least as high
		for pos > 0 && local[pos-1].sk < sk {
			pos--
		}
		local = slices.Insert(local, pos, lrow{sk: sk, i: i})
		local = trim(local, nTop, ties, func(r lrow) int64 { return r.sk })
	}
	o.local = local
	if len(local) == 0 {
		return nil
	}
	rows := o.mergeLocal(stored, local, b)
	if rows == nil {
		return nil
	}
	kp := newKeyPanes(len(cur) + 1)
	next := append(kp.ps, cur[:at]...)
	next = append(next, pane{start: gr.start, rows: rows})
	if found {
		at++
	}
	kp.ps = append(next, cur[at:]...)
	if !o.keyed {
		o.global = kp.ps
		return nil
	}
	o.panes.Update(kp)
	// A new pane needs a timer at its first window that has not fired,
	// unless an earlier pane of the key is in that window: that pane's
	// timers go on until its last window, which is after this pane's first
	// (see fire).
	if !found && (at == 0 || cur[at-1].start+o.spec.size <= gr.start) {
		slide, end := o.spec.slide, gr.start+o.spec.slide
		if end-1 <= o.wm {
			end += ((o.wm-(end-1))/slide + 1) * slide
		}
		o.timers.RegisterEventTimeTimer(end - 1)
	}
	return nil
}

// mergeLocal merges local (ranked rows of b, arriving in this order after
// every stored row) into stored (a pane's rows) and returns the new rows,
// or nil if no local row entered the top n.
func (o *TopN) mergeLocal(stored []cand, local []lrow, b *stream.Batch) []cand {
	m := o.merged[:0]
	i, j := 0, 0
	for i < len(stored) || j < len(local) {
		if j == len(local) || i < len(stored) && stored[i].sk >= local[j].sk {
			m = append(m, ref{sk: stored[i].sk, i: int32(i)})
			i++
		} else {
			m = append(m, ref{sk: local[j].sk, i: int32(j), local: true})
			j++
		}
	}
	m = trim(m, o.spec.n, o.spec.ties, func(r ref) int64 { return r.sk })
	o.merged = m
	buf, ends := o.rowBuf[:0], o.ends[:0]
	for _, r := range m {
		if r.local {
			buf = appendRow(buf, b, int(local[r.i].i))
			ends = append(ends, len(buf))
		}
	}
	o.rowBuf, o.ends = buf, ends
	if len(ends) == 0 {
		return nil
	}
	rowBytes := o.arena.copy(buf)
	out := make([]cand, len(m))
	off, e := 0, 0
	for k, r := range m {
		if !r.local {
			out[k] = stored[r.i]
			continue
		}
		end := ends[e]
		e++
		out[k] = cand{sk: r.sk, seq: o.seq + int64(local[r.i].i), row: rowBytes[off:end:end]}
		off = end
	}
	return out
}

// bar reports whether the pane starting at start holds n rows or more,
// and if so the rank key of its worst row.
func bar(ps []pane, start int64, n int) (bool, int64) {
	at, found := slices.BinarySearchFunc(ps, start, func(p pane, s int64) int { return cmp.Compare(p.start, s) })
	if !found || len(ps[at].rows) < n {
		return false, 0
	}
	rows := ps[at].rows
	return true, rows[len(rows)-1].sk
}

// mergePane merges p into kp (a restore of several subtasks' panes) and
// returns the result: the rows of equal panes merge by rank, then arrival.
func (o *TopN) mergePane(kp []pane, p pane) []pane {
	at, found := slices.BinarySearchFunc(kp, p.start, func(q pane, s int64) int { return cmp.Compare(q.start, s) })
	if !found {
		return slices.Insert(kp, at, p)
	}
	rows := append(slices.Clone(kp[at].rows), p.rows...)
	slices.SortStableFunc(rows, compareCands)
	kp[at].rows = trim(rows, o.spec.n, o.spec.ties, func(c cand) int64 { return c.sk })
	return kp
}

// compareCands orders candidates best first: by rank key, then arrival.
func compareCands(x, y cand) int {
	if c := cmp.Compare(y.sk, x.sk); c != 0 {
		return c
	}
	return cmp.Compare(x.seq, y.seq)
}

// trim cuts a best-first list to the top n (with ties: every row equal to
// the n-th).
func trim[T any](rows []T, n int, ties bool, sk func(T) int64) []T {
	if len(rows) <= n {
		return rows
	}
	if !ties {
		return rows[:n]
	}
	thr, cut := sk(rows[n-1]), n
	for cut < len(rows) && sk(rows[cut]) == thr {
		cut++
	}
	return rows[:cut]
}

// ProcessWatermark fires the windows whose end-1 wm reached, drops the panes
// no open window needs, and forwards wm.
func (o *TopN) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm <= o.wm {
		return nil
	}
	prev := o.wm
	o.wm = wm
	o.emit = out
	var err error
	if o.keyed {
		err = o.timers.AdvanceWatermark(wm, o.fire)
	} else {
		o.advanceGlobal(prev, wm)
	}
	o.flush()
	o.emit = nil
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	out.EmitWatermark(wm)
	return nil
}

// fire emits the current key's window ending at ts+1, drops the panes it
// was the last window of, and sets the timer of the key's next window if a
// remaining pane was in this one too. So the timers of a pane, from its
// first window that had not fired when it was created to its last, are
// set by its creation or by an earlier pane's firing; a pane starting at
// or after this window's end has a timer of its own (offerGroup).
func (o *TopN) fire(_ []byte, _ int, ts int64) error {
	kp, ok := o.panes.Value()
	if !ok {
		return nil
	}
	cur := kp.ps
	end := ts + 1
	o.emitWindow(cur, end)
	k := 0
	for k < len(cur) && cur[k].start+o.spec.size <= end {
		k++
	}
	switch {
	case k == len(cur):
		o.panes.Clear()
		return nil
	case k > 0:
		rest := newKeyPanes(len(cur) - k)
		rest.ps = append(rest.ps, cur[k:]...)
		o.panes.Update(rest)
	}
	if cur[k].start < end {
		o.timers.RegisterEventTimeTimer(end + o.spec.slide - 1)
	}
	return nil
}

// advanceGlobal fires the windows of the subtask's panes (without keyBy)
// that end after prev and by wm, and drops the panes whose last window has
// fired.
func (o *TopN) advanceGlobal(prev, wm int64) {
	size, slide, ps := o.spec.size, o.spec.slide, o.global
	if len(ps) == 0 {
		return
	}
	e := ps[0].start + slide
	if prev != stream.MinWatermark {
		e = max(e, o.paneStart(prev+1)+slide)
	}
	k := 0 // first pane that may be in the window ending at e
	for e-1 <= wm && e <= ps[len(ps)-1].start+size {
		for k < len(ps) && ps[k].start < e-size {
			k++
		}
		if k == len(ps) {
			break
		}
		if ps[k].start >= e {
			e = ps[k].start + slide // jump over windows without data
			continue
		}
		o.emitWindow(ps[k:], e)
		e += slide
	}
	k = 0
	for k < len(ps) && ps[k].start+size-1 <= wm {
		k++
	}
	if k > 0 {
		o.global = slices.Clone(ps[k:])
	}
}

// emitWindow adds the rows of the window ending at end to the output: the
// best of the rows of those of ps (ascending) that start in it.
func (o *TopN) emitWindow(ps []pane, end int64) {
	start := end - o.spec.size
	lo := 0
	for lo < len(ps) && ps[lo].start < start {
		lo++
	}
	hi := lo
	for hi < len(ps) && ps[hi].start < end {
		hi++
	}
	var rows []cand
	switch hi - lo {
	case 0:
		return
	case 1:
		rows = ps[lo].rows
	default:
		rows = o.best(ps[lo:hi])
	}
	if o.pend == nil {
		o.pend = stream.NewBatch(o.out, len(rows))
	}
	b := o.pend
	nIn := o.in.Len()
	rank := int64(0)
	for j, x := range rows {
		if j == 0 || x.sk != rows[j-1].sk {
			rank = int64(j + 1)
		}
		n := b.Len()
		rowenc.DecodeRow(b.Cols[:nIn], n, x.row)
		extra := nIn
		if o.spec.bounds {
			b.Cols[extra].Ints = append(b.Cols[extra].Ints, start)
			b.Cols[extra+1].Ints = append(b.Cols[extra+1].Ints, end)
			extra += 2
		}
		if o.spec.rankAs != "" {
			b.Cols[extra].Ints = append(b.Cols[extra].Ints, rank)
		}
		b.Times = append(b.Times, end-1)
		b.SetLen(n + 1)
	}
	if hi-lo > 1 {
		clear(o.cands) // do not pin rows
		o.cands = o.cands[:0]
	}
	if b.Len() >= maxOutputRows {
		o.flush()
	}
}

// best merges the rows of ps (each best first) into the top n of them
// (with ties: and every row equal to the n-th), in o.cands.
func (o *TopN) best(ps []pane) []cand {
	pos := o.pos[:0]
	for range ps {
		pos = append(pos, 0)
	}
	out := o.cands[:0]
	n := o.spec.n
	for {
		k := -1
		for j := range ps {
			if pos[j] < len(ps[j].rows) && (k < 0 || compareCands(ps[j].rows[pos[j]], ps[k].rows[pos[k]]) < 0) {
				k = j
			}
		}
		if k < 0 {
			break
		}
		c := ps[k].rows[pos[k]]
		if len(out) >= n && (!o.spec.ties || c.sk != out[n-1].sk) {
			break
		}
		out = append(out, c)
		pos[k]++
	}
	o.pos, o.cands = pos, out
	return out
}

// maxOutputRows bounds the rows of one output batch.
const maxOutputRows = 4096

// flush emits the output built so far.
func (o *TopN) flush() {
	if o.pend == nil {
		return
	}
	b := o.pend
	o.pend = nil
	if b.Len() == 0 {
		b.Release()
		return
	}
	o.emit.Collect(b)
}

// Finish does nothing: the final watermark fired every window.
func (o *TopN) Finish(stream.Collector) error { return nil }

// Close lets go of the state; the runtime closes the backend.
func (o *TopN) Close() error {
	o.backend, o.timers, o.panes, o.global = nil, nil, nil, nil
	o.arena = arena{}
	if o.pend != nil {
		o.pend.Release()
		o.pend = nil
	}
	return nil
}

// arena copies the encoded rows entering a top n into shared chunks, so that
// a row costs no allocation of its own. A chunk is never written where a
// row was handed out; it lives while any of its rows (in state or in an
// output batch's strings) does, which for windows that move on with time is
// not much longer than its rows.
type arena struct{ cur []byte }

const arenaChunk = 16 << 10

func (a *arena) copy(b []byte) []byte {
	if len(b) > arenaChunk/8 {
		return append([]byte(nil), b...)
	}
	if cap(a.cur)-len(a.cur) < len(b) {
		a.cur = make([]byte, 0, arenaChunk)
	}
	start := len(a.cur)
	a.cur = append(a.cur, b...)
	return a.cur[start:len(a.cur):len(a.cur)]
}

// grouper groups the rows of a batch by (key, pane), in order of each
// group's first row.
type grouper struct {
	gs    []group
	next  []int32 // next row of the same group, -1 after the last
	slots []int32 // open addressing over gs: index+1, 0 = empty
	mask  uint64
	prev  int32 // group of the row added last
}

type group struct {
	start       int64
	hash        uint64
	key         []byte
	first, last int32
}

func (g *grouper) reset(n int) {
	g.gs = g.gs[:0]
	if cap(g.next) < n {
		g.next = make([]int32, n)
	}
	g.next = g.next[:n]
	size := 16
	for size < 2*n {
		size <<= 1
	}
	if len(g.slots) != size {
		g.slots = make([]int32, size)
	} else {
		clear(g.slots)
	}
	g.mask = uint64(size - 1)
}

// add puts row i, of the pane starting at start and of a key with hash
// and encoding key (nil without keyBy), into its group.
func (g *grouper) add(i int32, start int64, hash uint64, key []byte) {
	g.next[i] = -1
	// Rows of one group mostly come in runs.
	if len(g.gs) > 0 {
		if gr := &g.gs[g.prev]; gr.start == start && gr.hash == hash && bytes.Equal(gr.key, key) {
			g.next[gr.last] = i
			gr.last = i
			return
		}
	}
	h := hash ^ uint64(start)*0x9e3779b97f4a7c15
	h ^= h >> 29
	for s := h & g.mask; ; s = (s + 1) & g.mask {
		x := g.slots[s]
		if x == 0 {
			g.gs = append(g.gs, group{start: start, hash: hash, key: key, first: i, last: i})
			g.slots[s] = int32(len(g.gs))
			g.prev = int32(len(g.gs) - 1)
			return
		}
		if gr := &g.gs[x-1]; gr.start == start && gr.hash == hash && bytes.Equal(gr.key, key) {
			g.next[gr.last] = i
			gr.last = i
			g.prev = x - 1
			return
		}
	}
}
