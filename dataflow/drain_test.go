package dataflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

// evlog is a sink of the drain tests: it logs, in order, the maximum
// watermark, its snapshots (with the rows seen so far), its checkpoint
// notifications and Finish, by "uid/subtask" in the ckState's events.
type evlog struct {
	stream.BaseOperator
	st   *ckState
	who  string
	rows int64
}

var (
	_ stream.Checkpointed       = (*evlog)(nil)
	_ stream.CheckpointListener = (*evlog)(nil)
)

func (e *evlog) Open(_ context.Context, octx *stream.OperatorContext) error {
	e.who = fmt.Sprintf("%s/%d", octx.OperatorUID, octx.Subtask)
	return nil
}

func (e *evlog) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	e.rows += int64(b.Len())
	b.Release()
	return nil
}

func (e *evlog) ProcessWatermark(wm int64, _ stream.Collector) error {
	if wm == stream.MaxWatermark {
		e.st.event(e.who, "max watermark")
	}
	return nil
}

func (e *evlog) SnapshotState(sc *stream.SnapshotContext) error {
	e.st.event(e.who, fmt.Sprintf("snapshot %d after %d rows", sc.CheckpointID, e.rows))
	return nil
}

func (e *evlog) RestoreState(*stream.RestoreContext) error { return nil }

func (e *evlog) NotifyCheckpointComplete(id int64) error {
	e.st.event(e.who, fmt.Sprintf("complete %d", id))
	return nil
}

func (e *evlog) NotifyCheckpointAborted(id int64) error {
	e.st.event(e.who, fmt.Sprintf("aborted %d", id))
	return nil
}

func (e *evlog) Finish(stream.Collector) error {
	e.st.event(e.who, "finish")
	return nil
}

// TestDrain: a source task triggered for the savepoint of a stop with
// --drain emits the maximum watermark ahead of the barrier (a sink across
// the exchange, or chained, sees it before its snapshot, after every row
// the source emitted), stops reading its input, and finishes once the
// checkpoint completes, the sink after its notification; when the
// checkpoint is aborted, or a later one completes first, the source fails
// with ErrDrainAborted. A
// savepoint without --drain emits no maximum watermark, and rows keep
// flowing after it.
func TestDrain(t *testing.T) {
	for _, chained := range []bool{false, true} {
		for _, outcome := range []string{"complete", "aborted", "later completed", "no drain"} {
			name := outcome
			if chained {
				name += " chained"
			}
			t.Run(name, func(t *testing.T) {
				st := newCkState()
				reg := newCkRegistry(st)
				reg.Register(stream.OperatorType{
					Name: "evlog", Kind: stream.KindSink,
					Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
					NewOperator: func([]byte) (stream.Operator, error) { return &evlog{st: st}, nil },
				})
				b := stream.NewBuilder("drain").Parallelism(1)
				src := b.Source("src", "ckgen", ckgenConfig{Rows: -1, Batch: 8, Keys: 5})
				chains := [][]int{{0, 1}}
				if !chained {
					src = src.Rebalance()
					chains = [][]int{{0}, {1}}
				}
				src.Then("sink", "evlog", nil)
				g := plan(t, b, reg)
				x := localExchange(t, "local")
				specs := buildSpecs(t, g, chains, func(int, int) string { return "local" })
				r := startCk(t, specs, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
				source := r.tasks[0]
				waitFor(t, "rows to flow", func() bool { return st.emitted.Load() >= 200 })

				trigger := source.TriggerDrain
				if outcome == "no drain" {
					trigger = source.TriggerSavepoint
				}
				if err := trigger(1, 1001); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "every task to take checkpoint 1", func() bool {
					for _, h := range r.hooks {
						if _, ok := h.snaps(1); !ok {
							return false
						}
					}
					return true
				})
				events := func() []string { return st.eventsOf("sink/0") }
				atBarrier := st.emitted.Load()
				if outcome == "no drain" {
					waitFor(t, "rows after the savepoint", func() bool { return st.emitted.Load() > atBarrier })
					if slices.Contains(events(), "max watermark") {
						t.Fatalf("a savepoint without --drain emitted the maximum watermark: %v", events())
					}
					r.stop()
					return
				}
				want := []string{"max watermark", fmt.Sprintf("snapshot 1 after %d rows", atBarrier)}
				if ev := events(); !slices.Equal(ev, want) {
					t.Fatalf("sink saw %v, want %v: every row the source emitted, then the maximum watermark, before the barrier", ev, want)
				}
				if !source.awaitingFinal.Load() && !r.isDone(0) {
					waitFor(t, "the drained source to wait for its checkpoint", source.awaitingFinal.Load)
				}
				if r.isDone(0) {
					t.Fatal("the drained source ended before its checkpoint's outcome")
				}

				if outcome != "complete" {
					if outcome == "aborted" {
						source.NotifyCheckpointAborted(1)
					} else {
						source.NotifyCheckpointComplete(2)
					}
					waitFor(t, "the source to fail", func() bool { return r.isDone(0) })
					if err := r.errs[0]; !errors.Is(err, ErrDrainAborted) || !strings.Contains(err.Error(), "checkpoint 1") {
						t.Fatalf("source ended with %v, want ErrDrainAborted naming checkpoint 1", err)
					}
					r.stop()
					return
				}
				for _, task := range r.tasks {
					task.NotifyCheckpointComplete(1)
				}
				for i, err := range r.wait(t) {
					if err != nil {
						t.Fatalf("task %s: %v", r.tasks[i].Name(), err)
					}
				}
				want = append(want, "complete 1", "finish")
				if ev := events(); !slices.Equal(ev, want) {
					t.Fatalf("sink saw %v, want %v", ev, want)
				}
				if n := st.emitted.Load(); n != atBarrier {
					t.Fatalf("the drained source emitted %d rows after its barrier", n-atBarrier)
				}
			})
		}
	}
}
