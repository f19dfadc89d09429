package dataflow

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/stream"
)

// creditSink is the producing end of a channel as its consumer sees it: it
// receives the credits the consumer grants, one per batch the consuming task
// takes out of the channel's buffer. Implementations must not call back into
// the gate or the exchange.
type creditSink interface {
	// connect is called once, when both ends of the channel exist: in is the
	// consumer's channel and credits the initial grant.
	connect(in *inputChannel, credits int)
	// grant gives the producer n more credits.
	grant(n int)
}

// inputChannel is one channel a task reads: its buffer in the input gate, the
// credit sink of its producer, and the task-side state of the channel.
type inputChannel struct {
	gate   *inputGate
	idx    int // position in gate.channels
	input  int // operator input number
	key    channelKey
	schema *stream.Schema

	// Guarded by gate.mu.
	q eventQueue
	// control counts the events of q other than batches, which need no
	// credit (pushBounded bounds them).
	control int
	queued  bool // idx is in gate.mu.avail
	// blocked channels are not read: barrier alignment blocks a channel
	// whose barrier has arrived until all channels have delivered it.
	blocked bool
	sink    creditSink

	// cell is the cell of the channel's upstream subtask, set before the
	// channel is registered (wmcell.go); gate.cellOf[idx] holds it too,
	// and gate.applied and gate.passed what the channel took of it.
	cell *wmCell

	// Task goroutine only.
	ended bool
	// dict is the channel dictionary of a channel from a peer
	// (batchcodec.Decoder), made for its first batch.
	dict *batchcodec.Decoder
}

// dictionary returns the channel dictionary of ch (task goroutine only).
func (ch *inputChannel) dictionary() *batchcodec.Decoder {
	if ch.dict == nil {
		ch.dict = &batchcodec.Decoder{}
	}
	return ch.dict
}

// cellMark is what a task takes from a channel's cell (the channel's
// index in the gate): a watermark (stream.MinWatermark: none), then a
// barrier if barrier is not nil.
type cellMark struct {
	ch      int
	wm      int64
	barrier *barrierMark
}

// The reasons a channel cannot take its cell's watermark now
// (inputGate.hold).
const (
	holdBlocked  uint8 = 1 << iota // blocked for barrier alignment
	holdBuffered                   // its buffer is not empty
)

// inputGate is a task's view of all the channels it reads, of every input.
// Producers push events into channel buffers from any goroutine; the task
// goroutine takes them out one at a time with next, visiting channels with
// data round-robin. The buffer of a channel is bounded by the credits its
// consumer grants: a producer pushes a batch only with a credit, and a credit
// returns when next takes a batch. Watermarks queued back to back are merged.
type inputGate struct {
	channels []*inputChannel
	notify   chan struct{} // capacity 1; signalled when a channel becomes available
	// buffered, if not nil, counts the bytes of network batches waiting
	// in the gate (the task's Metrics.NetworkBufferedBytes).
	buffered *atomic.Int64
	// idle, if not nil, counts the time next waits for an event (the
	// task's Metrics.IdleTime).
	idle *Metrics
	// cellsDirty: the cell of a channel marked in cellBits (bit i for
	// channel i), or of any channel if scanAll is set, may hold a
	// watermark the channel has not taken (wmcell.go); the task looks
	// with takeCells.
	cellsDirty atomic.Bool
	scanAll    atomic.Bool
	cellBits   []atomic.Uint64

	// What takeCells needs of each channel, by index, kept apart from the
	// channels so that a look at all of them reads a few contiguous
	// arrays: the channel's cell (set when it is registered, before the
	// task runs), the latest cell watermark and barrier it took (as
	// events or directly), and why it cannot take one now (hold* bits,
	// the channel's state mirrored by setHold). applied, passed and hold
	// are guarded by mu.
	cellOf  []*wmCell
	applied []int64
	passed  []int64
	hold    []uint8

	// mu is taken by every producer's push and by the task's reads: it
	// has a cache line of its own, apart from the flags the task and the
	// cell wake-up write without it.
	_  [cacheLine]byte
	mu struct {
		sync.Mutex
		avail  ring[int] // channels with data to read, in arrival order
		closed bool
	}
	_ [cacheLine]byte
}

