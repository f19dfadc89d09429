package pebblestate

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// timerService implements statebackend.TimerService: a timerQueue per
// domain (event time, processing time), each over its own timer keys, and
// the watermark.
type timerService struct {
	b     *Backend
	wm    int64
	event timerQueue
	proc  timerQueue
}

var _ statebackend.TimerService = (*timerService)(nil)

// timerQueue holds the timers of one domain, over the timer keys of each
// key group (kg | marker | ts | key), which iterate in (ts, key) order.
// Every timer is written to the batch when it is registered, deleted or
// fired, so the database (and every snapshot) holds all timers; what is in
// memory only spares reads.
//
// Across key groups, a small in-memory min-heap holds the key groups that
// may have timers, ordered by (lower bound of the key group's smallest
// timestamp, key group). A key group's bound only goes down when a timer is
// registered below it; advance takes the top key group, finds its first
// timer and either fires it (its timestamp equals the bound, so it is the
// smallest (ts, key group, key) overall: the heap backend's order) or
// raises the bound to the real timestamp, or drops the key group if it has
// no timers.
//
// Per key group, an index (timerIndex) holds the earliest timers in order,
// all of them up to a bound, and timers known to exist beyond it (found or
// registered), within a share of Options.TimerCacheBytes. The first timer
// comes from the index, which is loaded from Pebble (a page of timers after
// the bound) only when it holds none below its bound; registering or
// deleting a timer that the index holds, or that lies below the bound, does
// not read Pebble.
type timerQueue struct {
	b    *Backend
	dom  timerDomain
	at   int     // where the timestamp starts in the domain's timer keys
	lb   []int64 // per key group index: lower bound of the smallest timer
	pos  []int32 // per key group index: position in heap, -1 if absent
	heap []int32
	idx  []timerIndex // per key group index
	// share is the bytes each key group's index may hold (at least one
	// timer whatever its size).
	share int64
	kbuf  []byte // key of the timer being fired
}

// timerEntryOverhead approximates the bytes an indexed timer costs beyond
// its timestamp and key: a string header in a half-full block and the
// allocation's rounding.
const timerEntryOverhead = 48

// Completeness of a timerIndex.
const (
	timersUnknown = iota // nothing is known beyond the timers in set
	timersUpTo           // every timer ≤ upto is in set
	timersAll            // every timer of the key group is in set
)

// timerIndex is what the backend knows in memory of one key group's
// timers: set holds timers that exist (as timer key suffixes ts | key,
// which order as the keys do), and state (with upto) which timers not in
// set do not exist.
type timerIndex struct {
	set   timerSet
	state uint8
	upto  string // with timersUpTo
}

func (s *timerService) init(b *Backend) {
	*s = timerService{b: b, wm: stream.MinWatermark}
	s.event.init(b, eventTimers)
	s.proc.init(b, procTimers)
}

// queue returns the queue of domain d.
func (s *timerService) queue(d timerDomain) *timerQueue {
	if d.proc {
		return &s.proc
	}
	return &s.event
}

func (s *timerService) RegisterEventTimeTimer(ts int64) { s.event.register(ts) }
func (s *timerService) DeleteEventTimeTimer(ts int64)   { s.event.delete(ts) }
func (s *timerService) CurrentWatermark() int64         { return s.wm }

func (s *timerService) AdvanceWatermark(wm int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	if s.b.closed {
		return statebackend.ErrClosed
	}
	s.wm = max(s.wm, wm)
	return s.event.advance(s.wm, fire)
}

func (s *timerService) RegisterProcessingTimeTimer(ts int64) {
	if s.proc.register(ts) {
		s.b.holdProcTimers()
	}
}

func (s *timerService) DeleteProcessingTimeTimer(ts int64) { s.proc.delete(ts) }

func (s *timerService) NextProcessingTime() (int64, bool) {
	if s.b.closed {
		return 0, false
	}
	return s.proc.next()
}

func (s *timerService) AdvanceProcessingTime(now int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	if s.b.closed {
		return statebackend.ErrClosed
	}
	return s.proc.advance(now, fire)
}

func (q *timerQueue) init(b *Backend, dom timerDomain) {
	n := b.kg.Len()
	*q = timerQueue{
		b:     b,
		dom:   dom,
		at:    dom.suffixAt(),
		lb:    make([]int64, n),
		pos:   make([]int32, n),
		idx:   make([]timerIndex, n),
		share: b.opts.TimerCacheBytes / int64(n),
	}
	for i := range q.pos {
		q.pos[i] = -1
		q.idx[i].state = timersAll // a new database has no timers
	}
}

