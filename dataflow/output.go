package dataflow

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/stream"
)

// partitioner writes the last operator's output to the channels of one
// Output, choosing each batch's downstream subtasks.
type partitioner struct {
	kind   stream.Partitioning
	chans  []*outputChannel // per downstream subtask; for Forward only own subtask's is set
	own    int              // this task's subtask index
	next   int              // round-robin position (Rebalance)
	keys   []int            // key columns (Hash)
	maxPar int

	// pendingChans counts the channels that hold events back
	// (outputChannel.pendingChans).
	pendingChans int
	// Watermarks and aligned barriers by cell (wmcell.go), on edges other
	// than Forward: one cell per taskmanager the edge goes to.
	cells []cellTarget

	// Scratch reused across batches (Hash); touched lists the subtasks a
	// batch goes to, so that a batch of a few rows costs no pass over all
	// of them.
	touched []int32
	hashes  []uint64
	dest    []int32
	pos     []int32
	counts  []int32
	subs    []*stream.Batch
	cols    []*stream.Column
}

// sendBatch sends b (which it owns) to its target channels.
func (p *partitioner) sendBatch(ctx context.Context, b *stream.Batch) error {
	switch p.kind {
	case stream.Forward:
		return p.put(ctx, p.own, b)
	case stream.Rebalance:
		d := p.next
		p.next++
		if p.next == len(p.chans) {
			p.next = 0
		}
		return p.put(ctx, d, b)
	case stream.Broadcast:
		last := len(p.chans) - 1
		for i := range p.chans {
			bb := b
			if i < last {
				bb = cloneBatch(b)
			}
			if err := p.put(ctx, i, bb); err != nil {
				if i < last {
					b.Release()
				}
				return err
			}
		}
		return nil
	case stream.Hash:
		return p.sendHashed(ctx, b)
	}
	b.Release()
	return fmt.Errorf("dataflow: unknown partitioning %v", p.kind)
}

func (p *partitioner) sendHashed(ctx context.Context, b *stream.Batch) error {
	n := b.Len()
	if cap(p.hashes) < n {
		p.hashes = make([]uint64, n)
		p.dest = make([]int32, n)
		p.pos = make([]int32, n)
	}
	hashes, dest, pos := p.hashes[:n], p.dest[:n], p.pos[:n]
	stream.HashKeys(b, p.keys, hashes)
	par := len(p.chans)
	touched := p.touched[:0]
	for i, h := range hashes {
		t := stream.SubtaskForKeyGroup(p.maxPar, par, stream.KeyGroupForHash(h, p.maxPar))
		if p.counts[t] == 0 {
			touched = append(touched, int32(t))
		}
		dest[i] = int32(t)
		pos[i] = p.counts[t]
		p.counts[t]++
	}
	p.touched = touched
	if len(touched) == 1 { // every row goes to one subtask
		p.counts[touched[0]] = 0
		return p.put(ctx, int(touched[0]), b)
	}
	slices.Sort(touched) // subtask order, as a pass over all would send
	for _, t := range touched {
		c := int(p.counts[t])
		s := stream.NewBatch(b.Schema, c)
		s.SetLen(c)
		p.subs[t] = s
	}
	scatter(b, dest, pos, p.subs, p.cols)
	b.Release()
	var err error
	for _, t := range touched {
		s := p.subs[t]
		p.subs[t], p.counts[t] = nil, 0
		if err != nil {
			s.Release()
			continue
		}
		err = p.put(ctx, int(t), s)
	}
	return err
}

// put sends batch b (which it owns) on channel d.
func (p *partitioner) put(ctx context.Context, d int, b *stream.Batch) error {
	return p.chans[d].put(ctx, event{kind: eventBatch, batch: b})
}

// sendByCell sends watermark or aligned barrier e (byCell): by cell
// (wmcell.go) where it can, and on every channel while one holds events
// back (waiting for credit or for its consumer to exist: a cell would pass
// them). The caller sent what the channels hold to coalesce it first
// (outputWriter.broadcast).
func (p *partitioner) sendByCell(ctx context.Context, e event) error {
	if len(p.cells) == 0 || p.pendingChans > 0 {
		return p.sendEvent(ctx, e)
	}
	for _, c := range p.cells {
		if c.local != nil {
			c.local.publishEvent(&e)
			continue
		}
		it := outItem{id: c.id, kind: e.kind, value: e.value, ts: e.ts, full: e.full, final: e.final, cell: true}
		if err := c.conn.enqueueCell(it); err != nil {
			return err
		}
	}
	return nil
}

