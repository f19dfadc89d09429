package taskmanager

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/statebackend/backends"
)

const (
	running  = weirpb.TaskState_TASK_STATE_RUNNING
	finished = weirpb.TaskState_TASK_STATE_FINISHED
	canceled = weirpb.TaskState_TASK_STATE_CANCELED
	failed   = weirpb.TaskState_TASK_STATE_FAILED
)

// waitOpened waits until n operator instances have opened: a task reports
// RUNNING before it opens its operators.
func waitOpened(t *testing.T, st *testState, n int64) {
	t.Helper()
	waitFor(t, "operators to open", func() bool { return st.opened.Load() == n })
}

// sumTo returns 0+1+…+(n-1), the id sum of n generated rows.
func sumTo(n int64) int64 { return n * (n - 1) / 2 }

func TestRegisterRetriesUntilJobManagerAppears(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before arranges the jobmanager's absence and waits until the
		// taskmanager has met it.
		before func(t *testing.T, jm *jobmanagertest.Fake, h *harness)
	}{
		{
			// The TCP connection waits in the backlog until Serve.
			name:   "listening but not serving",
			before: func(*testing.T, *jobmanagertest.Fake, *harness) {},
		},
		{
			name: "nothing listening",
			before: func(t *testing.T, _ *jobmanagertest.Fake, h *harness) {
				waitFor(t, "a failed registration attempt", func() bool {
					return h.logs.count("cannot register with the jobmanager") > 0
				})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jm := jobmanagertest.New(t)
			if tc.name == "nothing listening" {
				jm.CloseListener(t)
			}
			h := startTaskManager(t, jm.Addr(), newTestRegistry(newTestState()), nil)
			tc.before(t, jm, h)
			if n := len(jm.Registrations()); n != 0 {
				t.Fatalf("%d registrations before the jobmanager served", n)
			}
			jm.Serve(t)
			waitFor(t, "registration", func() bool { return len(jm.Registrations()) > 0 })
			reg := jm.Registrations()[0]
			if reg.GetTaskmanagerId() != testTaskManagerID || reg.GetAddress() != h.tm.Addr() || reg.GetSlots() != 3 {
				t.Errorf("registered id %q address %q slots %d; want %q %q 3",
					reg.GetTaskmanagerId(), reg.GetAddress(), reg.GetSlots(), testTaskManagerID, h.tm.Addr())
			}
			if want := []string{"count", "gen", "hold"}; !slices.Equal(reg.GetOperatorTypes(), want) {
				t.Errorf("registered operator types %v, want %v", reg.GetOperatorTypes(), want)
			}
			// Heartbeats follow, at the interval the jobmanager asked for.
			waitFor(t, "heartbeats", func() bool { return jm.NumHeartbeats() >= 3 })
			for _, hb := range jm.Heartbeats() {
				if hb.GetTaskmanagerId() != testTaskManagerID {
					t.Fatalf("heartbeat from %q, want %q", hb.GetTaskmanagerId(), testTaskManagerID)
				}
			}
			if n := len(jm.Registrations()); n != 1 {
				t.Errorf("%d registrations, want 1", n)
			}
		})
	}
}

func TestRegisterAdvertisesAddress(t *testing.T) {
	jm := jobmanagertest.Start(t)
	h := startTaskManager(t, jm.Addr(), newTestRegistry(newTestState()), func(c *Config) {
		c.AdvertiseAddress = "tm-1.example:7000"
	})
	if h.tm.Addr() != "tm-1.example:7000" {
		t.Fatalf("Addr() = %q, want the advertised address", h.tm.Addr())
	}
	waitFor(t, "registration", func() bool { return len(jm.Registrations()) > 0 })
	if got := jm.Registrations()[0].GetAddress(); got != "tm-1.example:7000" {
		t.Fatalf("registered address %q, want tm-1.example:7000", got)
	}
}

