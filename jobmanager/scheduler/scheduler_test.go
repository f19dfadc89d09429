package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// coreHarness drives a core with a fake clock and collects its actions.
type coreHarness struct {
	t   *testing.T
	c   *Scheduler
	now time.Time
}

func newCoreHarness(t *testing.T) *coreHarness {
	return &coreHarness{t: t, c: New(Config{HeartbeatTimeout: 10 * time.Second, CancelTimeout: 10 * time.Second}),
		now: time.Unix(1_700_000_000, 0)}
}

func (h *coreHarness) advance(d time.Duration) []Action {
	h.now = h.now.Add(d)
	return h.c.Tick(h.now)
}

func (h *coreHarness) register(id string, slots int) []Action {
	h.t.Helper()
	acts, err := h.c.Register(Registration{ID: id, Instance: id + "-1", Addr: id + ":1", Slots: slots}, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return acts
}

func (h *coreHarness) submit(id string, srcPar, winPar int, wait time.Duration) []Action {
	h.t.Helper()
	g := planned(h.t, pipeline(h.t, srcPar, winPar), testRegistry(h.t))
	acts, err := h.c.Submit(id, g, JobOptions{SlotWait: wait}, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return acts
}

// ackAll acknowledges deploys as successful and returns the follow-up
// actions.
func (h *coreHarness) ackAll(acts []Action) []Action {
	var out []Action
	for _, a := range acts {
		if d, ok := a.(DeployAction); ok {
			out = append(out, h.c.DeployDone(d, nil, h.now)...)
		}
	}
	return out
}

// reportAll reports state s for every deploy in acts.
func (h *coreHarness) reportAll(acts []Action, s TaskState) []Action {
	var out []Action
	for _, a := range acts {
		if d, ok := a.(DeployAction); ok {
			out = append(out, h.c.Report(d.TaskManager, TaskReport{JobID: d.JobID, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt, State: s}, h.now)...)
		}
	}
	return out
}

func (h *coreHarness) jobState(id string) JobState { return h.c.jobs[id].state }

func count[T Action](acts []Action) int {
	n := 0
	for _, a := range acts {
		if _, ok := a.(T); ok {
			n++
		}
	}
	return n
}

func TestCoreLifecycle(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.register("b", 2)
	deploys := h.submit("j", 2, 4, time.Minute)
	if n := count[DeployAction](deploys); n != 6 {
		t.Fatalf("%d deploys, want 6", n)
	}
	if s := h.jobState("j"); s != JobScheduled {
		t.Fatalf("state %s", s)
	}
	h.ackAll(deploys)
	h.reportAll(deploys, TaskRunning)
	if s := h.jobState("j"); s != JobRunning {
		t.Fatalf("state %s, want RUNNING", s)
	}
	if v := h.c.TaskManagers(); v[0].Free != 0 || v[1].Free != 0 {
		t.Fatalf("slots not taken: %+v", v)
	}
	h.reportAll(deploys, TaskFinished)
	if s := h.jobState("j"); s != JobFinished {
		t.Fatalf("state %s, want FINISHED", s)
	}
	if v := h.c.TaskManagers(); v[0].Free != 2 || v[1].Free != 2 {
		t.Fatalf("slots not freed: %+v", v)
	}
	if _, err := h.c.Cancel("j", h.now); !errors.Is(err, ErrJobNotCancelable) {
		t.Fatalf("cancel finished job: %v, want ErrJobNotCancelable", err)
	}
}

func TestCoreStaleReportsIgnored(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := h.submit("j", 1, 1, time.Minute)
	d := deploys[0].(DeployAction)
	for _, r := range []TaskReport{
		{JobID: "j", Vertex: d.Task.Head, Subtask: 0, Attempt: 2, State: TaskFailed, Err: "old"}, // other attempt
		{JobID: "nope", Vertex: 0, Subtask: 0, Attempt: 1, State: TaskFailed},                    // unknown job
		{JobID: "j", Vertex: d.Task.Head, Subtask: 7, Attempt: 1, State: TaskFailed},             // unknown subtask
	} {
		h.c.Report("a", r, h.now)
	}
	h.c.Report("zzz", TaskReport{JobID: "j", Vertex: d.Task.Head, Attempt: 1, State: TaskFailed}, h.now) // unknown taskmanager
	if h.c.staleReports != 4 {
		t.Errorf("staleReports = %d, want 4", h.c.staleReports)
	}
	if s := h.jobState("j"); s != JobScheduled {
		t.Errorf("state %s, want SCHEDULED", s)
	}
}

func TestCoreHeartbeatTimeout(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.register("b", 2)
	deploys := h.submit("j", 2, 4, time.Minute)
	h.ackAll(deploys)
	h.reportAll(deploys, TaskRunning)

	h.advance(9 * time.Second)
	if rereg, _ := h.c.Heartbeat("b", "b-1", nil, h.now); rereg {
		t.Fatal("b told to re-register")
	}
	if acts := h.advance(999 * time.Millisecond); len(acts) != 0 || h.jobState("j") != JobRunning {
		t.Fatalf("lost too early: %v %s", acts, h.jobState("j"))
	}
	acts := h.advance(time.Millisecond) // a: 10s silent
	if s := h.jobState("j"); s != JobFailing {
		t.Fatalf("state %s, want FAILING", s)
	}
	// Only b's three executions need cancelling; a's are gone.
	if n := count[CancelAction](acts); n != 3 {
		t.Fatalf("%d cancels, want 3: %v", n, acts)
	}
	for _, a := range acts {
		if ca := a.(CancelAction); ca.TaskManager != "b" {
			t.Errorf("cancel sent to %s", ca.TaskManager)
		}
	}
	if err := h.c.jobs["j"].err; !strings.Contains(err, "on taskmanager a failed: taskmanager a at a:1 lost: no heartbeat for 10s") {
		t.Errorf("job error %q", err)
	}
	if rereg, _ := h.c.Heartbeat("a", "a-1", nil, h.now); !rereg {
		t.Error("lost taskmanager not told to re-register")
	}
	for _, a := range acts {
		ca := a.(CancelAction)
		h.c.Report("b", TaskReport{JobID: "j", Vertex: ca.Vertex, Subtask: ca.Subtask, Attempt: 1, State: TaskCanceled}, h.now)
	}
	if s := h.jobState("j"); s != JobFailed {
		t.Fatalf("state %s, want FAILED", s)
	}
	if v := h.c.TaskManagers(); v[0].Live || !v[1].Live || v[1].Free != 2 {
		t.Fatalf("taskmanagers %+v", v)
	}
}

func TestCoreReregistrationReplaces(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 1)
	deploys := h.submit("j", 1, 1, time.Minute)
	h.ackAll(deploys)
	h.reportAll(deploys, TaskRunning)
	h.register("a", 1)
	if s := h.jobState("j"); s != JobFailed {
		t.Fatalf("state %s, want FAILED", s)
	}
	if err := h.c.jobs["j"].err; !strings.Contains(err, "re-registered") {
		t.Errorf("error %q", err)
	}
	// A late report from the old incarnation is stale.
	h.reportAll(deploys, TaskFinished)
	if h.c.staleReports != 2 {
		t.Errorf("staleReports = %d, want 2", h.c.staleReports)
	}
	if v := h.c.TaskManagers(); v[0].Free != 1 {
		t.Errorf("new registration has %d free slots", v[0].Free)
	}
}

func TestCoreSlotWait(t *testing.T) {
	h := newCoreHarness(t)
	h.c.cfg.HeartbeatTimeout = time.Hour
	h.register("a", 2)
	if acts := h.submit("j", 2, 4, 30*time.Second); len(acts) != 0 {
		t.Fatalf("deployed without slots: %v", acts)
	}
	h.submit("k", 2, 4, 40*time.Second)
	h.advance(29 * time.Second)
	acts := h.register("b", 2) // j fits now; k still waits
	if n := count[DeployAction](acts); n != 6 {
		t.Fatalf("%d deploys after registration, want 6", n)
	}
	if h.jobState("j") != JobScheduled || h.c.jobs["j"].slots == nil || h.c.jobs["k"].slots != nil {
		t.Fatal("wrong job scheduled")
	}
	h.advance(11 * time.Second)
	if s, err := h.jobState("k"), h.c.jobs["k"].err; s != JobFailed ||
		err != "not enough free slots: job needs 4, cluster has 0 free across 2 taskmanager(s); start more taskmanagers or lower parallelism" {
		t.Fatalf("k: %s %q", s, err)
	}
}

func TestCoreCancel(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	deploys := h.submit("j", 2, 2, time.Minute)
	// One deploy acknowledged, the other still in flight.
	first := deploys[0].(DeployAction)
	h.c.DeployDone(first, nil, h.now)
	acts, err := h.c.Cancel("j", h.now)
	if err != nil {
		t.Fatal(err)
	}
	if n := count[CancelAction](acts); n != 1 {
		t.Fatalf("%d cancels, want 1 (only the acknowledged deploy)", n)
	}
	if acts, err := h.c.Cancel("j", h.now); err != nil || len(acts) != 0 {
		t.Fatalf("second cancel: %v %v", acts, err)
	}
	// The in-flight deploy completes: now it is cancelled.
	late := h.c.DeployDone(deploys[1].(DeployAction), nil, h.now)
	if n := count[CancelAction](late); n != 1 {
		t.Fatalf("late ack gave %v", late)
	}
	h.c.Report("a", TaskReport{JobID: "j", Vertex: first.Task.Head, Attempt: 1, State: TaskCanceled}, h.now)
	if s := h.jobState("j"); s != JobCanceling {
		t.Fatalf("state %s, want CANCELING", s)
	}
	// The second task never confirms: the cancel timeout ends the job.
	h.advance(10 * time.Second)
	if s := h.jobState("j"); s != JobCanceled {
		t.Fatalf("state %s, want CANCELED", s)
	}
	if _, err := h.c.Cancel("nope", h.now); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("cancel of unknown job: %v, want ErrJobNotFound", err)
	}
}

