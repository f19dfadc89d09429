package dataflow

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/stream"
)

// This file is the broadcast path of watermarks. On an edge with many
// channels (a keyBy at parallelism p has p × p) a watermark sent on every
// channel costs a push into every consumer's buffer and a wake-up of every
// consumer for each upstream subtask's watermark. Instead, an upstream
// subtask publishes its watermark once per taskmanager into a watermark
// cell, which the consuming tasks of that taskmanager read when they next
// look.
//
// A cell's watermark applies to a channel where a watermark event sent on
// the channel at the time of the publish would have been taken:
//
//   - the sender publishes only while none of the edge's channels holds
//     events back (deferred output waiting for credit), and after the
//     channels that hold batches to coalesce them (coalesce.go) sent
//     them, so everything it put on any channel before the publish is in
//     the consumer's buffer first (in-memory channels synchronously;
//     network channels through the one stream to the peer, in order);
//   - the task takes a cell's watermark for a channel only once the
//     channel buffers nothing and is not blocked (barrier alignment),
//     where a watermark event at the end of its buffer would be taken;
//   - an event pushed into a channel whose cell moved on since the channel
//     last took its value gets that value as a watermark event ahead of
//     it, so the cell's watermark keeps its place before everything sent
//     after it (batches and barriers). One goroutine publishes into a
//     cell and pushes the events of its channels, so a push sees every
//     publish before it.
//
// A task thus sees the same watermarks, in the same places among each
// channel's batches and barriers, as with an event on every channel, save
// that watermarks that follow each other on a channel may merge (as
// buffered watermark events always did) and that one travelling by cell
// arrives up to cellWakeDelay later.

// Aligned checkpoint barriers travel the same way: an upstream subtask
// publishes barrier n in its cell (once per taskmanager, after what its
// channels hold to coalesce went out, and only while none holds events
// back), instead of a barrier event on each of its p channels. A cell keeps
// its latest barriers (maxCellBarriers), each with the cell's watermark
// when it was published, so that a channel takes them in publish order
// among the watermarks: where the channel buffers nothing and is not
// blocked the task takes the next barrier directly (and then blocks the
// channel for alignment as for an event); an event pushed into a channel
// that has not taken all of its cell's barriers gets them, with the
// watermarks before them, as events ahead of it. Unaligned barriers, which
// overtake what channels buffer, and barriers on channels that hold events
// back still go as events.

// The consumer learns of new cell values through a wake-up that the
// exchange delays by cellWakeDelay and shares among all the cells that
// changed meanwhile, so that the watermarks the upstream subtasks emit in
// one round (they share their emission slots, see the watermarks
// operator) cost each consuming task one or a few wake-ups rather than one
// per upstream subtask. The wake-up goes to the gates that read the edges
// of the changed cells, once per gate, and a woken task looks at all its
// channels' cells (inputGate.takeCells): on a wide keyBy a round changes
// the cells of most channels, and what the task reads of each is kept in
// a few arrays of the gate.

// cellWakeDelay is how long the exchange gathers cell publishes before it
// wakes their consumers: the most a watermark travelling by cell is late
// compared to one sent as a channel event.
const cellWakeDelay = 5 * time.Millisecond

// cellKey names a watermark cell: one upstream subtask's watermark on one
// edge, as the consumers of one taskmanager see it (a channelKey without the
// downstream subtask).
type cellKey struct {
	JobID            string
	Attempt          int64
	UpstreamVertex   int
	UpstreamSubtask  int
	DownstreamVertex int
	DownstreamInput  int
}

// cellEdgeKey names the cells of one edge as one taskmanager's consumers
// see them: a cellKey without the upstream subtask.
type cellEdgeKey struct {
	JobID            string
	Attempt          int64
	UpstreamVertex   int
	DownstreamVertex int
	DownstreamInput  int
}

// cellEdge is the gates of one taskmanager that read the cells of an edge.
type cellEdge struct {
	key   cellEdgeKey
	gates atomic.Pointer[[]*inputGate] // copy on write, under Exchange.mu
	// Under Exchange.mu: the channels of each gate subscribed to a cell
	// of the edge, and the cells of the edge.
	channels map[*inputGate]int
	cells    int
}