// cacheLine is the size of a CPU cache line, for padding apart fields that
// different cores write.
const cacheLine = 64

func newInputGate() *inputGate {
	return &inputGate{notify: make(chan struct{}, 1)}
}

// add creates a channel of the gate; only before the gate is used.
func (g *inputGate) add(key channelKey, input int, schema *stream.Schema) *inputChannel {
	ch := &inputChannel{gate: g, idx: len(g.channels), input: input, key: key, schema: schema}
	g.channels = append(g.channels, ch)
	g.cellOf = append(g.cellOf, nil)
	g.applied = append(g.applied, stream.MinWatermark)
	g.passed = append(g.passed, 0)
	g.hold = append(g.hold, 0)
	if n := (len(g.channels) + 63) / 64; n > len(g.cellBits) {
		g.cellBits = make([]atomic.Uint64, n)
	}
	return ch
}

// push appends e to ch's buffer. It never blocks: the caller holds the credit
// a batch needs. Events pushed after close are dropped.
func (g *inputGate) push(ch *inputChannel, e event) { g.pushBounded(ch, e, 0) }

// pushBounded is push for a producer that is not trusted to keep to the
// protocol, a network peer: it refuses an event other than a batch when
// maxControl such events already wait in ch's buffer (0: no bound), and
// reports whether it took e. Batches are bounded by the credits the caller
// checks; the events between them by this: a producer that keeps to the
// protocol sends only a few barriers while the consumer does not read the
// channel (each needs a checkpoint), and watermarks queued back to back are
// merged, so in the buffer they are at most one more than the other events.
func (g *inputGate) pushBounded(ch *inputChannel, e event, maxControl int) bool {
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		e.release()
		return true
	}
	if ch.cell != nil && e.kind != eventError {
		// What the cell holds that the channel has not taken goes ahead
		// of e: it was published before e was sent.
		g.cellEventsLocked(ch)
	}
	if last := ch.q.last(); e.kind == eventWatermark && last != nil && last.kind == eventWatermark {
		// Merged into the watermark at the end of the buffer, which may
		// have just been put there (the cell's, above) into an empty
		// channel: the channel is queued below like for any event.
		last.value = max(last.value, e.value)
	} else if e.kind != eventBatch && maxControl > 0 && ch.control >= maxControl {
		g.setHold(ch) // the cell's watermark above may have gone in
		g.mu.Unlock()
		return false
	} else if e.kind == eventBarrier && e.unaligned {
		ch.control++
		// The barrier of an unaligned checkpoint overtakes what the
		// channel buffers; the batches it overtook are marked, so that
		// the task keeps them as channel state. A batch an earlier
		// barrier overtook is in flight for this checkpoint too (ids
		// increase along a channel).
		for i := 0; i < ch.q.len(); i++ {
			if q := ch.q.at(i); q.kind == eventBatch {
				q.before = e.value
			}
		}
		ch.q.pushFront(e)
	} else {
		if e.kind != eventBatch {
			ch.control++
		}
		ch.q.push(e)
	}
	g.setHold(ch)
	signal := false
	if !ch.queued && !ch.blocked {
		ch.queued = true
		g.mu.avail.push(ch.idx)
		signal = g.mu.avail.len() == 1
	}
	// A task waiting for its output to take batches looks for unaligned
	// barriers when signalled (takeUnaligned).
	signal = signal || e.kind == eventBarrier && e.unaligned
	g.mu.Unlock()
	if signal {
		select {
		case g.notify <- struct{}{}:
		default:
		}
	}
	return true
}

// pushWatermarkLocked queues watermark wm in ch, merged into a watermark
// at the end of its buffer; the caller queues ch in avail. g.mu must be held.
func (g *inputGate) pushWatermarkLocked(ch *inputChannel, wm int64) {
	if last := ch.q.last(); last != nil && last.kind == eventWatermark {
		last.value = max(last.value, wm)
		return
	}
	ch.control++
	ch.q.push(event{kind: eventWatermark, value: wm})
}