func TestChainedTaskFinishes(t *testing.T) {
	const rows = 10_000
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	d := chainedTask("job-chain", 1, genJSON(rows, false), "count", "")
	h.mustSubmit(t, d)
	fin := jm.WaitReported(t, d.GetId(), finished)
	if got := jm.StatesOf(d.GetId()); !slices.Equal(got, []weirpb.TaskState{running, finished}) {
		t.Errorf("reported states %v, want [RUNNING FINISHED]", got)
	}
	// The sink is the chain's last operator and emits nothing.
	if fin.GetRecordsIn() != rows || fin.GetRecordsOut() != 0 || fin.GetError() != "" {
		t.Errorf("FINISHED status in=%d out=%d error=%q; want %d, 0, none", fin.GetRecordsIn(), fin.GetRecordsOut(), fin.GetError(), rows)
	}
	if n, sum := st.sinkRows.Load(), st.sinkIDSum.Load(); n != rows || sum != sumTo(rows) {
		t.Errorf("sink saw %d rows with id sum %d; want %d and %d", n, sum, rows, sumTo(rows))
	}
	if o, c := st.opened.Load(), st.closed.Load(); o != 2 || c != 2 {
		t.Errorf("opened %d and closed %d operators; want 2 and 2", o, c)
	}
	// A heartbeat carries the final state; once it has, the taskmanager
	// forgets the task and later heartbeats omit it.
	waitFor(t, "a heartbeat reporting FINISHED followed by one without the task", func() bool {
		hbs := jm.Heartbeats()
		for i, hb := range hbs {
			if st := heartbeatStatus(hb, d.GetId()); st != nil && st.GetState() == finished {
				return i+1 < len(hbs) && heartbeatStatus(hbs[len(hbs)-1], d.GetId()) == nil
			}
		}
		return false
	})
}

func TestLocalExchangeBetweenTwoTasks(t *testing.T) {
	const rows = 5000
	for _, sinkFirst := range []bool{false, true} {
		name := "source first"
		if sinkFirst {
			name = "sink first"
		}
		t.Run(name, func(t *testing.T) {
			jm := jobmanagertest.Start(t)
			st := newTestState()
			h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

			// The output target is this taskmanager: an in-memory channel.
			src, sink := exchangeTasks("job-x", 4, rows, h.tm.ExchangeAddr())
			order := []*weirpb.TaskDeployment{src, sink}
			if sinkFirst {
				order = []*weirpb.TaskDeployment{sink, src}
			}
			for _, d := range order {
				h.mustSubmit(t, d)
			}
			srcFin := jm.WaitReported(t, src.GetId(), finished)
			sinkFin := jm.WaitReported(t, sink.GetId(), finished)
			if srcFin.GetRecordsIn() != rows || srcFin.GetRecordsOut() != rows {
				t.Errorf("source task in=%d out=%d, want %d and %d", srcFin.GetRecordsIn(), srcFin.GetRecordsOut(), rows, rows)
			}
			if sinkFin.GetRecordsIn() != rows || sinkFin.GetRecordsOut() != 0 {
				t.Errorf("sink task in=%d out=%d, want %d and 0", sinkFin.GetRecordsIn(), sinkFin.GetRecordsOut(), rows)
			}
			if n, sum := st.sinkRows.Load(), st.sinkIDSum.Load(); n != rows || sum != sumTo(rows) {
				t.Errorf("sink saw %d rows with id sum %d; want %d and %d", n, sum, rows, sumTo(rows))
			}
			for _, d := range order {
				if got := jm.StatesOf(d.GetId()); !slices.Equal(got, []weirpb.TaskState{running, finished}) {
					t.Errorf("task %s reported %v, want [RUNNING FINISHED]", d.GetTaskName(), got)
				}
			}
		})
	}
}

func TestFailingOperatorReportsFailed(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	d := chainedTask("job-fail", 1, genJSON(10_000, false), "count", `{"failAt": 2}`)
	h.mustSubmit(t, d)
	f := jm.WaitReported(t, d.GetId(), failed)
	if !strings.Contains(f.GetError(), `operator "sink"`) || !strings.Contains(f.GetError(), "failing on purpose") {
		t.Errorf("FAILED error %q does not name operator \"sink\" and its error", f.GetError())
	}
	if got := jm.StatesOf(d.GetId()); !slices.Equal(got, []weirpb.TaskState{running, failed}) {
		t.Errorf("reported states %v, want [RUNNING FAILED]", got)
	}
	if o, c := st.opened.Load(), st.closed.Load(); o != 2 || c != 2 {
		t.Errorf("opened %d and closed %d operators; want 2 and 2", o, c)
	}
}