func cellKeyOf(k channelKey) cellKey {
	return cellKey{JobID: k.JobID, Attempt: k.Attempt, UpstreamVertex: k.UpstreamVertex, UpstreamSubtask: k.UpstreamSubtask,
		DownstreamVertex: k.DownstreamVertex, DownstreamInput: k.DownstreamInput}
}

// wmCell is the latest watermark an upstream subtask published on an edge
// to one taskmanager's consumers. One goroutine publishes into it (the
// upstream task's, or the network stream's from the upstream task's
// taskmanager), the same that pushes the events of the channels it covers,
// so a push sees every publish before it.
type wmCell struct {
	x     *Exchange
	key   cellKey
	value atomic.Int64
	// barriers are the latest aligned barriers published, ascending by
	// id, at most maxCellBarriers (an immutable slice, replaced on each
	// publish). A reader loads value before barriers: a barrier published
	// after the watermark it read then carries a watermark at least as
	// high (barrierMark.wmBefore).
	barriers atomic.Pointer[[]barrierMark]
	// queued: the cell waits in the exchange's wake list.
	queued atomic.Bool
	// edge holds the gates that read the cell; refs counts the cell's
	// subscribed channels and publishers, under Exchange.mu.
	edge *cellEdge
	refs int
}

// publish raises the cell's watermark to wm and schedules the wake-up of
// its consumers. A watermark not above the cell's is ignored.
func (c *wmCell) publish(wm int64) {
	if wm <= c.value.Load() {
		return
	}
	c.value.Store(wm)
	if c.queued.CompareAndSwap(false, true) {
		c.x.queueCell(c)
	}
}

// byCell reports whether e travels by cell where it can: a watermark, or
// the barrier of an aligned checkpoint.
func byCell(e *event) bool {
	return e.kind == eventWatermark || e.kind == eventBarrier && !e.unaligned
}

// publishEvent publishes watermark or aligned barrier e (byCell).
func (c *wmCell) publishEvent(e *event) {
	if e.kind == eventWatermark {
		c.publish(e.value)
		return
	}
	c.publishBarrier(barrierMark{id: e.value, ts: e.ts, full: e.full, final: e.final})
}

// barrierMark is an aligned checkpoint barrier published in a cell: the
// fields of the barrier event, and the cell's watermark when it was
// published, which a channel takes before it.
type barrierMark struct {
	id, ts      int64
	full, final bool
	wmBefore    int64
}

// event is the barrier as a channel event.
func (b *barrierMark) event() event {
	return event{kind: eventBarrier, value: b.id, ts: b.ts, full: b.full, final: b.final}
}

// barriersAfter returns the barriers of log (ascending by id) above id.
// Most looks find none, at the cost of one comparison.
func barriersAfter(log []barrierMark, id int64) []barrierMark {
	i := len(log)
	for i > 0 && log[i-1].id > id {
		i--
	}
	return log[i:]
}

// maxCellBarriers is how many of its latest barriers a cell keeps. A
// channel takes a barrier soon after it is published unless the task is
// aligning an earlier checkpoint on it, so it lags by at most the
// checkpoints pending at once (CheckpointConfig.MaxConcurrent, default 1)
// or aborted meanwhile; one that lags further skips the oldest, and the
// task abandons those checkpoints as when a later barrier overtakes.
const maxCellBarriers = 16

// publishBarrier adds aligned barrier b (its wmBefore is set here) and
// schedules the wake-up of the cell's consumers. A barrier whose id is not
// above the cell's latest is ignored.
func (c *wmCell) publishBarrier(b barrierMark) {
	var old []barrierMark
	if p := c.barriers.Load(); p != nil {
		old = *p
	}
	if n := len(old); n > 0 && b.id <= old[n-1].id {
		return
	}
	if len(old) >= maxCellBarriers {
		old = old[len(old)-maxCellBarriers+1:]
	}
	b.wmBefore = c.value.Load()
	log := make([]barrierMark, len(old), len(old)+1)
	copy(log, old)
	log = append(log, b)
	c.barriers.Store(&log)
	if c.queued.CompareAndSwap(false, true) {
		c.x.queueCell(c)
	}
}

