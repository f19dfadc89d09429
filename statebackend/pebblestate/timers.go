package pebblestate

import (
	"bytes"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// timerService implements statebackend.TimerService over the timer keys of
// each key group (kg | 0x00 | ts | key), which iterate in (ts, key) order.
//
// Across key groups, a small in-memory min-heap holds the key groups that
// may have timers, ordered by (lower bound of the key group's smallest
// timestamp, key group). A key group's bound only goes down when a timer is
// registered below it; AdvanceWatermark takes the top key group, seeks its
// first timer and either fires it (its timestamp equals the bound, so it is
// the smallest (ts, key group, key) overall: the heap backend's order) or
// raises the bound to the real timestamp, or drops the key group if it has
// no timers. Per key group a seek hint (a key at or below its first timer)
// lets the seek skip the tombstones of timers that already fired.
type timerService struct {
	b    *Backend
	wm   int64
	lb   []int64  // per key group index: lower bound of the smallest timer
	hint [][]byte // per key group index: timer key ≤ the smallest timer
	pos  []int32  // per key group index: position in heap, -1 if absent
	heap []int32
	kbuf []byte // key of the timer being fired
}

var _ statebackend.TimerService = (*timerService)(nil)

func (s *timerService) init(b *Backend) {
	n := b.kg.Len()
	*s = timerService{b: b, wm: stream.MinWatermark, lb: make([]int64, n), hint: make([][]byte, n), pos: make([]int32, n)}
	for i := range s.pos {
		s.pos[i] = -1
	}
}

// unknownAll marks every key group as possibly holding timers anywhere
// (after opening a database with timers of unknown position).
func (s *timerService) unknownAll() {
	for i := range s.lb {
		s.lower(i, math.MinInt64, timerPrefix(s.b.kg.Start+i))
	}
}

// lower records that key group index i may have a timer at ts with key k.
func (s *timerService) lower(i int, ts int64, k []byte) {
	if s.pos[i] < 0 {
		s.lb[i] = ts
		s.hint[i] = append(s.hint[i][:0], k...)
		s.pos[i] = int32(len(s.heap))
		s.heap = append(s.heap, int32(i))
		s.up(int(s.pos[i]))
		return
	}
	if bytes.Compare(k, s.hint[i]) < 0 {
		s.hint[i] = append(s.hint[i][:0], k...)
	}
	if ts < s.lb[i] {
		s.lb[i] = ts
		s.up(int(s.pos[i]))
	}
}

func (s *timerService) RegisterEventTimeTimer(ts int64) {
	b := s.b
	if b.closed {
		return
	}
	b.tbuf = appendTimerKey(b.tbuf[:0], b.keyGroup, ts, b.key)
	if b.oldLen(b.tbuf) >= 0 {
		return
	}
	b.set(b.tbuf, nil, -1)
	s.lower(b.keyGroup-b.kg.Start, ts, b.tbuf)
}

func (s *timerService) DeleteEventTimeTimer(ts int64) {
	b := s.b
	if b.closed {
		return
	}
	b.tbuf = appendTimerKey(b.tbuf[:0], b.keyGroup, ts, b.key)
	if old := b.oldLen(b.tbuf); old >= 0 {
		b.del(b.tbuf, old)
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
		ts, found, err := s.first(i)
		if err != nil {
			b.fail(err)
			return err
		}
		if !found {
			s.remove(i)
			continue
		}
		if ts != s.lb[i] {
			s.lb[i] = ts
			s.down(int(s.pos[i]))
			continue
		}
		// The smallest timer overall: fire it. kbuf holds its key.
		b.tbuf = appendTimerKey(b.tbuf[:0], kg, ts, s.kbuf)
		b.del(b.tbuf, 0)
		s.hint[i] = append(s.hint[i][:0], b.tbuf...)
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

// first reads the first timer of key group index i (at or after its hint)
// into s.kbuf.
func (s *timerService) first(i int) (ts int64, found bool, err error) {
	kg := s.b.kg.Start + i
	it, err := s.b.newIter(&pebble.IterOptions{LowerBound: s.hint[i], UpperBound: timerEnd(kg)})
	if err != nil {
		return 0, false, err
	}
	if it.First() {
		var key []byte
		_, ts, key, found = parseTimerKey(it.Key())
		s.kbuf = append(s.kbuf[:0], key...)
	}
	return ts, found, it.Close()
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