func TestCancelTask(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	d := chainedTask("job-cancel", 2, genJSON(1000, true), "count", "")
	h.mustSubmit(t, d)
	jm.WaitReported(t, d.GetId(), running)
	waitFor(t, "the sink to see every row", func() bool { return st.sinkRows.Load() == 1000 })

	// Cancelling another attempt, or a task that does not exist, is a no-op.
	stale := &weirpb.ExecutionID{JobId: d.GetId().GetJobId(), VertexId: 0, Subtask: 0, Attempt: 1}
	h.cancelTask(t, stale)
	h.cancelTask(t, &weirpb.ExecutionID{JobId: "no-such-job", Attempt: 2})
	hb := jm.NumHeartbeats()
	waitFor(t, "two more heartbeats", func() bool { return jm.NumHeartbeats() >= hb+2 })
	// The last heartbeat was built after the sink saw every row.
	if s := heartbeatStatus(jm.Heartbeats()[jm.NumHeartbeats()-1], d.GetId()); s.GetState() != running || s.GetRecordsIn() != 1000 {
		t.Fatalf("after cancelling a stale attempt the heartbeat reports %v with %d records in, want RUNNING with 1000", s.GetState(), s.GetRecordsIn())
	}

	h.cancelTask(t, d.GetId())
	jm.WaitReported(t, d.GetId(), canceled)
	if got := jm.StatesOf(d.GetId()); !slices.Equal(got, []weirpb.TaskState{running, canceled}) {
		t.Errorf("reported states %v, want [RUNNING CANCELED]", got)
	}
	waitFor(t, "operators closed", func() bool { return st.closed.Load() == 2 })
}

func TestSubmitInvalidDeployment(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)
	waitFor(t, "registration", func() bool { return len(jm.Registrations()) > 0 })

	noChain := chainedTask("job-bad", 1, genJSON(10, false), "count", "")
	noChain.Chain = nil
	badSchema := chainedTask("job-bad", 1, genJSON(10, false), "count", "")
	badSchema.Chain[0].Vertex.OutSchema.Fields[1].Name = "id"
	for _, tc := range []struct {
		name    string
		d       *weirpb.TaskDeployment
		wantMsg string
	}{
		{"unknown sink type", chainedTask("job-bad", 1, genJSON(10, false), "no-such-sink", ""), `"no-such-sink"`},
		{"unknown source type", func() *weirpb.TaskDeployment {
			d := chainedTask("job-bad", 1, genJSON(10, false), "count", "")
			d.Chain[0].Vertex.Type = "no-such-source"
			return d
		}(), `"no-such-source"`},
		{"sink type used as source", func() *weirpb.TaskDeployment {
			d := chainedTask("job-bad", 1, genJSON(10, false), "count", "")
			d.Chain[0].Vertex.Type = "count"
			return d
		}(), `"count"`},
		{"bad operator config", chainedTask("job-bad", 1, `{"rowz": 1}`, "count", ""), "rowz"},
		{"no operators", noChain, "no operators"},
		{"duplicate schema field", badSchema, `"id"`},
		{"no deployment", nil, "no task deployment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.submit(t, tc.d)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("SubmitTask: %v; want InvalidArgument mentioning %s", err, tc.wantMsg)
			}
		})
	}
	// Nothing ran: no operator opened, no state reported, and a heartbeat
	// sent after the submissions lists no task.
	hb := jm.NumHeartbeats()
	waitFor(t, "a heartbeat", func() bool { return jm.NumHeartbeats() > hb })
	if tasks := jm.Heartbeats()[hb].GetTasks(); len(tasks) != 0 {
		t.Errorf("heartbeat lists tasks %v, want none", tasks)
	}
	if n := jm.NumUpdates(); n != 0 {
		t.Errorf("%d task state updates, want none", n)
	}
	if n := st.opened.Load(); n != 0 {
		t.Errorf("%d operators opened, want none", n)
	}
}