// cellEventsLocked queues in ch, as events, the barriers and the
// watermark of its cell that it has not taken, in the order they were
// published. g.mu must be held.
func (g *inputGate) cellEventsLocked(ch *inputChannel) {
	i := ch.idx
	v := ch.cell.value.Load() // before the barriers (wmCell.barriers)
	if p := ch.cell.barriers.Load(); p != nil {
		log := barriersAfter(*p, g.passed[i])
		for k := range log {
			b := &log[k]
			if b.wmBefore > g.applied[i] {
				g.applied[i] = b.wmBefore
				g.pushWatermarkLocked(ch, b.wmBefore)
			}
			g.passed[i] = b.id
			ch.control++
			ch.q.push(b.event())
		}
	}
	if v > g.applied[i] {
		g.applied[i] = v
		g.pushWatermarkLocked(ch, v)
	}
}

// cellPendingLocked reports whether channel i's cell holds a watermark or
// a barrier the channel has not taken. g.mu must be held.
func (g *inputGate) cellPendingLocked(i int) bool {
	c := g.cellOf[i]
	if c == nil {
		return false
	}
	if c.value.Load() > g.applied[i] {
		return true
	}
	p := c.barriers.Load()
	return p != nil && len(*p) > 0 && (*p)[len(*p)-1].id > g.passed[i]
}

// drainedLocked notes that the task took the last event buffered in ch:
// what its cell holds for it is due now. g.mu must be held.
func (g *inputGate) drainedLocked(ch *inputChannel) {
	if g.cellPendingLocked(ch.idx) {
		g.markCell(ch)
	}
}

// setHold mirrors ch's state into g.hold after it changed. g.mu must be
// held.
func (g *inputGate) setHold(ch *inputChannel) {
	var h uint8
	if ch.blocked {
		h |= holdBlocked
	}
	if ch.q.len() > 0 {
		h |= holdBuffered
	}
	g.hold[ch.idx] = h
}

// markCell records that ch's cell may hold a watermark ch has not taken,
// and reports whether the task had not been told of any since it last
// looked.
func (g *inputGate) markCell(ch *inputChannel) bool {
	g.cellBits[ch.idx>>6].Or(1 << (ch.idx & 63))
	return !g.cellsDirty.Swap(true)
}

// markAllCells makes the next takeCells look at every channel.
func (g *inputGate) markAllCells() {
	g.scanAll.Store(true)
	g.cellsDirty.Store(true)
}

// cellsChanged tells the task that cells of its channels have new
// watermarks, waking the task if it waits. The next takeCells looks at
// every channel: a round of publishes on a wide edge changes most of them,
// and a look at one is a few array reads.
func (g *inputGate) cellsChanged() {
	g.scanAll.Store(true)
	if g.cellsDirty.Swap(true) {
		return // already told
	}
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// takeCells appends to buf, and returns, what the cells of channels that
// are not blocked and buffer nothing hold for them and they have not
// taken, as events at the end of their buffers would be taken: for each
// such channel its cell's next barrier (with the watermark before it), or
// else its cell's watermark. A channel that has more to take after a
// barrier is marked to be looked at again: the task takes the barrier (and
// may block the channel for it) before it looks. Only the task goroutine
// calls it.
func (g *inputGate) takeCells(buf []cellMark) []cellMark {
	buf = buf[:0]
	if !g.cellsDirty.Swap(false) {
		return buf
	}
	all := g.scanAll.Swap(false)
	g.mu.Lock()
	// A channel passed over now is marked again when what holds it back
	// ends (drainedLocked, unblock; under g.mu like this).
	if all {
		for w := range g.cellBits {
			g.cellBits[w].Store(0)
		}
		for i := range g.cellOf {
			buf = g.takeCell(buf, i)
		}
	} else {
		for w := range g.cellBits {
			for set := g.cellBits[w].Swap(0); set != 0; set &= set - 1 {
				buf = g.takeCell(buf, w<<6+bits.TrailingZeros64(set))
			}
		}
	}
	g.mu.Unlock()
	return buf
}

// takeCell appends what channel i takes from its cell to buf, if it can
// take anything now. g.mu must be held.
func (g *inputGate) takeCell(buf []cellMark, i int) []cellMark {
	c := g.cellOf[i]
	if c == nil || g.hold[i] != 0 {
		return buf
	}
	v := c.value.Load() // before the barriers (wmCell.barriers)
	if p := c.barriers.Load(); p != nil {
		if log := barriersAfter(*p, g.passed[i]); len(log) > 0 {
			b := &log[0]
			m := cellMark{ch: i, wm: stream.MinWatermark, barrier: b}
			if b.wmBefore > g.applied[i] {
				g.applied[i] = b.wmBefore
				m.wm = b.wmBefore
			}
			g.passed[i] = b.id
			if g.cellPendingLocked(i) {
				g.markCell(g.channels[i])
			}
			return append(buf, m)
		}
	}
	if v > g.applied[i] {
		g.applied[i] = v
		buf = append(buf, cellMark{ch: i, wm: v})
	}
	return buf
}

// hasData reports whether a channel that is not blocked has an event
// waiting.
func (g *inputGate) hasData() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := 0; i < g.mu.avail.len(); i++ {
		if ch := g.channels[*g.mu.avail.at(i)]; !ch.blocked && ch.q.len() > 0 {
			return true
		}
	}
	return false
}

