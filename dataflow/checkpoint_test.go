package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

// sumCounts adds up the kcount snapshots of uid in snaps.
func sumCounts(t *testing.T, into map[int64]int64, snaps map[string]*stream.OperatorSnapshot, uid string) {
	t.Helper()
	s, ok := snaps[uid]
	if !ok {
		t.Fatalf("no snapshot of operator %q in %v", uid, slicesKeys(snaps))
	}
	for k, n := range decodeCounts(t, s) {
		into[k] += n
	}
}

func slicesKeys(m map[string]*stream.OperatorSnapshot) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestExactlyOnceRecovery runs a keyed count, takes a checkpoint while data
// flows, lets the doomed run count more rows, kills it, and restarts new
// tasks from the checkpoint with the sources rewound: the final counts must
// equal an uninterrupted run's (nothing lost or counted twice), and the
// checkpoint itself must be a consistent cut (the counts in it are exactly
// the rows below the sources' snapshotted positions).
func TestExactlyOnceRecovery(t *testing.T) {
	const rows, hold, keys, maxPar = 4000, 2000, 23, 16
	for _, tc := range []struct {
		name           string
		srcPar, cntPar int
		network        bool
	}{
		{"1 source to 1 task", 1, 1, false},
		{"2 sources to 2 keyed tasks", 2, 2, false},
		{"2 sources to 2 keyed tasks over gRPC", 2, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := stream.NewBuilder("eo").MaxParallelism(maxPar)
			b.Source("src", "ckgen", ckgenConfig{Rows: rows, Batch: 16, Keys: keys}).SetParallelism(tc.srcPar).
				KeyBy("key").Then("count", "kcount", nil).SetParallelism(tc.cntPar)
			g := plan(t, b, newCkRegistry(newCkState()))

			place := func(int, int) string { return "local" }
			var exchangeOf func(*TaskSpec) *Exchange
			if tc.network {
				nodes := []*testNode{startNode(t, 3), startNode(t, 3)}
				nodeOf := func(v, s int) int {
					if v == 0 {
						return s % 2
					}
					return 1 - s%2
				}
				place = func(v, s int) string { return nodes[nodeOf(v, s)].addr }
				exchangeOf = func(s *TaskSpec) *Exchange { return nodes[nodeOf(s.VertexID, s.Subtask)].x }
			} else {
				x := localExchange(t, "local")
				exchangeOf = func(*TaskSpec) *Exchange { return x }
			}
			countIn := func(r *ckRun) int64 {
				var n int64
				for _, task := range r.tasks {
					if task.spec.VertexID == 1 {
						n += task.Metrics().RecordsIn.Load()
					}
				}
				return n
			}

			// The doomed run: checkpoint 1 while rows flow.
			st1 := newCkState()
			st1.holdAt.Store(hold)
			r1 := startCk(t, buildSpecs(t, g, [][]int{{0}, {1}}, place), newCkRegistry(st1), stream.ExactlyOnce, 0, nil, exchangeOf)
			waitFor(t, "rows to flow", func() bool { return st1.emitted.Load() >= hold/4 })
			if !r1.checkpoint(t, 1) {
				t.Fatal("checkpoint 1 failed")
			}
			// Rows after the barrier are counted by the doomed run too.
			waitFor(t, "every row below the hold to be counted", func() bool { return countIn(r1) == hold })
			r1.stop()
			for i, err := range r1.errs {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("task %s of the killed run: %v", r1.tasks[i].Name(), err)
				}
			}

			// The checkpoint is a consistent cut.
			atCut := map[int64]int64{}
			wantCut := map[int64]int64{}
			var positions []int64
			for i, task := range r1.tasks {
				snaps, _ := r1.hooks[i].snaps(1)
				if ts := r1.hooks[i].timestamp(1); ts != 1001 {
					t.Fatalf("task %s took checkpoint 1 with timestamp %d, want the trigger's 1001", task.Name(), ts)
				}
				if task.spec.VertexID == 1 {
					sumCounts(t, atCut, snaps, "count")
					continue
				}
				item := snaps["src"].List["pos"][0]
				pos := int64(binary.LittleEndian.Uint64(item))
				positions = append(positions, pos)
				for id := int64(task.spec.Subtask); id < pos; id += int64(tc.srcPar) {
					wantCut[id%keys]++
				}
			}
			if !reflect.DeepEqual(atCut, wantCut) {
				t.Fatalf("checkpoint 1 counts %v, want the rows below the source positions %v: %v", atCut, positions, wantCut)
			}
			t.Logf("checkpoint 1 at source positions %v", positions)

			// The restarted run, from checkpoint 1, to the end of input.
			st2 := newCkState()
			specs2 := buildSpecs(t, g, [][]int{{0}, {1}}, place)
			for _, s := range specs2 {
				s.Attempt = 4
			}
			restore := func(i int) map[string]*stream.OperatorSnapshot {
				s, _ := r1.hooks[i].snaps(1)
				return s
			}
			r2 := startCk(t, specs2, newCkRegistry(st2), stream.ExactlyOnce, 1, restore, exchangeOf)
			last := r2.checkpointUntilDone(t, 2)
			for i, err := range r2.wait(t) {
				if err != nil {
					t.Fatalf("task %s: %v", r2.tasks[i].Name(), err)
				}
			}
			want := expectedCounts(rows, keys)
			if got := mergeCounts(st2, "count"); !reflect.DeepEqual(got, want) {
				t.Fatalf("final counts after recovery\n got %v\nwant %v", got, want)
			}
			// The final checkpoint holds all of it.
			final := map[int64]int64{}
			for i, task := range r2.tasks {
				if task.spec.VertexID == 1 {
					snaps, ok := r2.hooks[i].snaps(last)
					if !ok {
						t.Fatalf("task %s did not take the final checkpoint %d", task.Name(), last)
					}
					sumCounts(t, final, snaps, "count")
				}
			}
			if !reflect.DeepEqual(final, want) {
				t.Fatalf("final checkpoint %d counts %v, want %v", last, final, want)
			}
		})
	}
}