func TestSubmitSameTaskTwice(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	first := chainedTask("job-dup", 5, genJSON(100, true), "count", "")
	h.mustSubmit(t, first)
	jm.WaitReported(t, first.GetId(), running)
	waitOpened(t, st, 2)

	for _, attempt := range []int64{5, 4} {
		d := chainedTask("job-dup", attempt, genJSON(100, true), "count", "")
		if err := h.submit(t, d); status.Code(err) != codes.AlreadyExists {
			t.Errorf("submitting attempt %d while attempt 5 runs: %v; want AlreadyExists", attempt, err)
		}
	}

	// A newer attempt replaces the running one.
	second := chainedTask("job-dup", 6, genJSON(100, true), "count", "")
	h.mustSubmit(t, second)
	jm.WaitReported(t, first.GetId(), canceled)
	jm.WaitReported(t, second.GetId(), running)
	if got := jm.StatesOf(first.GetId()); !slices.Equal(got, []weirpb.TaskState{running, canceled}) {
		t.Errorf("attempt 5 reported %v, want [RUNNING CANCELED]", got)
	}
	waitFor(t, "attempt 5's operators to close", func() bool { return st.closed.Load() == 2 })
	waitOpened(t, st, 4)

	// The replaced attempt no longer blocks anything; cancelling it again
	// does not touch attempt 6.
	h.cancelTask(t, first.GetId())
	h.cancelTask(t, second.GetId())
	jm.WaitReported(t, second.GetId(), canceled)
	if got := jm.StatesOf(second.GetId()); !slices.Equal(got, []weirpb.TaskState{running, canceled}) {
		t.Errorf("attempt 6 reported %v, want [RUNNING CANCELED]", got)
	}
}

func TestReregisterCancelsTasks(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	d := chainedTask("job-rereg", 1, genJSON(100, true), "count", "")
	h.mustSubmit(t, d)
	jm.WaitReported(t, d.GetId(), running)
	waitOpened(t, st, 2)
	// Ready does not wait for the registration, which may still be in
	// flight while the task already runs.
	waitFor(t, "the registration", func() bool { return len(jm.Registrations()) >= 1 })
	if n := len(jm.Registrations()); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}

	jm.AskReregister(1)
	jm.WaitReported(t, d.GetId(), canceled)
	waitFor(t, "a second registration", func() bool { return len(jm.Registrations()) == 2 })
	waitFor(t, "operators closed", func() bool { return st.closed.Load() == 2 })

	// Registered again, the taskmanager takes new work.
	next := chainedTask("job-rereg", 2, genJSON(500, false), "count", "")
	h.mustSubmit(t, next)
	jm.WaitReported(t, next.GetId(), finished)
	if n := st.sinkRows.Load(); n != 600 {
		t.Errorf("sinks saw %d rows, want 100+500", n)
	}
}

func TestJobManagerOutageCancelsTasks(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	d := chainedTask("job-outage", 1, genJSON(100, true), "count", "")
	h.mustSubmit(t, d)
	jm.WaitReported(t, d.GetId(), running)
	waitOpened(t, st, 2)
	waitFor(t, "a heartbeat", func() bool { return jm.NumHeartbeats() > 0 })

	jm.Stop()
	// Past the heartbeat timeout the taskmanager gives its tasks up, since
	// the jobmanager has declared them lost.
	waitFor(t, "the task's operators to close", func() bool { return st.closed.Load() == 2 })
	if n := h.logs.count("unreachable for longer than the heartbeat timeout"); n == 0 {
		t.Error("no log of the heartbeat timeout")
	}
	waitFor(t, "a failed registration attempt", func() bool {
		return h.logs.count("cannot register with the jobmanager") > 0
	})
	if n := len(jm.Registrations()); n != 1 {
		t.Fatalf("%d registrations while the jobmanager was down, want the 1 from before", n)
	}

	hbBefore := jm.NumHeartbeats()
	jm.Serve(t)
	waitFor(t, "registration with the returned jobmanager", func() bool { return len(jm.Registrations()) == 2 })
	// The CANCELED report was lost with the jobmanager; heartbeats carry it.
	waitFor(t, "a heartbeat reporting the task CANCELED", func() bool {
		for _, hb := range jm.Heartbeats()[hbBefore:] {
			if s := heartbeatStatus(hb, d.GetId()); s.GetState() == canceled {
				return true
			}
		}
		return false
	})
}

