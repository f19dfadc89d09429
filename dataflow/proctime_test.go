package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// ptcountConfig configures "ptcount", a keyed operator with processing-time
// timers: it counts the rows of each key (column "key") in keyed state and,
// for every row, registers a processing-time timer Delay ms after the row
// arrived (the task clock's time). A firing timer emits one row: id the
// timer's timestamp, key the key, name "n=<count> at <now>" (the key's
// count then, and the time OnProcessingTime was called with).
type ptcountConfig struct {
	Delay int64 `json:"delay"`
}

// ptState is what the ptcount operators of one test report to.
type ptState struct {
	calls atomic.Int64 // OnProcessingTime calls
	// rows counts the rows ProcessBatch is done with. Tests that move a
	// manual clock after rows arrived wait for it, not for the task's
	// RecordsIn, which counts a batch before the operator reads the
	// clock for it.
	rows atomic.Int64
}

type ptcount struct {
	stream.BaseOperator
	st      *ptState
	cfg     ptcountConfig
	octx    *stream.OperatorContext
	backend statebackend.Backend
	count   statebackend.ValueState[int64]
	hashes  []uint64
}

var (
	_ stream.KeyedStateful       = (*ptcount)(nil)
	_ stream.ProcessingTimeAware = (*ptcount)(nil)
)

func (o *ptcount) UsesKeyedState() bool { return true }

func (o *ptcount) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.octx = octx
	var err error
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return err
	}
	o.count, err = statebackend.GetValueState(o.backend, "count", statebackend.Int64Codec)
	return err
}

func (o *ptcount) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	now := o.octx.ProcessingTime()
	n := b.Len()
	o.hashes = slices.Grow(o.hashes[:0], n)[:n]
	stream.HashKeys(b, []int{1}, o.hashes)
	owned := o.backend.KeyGroups()
	for i, k := range b.Cols[1].Ints[:n] {
		kg := stream.KeyGroupForHash(o.hashes[i], o.octx.MaxParallelism)
		if !owned.Contains(kg) {
			return fmt.Errorf("key %d of key group %d arrived at a subtask owning %v", k, kg, owned)
		}
		o.backend.SetCurrentKey(binary.BigEndian.AppendUint64(nil, uint64(k)), kg)
		c, _ := o.count.Value()
		o.count.Update(c + 1)
		o.backend.Timers().RegisterProcessingTimeTimer(now + o.cfg.Delay)
	}
	o.st.rows.Add(int64(n))
	return nil
}

func (o *ptcount) OnProcessingTime(now int64, out stream.Collector) error {
	o.st.calls.Add(1)
	res := stream.NewBatch(genSchema, 4)
	err := o.backend.Timers().AdvanceProcessingTime(now, func(key []byte, _ int, ts int64) error {
		c, _ := o.count.Value()
		res.AppendRow(ts, int64(binary.BigEndian.Uint64(key)), fmt.Sprintf("n=%d at %d", c, now))
		return nil
	})
	if err != nil || res.Len() == 0 {
		res.Release()
		return err
	}
	out.Collect(res)
	return nil
}

// ptsrcSource is the "ptsrc" source: it emits, one batch per Poll, the
// keys a test queued in its ptQueue (a row's id is its key), is idle while
// none are queued, and ends once the queue is closed and drained.
type ptsrcSource struct{ q *ptQueue }

type ptQueue struct {
	mu     sync.Mutex
	keys   []int64
	closed bool
}

func (q *ptQueue) push(keys ...int64) {
	q.mu.Lock()
	q.keys = append(q.keys, keys...)
	q.mu.Unlock()
}