// feedSpecs builds a keyed count fed by two upstream subtasks, and returns
// the count task's spec.
func countSpec(t *testing.T, reg *stream.Registry, cfg kcountConfig) *TaskSpec {
	b := stream.NewBuilder("align").MaxParallelism(8)
	b.Source("src", "ckgen", nil).SetParallelism(2).KeyBy("key").Then("count", "kcount", cfg).SetParallelism(1)
	g := plan(t, b, reg)
	return buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })[2]
}

// feed plays the upstream end of one input channel of a task.
type feed struct {
	t   *testing.T
	x   *Exchange
	o   *outputChannel
	key channelKey
}

// openFeeds opens the producing end of every input channel of spec.
func openFeeds(t *testing.T, x *Exchange, spec *TaskSpec) []*feed {
	var fs []*feed
	for _, g := range spec.Inputs {
		for u := 0; u < g.UpstreamParallelism; u++ {
			key := channelKey{JobID: spec.JobID, Attempt: spec.Attempt, UpstreamVertex: g.UpstreamVertex, UpstreamSubtask: u,
				DownstreamVertex: spec.VertexID, DownstreamInput: g.Input, DownstreamSub: spec.Subtask}
			o, err := x.openOutput(key, x.cfg.SelfAddress)
			if err != nil {
				t.Fatal(err)
			}
			f := &feed{t: t, x: x, o: o, key: key}
			t.Cleanup(func() { x.closeOutput(o) })
			fs = append(fs, f)
		}
	}
	return fs
}

func (f *feed) send(e event) {
	f.t.Helper()
	if err := f.o.send(f.t.Context(), e); err != nil {
		f.t.Fatal(err)
	}
}

func (f *feed) rows(ids ...int64) {
	f.t.Helper()
	b := stream.NewBatch(genSchema, len(ids))
	for _, id := range ids {
		b.AppendRow(id, id%7, "")
	}
	f.send(event{kind: eventBatch, batch: b})
}

func (f *feed) barrier(id int64) { f.send(event{kind: eventBarrier, value: id, ts: 1000 + id}) }
func (f *feed) end()             { f.send(event{kind: eventEndOfPartition}) }

// blocked reports whether the consumer has blocked the channel, and how many
// events wait in it.
func (f *feed) blocked() (bool, int) {
	f.x.mu.Lock()
	e := f.x.mu.endpoints[f.key]
	f.x.mu.Unlock()
	in := e.in.Load()
	if in == nil {
		return false, 0
	}
	return in.gate.isBlocked(in)
}