func TestRunStopsPromptly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serveJM bool
	}{
		{"with a running task", true},
		{"while registering", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			jm := jobmanagertest.New(t)
			st := newTestState()
			if tc.serveJM {
				jm.Serve(t)
			} else {
				jm.CloseListener(t)
			}
			h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)
			d := chainedTask("job-stop", 1, genJSON(100, true), "count", "")
			if tc.serveJM {
				h.mustSubmit(t, d)
				jm.WaitReported(t, d.GetId(), running)
				waitOpened(t, st, 2)
			} else {
				waitFor(t, "a failed registration attempt", func() bool {
					return h.logs.count("cannot register with the jobmanager") > 0
				})
			}

			start := time.Now()
			if err := h.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("Run returned %v after cancel", time.Since(start))
			if o, c := st.opened.Load(), st.closed.Load(); o != c {
				t.Errorf("opened %d operators but closed %d", o, c)
			}
			if tc.serveJM {
				// Run waits for its tasks, which report before they end.
				if jm.Reported(d.GetId(), canceled) == nil {
					t.Errorf("task reported %v before Run returned, want CANCELED last", jm.StatesOf(d.GetId()))
				}
			}
			h.conn.Close()
			jm.Stop()
			goleak.VerifyNone(t, ignore)
		})
	}
}

// A task submitted while Run shuts down must be refused: Run has already
// cancelled every task and waits for them, so a task started now would
// never be cancelled and Run would never return.
func TestSubmitDuringShutdownIsRefused(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)

	d := chainedTask("job-shutdown", 1, genJSON(100, true), "hold", "")
	h.mustSubmit(t, d)
	jm.WaitReported(t, d.GetId(), running)
	waitOpened(t, st, 2)

	h.cancel()
	select {
	case <-st.closeEntered: // Run has cancelled its tasks and waits for them
	case <-time.After(waitTimeout):
		t.Fatal("the task was not cancelled")
	}
	late := chainedTask("job-late", 1, genJSON(100, true), "count", "")
	err := h.submit(t, late)
	close(st.releaseClose)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("SubmitTask during shutdown: %v; want Unavailable", err)
	}
	if err := h.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunFailsWhenAddressTaken(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	cfg := DefaultConfig()
	cfg.RPCAddress = lis.Addr().String()
	tm, err := New(cfg, newTestRegistry(newTestState()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = tm.Run(ctx)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "listen" || !strings.Contains(err.Error(), lis.Addr().String()) {
		t.Fatalf("Run on a taken address: %v; want a listen error naming %s", err, lis.Addr())
	}
}

// A new attempt of a subtask whose stale attempt is still running here
// waits until the stale one has ended before it opens anything: both use
// the subtask's local state directory, which the stale one removes as it
// closes.
func TestNewAttemptWaitsForStaleOne(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), func(c *Config) { c.Slots = 2 })

	first := chainedTask("job-attempts", 1, genJSON(100, true), "hold", "")
	h.mustSubmit(t, first)
	jm.WaitReported(t, first.GetId(), running)
	waitOpened(t, st, 2)
	h.tm.mu.Lock()
	for _, rt := range h.tm.mu.tasks { // every task gets the shared block cache
		if c, ok := rt.spec.StateCache.(*backends.SharedCache); !ok || c == nil || c != h.tm.stateCache {
			t.Errorf("task %s has state cache %v, want the taskmanager's shared one", rt.name, rt.spec.StateCache)
		}
	}
	h.tm.mu.Unlock()

	second := chainedTask("job-attempts", 2, genJSON(100, true), "count", "")
	h.mustSubmit(t, second) // cancels the first, which blocks in Close
	select {
	case <-st.closeEntered:
	case <-time.After(waitTimeout):
		t.Fatal("the stale attempt was not cancelled")
	}
	jm.WaitReported(t, second.GetId(), running)
	// While the stale attempt is closing, the new one opens nothing. (This
	// watches for a while: an attempt that did not wait opens at once.)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); <-tick.C {
		if n := st.opened.Load(); n != 2 {
			t.Fatalf("%d operators opened while the stale attempt was still closing; want 2 (the stale attempt's)", n)
		}
	}
	close(st.releaseClose)
	jm.WaitReported(t, first.GetId(), canceled)
	waitOpened(t, st, 4)
	h.cancelTask(t, second.GetId())
	jm.WaitReported(t, second.GetId(), canceled)
}

// TestPrivateStateDir: without a configured state directory the
// taskmanager keeps local state in a new directory only its user can
// open, and removes it when it stops.
func TestPrivateStateDir(t *testing.T) {
	jm := jobmanagertest.Start(t)
	h := startTaskManager(t, jm.Addr(), newTestRegistry(newTestState()), nil)
	dir := h.tm.cfg.StateDir // set by Run before Ready
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("state directory %s has mode %v, want 0700", dir, perm)
	}
	h.stop(t)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("state directory %s left after the taskmanager stopped: %v", dir, err)
	}
}