// next returns the next event of an unblocked channel, waiting for one until
// ctx is done. It grants the producer a credit back when it takes a batch.
// While it waits it also watches wake (may be nil): when wake fires, or a
// cell of its channels has a new watermark (takeCells), it returns a nil
// channel and no error, so that the task can handle what woke it. Only the
// task goroutine calls it.
func (g *inputGate) next(ctx context.Context, wake <-chan struct{}) (event, *inputChannel, error) {
	// Checked even when data is waiting, so that a task whose inputs never
	// run dry still notices cancellation.
	if err := ctx.Err(); err != nil {
		return event{}, nil, err
	}
	for {
		g.mu.Lock()
		for g.mu.avail.len() > 0 {
			ch := g.channels[g.mu.avail.pop()]
			if ch.blocked || ch.q.len() == 0 {
				ch.queued = false
				continue
			}
			e := ch.q.pop()
			if e.kind != eventBatch {
				ch.control--
			}
			if ch.q.len() > 0 {
				g.mu.avail.push(ch.idx) // round-robin between channels
			} else {
				ch.queued = false
				g.setHold(ch)
				g.drainedLocked(ch)
			}
			var sink creditSink
			if e.kind == eventBatch && !e.replay {
				sink = ch.sink
			}
			g.mu.Unlock()
			if sink != nil {
				sink.grant(1)
			}
			return e, ch, nil
		}
		g.mu.Unlock()
		if g.cellsDirty.Load() {
			return event{}, nil, nil // for takeCells
		}
		if g.idle != nil {
			g.idle.startIdle()
		}
		var woken bool
		select {
		case <-g.notify:
		case <-wake:
			woken = true
		case <-ctx.Done():
		}
		if g.idle != nil {
			g.idle.endIdle()
		}
		if woken {
			return event{}, nil, nil
		}
		if err := ctx.Err(); err != nil {
			return event{}, nil, err
		}
	}
}

// takeUnaligned takes the barrier of an unaligned checkpoint at the
// front of a channel that is not blocked, if there is one, for a task
// that takes no batches now (its output is full). It returns a nil
// channel when there is none.
func (g *inputGate) takeUnaligned() (event, *inputChannel) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ch := range g.channels {
		if ch.blocked || ch.q.len() == 0 {
			continue
		}
		if e := ch.q.peek(); e.kind != eventBarrier || !e.unaligned {
			continue
		}
		e := ch.q.pop()
		ch.control--
		if ch.q.len() == 0 {
			g.setHold(ch)
			g.drainedLocked(ch)
		}
		// ch stays in avail if it is there: next skips a channel it finds
		// empty.
		return e, ch
	}
	return event{}, nil
}