func idRange(from, n int64) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = from + int64(i)
	}
	return ids
}

func countOf(idss ...[]int64) map[int64]int64 {
	m := map[int64]int64{}
	for _, ids := range idss {
		for _, id := range ids {
			m[id%7]++
		}
	}
	return m
}

// TestAlignmentModes: channel A delivers rows a1, barrier 1, rows a2 while
// channel B has delivered only b1. Exactly-once must block A, so the
// snapshot holds exactly a1+b1; at-least-once goes on reading A, so a2 is in
// the snapshot and a replay from it counts a2 twice (nothing is lost).
func TestAlignmentModes(t *testing.T) {
	a1, a2, b1 := idRange(0, 10), idRange(200, 12), idRange(100, 9)
	for _, tc := range []struct {
		mode      stream.CheckpointMode
		snapshot  map[int64]int64 // counts in checkpoint 1
		afterPlay map[int64]int64 // counts after replaying a2 on the restored state
	}{
		{stream.ExactlyOnce, countOf(a1, b1), countOf(a1, b1, a2)},
		{stream.AtLeastOnce, countOf(a1, b1, a2), countOf(a1, b1, a2, a2)},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			st := newCkState()
			reg := newCkRegistry(st)
			x := localExchange(t, "local")
			spec := countSpec(t, reg, kcountConfig{})
			r := startCk(t, []*TaskSpec{spec}, reg, tc.mode, 0, nil, func(*TaskSpec) *Exchange { return x })
			task := r.tasks[0]
			fs := openFeeds(t, x, spec)
			A, B := fs[0], fs[1]
			A.rows(a1...)
			A.barrier(1)
			A.rows(a2[:6]...) // a2 in two batches: they hold both of A's credits
			A.rows(a2[6:]...)
			B.rows(b1...)
			if tc.mode == stream.ExactlyOnce {
				waitFor(t, "A blocked with a2 buffered, a1 and b1 counted", func() bool {
					blocked, queued := A.blocked()
					return blocked && queued == 2 && task.Metrics().RecordsIn.Load() == int64(len(a1)+len(b1))
				})
				// No credit returns from a blocked channel: A's producer is
				// backpressured.
				A.o.mu.Lock()
				credits := A.o.mu.credits
				A.o.mu.Unlock()
				if credits != 0 {
					t.Fatalf("A's producer holds %d credits while A is blocked, want 0", credits)
				}
			} else {
				waitFor(t, "a1, a2 and b1 counted", func() bool {
					return task.Metrics().RecordsIn.Load() == int64(len(a1)+len(a2)+len(b1))
				})
				if blocked, _ := A.blocked(); blocked {
					t.Fatal("at-least-once blocked a channel")
				}
			}
			if _, ok := r.hooks[0].snaps(1); ok {
				t.Fatal("checkpoint 1 taken before every channel delivered its barrier")
			}
			B.barrier(1)
			waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
			snaps, _ := r.hooks[0].snaps(1)
			got := map[int64]int64{}
			sumCounts(t, got, snaps, "count")
			if !reflect.DeepEqual(got, tc.snapshot) {
				t.Fatalf("checkpoint 1 counts %v, want %v", got, tc.snapshot)
			}
			if a := r.hooks[0].statsOf(1).Alignment; tc.mode == stream.ExactlyOnce && a <= 0 {
				t.Fatalf("alignment time %v, want > 0", a)
			}
			waitFor(t, "a2 counted after alignment", func() bool {
				return task.Metrics().RecordsIn.Load() == int64(len(a1)+len(a2)+len(b1))
			})
			A.end()
			B.end()
			task.NotifyCheckpointComplete(1)
			if errs := r.wait(t); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if got := mergeCounts(st, "count"); !reflect.DeepEqual(got, countOf(a1, a2, b1)) {
				t.Fatalf("final counts %v, want %v", got, countOf(a1, a2, b1))
			}

			// Replay from checkpoint 1: upstream resends what followed its
			// barrier, a2 on A and nothing on B.
			st2 := newCkState()
			reg2 := newCkRegistry(st2)
			spec2 := countSpec(t, reg2, kcountConfig{})
			spec2.Attempt++
			spec2.RestoreCheckpointID, spec2.Restore = 1, snaps
			task2, err := NewTask(spec2, reg2, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- task2.Run(t.Context()) }()
			fs2 := openFeeds(t, x, spec2)
			fs2[0].rows(a2...)
			fs2[0].end()
			fs2[1].end()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got = mergeCounts(st2, "count")
			if !reflect.DeepEqual(got, tc.afterPlay) {
				t.Fatalf("counts after replay %v, want %v", got, tc.afterPlay)
			}
			for k, n := range countOf(a1, a2, b1) {
				if got[k] < n {
					t.Fatalf("key %d: counted %d after replay, fewer than the %d rows sent: a row was lost", k, got[k], n)
				}
			}
		})
	}
}