func TestCoreDeployFailure(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	deploys := h.submit("j", 2, 2, time.Minute)
	h.c.DeployDone(deploys[0].(DeployAction), nil, h.now)
	acts := h.c.DeployDone(deploys[1].(DeployAction), errString("connection refused"), h.now)
	// The failed attempt itself is cancelled (it may have reached the
	// taskmanager), and so is the deployed one.
	cancels := actionsOf[CancelAction](acts)
	if len(cancels) != 2 || !cancels[0].Stale || cancels[0].Subtask != 1 || cancels[0].Attempt != 1 ||
		cancels[1].Stale || cancels[1].Subtask != 0 {
		t.Fatalf("cancels %+v; want the failed attempt (stale) and the deployed one", cancels)
	}
	if err := h.c.jobs["j"].err; !strings.Contains(err, "task src -> map (2/2) on taskmanager a failed: deploying to a:1 failed: connection refused") {
		t.Fatalf("error %q", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// An unknown job id is repeated in the error only up to maxQuotedID bytes.
func TestNotFoundBoundsTheID(t *testing.T) {
	c := New(Config{})
	long := strings.Repeat("x", 10_000)
	_, err := c.Job(long)
	if !errors.Is(err, ErrJobNotFound) || len(err.Error()) > 200 || !strings.Contains(err.Error(), "10000 bytes") {
		t.Fatalf("error %.300q (%d bytes)", err, len(err.Error()))
	}
	if _, err := c.Job("abc"); !strings.Contains(err.Error(), `"abc"`) {
		t.Fatalf("short id: %v", err)
	}
}