func (q *ptQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

func (s *ptsrcSource) Open(context.Context, *stream.OperatorContext) error { return nil }
func (s *ptsrcSource) Close() error                                        { return nil }

func (s *ptsrcSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	s.q.mu.Lock()
	keys, closed := s.q.keys, s.q.closed
	s.q.keys = nil
	s.q.mu.Unlock()
	if len(keys) == 0 {
		if closed {
			return stream.PollEnd, nil
		}
		return stream.PollIdle, nil
	}
	out.Collect(keyBatch(keys...))
	return stream.PollEmitted, nil
}

// keyBatch returns a batch with one row per key, its id the key.
func keyBatch(keys ...int64) *stream.Batch {
	b := stream.NewBatch(genSchema, len(keys))
	for _, k := range keys {
		b.AppendRow(k, k, "")
	}
	return b
}

// sendKeys sends one batch with a row per key on the channel f feeds.
func (f *feed) sendKeys(keys ...int64) {
	f.t.Helper()
	f.send(event{kind: eventBatch, batch: keyBatch(keys...)})
}

// newPtRegistry registers ptcount, ptsrc and the test operators of
// newTestRegistry.
func newPtRegistry(st *testState, pst *ptState, q *ptQueue) *stream.Registry {
	reg := newTestRegistry(st)
	reg.Register(stream.OperatorType{
		Name: "ptcount", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func(config []byte) (stream.Operator, error) {
			o := &ptcount{st: pst}
			return o, stream.DecodeConfig(config, &o.cfg)
		},
	})
	reg.Register(stream.OperatorType{
		Name: "ptsrc", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return &ptsrcSource{q: q}, nil },
	})
	return reg
}

// ptSpec returns the spec of a task running ptcount (delay ms) chained with
// the "collect" sink "sink", fed by one upstream subtask over a hash edge.
func ptSpec(t *testing.T, reg *stream.Registry, delay int64) *TaskSpec {
	t.Helper()
	b := stream.NewBuilder("pt").MaxParallelism(16)
	b.Source("src", "gen", nil).KeyBy("key").Then("pt", "ptcount", ptcountConfig{Delay: delay}).Then("sink", "collect", nil)
	g := plan(t, b, reg)
	return buildSpecs(t, g, [][]int{{0}, {1, 2}}, func(int, int) string { return "local" })[1]
}

// manualClock is a processing-time clock that moves only when the test
// sets it. It counts its reads.
type manualClock struct {
	ms    atomic.Int64
	reads atomic.Int64
}

func newManualClock(ms int64) *manualClock {
	c := &manualClock{}
	c.ms.Store(ms)
	return c
}

func (c *manualClock) now() int64 {
	c.reads.Add(1)
	return c.ms.Load()
}

// set moves the clock to ms and wakes the tasks, which sleep by the wall
// clock's pace, to read it.
func (c *manualClock) set(ms int64, tasks ...*Task) {
	c.ms.Store(ms)
	for _, task := range tasks {
		task.wakeProcessingTime()
	}
}

// ptRow is a row the sink got from ptcount.
type ptRow struct {
	ts, key int64
	what    string // "n=<count> at <now>"
}

func (r ptRow) String() string { return fmt.Sprintf("%d@%d: %s", r.key, r.ts, r.what) }

func ptRows(st *testState) []ptRow {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []ptRow
	for _, r := range st.rows["sink"] {
		out = append(out, ptRow{r.id, r.key, r.name})
	}
	slices.SortFunc(out, func(a, b ptRow) int {
		if a.ts != b.ts {
			return int(a.ts - b.ts)
		}
		return int(a.key - b.key)
	})
	return out
}

// waitRows waits until the sink has got len(want) rows and checks that
// they are want (sorted by timestamp and key).
func waitRows(t *testing.T, what string, st *testState, want ...ptRow) {
	t.Helper()
	waitFor(t, what, func() bool { return len(ptRows(st)) >= len(want) })
	if got := ptRows(st); !slices.Equal(got, want) {
		t.Fatalf("%s: the sink got %v, want %v", what, got, want)
	}
}

// runTask runs task in the background until ctx ends; the returned channel
// gets Run's error.
func runTask(t *testing.T, ctx context.Context, task *Task) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	waitFor(t, "the task to run", func() bool { return running(task) })
	return done
}