// sendEvent sends a non-batch event to every channel of the output.
func (p *partitioner) sendEvent(ctx context.Context, e event) error {
	for _, ch := range p.chans {
		if ch == nil {
			continue
		}
		if err := ch.put(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// outputWriter is the collector of the chain's last operator: it counts the
// rows leaving the task and hands every batch of an output (the main one or
// a side output) to the partitioner of each edge reading that output. Events
// (watermarks, barriers, end-of-partition) go to every edge. It lives for
// one Task.Run call and keeps that call's context because the
// stream.Collector methods have none.
type outputWriter struct {
	ctx  context.Context
	r    *taskRun
	tail *chainLink
	// outs has every edge's partitioner; main those reading the main
	// output, side those reading each side output.
	outs []*partitioner
	main []*partitioner
	side map[string][]*partitioner
	// deferred: the channels are deferred (outputChannel.deferred) and
	// signal their credit grants on wake.
	deferred bool
	wake     chan struct{}
	// gated: the task takes no input while full > 0, that is while a
	// channel of its output cannot take a batch (outputChannel.full), so
	// that it waits for credit between batches, where it handles unaligned
	// barriers, rather than inside a send. The channels signal their
	// grants on wake.
	gated bool
	full  atomic.Int64
	// linger lists the channels holding batches to coalesce them
	// (coalesce.go).
	linger lingerSet
}

var _ stream.SideOutputCollector = (*outputWriter)(nil)

// isFull reports whether a channel of the output cannot take a batch now.
func (w *outputWriter) isFull() bool { return w.full.Load() > 0 }

// brokenErr returns the error of a broken network stream under one of the
// output's channels, if any.
func (w *outputWriter) brokenErr() error {
	for _, p := range w.outs {
		for _, ch := range p.chans {
			if ch == nil {
				continue
			}
			if err := ch.brokenErr(); err != nil {
				return err
			}
		}
	}
	return nil
}

// add adds the partitioner of an edge reading output side ("" is main).
func (w *outputWriter) add(side string, p *partitioner) {
	w.outs = append(w.outs, p)
	if side == "" {
		w.main = append(w.main, p)
		return
	}
	if w.side == nil {
		w.side = make(map[string][]*partitioner)
	}
	w.side[side] = append(w.side[side], p)
}

func (w *outputWriter) Collect(b *stream.Batch) {
	n := b.Len()
	if w.r.err != nil || n == 0 {
		b.Release()
		return
	}
	w.r.t.metrics.RecordsOut.Add(int64(n))
	w.send(w.main, b)
}

func (w *outputWriter) CollectSide(name string, b *stream.Batch) bool {
	ps := w.side[name]
	if w.r.err != nil {
		b.Release()
		return len(ps) > 0
	}
	if err := checkSideOutput(w.tail.v, name, b); err != nil {
		b.Release()
		w.r.fail(w.r.t.opErr(w.tail.uid, err))
		return false
	}
	if len(ps) == 0 || b.Len() == 0 {
		b.Release()
		return len(ps) > 0
	}
	w.r.t.metrics.RecordsOut.Add(int64(b.Len()))
	w.send(ps, b)
	return true
}

// send hands b to each of ps, cloning it for all but the last.
func (w *outputWriter) send(ps []*partitioner, b *stream.Batch) {
	last := len(ps) - 1
	if last < 0 {
		b.Release()
		return
	}
	for i, p := range ps {
		bb := b
		if i < last {
			bb = cloneBatch(b)
		}
		if err := p.sendBatch(w.ctx, bb); err != nil {
			if i < last {
				b.Release()
			}
			w.r.fail(err)
			return
		}
	}
}

func (w *outputWriter) EmitWatermark(wm int64) {
	if w.r.err != nil {
		return
	}
	w.r.t.metrics.Watermark.Store(wm)
	w.broadcast(event{kind: eventWatermark, value: wm})
}

func (w *outputWriter) broadcast(e event) {
	cell := byCell(&e)
	if cell {
		// What the channels hold to coalesce it goes first: a watermark or
		// a barrier by cell must not pass it (wmcell.go).
		if err := w.flushLinger(); err != nil {
			w.r.fail(err)
			return
		}
	}
	for _, p := range w.outs {
		var err error
		if cell {
			err = p.sendByCell(w.ctx, e)
		} else {
			err = p.sendEvent(w.ctx, e)
		}
		if err != nil {
			w.r.fail(err)
			return
		}
	}
}

// checkSideOutput checks a batch that the operator of vertex v emits to its
// side output name: the name must be declared, and b must have the
// declared schema (readers decode it with that schema).
func checkSideOutput(v *stream.Vertex, name string, b *stream.Batch) error {
	s := v.SideOutSchemas[name]
	if s == nil {
		return fmt.Errorf("emitted to side output %q, which operator type %q does not declare (its side outputs: %s); declare it in the type's Plan with PlanContext.DeclareSideOutput",
			name, v.Type, sideOutputNames(v))
	}
	if !b.Schema.Equal(s) {
		return fmt.Errorf("emitted a batch of schema %v to side output %q, declared with schema %v", b.Schema, name, s)
	}
	return nil
}

// sideOutputNames lists v's side outputs for messages.
func sideOutputNames(v *stream.Vertex) string {
	if len(v.SideOutSchemas) == 0 {
		return "none"
	}
	names := make([]string, 0, len(v.SideOutSchemas))
	for n := range v.SideOutSchemas {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// channelStatePrefix starts the names of the operator list state in which
// a source task's unaligned checkpoint keeps the batches its barrier
// overtook (see outputWriter.channelState). The rest of the name is
// "p<parallelism>/out<output>/sub<downstream subtask>".
const channelStatePrefix = "weir.channel-state/"

// flush sends what waits in the deferred channels while it can go, and
// reports whether anything still waits.
func (w *outputWriter) flush() (bool, error) {
	left := false
	for _, p := range w.outs {
		if p.pendingChans == 0 {
			continue
		}
		for _, ch := range p.chans {
			if ch == nil || ch.pending.len() == 0 {
				continue
			}
			l, err := ch.flush()
			if err != nil {
				return true, err
			}
			left = left || l
		}
	}
	return left, nil
}

// channelState encodes the batches waiting in the deferred channels, by
// list-state name (channelStatePrefix), with their size in bytes. The
// batches stay where they are. schemaOf gives the schema of output i.
func (w *outputWriter) channelState(parallelism int, schemaOf func(out int) *stream.Schema) (map[string][][]byte, int64, error) {
	var state map[string][][]byte
	var size int64
	for i, p := range w.outs {
		for d, ch := range p.chans {
			if ch == nil {
				continue
			}
			err := ch.pendingData(schemaOf(i), func(data []byte) {
				if state == nil {
					state = make(map[string][][]byte)
				}
				name := fmt.Sprintf("%sp%d/out%d/sub%d", channelStatePrefix, parallelism, i, d)
				state[name] = append(state[name], data)
				size += int64(len(data))
			})
			if err != nil {
				return nil, 0, fmt.Errorf("output %d to subtask %d: %w", i, d, err)
			}
		}
	}
	return state, size, nil
}

// overtake sends barrier e on every channel ahead of what waits there.
func (w *outputWriter) overtake(e event) {
	for _, p := range w.outs {
		for _, ch := range p.chans {
			if ch == nil {
				continue
			}
			if err := ch.overtake(e); err != nil {
				w.r.fail(err)
				return
			}
		}
	}
}

// replay queues the batches of channel state (by list-state name, as
// channelState wrote them) in the deferred channels they were taken from,
// ahead of any new output. schemaOf gives the schema of output i.
func (w *outputWriter) replay(state map[string][][]byte, parallelism int, schemaOf func(out int) *stream.Schema) error {
	for _, name := range sortedStateNames(state) {
		var p, out, sub int
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, channelStatePrefix), "p%d/out%d/sub%d", &p, &out, &sub); err != nil {
			return fmt.Errorf("channel state %q: malformed name; the checkpoint was not written by this version of Weir", name)
		}
		if p != parallelism {
			return fmt.Errorf("%w: it holds records in flight of parallelism %d, and this task runs at parallelism %d; "+
				"restore it at parallelism %d, or take a savepoint (savepoints are always aligned) and rescale from that", ErrUnalignedRescale, p, parallelism, p)
		}
		if out < 0 || out >= len(w.outs) || sub < 0 || sub >= len(w.outs[out].chans) || w.outs[out].chans[sub] == nil {
			return fmt.Errorf("channel state %q: the task has no such output channel; was the job's graph changed? restore it from a savepoint", name)
		}
		ch := w.outs[out].chans[sub]
		for _, data := range state[name] {
			b, err := batchcodec.Decode(data, schemaOf(out))
			if err != nil {
				return fmt.Errorf("channel state %q: %w", name, err)
			}
			ch.queuePending(event{kind: eventBatch, batch: b})
		}
	}
	return nil
}

// dropPending releases what waits in the deferred channels.
func (w *outputWriter) dropPending() {
	for _, p := range w.outs {
		for _, ch := range p.chans {
			if ch != nil {
				ch.dropPending()
			}
		}
	}
}

func sortedStateNames(m map[string][][]byte) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
