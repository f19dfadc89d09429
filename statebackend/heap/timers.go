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

// timerService implements statebackend.TimerService: one timerQueue per
// domain, and the watermark.
type timerService struct {
	b     *Backend
	wm    int64
	event timerQueue
	proc  timerQueue
}

var _ statebackend.TimerService = (*timerService)(nil)

// newTimerService returns the timer service of b, with no timers.
func newTimerService(b *Backend, wm int64) timerService {
	n := b.kg.Len()
	return timerService{
		b:     b,
		wm:    wm,
		event: timerQueue{sets: make([]map[timerID]struct{}, n)},
		proc:  timerQueue{sets: make([]map[timerID]struct{}, n)},
	}
}

func (s *timerService) RegisterEventTimeTimer(ts int64) { s.event.register(s.b, ts) }
func (s *timerService) DeleteEventTimeTimer(ts int64)   { s.event.delete(s.b, ts) }
func (s *timerService) CurrentWatermark() int64         { return s.wm }

func (s *timerService) AdvanceWatermark(wm int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	if s.b.closed {
		return statebackend.ErrClosed
	}
	s.wm = max(s.wm, wm)
	return s.event.advance(s.b, s.wm, fire)
}

func (s *timerService) RegisterProcessingTimeTimer(ts int64) { s.proc.register(s.b, ts) }
func (s *timerService) DeleteProcessingTimeTimer(ts int64)   { s.proc.delete(s.b, ts) }

func (s *timerService) NextProcessingTime() (int64, bool) {
	if s.b.closed {
		return 0, false
	}
	return s.proc.next(s.b.kg.Start)
}

func (s *timerService) AdvanceProcessingTime(now int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	if s.b.closed {
		return statebackend.ErrClosed
	}
	return s.proc.advance(s.b, now, fire)
}

func (s *timerService) sizeBytes() int64 { return s.event.sizeBytes() + s.proc.sizeBytes() }

// rebuild makes both heaps hold exactly the timers in their sets.
func (s *timerService) rebuild() {
	s.event.rebuild(s.b.kg.Start)
	s.proc.rebuild(s.b.kg.Start)
}

// timerQueue holds the timers of one domain. The heap may hold entries that
// were deleted (or fired and registered again): an entry counts only while
// its timerID is in its key group's set.
type timerQueue struct {
	heap []timer
	sets []map[timerID]struct{} // per key group - b.kg.Start
	n    int                    // timers in sets
	keyB int64                  // key bytes of timers in sets
}

// register adds a timer at ts for b's current key.
func (q *timerQueue) register(b *Backend, ts int64) {
	if b.closed {
		return
	}
	set := q.sets[b.idx]
	if set == nil {
		set = make(map[timerID]struct{})
		q.sets[b.idx] = set
	}
	if _, ok := set[timerID{ts, string(b.key)}]; ok {
		return
	}
	k := string(b.key)
	set[timerID{ts, k}] = struct{}{}
	q.n++
	q.keyB += int64(len(k))
	q.push(timer{ts: ts, kg: b.idx + b.kg.Start, key: k})
}

// delete removes b's current key's timer at ts, if any.
func (q *timerQueue) delete(b *Backend, ts int64) {
	if b.closed {
		return
	}
	set := q.sets[b.idx]
	id := timerID{ts, string(b.key)}
	if _, ok := set[id]; !ok {
		return
	}
	delete(set, id)
	q.n--
	q.keyB -= int64(len(b.key))
	if len(q.heap) > 2*q.n+64 {
		q.rebuild(b.kg.Start)
	}
}

// next returns the earliest timer's timestamp, dropping the heap entries
// of timers that no longer exist on the way; kgStart is the backend's
// first key group.
func (q *timerQueue) next(kgStart int) (int64, bool) {
	for len(q.heap) > 0 {
		t := q.heap[0]
		if _, ok := q.sets[t.kg-kgStart][timerID{t.ts, t.key}]; ok {
			return t.ts, true
		}
		q.pop()
	}
	return 0, false
}

// advance fires, in order, every timer at or below limit (see
// statebackend.TimerService.AdvanceWatermark).
func (q *timerQueue) advance(b *Backend, limit int64, fire func(key []byte, keyGroup int, ts int64) error) error {
	savedKey, savedIdx := b.key, b.idx
	defer func() { b.key, b.idx = savedKey, savedIdx }()
	var keyBuf []byte
	for len(q.heap) > 0 && q.heap[0].ts <= limit {
		t := q.pop()
		i := t.kg - b.kg.Start
		id := timerID{t.ts, t.key}
		if _, ok := q.sets[i][id]; !ok {
			continue // deleted, or a duplicate entry of one that fired
		}
		delete(q.sets[i], id)
		q.n--
		q.keyB -= int64(len(t.key))
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

func (q *timerQueue) sizeBytes() int64 {
	return q.keyB + int64(q.n)*entryOverhead + int64(len(q.heap))*32
}

// add inserts a restored timer without keeping the heap order; call
// rebuild afterwards.
func (q *timerQueue) add(i int, id timerID) {
	set := q.sets[i]
	if set == nil {
		set = make(map[timerID]struct{})
		q.sets[i] = set
	}
	if _, ok := set[id]; ok {
		return
	}
	set[id] = struct{}{}
	q.n++
	q.keyB += int64(len(id.key))
}

// rebuild makes the heap hold exactly the timers in the sets; kgStart is
// the backend's first key group.
func (q *timerQueue) rebuild(kgStart int) {
	q.heap = q.heap[:0]
	for i, set := range q.sets {
		for id := range set {
			q.heap = append(q.heap, timer{ts: id.ts, kg: i + kgStart, key: id.key})
		}
	}
	for i := len(q.heap)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q *timerQueue) push(t timer) {
	q.heap = append(q.heap, t)
	q.up(len(q.heap) - 1)
}

func (q *timerQueue) pop() timer {
	h := q.heap
	t := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = timer{}
	q.heap = h[:last]
	if last > 0 {
		q.down(0)
	}
	return t
}

func (q *timerQueue) up(i int) {
	h := q.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *timerQueue) down(i int) {
	h := q.heap
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
