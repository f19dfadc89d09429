package dataflow

import (
	"context"
	"fmt"
	"testing"

	"github.com/weirstream/weir/stream"
)

// passOp forwards every batch as it is.
type passOp struct{ stream.BaseOperator }

func (passOp) Open(context.Context, *stream.OperatorContext) error { return nil }
func (passOp) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	out.Collect(b)
	return nil
}

// TestGatedTaskTakesUnalignedBarrier: a task between a source and a
// consumer that reads nothing has its output channel full. It waits for
// credit between batches, not inside a send, so an unaligned barrier
// arriving on its input is taken at once: the task snapshots, keeping the
// batches the barrier overtook in its input as channel state, and the
// barrier reaches the full channel ahead of the batches there, all while
// nothing downstream is read. (Blocked in a send, the task would see the
// barrier only after the consumer read.) Over the network exchange and in
// memory.
func TestGatedTaskTakesUnalignedBarrier(t *testing.T) {
	const credits = 2
	for _, remote := range []bool{true, false} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) {
			st := newCkState()
			reg := newCkRegistry(st)
			reg.Register(stream.OperatorType{Name: "pass", Kind: stream.KindTransform, Plan: samePlan,
				NewOperator: func([]byte) (stream.Operator, error) { return passOp{}, nil }})
			b := stream.NewBuilder("gated").MaxParallelism(8)
			b.Source("src", "ckgen", ckgenConfig{Rows: 1 << 40, Batch: 10, Keys: 7}).Rebalance().
				Then("mid", "pass", nil).Rebalance().Then("count", "kcount", nil)
			g := plan(t, b, reg)
			a, c := startNode(t, credits), startNode(t, credits)
			if !remote {
				c = a
			}
			specs := buildSpecs(t, g, [][]int{{0}, {1}, {2}}, func(v, _ int) string {
				if v == 0 {
					return a.addr
				}
				return c.addr
			})
			for _, s := range specs {
				s.Attempt = 1
			}
			p := openProbe(t, c.x, channelKey{JobID: specs[1].JobID, Attempt: 1, UpstreamVertex: 1, DownstreamVertex: 2})
			r := startCk(t, specs[:2], reg, stream.ExactlyOnce, 0, nil, func(s *TaskSpec) *Exchange {
				if s.VertexID == 0 {
					return a.x
				}
				return c.x
			})
			defer r.stop()
			// The middle task's input holds every batch its credits allow,
			// and its output is full: it waits for credit now.
			in := channelKey{JobID: specs[1].JobID, Attempt: 1, UpstreamVertex: 0, DownstreamVertex: 1}
			waitFor(t, "the middle task's input and output to be full", func() bool {
				return p.batches() >= credits && bufferedBatches(c.x, in) >= credits &&
					r.tasks[1].Metrics().backpressured()
			})
			if err := r.tasks[0].TriggerUnalignedCheckpoint(1, 1001); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the middle task to take checkpoint 1", func() bool { _, ok := r.hooks[1].snaps(1); return ok })
			waitFor(t, "barrier 1 at the front of the full channel", func() bool {
				q := p.queued()
				return len(q) > 0 && q[0] == eventBarrier
			})
			if n := len(p.overtaken(1)); n == 0 {
				t.Fatalf("channel holds %v; barrier 1 overtook no batch there", p.queued())
			}
			if s := r.hooks[1].statsOf(1); s.ChannelStateBytes == 0 {
				t.Fatalf("the middle task's snapshot has no channel state (%+v); its input was full when the barrier came", s)
			}
		})
	}
}

// bufferedBatches counts the batches waiting in the consumer's buffer of
// channel key on x.
func bufferedBatches(x *Exchange, key channelKey) int {
	x.mu.Lock()
	e := x.mu.endpoints[key]
	x.mu.Unlock()
	if e == nil {
		return 0
	}
	in := e.in.Load()
	if in == nil {
		return 0
	}
	in.gate.mu.Lock()
	defer in.gate.mu.Unlock()
	n := 0
	for i := 0; i < in.q.len(); i++ {
		if in.q.at(i).kind == eventBatch {
			n++
		}
	}
	return n
}
