package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weirstream/weir/internal/syncbuf"
	"github.com/weirstream/weir/stream"
)

// panickyConfig configures "panicky", a pass-through operator that panics
// in its method In on the At-th call (default the first). The panic value
// is an opBug, or with Runtime the runtime error of an index out of range.
type panickyConfig struct {
	In      string `json:"in"`
	At      int    `json:"at"`
	Runtime bool   `json:"runtime"`
}

// opBug is the panic value of panicky.
type opBug struct{ in string }

func (b opBug) Error() string { return "injected bug in " + b.in }

// panicCounts is what the panicky operators and sources of a test report.
type panicCounts struct {
	opened, closed atomic.Int64
}

type panicky struct {
	cfg   panickyConfig
	pc    *panicCounts
	calls map[string]int
	none  []int // indexed out of range for a runtime error
}

var (
	_ stream.Checkpointed       = (*panicky)(nil)
	_ stream.CheckpointListener = (*panicky)(nil)
)

// maybePanic panics when call is the configured method's At-th call.
func (p *panicky) maybePanic(call string) {
	p.calls[call]++
	if call != p.cfg.In || p.calls[call] != max(p.cfg.At, 1) {
		return
	}
	if p.cfg.Runtime {
		_ = p.none[p.calls[call]]
	}
	panic(opBug{in: call})
}

func (p *panicky) Open(context.Context, *stream.OperatorContext) error {
	p.pc.opened.Add(1)
	p.maybePanic("Open")
	return nil
}

func (p *panicky) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	p.maybePanic("ProcessBatch")
	out.Collect(b)
	return nil
}

func (p *panicky) ProcessWatermark(wm int64, out stream.Collector) error {
	p.maybePanic("ProcessWatermark")
	out.EmitWatermark(wm)
	return nil
}

func (p *panicky) Finish(stream.Collector) error {
	p.maybePanic("Finish")
	return nil
}

func (p *panicky) Close() error {
	p.pc.closed.Add(1)
	p.maybePanic("Close")
	return nil
}

func (p *panicky) SnapshotState(*stream.SnapshotContext) error {
	p.maybePanic("SnapshotState")
	return nil
}

func (p *panicky) RestoreState(*stream.RestoreContext) error {
	p.maybePanic("RestoreState")
	return nil
}

func (p *panicky) NotifyCheckpointComplete(int64) error {
	p.maybePanic("NotifyCheckpointComplete")
	return nil
}

func (p *panicky) NotifyCheckpointAborted(int64) error { return nil }

// panicSource is "panicsrc": the "gen" source, panicking like panicky in
// Open or Poll.
type panicSource struct {
	genSource
	p panicky
}

func (s *panicSource) Open(ctx context.Context, octx *stream.OperatorContext) error {
	if err := s.genSource.Open(ctx, octx); err != nil {
		return err
	}
	return s.p.Open(ctx, octx)
}

func (s *panicSource) Poll(ctx context.Context, out stream.Collector) (stream.PollStatus, error) {
	s.p.maybePanic("Poll")
	return s.genSource.Poll(ctx, out)
}

func (s *panicSource) Close() error {
	s.genSource.Close()
	return s.p.Close()
}

// newPanicRegistry registers panicky, panicsrc and "panicfactory" (whose
// NewOperator panics) with the operators of newTestRegistry and ckgen.
func newPanicRegistry(st *testState, pc *panicCounts) *stream.Registry {
	reg := newTestRegistry(st)
	decode := func(config []byte) (panicky, error) {
		p := panicky{pc: pc, calls: map[string]int{}}
		return p, stream.DecodeConfig(config, &p.cfg)
	}
	reg.Register(stream.OperatorType{
		Name: "panicky", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func(config []byte) (stream.Operator, error) {
			p, err := decode(config)
			return &p, err
		},
	})
	reg.Register(stream.OperatorType{
		Name: "panicsrc", Kind: stream.KindSource,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
		NewSource: func(config []byte) (stream.Source, error) {
			var cfg struct {
				genConfig
				panickyConfig
			}
			err := stream.DecodeConfig(config, &cfg)
			return &panicSource{
				genSource: genSource{st: st, cfg: cfg.genConfig},
				p:         panicky{pc: pc, calls: map[string]int{}, cfg: cfg.panickyConfig},
			}, err
		},
	})
	reg.Register(stream.OperatorType{
		Name: "panicfactory", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func([]byte) (stream.Operator, error) { panic("no operator today") },
	})
	ckgen, _ := newCkRegistry(newCkState()).Lookup("ckgen", true)
	reg.Register(*ckgen)
	return reg
}

