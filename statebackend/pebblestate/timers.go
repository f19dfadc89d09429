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

// timerService implements statebackend.TimerService over the timer keys of
// each key group (kg | 0x00 | ts | key), which iterate in (ts, key) order.
// Every timer is written to the batch when it is registered, deleted or
// fired, so the database (and every snapshot) holds all timers; what is in
// memory only spares reads.
//
// Across key groups, a small in-memory min-heap holds the key groups that
// may have timers, ordered by (lower bound of the key group's smallest
// timestamp, key group). A key group's bound only goes down when a timer is
// registered below it; AdvanceWatermark takes the top key group, finds its
// first timer and either fires it (its timestamp equals the bound, so it is
// the smallest (ts, key group, key) overall: the heap backend's order) or
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
type timerService struct {
	b    *Backend
	wm   int64
	lb   []int64 // per key group index: lower bound of the smallest timer
	pos  []int32 // per key group index: position in heap, -1 if absent
	heap []int32
	idx  []timerIndex // per key group index
	// share is the bytes each key group's index may hold (at least one
	// timer whatever its size).
	share int64
	kbuf  []byte // key of the timer being fired
}

var _ statebackend.TimerService = (*timerService)(nil)

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
	n := b.kg.Len()
	*s = timerService{
		b:     b,
		wm:    stream.MinWatermark,
		lb:    make([]int64, n),
		pos:   make([]int32, n),
		idx:   make([]timerIndex, n),
		share: b.opts.TimerCacheBytes / int64(n),
	}
	for i := range s.pos {
		s.pos[i] = -1
		s.idx[i].state = timersAll // a new database has no timers
	}
}

// unknownAll marks every key group as possibly holding timers anywhere
// (after opening a database with timers of unknown position).
func (s *timerService) unknownAll() {
	for i := range s.idx {
		s.idx[i] = timerIndex{state: timersUnknown}
		s.lowerBound(i, math.MinInt64)
	}
}

// lower records that key group index i has the timer k (a timer key) at
// ts, written to the batch by a restore or merge.
func (s *timerService) lower(i int, ts int64, k []byte) {
	s.lowerBound(i, ts)
	s.add(i, k[timerSuffixAt:])
}

// lowerBound lowers key group index i's lower bound in the heap to ts,
// adding the key group to the heap.
func (s *timerService) lowerBound(i int, ts int64) {
	if s.pos[i] < 0 {
		s.lb[i] = ts
		s.pos[i] = int32(len(s.heap))
		s.heap = append(s.heap, int32(i))
		s.up(int(s.pos[i]))
		return
	}
	if ts < s.lb[i] {
		s.lb[i] = ts
		s.up(int(s.pos[i]))
	}
}

// timerSuffixAt is where the timestamp starts in a timer key.
const timerSuffixAt = 3

// exists reports whether key group index i has the timer with key k (a
// timer key): from the index if it knows, else from the batch or database.
// A timer found in the database is added to the index.
func (s *timerService) exists(i int, k []byte) (bool, error) {
	x := &s.idx[i]
	sfx := k[timerSuffixAt:]
	if x.set.has(sfx) {
		return true, nil
	}
	if x.state == timersAll || x.state == timersUpTo && string(sfx) <= x.upto {
		return false, nil
	}
	if x.state == timersUnknown {
		// Load the key group's first timers: later calls (and the next
		// firing) find them in memory.
		if err := s.load(i); err != nil {
			return false, err
		}
		return s.exists(i, k)
	}
	_, found, err := s.b.get(k, nil)
	if found {
		s.add(i, sfx)
	}
	return found, err
}

// add records in key group index i's index that the timer with suffix sfx
// exists, and evicts the index's last timers beyond its share.
func (s *timerService) add(i int, sfx []byte) {
	x := &s.idx[i]
	if x.set.n > 0 && x.set.bytes+int64(len(sfx))+timerEntryOverhead > s.share && string(sfx) > x.set.max() {
		// It would be the first to go: leave it out.
		if x.state == timersAll || x.state == timersUpTo && string(sfx) <= x.upto {
			x.state, x.upto = timersUpTo, x.set.max()
		}
		return
	}
	if x.set.insert(sfx) {
		s.trim(i)
	}
}