// TestProcessingTimeTimers drives ptcount with a manual clock: timers fire
// exactly when the clock reaches them, with no input arriving, with the
// count of their key at that time; OnProcessingTime is called only when a
// timer is due; and timers still pending when the input ends do not fire.
func TestProcessingTimeTimers(t *testing.T) {
	st, pst := newTestState(), &ptState{}
	reg := newPtRegistry(st, pst, nil)
	x := localExchange(t, "local")
	spec := ptSpec(t, reg, 100)
	clock := newManualClock(1000)
	spec.Clock = clock.now
	task, err := NewTask(spec, reg, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := runTask(t, t.Context(), task)
	in := openFeeds(t, x, spec)[0]
	consumed := func(n int64) func() bool {
		return func() bool { return pst.rows.Load() == n }
	}

	in.sendKeys(1, 2, 3) // timers at 1100
	waitFor(t, "3 rows counted", consumed(3))
	clock.set(1050, task)
	in.sendKeys(1, 4) // timers at 1150
	waitFor(t, "5 rows counted", consumed(5))
	clock.set(1100, task)
	waitRows(t, "the timers at 1100", st,
		ptRow{1100, 1, "n=2 at 1100"}, ptRow{1100, 2, "n=1 at 1100"}, ptRow{1100, 3, "n=1 at 1100"})
	clock.set(1200, task)
	waitRows(t, "the timers at 1150", st,
		ptRow{1100, 1, "n=2 at 1100"}, ptRow{1100, 2, "n=1 at 1100"}, ptRow{1100, 3, "n=1 at 1100"},
		ptRow{1150, 1, "n=2 at 1200"}, ptRow{1150, 4, "n=1 at 1200"})
	if n := pst.calls.Load(); n != 2 {
		t.Errorf("OnProcessingTime called %d times, want 2: once per time a timer was due", n)
	}

	// A timer pending at the end of the input does not fire: the task
	// finishes without it.
	in.sendKeys(5) // timer at 1300
	waitFor(t, "6 rows counted", consumed(6))
	in.end()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := ptRows(st); len(got) != 5 {
		t.Fatalf("the sink got %v after the input ended, want the 5 rows of the timers at 1100 and 1150", got)
	}
}

// TestProcessingTimeTimersWakeUp runs ptcount with the wall clock and
// nothing but its own timer to wake the task, in a task fed over a channel
// and chained after a source: each timer fires once its delay has passed,
// and the task reads the clock a few times, not in a loop, while it waits.
func TestProcessingTimeTimersWakeUp(t *testing.T) {
	const delay = 30
	for _, placement := range []string{"input task", "source chain"} {
		t.Run(placement, func(t *testing.T) {
			st, pst, q := newTestState(), &ptState{}, &ptQueue{}
			reg := newPtRegistry(st, pst, q)
			x := localExchange(t, "local")
			var spec *TaskSpec
			if placement == "input task" {
				spec = ptSpec(t, reg, delay)
			} else {
				b := stream.NewBuilder("pt").Parallelism(1).MaxParallelism(16)
				b.Source("src", "ptsrc", nil).Then("pt", "ptcount", ptcountConfig{Delay: delay}).Then("sink", "collect", nil)
				spec = buildSpecs(t, plan(t, b, reg), [][]int{{0, 1, 2}}, func(int, int) string { return "local" })[0]
			}
			var reads atomic.Int64
			spec.Clock = func() int64 {
				reads.Add(1)
				return wallClock()
			}
			task, err := NewTask(spec, reg, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := runTask(t, t.Context(), task)
			var send func(keys ...int64)
			var end func()
			if placement == "input task" {
				in := openFeeds(t, x, spec)[0]
				send, end = in.sendKeys, in.end
			} else {
				send, end = q.push, q.close
			}

			// Two rounds: the first arms a new timer, the second resets it.
			for round, keys := range [][]int64{{1, 2}, {3}} {
				before := len(ptRows(st))
				start := wallClock()
				send(keys...)
				waitFor(t, "the timers to fire", func() bool { return len(ptRows(st)) == before+len(keys) })
				for _, r := range ptRows(st)[before:] {
					var now int64
					if _, err := fmt.Sscanf(r.what, "n=1 at %d", &now); err != nil || now < r.ts || r.ts < start+delay {
						t.Errorf("round %d: row %v: want count 1, fired at or after its timer, which is %d ms after the row was sent at %d or later", round, r, delay, start)
					}
				}
			}
			if n := pst.calls.Load(); n > 3 {
				t.Errorf("OnProcessingTime called %d times for three timers", n)
			}
			if n := reads.Load(); n > 30 {
				t.Errorf("the clock was read %d times while three timers %d ms away were waited for: the task polls", n, delay)
			}
			end()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestProcessingTimeTimersAcrossRestore checkpoints ptcount with a timer
// fired and five pending, kills the run and restores a new one: the
// pending timers fire exactly once after the restore (those due at once
// without waiting for input or a clock change, with the restored counts),
// and the one fired before the checkpoint does not fire again; on the heap
// backend, and on Pebble with full and with incremental snapshots.
func TestProcessingTimeTimersAcrossRestore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend string
		full    bool
	}{
		{"heap", stream.StateBackendHeap, true},
		{"pebble full", stream.StateBackendPebble, true},
		{"pebble incremental", stream.StateBackendPebble, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := localExchange(t, "local")
			local := t.TempDir()
			configure := func(spec *TaskSpec, clock *manualClock) {
				spec.StateBackend, spec.FullSnapshots, spec.LocalStateDir = tc.backend, tc.full, local
				spec.Clock = clock.now
			}

			// The doomed run: key 5's timer fires, then checkpoint 1 is
			// taken with timers at 1100 (keys 1, 2, 3) and 1150 (keys 1, 4).
			st1 := newTestState()
			pst1 := &ptState{}
			reg1 := newPtRegistry(st1, pst1, nil)
			spec1 := ptSpec(t, reg1, 100)
			clock1 := newManualClock(900)
			configure(spec1, clock1)
			r1 := startCk(t, []*TaskSpec{spec1}, reg1, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
			task1 := r1.tasks[0]
			in := openFeeds(t, x, spec1)[0]
			in.sendKeys(5) // timer at 1000
			waitFor(t, "key 5 counted", func() bool { return pst1.rows.Load() == 1 })
			clock1.set(1000, task1)
			waitRows(t, "key 5's timer", st1, ptRow{1000, 5, "n=1 at 1000"})
			in.sendKeys(1, 2, 3)
			waitFor(t, "4 rows counted", func() bool { return pst1.rows.Load() == 4 })
			clock1.set(1050, task1)
			in.sendKeys(1, 4)
			in.barrier(1)
			waitFor(t, "checkpoint 1", func() bool { _, ok := r1.hooks[0].snaps(1); return ok })
			snaps, _ := r1.hooks[0].snaps(1)
			task1.NotifyCheckpointComplete(1)
			r1.stop()
			if err := r1.errs[0]; !errors.Is(err, context.Canceled) {
				t.Fatalf("the killed run: %v", err)
			}
			if got := ptRows(st1); len(got) != 1 {
				t.Fatalf("the killed run's sink got %v, want key 5's row only", got)
			}

			// The restored run starts at 1120: the timers at 1100 are due.
			st2 := newTestState()
			pst2 := &ptState{}
			reg2 := newPtRegistry(st2, pst2, nil)
			spec2 := ptSpec(t, reg2, 100)
			spec2.Attempt++
			clock2 := newManualClock(1120)
			configure(spec2, clock2)
			r2 := startCk(t, []*TaskSpec{spec2}, reg2, stream.ExactlyOnce, 1, func(int) map[string]*stream.OperatorSnapshot { return snaps }, func(*TaskSpec) *Exchange { return x })
			task2 := r2.tasks[0]
			at1100 := []ptRow{{1100, 1, "n=2 at 1120"}, {1100, 2, "n=1 at 1120"}, {1100, 3, "n=1 at 1120"}}
			waitRows(t, "the restored timers at 1100", st2, at1100...)
			clock2.set(1150, task2)
			waitRows(t, "the restored timers at 1150", st2, append(at1100, ptRow{1150, 1, "n=2 at 1150"}, ptRow{1150, 4, "n=1 at 1150"})...)
			in2 := openFeeds(t, x, spec2)[0]
			in2.end()
			if errs := r2.wait(t); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if got := ptRows(st2); len(got) != 5 {
				t.Fatalf("the restored run's sink got %v, want the 5 rows of the timers pending at checkpoint 1", got)
			}
			if n := pst2.calls.Load(); n != 2 {
				t.Errorf("OnProcessingTime called %d times in the restored run, want 2", n)
			}
		})
	}
}

func TestTimerWait(t *testing.T) {
	const maxInt64 = 1<<63 - 1
	for _, tc := range []struct {
		next, now int64
		want      time.Duration
	}{
		{1100, 1000, 100 * time.Millisecond},
		{1000, 1000, 0},
		{900, 1000, 0},
		{1000 + maxTimerWait.Milliseconds() + 1, 1000, maxTimerWait},
		{maxInt64, 0, maxTimerWait},
		{maxInt64, -maxInt64, maxTimerWait}, // the difference overflows
		{-maxInt64, maxInt64, 0},
	} {
		if got := timerWait(tc.next, tc.now); got != tc.want {
			t.Errorf("timerWait(%d, %d) = %v, want %v", tc.next, tc.now, got, tc.want)
		}
	}
}

// ptdeadline is a non-keyed operator with a processing-time deadline of
// its own (stream.ProcessingTimeDeadline): a batch that arrives while it
// has none sets one delay ms later and is held back; when the deadline
// fires it emits one row: id the deadline, key the rows held, name
// "at <now>".
type ptdeadline struct {
	stream.BaseOperator
	st    *ptState
	delay int64
	octx  *stream.OperatorContext
	due   int64
	set   bool
	held  int64
}

var _ stream.ProcessingTimeDeadline = (*ptdeadline)(nil)

func (o *ptdeadline) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.octx = octx
	return nil
}

func (o *ptdeadline) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	n := int64(b.Len())
	o.held += n
	b.Release()
	if !o.set {
		o.due, o.set = o.octx.ProcessingTime()+o.delay, true
	}
	o.st.rows.Add(n)
	return nil
}

func (o *ptdeadline) NextProcessingTime() (int64, bool) { return o.due, o.set }

func (o *ptdeadline) OnProcessingTime(now int64, out stream.Collector) error {
	o.st.calls.Add(1)
	if !o.set || now < o.due {
		return fmt.Errorf("called at %d with deadline %d (set %v)", now, o.due, o.set)
	}
	res := stream.NewBatch(genSchema, 1)
	res.AppendRow(o.due, o.held, fmt.Sprintf("at %d", now))
	o.set, o.held = false, 0
	out.Collect(res)
	return nil
}

// TestProcessingTimeDeadline drives a non-keyed operator's own deadline
// with a manual clock: it fires when the clock reaches it, with no input
// arriving, once per deadline; with no deadline set the clock moving does
// not call it; a deadline pending at the end of input does not fire.
func TestProcessingTimeDeadline(t *testing.T) {
	st, pst := newTestState(), &ptState{}
	reg := newTestRegistry(st)
	reg.Register(stream.OperatorType{
		Name: "ptdeadline", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func([]byte) (stream.Operator, error) { return &ptdeadline{st: pst, delay: 100}, nil },
	})
	b := stream.NewBuilder("pt").MaxParallelism(16)
	b.Source("src", "gen", nil).KeyBy("key").Then("pt", "ptdeadline", nil).Then("sink", "collect", nil)
	spec := buildSpecs(t, plan(t, b, reg), [][]int{{0}, {1, 2}}, func(int, int) string { return "local" })[1]
	x := localExchange(t, "local")
	clock := newManualClock(1000)
	spec.Clock = clock.now
	task, err := NewTask(spec, reg, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := runTask(t, t.Context(), task)
	in := openFeeds(t, x, spec)[0]
	consumed := func(n int64) func() bool {
		return func() bool { return pst.rows.Load() == n }
	}

	in.sendKeys(1, 2) // deadline 1100
	waitFor(t, "2 rows", consumed(2))
	clock.set(1050, task)
	in.sendKeys(3) // held; the deadline stays
	waitFor(t, "3 rows", consumed(3))
	clock.set(1100, task)
	waitRows(t, "the deadline at 1100", st, ptRow{1100, 3, "at 1100"})
	// Nothing pending: moving the clock calls nothing.
	clock.set(5000, task)
	in.sendKeys(4) // deadline 5100
	waitFor(t, "4 rows", consumed(4))
	clock.set(5200, task)
	waitRows(t, "the deadline at 5100", st, ptRow{1100, 3, "at 1100"}, ptRow{5100, 1, "at 5200"})
	if n := pst.calls.Load(); n != 2 {
		t.Errorf("OnProcessingTime called %d times, want 2: once per deadline", n)
	}
	in.sendKeys(5) // deadline 5300, never reached
	waitFor(t, "5 rows", consumed(5))
	in.end()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := ptRows(st); len(got) != 2 {
		t.Fatalf("the sink got %v after the input ended, want the 2 rows of the deadlines", got)
	}
}
