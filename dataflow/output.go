package dataflow

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

	// Scratch reused across batches (Hash).
	hashes []uint64
	dest   []int32
	pos    []int32
	counts []int32
	subs   []*stream.Batch
	cols   []*stream.Column
}

// sendBatch sends b (which it owns) to its target channels.
func (p *partitioner) sendBatch(ctx context.Context, b *stream.Batch) error {
	switch p.kind {
	case stream.Forward:
		return p.chans[p.own].send(ctx, event{kind: eventBatch, batch: b})
	case stream.Rebalance:
		ch := p.chans[p.next]
		p.next++
		if p.next == len(p.chans) {
			p.next = 0
		}
		return ch.send(ctx, event{kind: eventBatch, batch: b})
	case stream.Broadcast:
		last := len(p.chans) - 1
		for i, ch := range p.chans {
			bb := b
			if i < last {
				bb = cloneBatch(b)
			}
			if err := ch.send(ctx, event{kind: eventBatch, batch: bb}); err != nil {
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
	clear(p.counts)
	par := len(p.chans)
	for i, h := range hashes {
		t := stream.SubtaskForKeyGroup(p.maxPar, par, stream.KeyGroupForHash(h, p.maxPar))
		dest[i] = int32(t)
		pos[i] = p.counts[t]
		p.counts[t]++
	}
	if p.counts[dest[0]] == int32(n) { // every row goes to one subtask
		return p.chans[dest[0]].send(ctx, event{kind: eventBatch, batch: b})
	}
	for t, c := range p.counts {
		p.subs[t] = nil
		if c > 0 {
			s := stream.NewBatch(b.Schema, int(c))
			s.SetLen(int(c))
			p.subs[t] = s
		}
	}
	scatter(b, dest, pos, p.subs, p.cols)
	b.Release()
	var err error
	for t, s := range p.subs {
		if s == nil {
			continue
		}
		p.subs[t] = nil
		if err != nil {
			s.Release()
			continue
		}
		err = p.chans[t].send(ctx, event{kind: eventBatch, batch: s})
	}
	return err
}

// sendEvent sends a non-batch event to every channel of the output.
func (p *partitioner) sendEvent(ctx context.Context, e event) error {
	for _, ch := range p.chans {
		if ch == nil {
			continue
		}
		if err := ch.send(ctx, e); err != nil {
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
}

var _ stream.SideOutputCollector = (*outputWriter)(nil)

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
	w.broadcast(event{kind: eventWatermark, value: wm})
}

func (w *outputWriter) broadcast(e event) {
	for _, p := range w.outs {
		if err := p.sendEvent(w.ctx, e); err != nil {
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
