package jobmanager

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
)

// coreHarness drives a core with a fake clock and collects its actions.
type coreHarness struct {
	t   *testing.T
	c   *core
	now time.Time
}

func newCoreHarness(t *testing.T) *coreHarness {
	return &coreHarness{t: t, c: newCore(coreConfig{HeartbeatTimeout: 10 * time.Second, CancelTimeout: 10 * time.Second}),
		now: time.Unix(1_700_000_000, 0)}
}

func (h *coreHarness) advance(d time.Duration) []action {
	h.now = h.now.Add(d)
	return h.c.tick(h.now)
}

func (h *coreHarness) register(id string, slots int) []action {
	h.t.Helper()
	acts, err := h.c.register(tmRegistration{ID: id, Instance: id + "-1", Addr: id + ":1", Slots: slots}, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return acts
}

func (h *coreHarness) submit(id string, srcPar, winPar int, wait time.Duration) []action {
	h.t.Helper()
	g := planned(h.t, pipeline(h.t, srcPar, winPar), testRegistry(h.t))
	acts, err := h.c.submit(id, g, jobOptions{SlotWait: wait}, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return acts
}

// ackAll acknowledges deploys as successful and returns the follow-up
// actions.
func (h *coreHarness) ackAll(acts []action) []action {
	var out []action
	for _, a := range acts {
		if d, ok := a.(deployAction); ok {
			out = append(out, h.c.deployDone(d, nil, h.now)...)
		}
	}
	return out
}

// reportAll reports state s for every deploy in acts.
func (h *coreHarness) reportAll(acts []action, s taskState) []action {
	var out []action
	for _, a := range acts {
		if d, ok := a.(deployAction); ok {
			out = append(out, h.c.report(d.TaskManager, taskReport{JobID: d.JobID, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt, State: s}, h.now)...)
		}
	}
	return out
}

func (h *coreHarness) jobState(id string) jobState { return h.c.jobs[id].state }

func count[T action](acts []action) int {
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
	if n := count[deployAction](deploys); n != 6 {
		t.Fatalf("%d deploys, want 6", n)
	}
	if s := h.jobState("j"); s != jobScheduled {
		t.Fatalf("state %s", s)
	}
	h.ackAll(deploys)
	h.reportAll(deploys, taskRunning)
	if s := h.jobState("j"); s != jobRunning {
		t.Fatalf("state %s, want RUNNING", s)
	}
	if v := h.c.tmViews(); v[0].Free != 0 || v[1].Free != 0 {
		t.Fatalf("slots not taken: %+v", v)
	}
	h.reportAll(deploys, taskFinished)
	if s := h.jobState("j"); s != jobFinished {
		t.Fatalf("state %s, want FINISHED", s)
	}
	if v := h.c.tmViews(); v[0].Free != 2 || v[1].Free != 2 {
		t.Fatalf("slots not freed: %+v", v)
	}
	if _, err := h.c.cancel("j", h.now); !errors.Is(err, ErrJobNotCancelable) {
		t.Fatalf("cancel finished job: %v, want ErrJobNotCancelable", err)
	}
}

func TestCoreStaleReportsIgnored(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := h.submit("j", 1, 1, time.Minute)
	d := deploys[0].(deployAction)
	for _, r := range []taskReport{
		{JobID: "j", Vertex: d.Task.Head, Subtask: 0, Attempt: 2, State: taskFailed, Err: "old"}, // other attempt
		{JobID: "nope", Vertex: 0, Subtask: 0, Attempt: 1, State: taskFailed},                    // unknown job
		{JobID: "j", Vertex: d.Task.Head, Subtask: 7, Attempt: 1, State: taskFailed},             // unknown subtask
	} {
		h.c.report("a", r, h.now)
	}
	h.c.report("zzz", taskReport{JobID: "j", Vertex: d.Task.Head, Attempt: 1, State: taskFailed}, h.now) // unknown taskmanager
	if h.c.staleReports != 4 {
		t.Errorf("staleReports = %d, want 4", h.c.staleReports)
	}
	if s := h.jobState("j"); s != jobScheduled {
		t.Errorf("state %s, want SCHEDULED", s)
	}
}

func TestCoreHeartbeatTimeout(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.register("b", 2)
	deploys := h.submit("j", 2, 4, time.Minute)
	h.ackAll(deploys)
	h.reportAll(deploys, taskRunning)

	h.advance(9 * time.Second)
	if rereg, _ := h.c.heartbeat("b", "b-1", nil, h.now); rereg {
		t.Fatal("b told to re-register")
	}
	if acts := h.advance(999 * time.Millisecond); len(acts) != 0 || h.jobState("j") != jobRunning {
		t.Fatalf("lost too early: %v %s", acts, h.jobState("j"))
	}
	acts := h.advance(time.Millisecond) // a: 10s silent
	if s := h.jobState("j"); s != jobFailing {
		t.Fatalf("state %s, want FAILING", s)
	}
	// Only b's three executions need cancelling; a's are gone.
	if n := count[cancelAction](acts); n != 3 {
		t.Fatalf("%d cancels, want 3: %v", n, acts)
	}
	for _, a := range acts {
		if ca := a.(cancelAction); ca.TaskManager != "b" {
			t.Errorf("cancel sent to %s", ca.TaskManager)
		}
	}
	if err := h.c.jobs["j"].err; !strings.Contains(err, "on taskmanager a failed: taskmanager a at a:1 lost: no heartbeat for 10s") {
		t.Errorf("job error %q", err)
	}
	if rereg, _ := h.c.heartbeat("a", "a-1", nil, h.now); !rereg {
		t.Error("lost taskmanager not told to re-register")
	}
	for _, a := range acts {
		ca := a.(cancelAction)
		h.c.report("b", taskReport{JobID: "j", Vertex: ca.Vertex, Subtask: ca.Subtask, Attempt: 1, State: taskCanceled}, h.now)
	}
	if s := h.jobState("j"); s != jobFailed {
		t.Fatalf("state %s, want FAILED", s)
	}
	if v := h.c.tmViews(); v[0].Live || !v[1].Live || v[1].Free != 2 {
		t.Fatalf("taskmanagers %+v", v)
	}
}

func TestCoreReregistrationReplaces(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 1)
	deploys := h.submit("j", 1, 1, time.Minute)
	h.ackAll(deploys)
	h.reportAll(deploys, taskRunning)
	h.register("a", 1)
	if s := h.jobState("j"); s != jobFailed {
		t.Fatalf("state %s, want FAILED", s)
	}
	if err := h.c.jobs["j"].err; !strings.Contains(err, "re-registered") {
		t.Errorf("error %q", err)
	}
	// A late report from the old incarnation is stale.
	h.reportAll(deploys, taskFinished)
	if h.c.staleReports != 2 {
		t.Errorf("staleReports = %d, want 2", h.c.staleReports)
	}
	if v := h.c.tmViews(); v[0].Free != 1 {
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
	if n := count[deployAction](acts); n != 6 {
		t.Fatalf("%d deploys after registration, want 6", n)
	}
	if h.jobState("j") != jobScheduled || h.c.jobs["j"].slots == nil || h.c.jobs["k"].slots != nil {
		t.Fatal("wrong job scheduled")
	}
	h.advance(11 * time.Second)
	if s, err := h.jobState("k"), h.c.jobs["k"].err; s != jobFailed ||
		err != "not enough free slots: job needs 4, cluster has 0 free across 2 taskmanager(s); start more taskmanagers or lower parallelism" {
		t.Fatalf("k: %s %q", s, err)
	}
}

func TestCoreCancel(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	deploys := h.submit("j", 2, 2, time.Minute)
	// One deploy acknowledged, the other still in flight.
	first := deploys[0].(deployAction)
	h.c.deployDone(first, nil, h.now)
	acts, err := h.c.cancel("j", h.now)
	if err != nil {
		t.Fatal(err)
	}
	if n := count[cancelAction](acts); n != 1 {
		t.Fatalf("%d cancels, want 1 (only the acknowledged deploy)", n)
	}
	if acts, err := h.c.cancel("j", h.now); err != nil || len(acts) != 0 {
		t.Fatalf("second cancel: %v %v", acts, err)
	}
	// The in-flight deploy completes: now it is cancelled.
	late := h.c.deployDone(deploys[1].(deployAction), nil, h.now)
	if n := count[cancelAction](late); n != 1 {
		t.Fatalf("late ack gave %v", late)
	}
	h.c.report("a", taskReport{JobID: "j", Vertex: first.Task.Head, Attempt: 1, State: taskCanceled}, h.now)
	if s := h.jobState("j"); s != jobCanceling {
		t.Fatalf("state %s, want CANCELING", s)
	}
	// The second task never confirms: the cancel timeout ends the job.
	h.advance(10 * time.Second)
	if s := h.jobState("j"); s != jobCanceled {
		t.Fatalf("state %s, want CANCELED", s)
	}
	if _, err := h.c.cancel("nope", h.now); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("cancel of unknown job: %v, want ErrJobNotFound", err)
	}
}

func TestCoreDeployFailure(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	deploys := h.submit("j", 2, 2, time.Minute)
	h.c.deployDone(deploys[0].(deployAction), nil, h.now)
	acts := h.c.deployDone(deploys[1].(deployAction), errString("connection refused"), h.now)
	if n := count[cancelAction](acts); n != 1 {
		t.Fatalf("cancels %v", acts)
	}
	if err := h.c.jobs["j"].err; !strings.Contains(err, "task src -> map (2/2) on taskmanager a failed: deploying to a:1 failed: connection refused") {
		t.Fatalf("error %q", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// The core's states convert to the protobuf enums by value.
func TestStatesMirrorProto(t *testing.T) {
	for s := jobCreated; s <= jobFailed; s++ {
		if got, want := weirpb.JobState(s).String(), "JOB_STATE_"+s.String(); got != want {
			t.Errorf("job state %d: proto %s, core %s", s, got, want)
		}
	}
	for s := taskCreated; s <= taskFailed; s++ {
		if got, want := weirpb.TaskState(s).String(), "TASK_STATE_"+s.String(); got != want {
			t.Errorf("task state %d: proto %s, core %s", s, got, want)
		}
	}
}
