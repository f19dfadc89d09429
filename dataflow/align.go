package dataflow

import (
	"time"

	"github.com/weirstream/weir/stream"
)

// aligner is the barrier-alignment bookkeeping of a task with input
// channels: it is told which barriers and ends arrive on which channels and
// answers which channel to block, which checkpoints to snapshot and which to
// give up. It is pure logic (no goroutines, clock or I/O; the caller passes
// the time), driven by the task goroutine.
//
// ExactlyOnce: at most one checkpoint aligns at a time. A channel whose
// barrier n arrived is blocked until barrier n has arrived on every channel
// that has not ended. A barrier with a higher id abandons n (its upstream
// skipped or aborted n) and starts aligning the new id; a lower one is stale
// and ignored.
//
// AtLeastOnce: nothing is blocked. Several checkpoints may be pending, each
// completing when its barrier has arrived on every channel that has not
// ended; completing n abandons the pending checkpoints below n.
//
// In both modes a barrier whose id is not above the last completed or
// abandoned checkpoint is ignored, and ended channels count as aligned.
//
// A barrier or an end costs O(1) per pending checkpoint, not a scan of
// every channel, so that a task reading p channels aligns a checkpoint in
// O(p) rather than O(p²).
type aligner struct {
	mode  stream.CheckpointMode
	ended []bool
	open  int   // channels that have not ended
	last  int64 // highest checkpoint completed or abandoned
	// pending checkpoints in ascending id order; at most one in ExactlyOnce.
	pending []*alignment
	// clock reads the time: only for a checkpoint's first barrier and its
	// completion, not for each of a wide task's many barriers.
	clock func() time.Time
}

// alignment is one checkpoint whose barriers are arriving.
type alignment struct {
	id, ts  int64
	began   time.Time // when its first barrier arrived
	arrived []bool
	// missing counts the channels that have neither delivered its
	// barrier nor ended.
	missing int
	blocked []int // channels blocked for it (ExactlyOnce)
}

// alignDone is a checkpoint whose barriers have all arrived.
type alignDone struct {
	id, ts int64
	// aligning is the time from its first barrier to its last.
	aligning time.Duration
}

// alignStep is what the task must do after an aligner event, in this order:
// report aborted as failed, block the channel (block), snapshot and forward
// the barriers of done in order, then unblock the channels in unblock.
type alignStep struct {
	aborted []int64
	block   bool
	done    []alignDone
	unblock []int
}

func newAligner(mode stream.CheckpointMode, channels int) *aligner {
	return &aligner{mode: mode, ended: make([]bool, channels), open: channels, clock: time.Now}
}

// aligning reports the pending checkpoint ids, ascending.
func (a *aligner) aligning() []int64 {
	ids := make([]int64, len(a.pending))
	for i, p := range a.pending {
		ids[i] = p.id
	}
	return ids
}

// pendingOf returns the pending checkpoint id, or nil.
func (a *aligner) pendingOf(id int64) *alignment {
	for _, p := range a.pending {
		if p.id == id {
			return p
		}
	}
	return nil
}

// barrier records barrier id (triggered at ts) on channel ch.
func (a *aligner) barrier(ch int, id, ts int64) alignStep {
	var s alignStep
	if id <= a.last || a.ended[ch] {
		return s
	}
	var p *alignment
	pos := len(a.pending)
	for i, q := range a.pending {
		if q.id == id {
			p = q
			break
		}
		if q.id > id {
			pos = i
			break
		}
	}
	if p == nil {
		if a.mode == stream.ExactlyOnce && len(a.pending) > 0 {
			cur := a.pending[0]
			if id < cur.id {
				return s // stale: cur superseded it
			}
			s.aborted = append(s.aborted, cur.id)
			s.unblock = append(s.unblock, cur.blocked...)
			a.last = cur.id
			a.pending = a.pending[:0]
			pos = 0
		}
		p = &alignment{id: id, ts: ts, began: a.clock(), arrived: make([]bool, len(a.ended)), missing: a.open}
		a.pending = append(a.pending, nil)
		copy(a.pending[pos+1:], a.pending[pos:])
		a.pending[pos] = p
	}
	if p.arrived[ch] {
		return s // a duplicate; not sent by well-behaved producers
	}
	p.arrived[ch] = true
	p.missing--
	if !a.complete(p) {
		if a.mode == stream.ExactlyOnce {
			s.block = true
			p.blocked = append(p.blocked, ch)
		}
		return s
	}
	a.settle(&s)
	return s
}

// end records that channel ch ended: it counts as aligned from now on.
func (a *aligner) end(ch int) alignStep {
	var s alignStep
	if a.ended[ch] {
		return s
	}
	a.ended[ch] = true
	a.open--
	for _, p := range a.pending {
		if !p.arrived[ch] {
			p.missing--
		}
	}
	a.settle(&s)
	return s
}

// abortUpTo abandons every pending checkpoint with an id up to id (the
// coordinator aborted it, or completed a later one) and ignores their
// barriers from now on.
func (a *aligner) abortUpTo(id int64) alignStep {
	var s alignStep
	k := 0
	for _, p := range a.pending {
		if p.id > id {
			a.pending[k] = p
			k++
			continue
		}
		s.aborted = append(s.aborted, p.id)
		s.unblock = append(s.unblock, p.blocked...)
	}
	clear(a.pending[k:])
	a.pending = a.pending[:k]
	a.last = max(a.last, id)
	return s
}

// abortAll abandons every pending checkpoint (the task is ending).
func (a *aligner) abortAll() []int64 {
	ids := a.aligning()
	if n := len(ids); n > 0 {
		a.last = max(a.last, ids[n-1])
	}
	clear(a.pending)
	a.pending = a.pending[:0]
	return ids
}

func (a *aligner) complete(p *alignment) bool { return p.missing == 0 }

// settle completes the pending checkpoints whose barriers have all arrived,
// and abandons those below the highest of them that have not.
func (a *aligner) settle(s *alignStep) {
	h := -1
	for i, p := range a.pending {
		if a.complete(p) {
			h = i
		}
	}
	if h < 0 {
		return
	}
	now := a.clock()
	for _, p := range a.pending[:h+1] {
		if a.complete(p) {
			s.done = append(s.done, alignDone{id: p.id, ts: p.ts, aligning: now.Sub(p.began)})
		} else {
			s.aborted = append(s.aborted, p.id)
		}
		s.unblock = append(s.unblock, p.blocked...)
	}
	a.last = a.pending[h].id
	n := copy(a.pending, a.pending[h+1:])
	clear(a.pending[n:])
	a.pending = a.pending[:n]
}