// taskLogger logs into b.
func taskLogger(b *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// runJob runs the tasks of one job as the taskmanagers and jobmanager
// would: a task that fails makes the job fail over, which cancels the
// others. It returns every task's Run error.
func runJob(ctx context.Context, t *testing.T, specs []*TaskSpec, reg *stream.Registry, x *Exchange, log *slog.Logger) []error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tasks := make([]*Task, len(specs))
	for i, s := range specs {
		task, err := NewTask(s, reg, x, log)
		if err != nil {
			t.Fatalf("NewTask %d: %v", i, err)
		}
		tasks[i] = task
	}
	errs := make([]error, len(tasks))
	var wg sync.WaitGroup
	for i, task := range tasks {
		wg.Go(func() {
			if errs[i] = task.Run(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errs
}

// withJobID sets the job id of specs, so that two jobs built from graphs
// with the same vertex ids can share an exchange.
func withJobID(id string, specs []*TaskSpec) []*TaskSpec {
	for _, s := range specs {
		s.JobID = id
	}
	return specs
}

// checkOperatorPanic checks that err is the failure of operator uid's panic
// in call, with a panic value of type typ.
func checkOperatorPanic(t *testing.T, err error, uid, call, typ string) {
	t.Helper()
	if !errors.Is(err, ErrOperatorPanic) {
		t.Fatalf("the task ended with %v; want an error wrapping ErrOperatorPanic", err)
	}
	if errors.Is(err, errRuntimePanic) {
		t.Fatalf("%v: an operator's panic is blamed on the runtime", err)
	}
	msg := err.Error()
	t.Logf("the task failed with: %s", msg)
	for _, want := range []string{
		fmt.Sprintf("operator %q", uid), "subtask 1 of 1", "panicked in " + call, "of type " + typ,
		"raised in github.com/weirstream/weir/dataflow.(*panicky).maybePanic at dataflow/panic_test.go:",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}

// TestOperatorPanicFailsOnlyItsTask runs a job whose operator or source
// panics next to a healthy job on the same exchange: the panic fails the
// task it happened in, with an error naming the operator, the method and
// the panic, and a stack excerpt in the log; the operator is still closed;
// the job's other tasks end; and the healthy job runs to completion with
// all of its output.
func TestOperatorPanicFailsOnlyItsTask(t *testing.T) {
	const rows, batch = 3000, 10
	for _, tc := range []struct {
		name    string
		cfg     panickyConfig
		chained bool // panicky is chained after the source; else the head of its own task
		source  bool // the panicking operator is the source
		typ     string
	}{
		{name: "ProcessBatch of a chained operator", cfg: panickyConfig{In: "ProcessBatch", At: 3}, chained: true, typ: "dataflow.opBug"},
		{name: "ProcessBatch of a task's head, runtime error", cfg: panickyConfig{In: "ProcessBatch", At: 3, Runtime: true}, typ: "runtime.boundsError"},
		{name: "ProcessWatermark of a chained operator", cfg: panickyConfig{In: "ProcessWatermark", At: 5}, chained: true, typ: "dataflow.opBug"},
		{name: "ProcessWatermark of a task's head", cfg: panickyConfig{In: "ProcessWatermark", At: 5}, typ: "dataflow.opBug"},
		{name: "Open", cfg: panickyConfig{In: "Open"}, chained: true, typ: "dataflow.opBug"},
		{name: "Finish", cfg: panickyConfig{In: "Finish"}, chained: true, typ: "dataflow.opBug"},
		{name: "Close", cfg: panickyConfig{In: "Close"}, chained: true, typ: "dataflow.opBug"},
		{name: "Poll of a source", cfg: panickyConfig{In: "Poll", At: 4}, source: true, typ: "dataflow.opBug"},
		{name: "Open of a source", cfg: panickyConfig{In: "Open"}, source: true, typ: "dataflow.opBug"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, pc := newTestState(), &panicCounts{}
			reg := newPanicRegistry(st, pc)
			x := localExchange(t, "local")
			local := func(int, int) string { return "local" }

			// The bad job: the panicking vertex "bad" is the head of the
			// task of index badTask.
			b := stream.NewBuilder("bad").Parallelism(1)
			var chains [][]int
			badTask := 0
			switch {
			case tc.source:
				b.Source("bad", "panicsrc", map[string]any{"rows": rows, "batch": batch, "in": tc.cfg.In, "at": tc.cfg.At}).
					Rebalance().Then("badsink", "collect", nil)
				chains = [][]int{{0}, {1}}
			case tc.chained:
				b.Source("badsrc", "gen", genConfig{Rows: rows, Batch: batch}).Then("bad", "panicky", tc.cfg).Then("badsink", "collect", nil)
				chains = [][]int{{0, 1, 2}}
			default:
				b.Source("badsrc", "gen", genConfig{Rows: rows, Batch: batch}).Rebalance().Then("bad", "panicky", tc.cfg).Then("badsink", "collect", nil)
				chains, badTask = [][]int{{0}, {1, 2}}, 1
			}
			badSpecs := withJobID("bad", buildSpecs(t, plan(t, b, reg), chains, local))

			good := stream.NewBuilder("good").Parallelism(2)
			good.Source("goodsrc", "gen", genConfig{Rows: rows, Batch: batch, Keys: 13}).
				Then("goodadd", "addOne", nil).KeyBy("key").Then("goodsink", "collect", nil)
			goodSpecs := withJobID("good", buildSpecs(t, plan(t, good, reg), [][]int{{0, 1}, {2}}, local))

			var logs syncbuf.Buffer
			var badErrs, goodErrs []error
			var wg sync.WaitGroup
			wg.Go(func() { badErrs = runJob(t.Context(), t, badSpecs, reg, x, taskLogger(&logs)) })
			wg.Go(func() { goodErrs = runJob(t.Context(), t, goodSpecs, reg, x, nil) })
			wg.Wait()

			checkOperatorPanic(t, badErrs[badTask], "bad", tc.cfg.In, tc.typ)
			for i, err := range badErrs {
				if i != badTask && !errors.Is(err, context.Canceled) && !errors.Is(err, errUpstreamStopped) {
					t.Errorf("task %d of the failing job: %v; want it cancelled or failed for its stopped upstream", i, err)
				}
			}
			if o, c := pc.opened.Load(), pc.closed.Load(); o != 1 || c != 1 {
				t.Errorf("the panicking operator was opened %d and closed %d times; want 1 and 1", o, c)
			}
			log := logs.String()
			if !strings.Contains(log, "operator panicked") || !strings.Contains(log, ")."+tc.cfg.In) {
				t.Errorf("the log has no stack excerpt of the panic in %s:\n%s", tc.cfg.In, log)
			}

			for i, err := range goodErrs {
				if err != nil {
					t.Fatalf("task %d of the healthy job: %v", i, err)
				}
			}
			st.mu.Lock()
			got := append([]sinkRow(nil), st.rows["goodsink"]...)
			st.mu.Unlock()
			if len(got) != rows {
				t.Fatalf("the healthy job's sink got %d rows, want %d", len(got), rows)
			}
			sortRows(got)
			for i, r := range got {
				if want := int64(i) + 1000000; r.id != want || r.key != int64(i)%13 {
					t.Fatalf("the healthy job's row %d is %+v, want id %d key %d", i, r, want, i%13)
				}
			}
		})
	}
}

// TestTimerPanicFailsOnlyItsTask fires the processing-time timers of two
// tasks on one exchange, one of them an operator that panics in
// OnProcessingTime: that task fails with the operator's panic, its wake-up
// timer is stopped (the leak check of TestMain), and the other task's
// timers go on firing.
func TestTimerPanicFailsOnlyItsTask(t *testing.T) {
	st, pst := newTestState(), &ptState{}
	reg := newPtRegistry(st, pst, nil)
	reg.Register(stream.OperatorType{
		Name: "ptpanic", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func([]byte) (stream.Operator, error) {
			return &ptpanic{ptcount{st: pst, cfg: ptcountConfig{Delay: 100}}}, nil
		},
	})
	x := localExchange(t, "local")
	specFor := func(job, typ string) *TaskSpec {
		b := stream.NewBuilder(job).MaxParallelism(16)
		b.Source("src", "gen", nil).KeyBy("key").Then("pt", typ, ptcountConfig{Delay: 100}).Then("sink", "collect", nil)
		spec := buildSpecs(t, plan(t, b, reg), [][]int{{0}, {1, 2}}, func(int, int) string { return "local" })[1]
		spec.JobID = job
		return spec
	}
	clock := newManualClock(1000)
	var tasks []*Task
	var dones []<-chan error
	var feeds []*feed
	var logs syncbuf.Buffer
	for _, typ := range []string{"ptpanic", "ptcount"} {
		spec := specFor(typ, typ)
		spec.Clock = clock.now
		task, err := NewTask(spec, reg, x, taskLogger(&logs))
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
		dones = append(dones, runTask(t, t.Context(), task))
		feeds = append(feeds, openFeeds(t, x, spec)[0])
	}
	for _, f := range feeds {
		f.sendKeys(1, 2) // timers at 1100
	}
	waitFor(t, "2 rows counted by each task", func() bool { return pst.rows.Load() == 4 })
	clock.set(1100, tasks...)
	err := <-dones[0]
	if !errors.Is(err, ErrOperatorPanic) || !strings.Contains(err.Error(), `operator "pt"`) ||
		!strings.Contains(err.Error(), "panicked in OnProcessingTime: timer state broken (panic value of type *errors.errorString") || !strings.Contains(err.Error(), "raised in github.com/weirstream/weir/dataflow.(*ptpanic).OnProcessingTime") {
		t.Fatalf("the task whose timer panicked ended with %v; want ErrOperatorPanic naming operator \"pt\" and OnProcessingTime", err)
	}
	if !strings.Contains(logs.String(), "(*ptpanic).OnProcessingTime") {
		t.Errorf("the log has no stack excerpt of the panic:\n%s", logs.String())
	}

	// The healthy task fires its timers, and more after that.
	waitRows(t, "the healthy task's timers at 1100", st, ptRow{1100, 1, "n=1 at 1100"}, ptRow{1100, 2, "n=1 at 1100"})
	feeds[1].sendKeys(3) // timer at 1200
	waitFor(t, "3 rows counted", func() bool { return pst.rows.Load() == 5 })
	clock.set(1200, tasks[1])
	waitRows(t, "the healthy task's timer at 1200", st, ptRow{1100, 1, "n=1 at 1100"}, ptRow{1100, 2, "n=1 at 1100"}, ptRow{1200, 3, "n=1 at 1200"})
	feeds[1].end()
	if err := <-dones[1]; err != nil {
		t.Fatalf("the healthy task: %v", err)
	}
}

// ptpanic is ptcount panicking in OnProcessingTime.
type ptpanic struct{ ptcount }

func (o *ptpanic) OnProcessingTime(int64, stream.Collector) error {
	panic(errors.New("timer state broken"))
}

// TestCheckpointCallPanics: a panic in an operator's SnapshotState,
// RestoreState or NotifyCheckpointComplete fails its task (a failed
// snapshot alone only declines the checkpoint; a panic may have left the
// operator's state broken), and SnapshotFailed hears of the snapshot's.
func TestCheckpointCallPanics(t *testing.T) {
	for _, call := range []string{"SnapshotState", "RestoreState", "NotifyCheckpointComplete"} {
		t.Run(call, func(t *testing.T) {
			st, pc := newTestState(), &panicCounts{}
			reg := newPanicRegistry(st, pc)
			x := localExchange(t, "local")
			b := stream.NewBuilder("ck").Parallelism(1)
			b.Source("src", "ckgen", ckgenConfig{Rows: -1, Batch: 10}).Then("bad", "panicky", panickyConfig{In: call}).Then("sink", "collect", nil)
			spec := buildSpecs(t, plan(t, b, reg), [][]int{{0, 1, 2}}, func(int, int) string { return "local" })[0]
			var restore func(int) map[string]*stream.OperatorSnapshot
			var restoreID int64
			if call == "RestoreState" {
				restoreID = 7
				restore = func(int) map[string]*stream.OperatorSnapshot {
					return map[string]*stream.OperatorSnapshot{"bad": {List: map[string][][]byte{"x": {[]byte("y")}}}}
				}
			}
			r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, restoreID, restore, func(*TaskSpec) *Exchange { return x })
			if call != "RestoreState" {
				waitFor(t, "rows to flow", func() bool { return st.consumed.Load() > 0 })
				r.checkpoint(t, 1)
			}
			errs := r.wait(t)
			checkOperatorPanic(t, errs[0], "bad", call, "dataflow.opBug")
			if call == "SnapshotState" {
				if err := r.hooks[0].failure(1); !errors.Is(err, ErrOperatorPanic) {
					t.Errorf("SnapshotFailed got %v, want the panic", err)
				}
				if _, taken := r.hooks[0].snaps(1); taken {
					t.Errorf("checkpoint 1 was reported taken")
				}
			}
			if c := pc.closed.Load(); c != 1 {
				t.Errorf("the operator was closed %d times, want 1", c)
			}
		})
	}
}

// panickingHooks panics in SnapshotTaken: a bug outside the operators.
type panickingHooks struct{ *fakeHooks }

func (h *panickingHooks) SnapshotTaken(int64, int64, map[string]*stream.OperatorSnapshot, SnapshotStats) {
	panic("hooks bug")
}

// TestRuntimePanicFailsTask: a panic on the task goroutine outside
// operator code (here in the CheckpointHooks) fails the task too, with an
// error that blames the runtime, not an operator, and the whole stack in
// the log; the operators are closed as after any failure.
func TestRuntimePanicFailsTask(t *testing.T) {
	st, pc := newTestState(), &panicCounts{}
	reg := newPanicRegistry(st, pc)
	x := localExchange(t, "local")
	b := stream.NewBuilder("rt").Parallelism(1)
	b.Source("src", "ckgen", ckgenConfig{Rows: -1, Batch: 10}).Then("op", "panicky", nil).Then("sink", "collect", nil)
	spec := buildSpecs(t, plan(t, b, reg), [][]int{{0, 1, 2}}, func(int, int) string { return "local" })[0]
	spec.Checkpointing, spec.Hooks = true, &panickingHooks{newFakeHooks()}
	var logs syncbuf.Buffer
	task, err := NewTask(spec, reg, x, taskLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	done := runTask(t, t.Context(), task)
	waitFor(t, "rows to flow", func() bool { return st.consumed.Load() > 0 })
	if err := task.TriggerCheckpoint(1, 1001); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, errRuntimePanic) || errors.Is(err, ErrOperatorPanic) || !strings.Contains(err.Error(), "hooks bug") {
		t.Fatalf("Run returned %v; want the runtime's panic, not an operator's", err)
	}
	if log := logs.String(); !strings.Contains(log, "(*panickingHooks).SnapshotTaken") || !strings.Contains(log, "goroutine ") {
		t.Errorf("the log lacks the panic's whole stack:\n%s", log)
	}
	if c := pc.closed.Load(); c != 1 {
		t.Errorf("the operator was closed %d times, want 1", c)
	}
	if n := x.numEndpoints(); n != 0 {
		t.Errorf("%d channel endpoints left registered", n)
	}
}

// TestNewTaskRecoversFactoryPanic: an operator type whose constructor
// panics fails NewTask (on the taskmanager's deploying goroutine) with an
// error, not the process.
func TestNewTaskRecoversFactoryPanic(t *testing.T) {
	st, pc := newTestState(), &panicCounts{}
	reg := newPanicRegistry(st, pc)
	b := stream.NewBuilder("factory").Parallelism(1)
	b.Source("src", "gen", nil).Then("bad", "panicfactory", nil).Then("sink", "collect", nil)
	spec := buildSpecs(t, plan(t, b, reg), [][]int{{0, 1, 2}}, func(int, int) string { return "local" })[0]
	_, err := NewTask(spec, reg, localExchange(t, "local"), nil)
	if !errors.Is(err, ErrOperatorPanic) || !strings.Contains(err.Error(), `operator "bad"`) ||
		!strings.Contains(err.Error(), "panicked in NewOperator: no operator today (panic value of type string") {
		t.Fatalf("NewTask returned %v; want ErrOperatorPanic naming operator \"bad\", NewOperator and the panic", err)
	}
}