// overtaken calls f, under the gate's lock, with the batches buffered in
// ch, in order, up to the last one that the barrier of unaligned checkpoint
// id overtook (event.before): mark says whether f's batch is one (they
// are the batches at the front of ch). f sees every batch ahead of a marked
// one, so that it can decode them in turn with a copy of the channel
// dictionary.
func (g *inputGate) overtaken(ch *inputChannel, id int64, f func(e *event, mark bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	last := -1
	for i := 0; i < ch.q.len(); i++ {
		if e := ch.q.at(i); e.kind == eventBatch && e.before == id {
			last = i
		}
	}
	for i := 0; i <= last; i++ {
		if e := ch.q.at(i); e.kind == eventBatch {
			f(e, e.before == id)
		}
	}
}

// promote makes the aligned barrier of checkpoint id buffered in ch, if
// any, unaligned: it moves to the front of ch, and the batches it passes
// are marked overtaken (event.before), as when an unaligned barrier
// arrives (pushBounded). A barrier its cell holds for ch is buffered first,
// behind what ch buffers (wmcell.go); one not there yet is left to arrive.
func (g *inputGate) promote(ch *inputChannel, id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch.cell != nil && ch.q.len() > 0 {
		g.cellEventsLocked(ch)
	}
	pos := -1
	for i := 0; i < ch.q.len(); i++ {
		if e := ch.q.at(i); e.kind == eventBarrier && e.value == id {
			pos = i
			break
		}
	}
	if pos < 0 {
		return
	}
	b := *ch.q.at(pos)
	b.unaligned, b.full = true, false
	for i := pos; i > 0; i-- {
		prev := ch.q.at(i - 1)
		if prev.kind == eventBatch {
			prev.before = id
		}
		*ch.q.at(i) = *prev
	}
	*ch.q.at(0) = b
}

// replay puts the batches of restored channel state in front of whatever
// ch buffers, in order. They took no credit, so none goes back for them.
func (g *inputGate) replay(ch *inputChannel, batches []*stream.Batch) {
	g.mu.Lock()
	for i := len(batches) - 1; i >= 0; i-- {
		ch.q.pushFront(event{kind: eventBatch, batch: batches[i], replay: true})
	}
	g.setHold(ch)
	signal := false
	if ch.q.len() > 0 && !ch.queued && !ch.blocked {
		ch.queued = true
		g.mu.avail.push(ch.idx)
		signal = true
	}
	g.mu.Unlock()
	if signal {
		select {
		case g.notify <- struct{}{}:
		default:
		}
	}
}

// block blocks reading ch (for barrier alignment) until unblock. Events
// keep arriving into a blocked channel's buffer, bounded by its credits, so
// its producer is backpressured.
func (g *inputGate) block(ch *inputChannel) {
	g.mu.Lock()
	ch.blocked = true
	g.setHold(ch)
	g.mu.Unlock()
}

// unblock unblocks reading the channels of the given indexes, under one
// lock: an aligned checkpoint ends by unblocking every channel.
func (g *inputGate) unblock(idxs []int) {
	signal := false
	g.mu.Lock()
	for _, i := range idxs {
		ch := g.channels[i]
		ch.blocked = false
		g.setHold(ch)
		if ch.cell != nil {
			g.markCell(ch) // its cell's watermark may apply now
		}
		if !ch.queued && ch.q.len() > 0 {
			ch.queued = true
			g.mu.avail.push(ch.idx)
			signal = true
		}
	}
	g.mu.Unlock()
	if signal {
		select {
		case g.notify <- struct{}{}:
		default:
		}
	}
}

// setSink records the producer end of ch, which receives credit returns.
func (g *inputGate) setSink(ch *inputChannel, s creditSink) {
	g.mu.Lock()
	ch.sink = s
	g.mu.Unlock()
}

// close drops everything buffered and makes later pushes drop their events.
func (g *inputGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.closed = true
	for _, ch := range g.channels {
		for ch.q.len() > 0 {
			e := ch.q.pop()
			e.release()
		}
		ch.control = 0
		g.setHold(ch)
	}
}