// TestAlignmentAbortedByHigherBarrier: barrier 2 arriving while 1 aligns
// abandons 1 (reported failed) and unblocks its channel; a stale barrier 1
// afterwards is ignored.
func TestAlignmentAbortedByHigherBarrier(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	x := localExchange(t, "local")
	spec := countSpec(t, reg, kcountConfig{})
	r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
	task, hooks := r.tasks[0], r.hooks[0]
	fs := openFeeds(t, x, spec)
	A, B := fs[0], fs[1]
	a1, b1 := idRange(0, 5), idRange(50, 6)

	A.barrier(1)
	A.rows(a1...)
	waitFor(t, "A blocked by barrier 1", func() bool { blocked, q := A.blocked(); return blocked && q == 1 })
	B.barrier(2)
	waitFor(t, "checkpoint 1 abandoned", func() bool { return hooks.failure(1) != nil })
	if err := hooks.failure(1); !errors.Is(err, errAbandoned) {
		t.Fatalf("failure of 1: %v", err)
	}
	waitFor(t, "A unblocked and a1 counted", func() bool { return task.Metrics().RecordsIn.Load() == int64(len(a1)) })
	B.rows(b1...)
	waitFor(t, "B blocked by barrier 2", func() bool { blocked, q := B.blocked(); return blocked && q == 1 })
	A.barrier(2)
	waitFor(t, "checkpoint 2", func() bool { _, ok := hooks.snaps(2); return ok })
	snaps, _ := hooks.snaps(2)
	got := map[int64]int64{}
	sumCounts(t, got, snaps, "count")
	if !reflect.DeepEqual(got, countOf(a1)) {
		t.Fatalf("checkpoint 2 counts %v, want only a1 %v", got, countOf(a1))
	}
	B.barrier(1) // stale
	A.barrier(3)
	B.barrier(3)
	waitFor(t, "checkpoint 3", func() bool { _, ok := hooks.snaps(3); return ok })
	if log := hooks.entries(); !reflect.DeepEqual(log, []string{"failed 1", "taken 2", "taken 3"}) {
		t.Fatalf("hooks saw %v", log)
	}
	A.end()
	B.end()
	task.NotifyCheckpointComplete(3)
	if errs := r.wait(t); errs[0] != nil {
		t.Fatal(errs[0])
	}
}