// acquireCell returns the cell key names, creating it, and counts a
// reference to it; releaseCell drops one.
func (x *Exchange) acquireCell(key cellKey) *wmCell {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.acquireCellLocked(key)
}

func (x *Exchange) acquireCellLocked(key cellKey) *wmCell {
	c := x.mu.cells[key]
	if c == nil {
		ek := cellEdgeKey{JobID: key.JobID, Attempt: key.Attempt, UpstreamVertex: key.UpstreamVertex,
			DownstreamVertex: key.DownstreamVertex, DownstreamInput: key.DownstreamInput}
		e := x.mu.cellEdges[ek]
		if e == nil {
			e = &cellEdge{key: ek, channels: make(map[*inputGate]int)}
			x.mu.cellEdges[ek] = e
		}
		e.cells++
		c = &wmCell{x: x, key: key, edge: e}
		c.value.Store(stream.MinWatermark)
		x.mu.cells[key] = c
	}
	c.refs++
	return c
}

func (x *Exchange) releaseCell(c *wmCell) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.releaseCellLocked(c)
}

func (x *Exchange) releaseCellLocked(c *wmCell) {
	c.refs--
	if c.refs == 0 && x.mu.cells[c.key] == c {
		delete(x.mu.cells, c.key)
		if c.edge.cells--; c.edge.cells == 0 {
			delete(x.mu.cellEdges, c.edge.key)
		}
	}
}

// subscribeLocked makes in read cell c; x.mu must be held.
func (x *Exchange) subscribeLocked(c *wmCell, in *inputChannel) {
	e := c.edge
	if e.channels[in.gate]++; e.channels[in.gate] == 1 {
		e.setGates()
	}
	in.cell = c
	in.gate.cellOf[in.idx] = c
}

// unsubscribeLocked undoes subscribeLocked; x.mu must be held.
func (x *Exchange) unsubscribeLocked(c *wmCell, in *inputChannel) {
	e := c.edge
	if e.channels[in.gate]--; e.channels[in.gate] == 0 {
		delete(e.channels, in.gate)
		e.setGates()
	}
}

// setGates publishes the gates of e.channels; Exchange.mu must be held.
func (e *cellEdge) setGates() {
	gates := make([]*inputGate, 0, len(e.channels))
	for g := range e.channels {
		gates = append(gates, g)
	}
	e.gates.Store(&gates)
}

// numCells reports how many watermark cells and cell edges exist, for
// leak tests.
func (x *Exchange) numCells() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.mu.cells) + len(x.mu.cellEdges)
}

// queueCell adds c to the cells whose consumers the next wake-up wakes,
// arming it if none is armed.
func (x *Exchange) queueCell(c *wmCell) {
	x.cellWake.Lock()
	x.cellWake.cells = append(x.cellWake.cells, c)
	arm := !x.cellWake.armed
	x.cellWake.armed = true
	x.cellWake.Unlock()
	if arm {
		time.AfterFunc(cellWakeDelay, x.wakeCells)
	}
}

// wakeCells wakes the consumers of the cells published since the last
// wake-up.
func (x *Exchange) wakeCells() {
	x.cellWake.Lock()
	cells := x.cellWake.cells
	x.cellWake.cells = nil
	x.cellWake.armed = false
	x.cellWake.Unlock()
	var edges []*cellEdge
	for _, c := range cells {
		// Cleared first: a publish from now on queues the cell again.
		c.queued.Store(false)
		if !slices.Contains(edges, c.edge) {
			edges = append(edges, c.edge)
		}
	}
	for _, e := range edges {
		if p := e.gates.Load(); p != nil {
			for _, g := range *p {
				g.cellsChanged()
			}
		}
	}
}

// cellTarget is where a partitioner publishes its watermarks by cell: a
// cell of this exchange, or a peer's, through one of the partitioner's
// channels on the stream to that peer.
type cellTarget struct {
	local *wmCell
	conn  *peerConn
	id    uint32
}