// unknownAll marks every key group as possibly holding timers anywhere
// (after opening a database with timers of unknown position).
func (q *timerQueue) unknownAll() {
	for i := range q.idx {
		q.idx[i] = timerIndex{state: timersUnknown}
		q.lowerBound(i, math.MinInt64)
	}
}

// lower records that key group index i has the timer k (a timer key of the
// queue's domain) at ts, written to the batch by a restore or merge.
func (q *timerQueue) lower(i int, ts int64, k []byte) {
	q.lowerBound(i, ts)
	q.add(i, k[q.at:])
}

// lowerBound lowers key group index i's lower bound in the heap to ts,
// adding the key group to the heap.
func (q *timerQueue) lowerBound(i int, ts int64) {
	if q.pos[i] < 0 {
		q.lb[i] = ts
		q.pos[i] = int32(len(q.heap))
		q.heap = append(q.heap, int32(i))
		q.up(int(q.pos[i]))
		return
	}
	if ts < q.lb[i] {
		q.lb[i] = ts
		q.up(int(q.pos[i]))
	}
}

// exists reports whether key group index i has the timer with key k (a
// timer key): from the index if it knows, else from the batch or database.
// A timer found in the database is added to the index.
func (q *timerQueue) exists(i int, k []byte) (bool, error) {
	x := &q.idx[i]
	sfx := k[q.at:]
	if x.set.has(sfx) {
		return true, nil
	}
	if x.state == timersAll || x.state == timersUpTo && string(sfx) <= x.upto {
		return false, nil
	}
	if x.state == timersUnknown {
		// Load the key group's first timers: later calls (and the next
		// firing) find them in memory.
		if err := q.load(i); err != nil {
			return false, err
		}
		return q.exists(i, k)
	}
	_, found, err := q.b.get(k, nil)
	if found {
		q.add(i, sfx)
	}
	return found, err
}

// add records in key group index i's index that the timer with suffix sfx
// exists, and evicts the index's last timers beyond its share.
func (q *timerQueue) add(i int, sfx []byte) {
	x := &q.idx[i]
	if x.set.n > 0 && x.set.bytes+int64(len(sfx))+timerEntryOverhead > q.share && string(sfx) > x.set.max() {
		// It would be the first to go: leave it out.
		if x.state == timersAll || x.state == timersUpTo && string(sfx) <= x.upto {
			x.state, x.upto = timersUpTo, x.set.max()
		}
		return
	}
	if x.set.insert(sfx) {
		q.trim(i)
	}
}

// trim evicts the last timers of key group index i's index while it holds
// more than its share (and more than one timer), lowering its bound below
// the ones it evicts.
func (q *timerQueue) trim(i int) {
	x := &q.idx[i]
	for x.set.bytes > q.share && x.set.n > 1 {
		last := x.set.popMax()
		if x.state == timersAll || x.state == timersUpTo && last <= x.upto {
			x.state, x.upto = timersUpTo, x.set.max()
		}
	}
}

// load reads key group index i's timers after its index's bound (all of
// them if nothing is known) into the index, as many as fit its share but
// at least one, and moves the bound to the last one read. It is called
// when the index holds no timer up to its bound, so only timers beyond
// it: it drops those, which it reads again in order if they fit.
func (q *timerQueue) load(i int) error {
	b, x := q.b, &q.idx[i]
	kg := b.kg.Start + i
	lower := q.dom.prefix(kg)
	if x.state == timersUpTo {
		lower = append(append(lower, x.upto...), 0) // the first key after upto
	}
	it, err := b.newIter(&pebble.IterOptions{LowerBound: lower, UpperBound: q.dom.end(kg)})
	if err != nil {
		return err
	}
	x.set = timerSet{}
	var last []byte
	ok := it.First()
	for ; ok; ok = it.Next() {
		sfx := it.Key()[q.at:]
		if x.set.n > 0 && x.set.bytes+int64(len(sfx))+timerEntryOverhead > q.share {
			break
		}
		x.set.insert(sfx)
		last = append(last[:0], sfx...)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		x.set, x.state = timerSet{}, timersUnknown
		return err
	}
	if ok {
		x.state, x.upto = timersUpTo, string(last)
	} else {
		x.state, x.upto = timersAll, ""
	}
	return nil
}