// TestFinalCheckpointChained: a source task (chained with a listening sink)
// whose input ended does not finish until a checkpoint taken after the end
// completes; an aborted one makes it wait for the next trigger.
func TestFinalCheckpointChained(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	b := stream.NewBuilder("final").Parallelism(1)
	b.Source("src", "ckgen", ckgenConfig{Rows: 100, Keys: 7}).Then("sink", "kcount", nil)
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	specs := buildSpecs(t, g, [][]int{{0, 1}}, func(int, int) string { return "local" })
	r := startCk(t, specs, reg, 0, 0, nil, func(*TaskSpec) *Exchange { return x })
	task, hooks := r.tasks[0], r.hooks[0]

	waitFor(t, "the source to wait for its final checkpoint", task.awaitingFinal.Load)
	if r.isDone(0) || len(st.eventsOf("sink/0")) != 0 {
		t.Fatalf("task ended (%v) or sink saw %v before any checkpoint", r.isDone(0), st.eventsOf("sink/0"))
	}
	if err := task.TriggerCheckpoint(1, 1001); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "checkpoint 1", func() bool { _, ok := hooks.snaps(1); return ok })
	task.NotifyCheckpointAborted(1)
	waitFor(t, "the abort to reach the sink", func() bool { return len(st.eventsOf("sink/0")) == 1 })
	if r.isDone(0) || !task.awaitingFinal.Load() {
		t.Fatal("the task stopped waiting after its final checkpoint was aborted")
	}
	if err := task.TriggerCheckpoint(2, 1002); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "checkpoint 2", func() bool { _, ok := hooks.snaps(2); return ok })
	if r.isDone(0) {
		t.Fatal("the task ended before its final checkpoint completed")
	}
	task.NotifyCheckpointComplete(2)
	if errs := r.wait(t); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if ev := st.eventsOf("sink/0"); !reflect.DeepEqual(ev, []string{"aborted 1", "complete 2", "finish"}) {
		t.Fatalf("sink saw %v", ev)
	}
	snaps, _ := hooks.snaps(2)
	got := map[int64]int64{}
	sumCounts(t, got, snaps, "sink")
	if want := expectedCounts(100, 7); !reflect.DeepEqual(got, want) {
		t.Fatalf("final checkpoint counts %v, want %v", got, want)
	}
	if err := task.TriggerCheckpoint(3, 1003); !errors.Is(err, ErrTaskNotRunning) || !errors.Is(err, ErrTaskEnded) {
		t.Fatalf("trigger after the end: %v, want ErrTaskEnded (an ErrTaskNotRunning)", err)
	}
	st.mu.Lock()
	octx := st.octx["sink/0"]
	st.mu.Unlock()
	if octx.Attempt != 3 || !octx.Checkpointing || octx.CheckpointMode != stream.ExactlyOnce {
		t.Fatalf("operator context: attempt %d checkpointing %v mode %v; want 3, true, exactly_once (the default)", octx.Attempt, octx.Checkpointing, octx.CheckpointMode)
	}
}

// TestFinalCheckpointDownstream: a task whose channels all ended waits for
// the outcome of its last snapshot before Finish; on complete or abort it
// finishes.
func TestFinalCheckpointDownstream(t *testing.T) {
	for _, outcome := range []string{"complete", "aborted"} {
		t.Run(outcome, func(t *testing.T) {
			st := newCkState()
			reg := newCkRegistry(st)
			b := stream.NewBuilder("final2").Parallelism(1)
			b.Source("src", "ckgen", ckgenConfig{Rows: 50, Keys: 7}).Rebalance().Then("sink", "kcount", nil)
			g := plan(t, b, reg)
			x := localExchange(t, "local")
			specs := buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" })
			r := startCk(t, specs, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
			src, sink := r.tasks[0], r.tasks[1]
			waitFor(t, "the source to wait for its final checkpoint", src.awaitingFinal.Load)
			if err := src.TriggerCheckpoint(1, 1001); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "both tasks to take checkpoint 1", func() bool {
				_, a := r.hooks[0].snaps(1)
				_, b := r.hooks[1].snaps(1)
				return a && b
			})
			src.NotifyCheckpointComplete(1)
			waitFor(t, "the source to finish", func() bool { return r.isDone(0) })
			waitFor(t, "the sink to wait for the outcome of checkpoint 1", sink.awaitingFinal.Load)
			if ev := st.eventsOf("sink/0"); len(ev) != 0 {
				t.Fatalf("sink saw %v before its notification", ev)
			}
			if outcome == "complete" {
				sink.NotifyCheckpointComplete(1)
			} else {
				sink.NotifyCheckpointAborted(1)
			}
			for i, err := range r.wait(t) {
				if err != nil {
					t.Fatalf("task %d: %v", i, err)
				}
			}
			if ev := st.eventsOf("sink/0"); !reflect.DeepEqual(ev, []string{outcome + " 1", "finish"}) {
				t.Fatalf("sink saw %v", ev)
			}
		})
	}
}