// trim evicts the last timers of key group index i's index while it holds
// more than its share (and more than one timer), lowering its bound below
// the ones it evicts.
func (s *timerService) trim(i int) {
	x := &s.idx[i]
	for x.set.bytes > s.share && x.set.n > 1 {
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
func (s *timerService) load(i int) error {
	b, x := s.b, &s.idx[i]
	kg := b.kg.Start + i
	lower := timerPrefix(kg)
	if x.state == timersUpTo {
		lower = append(append(lower, x.upto...), 0) // the first key after upto
	}
	it, err := b.newIter(&pebble.IterOptions{LowerBound: lower, UpperBound: timerEnd(kg)})
	if err != nil {
		return err
	}
	x.set = timerSet{}
	var last []byte
	ok := it.First()
	for ; ok; ok = it.Next() {
		sfx := it.Key()[timerSuffixAt:]
		if x.set.n > 0 && x.set.bytes+int64(len(sfx))+timerEntryOverhead > s.share {
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
func (s *timerService) first(i int) (sfx string, found bool, err error) {
	x := &s.idx[i]
	if x.state != timersUnknown && x.set.n > 0 {
		if m := x.set.min(); x.state == timersAll || m <= x.upto {
			return m, true, nil
		}
	}
	if x.state == timersAll {
		return "", false, nil
	}
	if err := s.load(i); err != nil {
		return "", false, err
	}
	if x.set.n == 0 {
		return "", false, nil
	}
	return x.set.min(), true, nil
}

func (s *timerService) RegisterEventTimeTimer(ts int64) {
	b := s.b
	if b.closed {
		return
	}
	i := b.keyGroup - b.kg.Start
	b.tbuf = appendTimerKey(b.tbuf[:0], b.keyGroup, ts, b.key)
	found, err := s.exists(i, b.tbuf)
	if err != nil {
		b.fail(err)
		return
	}
	if found {
		return
	}
	b.set(b.tbuf, nil, -1)
	s.add(i, b.tbuf[timerSuffixAt:])
	s.lowerBound(i, ts)
}

func (s *timerService) DeleteEventTimeTimer(ts int64) {
	b := s.b
	if b.closed {
		return
	}
	i := b.keyGroup - b.kg.Start
	b.tbuf = appendTimerKey(b.tbuf[:0], b.keyGroup, ts, b.key)
	found, err := s.exists(i, b.tbuf)
	if err != nil {
		b.fail(err)
		return
	}
	if found {
		b.del(b.tbuf, 0) // timers have empty values
		s.idx[i].set.remove(b.tbuf[timerSuffixAt:])
	}
}

func (s *timerService) CurrentWatermark() int64 { return s.wm }

func (s *timerService) AdvanceWatermark(wm int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	b := s.b
	if b.closed {
		return statebackend.ErrClosed
	}
	s.wm = max(s.wm, wm)
	savedKey, savedKG := b.key, b.keyGroup
	defer func() { b.key, b.keyGroup = savedKey, savedKG }()
	for len(s.heap) > 0 {
		i := int(s.heap[0])
		if s.lb[i] > s.wm {
			return nil
		}
		kg := b.kg.Start + i
		sfx, found, err := s.first(i)
		if err != nil {
			err = fmt.Errorf("pebble state backend: %s: reading the timers of key group %d: %w", b.opts.Dir, kg, err)
			b.fail(err)
			return err
		}
		if !found {
			s.remove(i)
			continue
		}
		ts := timerSuffixTS(sfx)
		if ts != s.lb[i] {
			s.lb[i] = ts
			s.down(int(s.pos[i]))
			continue
		}
		// The smallest timer overall: fire it.
		s.kbuf = append(s.kbuf[:0], sfx[8:]...)
		b.tbuf = appendTimerKey(b.tbuf[:0], kg, ts, s.kbuf)
		b.del(b.tbuf, 0)
		s.idx[i].set.remove(b.tbuf[timerSuffixAt:])
		b.key, b.keyGroup = s.kbuf, kg
		if err := fire(s.kbuf, kg, ts); err != nil {
			return err
		}
		if b.closed {
			return statebackend.ErrClosed
		}
	}
	return nil
}

// timerSuffixTS returns the timestamp of a timer key suffix (ts | key).
func timerSuffixTS(sfx string) int64 {
	var u uint64
	for j := range 8 {
		u = u<<8 | uint64(sfx[j])
	}
	return int64(u ^ 1<<63)
}

func (s *timerService) less(a, b int32) bool {
	if s.lb[a] != s.lb[b] {
		return s.lb[a] < s.lb[b]
	}
	return a < b
}

func (s *timerService) swap(x, y int) {
	h := s.heap
	h[x], h[y] = h[y], h[x]
	s.pos[h[x]] = int32(x)
	s.pos[h[y]] = int32(y)
}

func (s *timerService) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(s.heap[j], s.heap[p]) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

func (s *timerService) down(j int) {
	n := len(s.heap)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(s.heap[r], s.heap[l]) {
			m = r
		}
		if !s.less(s.heap[m], s.heap[j]) {
			return
		}
		s.swap(j, m)
		j = m
	}
}

// remove takes key group index i out of the heap.
func (s *timerService) remove(i int) {
	j := int(s.pos[i])
	last := len(s.heap) - 1
	if j != last {
		s.swap(j, last)
	}
	s.heap = s.heap[:last]
	s.pos[i] = -1
	if j < last {
		s.down(j)
		s.up(j)
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