// first returns key group index i's first timer (its key suffix), loading
// the index if it holds none below its bound.
func (q *timerQueue) first(i int) (sfx string, found bool, err error) {
	x := &q.idx[i]
	if x.state != timersUnknown && x.set.n > 0 {
		if m := x.set.min(); x.state == timersAll || m <= x.upto {
			return m, true, nil
		}
	}
	if x.state == timersAll {
		return "", false, nil
	}
	if err := q.load(i); err != nil {
		return "", false, err
	}
	if x.set.n == 0 {
		return "", false, nil
	}
	return x.set.min(), true, nil
}

// register adds a timer at ts for the current key and reports whether it
// was new.
func (q *timerQueue) register(ts int64) bool {
	b := q.b
	if b.closed {
		return false
	}
	i := b.keyGroup - b.kg.Start
	b.tbuf = q.dom.appendKey(b.tbuf[:0], b.keyGroup, ts, b.key)
	found, err := q.exists(i, b.tbuf)
	if err != nil {
		b.fail(err)
		return false
	}
	if found {
		return false
	}
	b.set(b.tbuf, nil, -1)
	q.add(i, b.tbuf[q.at:])
	q.lowerBound(i, ts)
	return true
}

// delete removes the current key's timer at ts, if any.
func (q *timerQueue) delete(ts int64) {
	b := q.b
	if b.closed {
		return
	}
	i := b.keyGroup - b.kg.Start
	b.tbuf = q.dom.appendKey(b.tbuf[:0], b.keyGroup, ts, b.key)
	found, err := q.exists(i, b.tbuf)
	if err != nil {
		b.fail(err)
		return
	}
	if found {
		b.del(b.tbuf, 0) // timers have empty values
		q.idx[i].set.remove(b.tbuf[q.at:])
	}
}

// settle settles the heap's top key group, while its bound is at or below
// limit, until the bound is the timestamp of the key group's first timer
// (which is then the smallest (ts, key group, key) of all timers): it
// returns that key group's index, and false if no timer is at or below
// limit. Key groups without timers leave the heap on the way.
func (q *timerQueue) settle(limit int64) (i int, ok bool, err error) {
	for len(q.heap) > 0 {
		i := int(q.heap[0])
		if q.lb[i] > limit {
			return 0, false, nil
		}
		sfx, found, err := q.first(i)
		if err != nil {
			err = fmt.Errorf("pebble state backend: %s: reading the %s timers of key group %d: %w", q.b.opts.Dir, q.dom.name, q.b.kg.Start+i, err)
			q.b.fail(err)
			return i, false, err
		}
		if !found {
			q.remove(i)
			continue
		}
		if ts := timerSuffixTS(sfx); ts != q.lb[i] {
			q.lb[i] = ts
			q.down(int(q.pos[i]))
			continue
		}
		return i, true, nil
	}
	return 0, false, nil
}

// next returns the smallest timer's timestamp. If the timers cannot be
// read, it returns a lower bound of it, so that the caller goes on to
// advance, which returns the error.
func (q *timerQueue) next() (int64, bool) {
	i, ok, err := q.settle(math.MaxInt64)
	if err != nil {
		return q.lb[i], true
	}
	if !ok {
		return 0, false
	}
	return q.lb[i], true
}

// advance fires, in (ts, key group, key) order, every timer at or below
// limit (see statebackend.TimerService.AdvanceWatermark).
func (q *timerQueue) advance(limit int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	b := q.b
	savedKey, savedKG := b.key, b.keyGroup
	defer func() { b.key, b.keyGroup = savedKey, savedKG }()
	for {
		i, ok, err := q.settle(limit)
		if err != nil || !ok {
			return err
		}
		// The smallest timer overall: fire it.
		kg, ts := b.kg.Start+i, q.lb[i]
		sfx := q.idx[i].set.min()
		q.kbuf = append(q.kbuf[:0], sfx[8:]...)
		b.tbuf = q.dom.appendKey(b.tbuf[:0], kg, ts, q.kbuf)
		b.del(b.tbuf, 0)
		q.idx[i].set.remove(b.tbuf[q.at:])
		b.key, b.keyGroup = q.kbuf, kg
		if err := fire(q.kbuf, kg, ts); err != nil {
			return err
		}
		if b.closed {
			return statebackend.ErrClosed
		}
	}
}

// timerSuffixTS returns the timestamp of a timer key suffix (ts | key).
func timerSuffixTS(sfx string) int64 {
	var u uint64
	for j := range 8 {
		u = u<<8 | uint64(sfx[j])
	}
	return int64(u ^ 1<<63)
}