// TestNotifications: notifications reach listeners in order, stale ids are
// dropped, an idle source reacts to triggers, and a task waiting for input
// wakes up for notifications.
func TestNotifications(t *testing.T) {
	t.Run("idle source task", func(t *testing.T) {
		st := newCkState()
		st.holdAt.Store(0) // idle forever
		reg := newCkRegistry(st)
		b := stream.NewBuilder("notify").Parallelism(1)
		b.Source("src", "ckgen", ckgenConfig{Rows: -1}).Then("sink", "kcount", nil)
		g := plan(t, b, reg)
		x := localExchange(t, "local")
		specs := buildSpecs(t, g, [][]int{{0, 1}}, func(int, int) string { return "local" })
		r := startCk(t, specs, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
		task := r.tasks[0]
		task.NotifyCheckpointComplete(3)
		task.NotifyCheckpointComplete(2)
		task.NotifyCheckpointAborted(3)
		task.NotifyCheckpointAborted(5)
		task.NotifyCheckpointComplete(4)
		task.NotifyCheckpointComplete(6)
		want := []string{"complete 3", "aborted 5", "complete 6"}
		waitFor(t, "three notifications", func() bool { return len(st.eventsOf("sink/0")) >= len(want) })
		if err := task.TriggerCheckpoint(7, 1007); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the idle source to take checkpoint 7", func() bool { _, ok := r.hooks[0].snaps(7); return ok })
		if err := task.TriggerCheckpoint(7, 1007); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the repeated trigger to be refused", func() bool { return r.hooks[0].failure(7) != nil })
		r.stop()
		if ev := st.eventsOf("sink/0"); !reflect.DeepEqual(ev, want) {
			t.Fatalf("listener saw %v, want %v", ev, want)
		}
	})
	t.Run("task waiting for input", func(t *testing.T) {
		st := newCkState()
		reg := newCkRegistry(st)
		x := localExchange(t, "local")
		spec := countSpec(t, reg, kcountConfig{})
		r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
		openFeeds(t, x, spec)
		r.tasks[0].NotifyCheckpointAborted(1)
		waitFor(t, "the notification", func() bool { return len(st.eventsOf("count/0")) == 1 })
		r.stop()
	})
}

func TestTriggerErrors(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	x := localExchange(t, "local")
	spec := countSpec(t, reg, kcountConfig{})
	spec.Checkpointing, spec.Hooks = true, newFakeHooks()
	nonSource, err := NewTask(spec, reg, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := nonSource.TriggerCheckpoint(1, 1); !errors.Is(err, ErrNotSourceTask) {
		t.Fatalf("trigger on a non-source: %v, want ErrNotSourceTask", err)
	}
	b := stream.NewBuilder("trig").Parallelism(1)
	b.Source("src", "ckgen", ckgenConfig{Rows: 10}).Then("sink", "kcount", nil)
	g := plan(t, b, reg)
	srcSpec := func(on bool) *TaskSpec {
		s := buildSpecs(t, g, [][]int{{0, 1}}, func(int, int) string { return "local" })[0]
		if on {
			s.Checkpointing, s.Hooks = true, newFakeHooks()
		}
		return s
	}
	notRun, err := NewTask(srcSpec(true), reg, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A trigger before Run (the task still restoring) waits for it.
	if err := notRun.TriggerCheckpoint(1, 1); err != nil {
		t.Fatalf("trigger before Run: %v, want it queued", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- notRun.Run(ctx) }()
	hooks := notRun.spec.Hooks.(*fakeHooks)
	waitFor(t, "the checkpoint triggered before Run to be taken", func() bool {
		hooks.mu.Lock()
		defer hooks.mu.Unlock()
		_, taken := hooks.taken[1]
		return taken
	})
	cancel() // it waits for its final checkpoint
	<-done
	off, err := NewTask(srcSpec(false), reg, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := off.TriggerCheckpoint(1, 1); !errors.Is(err, ErrCheckpointingOff) {
		t.Fatalf("trigger without checkpointing: %v, want ErrCheckpointingOff", err)
	}
	noHooks := srcSpec(true)
	noHooks.Hooks = nil
	if _, err := NewTask(noHooks, reg, x, nil); err == nil || !strings.Contains(err.Error(), "Hooks") {
		t.Fatalf("NewTask without hooks: %v", err)
	}
}

// TestCancelDuringCheckpointWaits: cancellation ends every checkpoint wait,
// and a checkpoint still aligning is reported failed.
func TestCancelDuringCheckpointWaits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, r *ckRun, fs []*feed)
	}{
		{"source waiting for a final trigger", func(t *testing.T, r *ckRun, _ []*feed) {
			waitFor(t, "the final wait", r.tasks[0].awaitingFinal.Load)
		}},
		{"source waiting for the final completion", func(t *testing.T, r *ckRun, _ []*feed) {
			waitFor(t, "the final wait", r.tasks[0].awaitingFinal.Load)
			if err := r.tasks[0].TriggerCheckpoint(1, 1); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "checkpoint 1", func() bool { _, ok := r.hooks[0].snaps(1); return ok })
		}},
		{"ended task waiting for a notification", func(t *testing.T, r *ckRun, fs []*feed) {
			for _, f := range fs {
				f.barrier(1)
				f.end()
			}
			waitFor(t, "the final wait", r.tasks[0].awaitingFinal.Load)
		}},
		{"exactly-once alignment", func(t *testing.T, r *ckRun, fs []*feed) {
			fs[0].barrier(1)
			waitFor(t, "channel blocked", func() bool { b, _ := fs[0].blocked(); return b })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newCkState()
			reg := newCkRegistry(st)
			x := localExchange(t, "local")
			var spec *TaskSpec
			if strings.HasPrefix(tc.name, "source") {
				b := stream.NewBuilder("cancel").Parallelism(1)
				b.Source("src", "ckgen", ckgenConfig{Rows: 10}).Then("sink", "kcount", nil)
				spec = buildSpecs(t, plan(t, b, reg), [][]int{{0, 1}}, func(int, int) string { return "local" })[0]
			} else {
				spec = countSpec(t, reg, kcountConfig{})
			}
			r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
			var fs []*feed
			if spec.Inputs != nil {
				fs = openFeeds(t, x, spec)
			}
			tc.setup(t, r, fs)
			r.cancel()
			if errs := r.wait(t); !errors.Is(errs[0], context.Canceled) {
				t.Fatalf("Run returned %v, want context.Canceled", errs[0])
			}
			if tc.name == "exactly-once alignment" {
				if err := r.hooks[0].failure(1); !errors.Is(err, ErrTaskEnded) {
					t.Fatalf("checkpoint 1 aligning at cancellation: failure %v, want one saying the task ended", err)
				}
			}
		})
	}
}

// TestSnapshotFailure: a failing SnapshotState declines the checkpoint
// (naming the operator), the task goes on, and the next checkpoint works.
func TestSnapshotFailure(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	b := stream.NewBuilder("snapfail").Parallelism(1)
	b.Source("src", "ckgen", ckgenConfig{Rows: 200}).Rebalance().Then("count", "kcount", kcountConfig{FailSnapshot: 1})
	g := plan(t, b, reg)
	x := localExchange(t, "local")
	r := startCk(t, buildSpecs(t, g, [][]int{{0}, {1}}, func(int, int) string { return "local" }), reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
	if r.checkpoint(t, 1) {
		t.Fatal("checkpoint 1 completed despite the failing snapshot")
	}
	if err := r.hooks[1].failure(1); !errors.Is(err, errInjectedSnapshot) || !strings.Contains(err.Error(), `"count"`) {
		t.Fatalf("failure of checkpoint 1: %v, want the operator's error naming operator \"count\"", err)
	}
	if !r.checkpoint(t, 2) {
		t.Fatal("checkpoint 2 failed")
	}
	r.checkpointUntilDone(t, 3)
	for _, err := range r.wait(t) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := mergeCounts(st, "count"), expectedCounts(200, 10); !reflect.DeepEqual(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
}

func TestRestoreFailureNamesOperatorAndCheckpoint(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	x := localExchange(t, "local")
	spec := countSpec(t, reg, kcountConfig{})
	spec.RestoreCheckpointID = 7
	spec.Restore = map[string]*stream.OperatorSnapshot{"count": {Keyed: map[int][][]byte{0: {{1, 2, 3}}}}}
	task, err := NewTask(spec, reg, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = task.Run(t.Context())
	if !errors.Is(err, errBadChunk) || !strings.Contains(err.Error(), `"count"`) || !strings.Contains(err.Error(), "checkpoint 7") {
		t.Fatalf("Run: %v, want the operator's error naming operator \"count\" and checkpoint 7", err)
	}
	spec.Restore = map[string]*stream.OperatorSnapshot{"count": {}}
	spec.RestoreCheckpointID = 0
	if _, err := NewTask(spec, reg, x, nil); err == nil || !strings.Contains(err.Error(), "RestoreCheckpointID") {
		t.Fatalf("NewTask with state but no checkpoint id: %v", err)
	}
	if n := x.numEndpoints(); n != 0 {
		t.Fatalf("%d endpoints left", n)
	}
}
