package heap

import "github.com/weirstream/weir/statebackend"

// timerID is a timer within one key group.
type timerID struct {
	ts  int64
	key string
}

// timer is a heap entry.
type timer struct {
	ts  int64
	kg  int
	key string
}

func (a timer) less(b timer) bool {
	if a.ts != b.ts {
		return a.ts < b.ts
	}
	if a.kg != b.kg {
		return a.kg < b.kg
	}
	return a.key < b.key
}

// timerService implements statebackend.TimerService. The heap may hold
// entries that were deleted (or fired and registered again): an entry counts
// only while its timerID is in its key group's set.
type timerService struct {
	b    *Backend
	wm   int64
	heap []timer
	sets []map[timerID]struct{} // per key group - b.kg.Start
	n    int                    // timers in sets
	keyB int64                  // key bytes of timers in sets
}

var _ statebackend.TimerService = (*timerService)(nil)

func (s *timerService) RegisterEventTimeTimer(ts int64) {
	b := s.b
	if b.closed {
		return
	}
	set := s.sets[b.idx]
	if set == nil {
		set = make(map[timerID]struct{})
		s.sets[b.idx] = set
	}
	if _, ok := set[timerID{ts, string(b.key)}]; ok {
		return
	}
	k := string(b.key)
	set[timerID{ts, k}] = struct{}{}
	s.n++
	s.keyB += int64(len(k))
	s.push(timer{ts: ts, kg: b.idx + b.kg.Start, key: k})
}

func (s *timerService) DeleteEventTimeTimer(ts int64) {
	b := s.b
	if b.closed {
		return
	}
	set := s.sets[b.idx]
	id := timerID{ts, string(b.key)}
	if _, ok := set[id]; !ok {
		return
	}
	delete(set, id)
	s.n--
	s.keyB -= int64(len(b.key))
	if len(s.heap) > 2*s.n+64 {
		s.rebuild()
	}
}

func (s *timerService) CurrentWatermark() int64 { return s.wm }

func (s *timerService) AdvanceWatermark(wm int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	b := s.b
	if b.closed {
		return statebackend.ErrClosed
	}
	s.wm = max(s.wm, wm)
	savedKey, savedIdx := b.key, b.idx
	defer func() { b.key, b.idx = savedKey, savedIdx }()
	var keyBuf []byte
	for len(s.heap) > 0 && s.heap[0].ts <= s.wm {
		t := s.pop()
		i := t.kg - b.kg.Start
		id := timerID{t.ts, t.key}
		if _, ok := s.sets[i][id]; !ok {
			continue // deleted, or a duplicate entry of one that fired
		}
		delete(s.sets[i], id)
		s.n--
		s.keyB -= int64(len(t.key))
		keyBuf = append(keyBuf[:0], t.key...)
		b.key, b.idx = keyBuf, i
		if err := fire(keyBuf, t.kg, t.ts); err != nil {
			return err
		}
		if b.closed {
			return statebackend.ErrClosed
		}
	}
	return nil
}

func (s *timerService) sizeBytes() int64 {
	return s.keyB + int64(s.n)*entryOverhead + int64(len(s.heap))*32
}

// add inserts a restored timer without keeping the heap order; call
// rebuild afterwards.
func (s *timerService) add(i int, id timerID) {
	set := s.sets[i]
	if set == nil {
		set = make(map[timerID]struct{})
		s.sets[i] = set
	}
	if _, ok := set[id]; ok {
		return
	}
	set[id] = struct{}{}
	s.n++
	s.keyB += int64(len(id.key))
}

// rebuild makes the heap hold exactly the timers in the sets.
func (s *timerService) rebuild() {
	s.heap = s.heap[:0]
	for i, set := range s.sets {
		for id := range set {
			s.heap = append(s.heap, timer{ts: id.ts, kg: i + s.b.kg.Start, key: id.key})
		}
	}
	for i := len(s.heap)/2 - 1; i >= 0; i-- {
		s.down(i)
	}
}

func (s *timerService) push(t timer) {
	s.heap = append(s.heap, t)
	s.up(len(s.heap) - 1)
}

func (s *timerService) pop() timer {
	h := s.heap
	t := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = timer{}
	s.heap = h[:last]
	if last > 0 {
		s.down(0)
	}
	return t
}

func (s *timerService) up(i int) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (s *timerService) down(i int) {
	h := s.heap
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