func (q *timerQueue) less(a, b int32) bool {
	if q.lb[a] != q.lb[b] {
		return q.lb[a] < q.lb[b]
	}
	return a < b
}

func (q *timerQueue) swap(x, y int) {
	h := q.heap
	h[x], h[y] = h[y], h[x]
	q.pos[h[x]] = int32(x)
	q.pos[h[y]] = int32(y)
}

func (q *timerQueue) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !q.less(q.heap[j], q.heap[p]) {
			return
		}
		q.swap(j, p)
		j = p
	}
}

func (q *timerQueue) down(j int) {
	n := len(q.heap)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.less(q.heap[r], q.heap[l]) {
			m = r
		}
		if !q.less(q.heap[m], q.heap[j]) {
			return
		}
		q.swap(j, m)
		j = m
	}
}

// remove takes key group index i out of the heap.
func (q *timerQueue) remove(i int) {
	j := int(q.pos[i])
	last := len(q.heap) - 1
	if j != last {
		q.swap(j, last)
	}
	q.heap = q.heap[:last]
	q.pos[i] = -1
	if j < last {
		q.down(j)
		q.up(j)
	}
}

// timerSet is a sorted set of timer key suffixes in blocks of at most
// timerBlock elements, so that an insertion or removal moves at most a
// block's elements (and a split the block list). bytes counts the
// suffixes plus timerEntryOverhead each.
type timerSet struct {
	blocks [][]string // non-empty, each sorted, in order
	n      int
	bytes  int64
}

const timerBlock = 128

// find returns the position of k, or where it would be inserted: bi ==
// len(blocks) if k is above every element.
func (t *timerSet) find(k []byte) (bi, j int, found bool) {
	bi = sort.Search(len(t.blocks), func(i int) bool {
		blk := t.blocks[i]
		return blk[len(blk)-1] >= string(k)
	})
	if bi == len(t.blocks) {
		return bi, 0, false
	}
	blk := t.blocks[bi]
	lo, hi := 0, len(blk)-1 // blk[hi] ≥ k
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if blk[h] < string(k) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return bi, lo, blk[lo] == string(k)
}

func (t *timerSet) has(k []byte) bool {
	_, _, found := t.find(k)
	return found
}

// insert adds k and reports whether it was absent.
func (t *timerSet) insert(k []byte) bool {
	bi, j, found := t.find(k)
	if found {
		return false
	}
	switch {
	case len(t.blocks) == 0:
		t.blocks = append(t.blocks, make([]string, 0, 8))
		bi, j = 0, 0
	case bi == len(t.blocks):
		bi--
		j = len(t.blocks[bi])
	}
	blk := append(t.blocks[bi], "")
	copy(blk[j+1:], blk[j:])
	blk[j] = string(k)
	if len(blk) > timerBlock {
		half := len(blk) / 2
		right := append(make([]string, 0, timerBlock), blk[half:]...)
		clear(blk[half:])
		blk = blk[:half]
		t.blocks = append(t.blocks, nil)
		copy(t.blocks[bi+2:], t.blocks[bi+1:])
		t.blocks[bi+1] = right
	}
	t.blocks[bi] = blk
	t.n++
	t.bytes += int64(len(k)) + timerEntryOverhead
	return true
}

// remove deletes k if present.
func (t *timerSet) remove(k []byte) {
	bi, j, found := t.find(k)
	if !found {
		return
	}
	blk := t.blocks[bi]
	if j == 0 {
		blk[0] = "" // firing takes the first element: no move
		blk = blk[1:]
	} else {
		copy(blk[j:], blk[j+1:])
		blk[len(blk)-1] = ""
		blk = blk[:len(blk)-1]
	}
	if len(blk) == 0 {
		copy(t.blocks[bi:], t.blocks[bi+1:])
		t.blocks[len(t.blocks)-1] = nil
		t.blocks = t.blocks[:len(t.blocks)-1]
	} else {
		t.blocks[bi] = blk
	}
	t.n--
	t.bytes -= int64(len(k)) + timerEntryOverhead
}

// min and max return the smallest and largest element; the set must not
// be empty.
func (t *timerSet) min() string { return t.blocks[0][0] }

func (t *timerSet) max() string {
	blk := t.blocks[len(t.blocks)-1]
	return blk[len(blk)-1]
}

// popMax removes and returns the largest element.
func (t *timerSet) popMax() string {
	m := t.max()
	t.remove([]byte(m))
	return m
}
