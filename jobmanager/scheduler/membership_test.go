package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Tests of taskmanager membership in the scheduler: process instances,
// suspicion and probes, and deployment failures that back off.

func deployTargets(acts []Action) map[string]int {
	out := make(map[string]int)
	for _, d := range actionsOf[DeployAction](acts) {
		out[d.TaskManager]++
	}
	return out
}

func TestCoreSuspectedTaskManagerGetsNoSlots(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.register("b", 2)
	for _, id := range []string{"a", "b"} {
		acts := h.c.Suspect(id, id+"-1", "its connection broke", h.now)
		if p := actionsOf[ProbeAction](acts); len(p) != 1 || p[0] != (ProbeAction{TaskManager: id, Instance: id + "-1", Addr: id + ":1"}) {
			t.Fatalf("suspect %s: actions %v, want one probe", id, acts)
		}
	}
	for _, v := range h.c.TaskManagers() {
		if !v.Live || !v.Suspected || v.Reason != "its connection broke" {
			t.Fatalf("view of suspected %s: %+v", v.ID, v)
		}
	}
	if acts := h.c.Suspect("a", "a-0", "an old process", h.now); len(acts) != 0 {
		t.Fatalf("suspecting another instance of a: %v", acts)
	}
	if acts := h.submit("j", 2, 2, time.Minute); len(acts) != 0 {
		t.Fatalf("deployed while every taskmanager is suspected: %v", acts)
	}
	// a answers its probe: the job is placed there, and only there.
	acts := h.c.Probed("a", "a-1", nil, h.now)
	if got := deployTargets(acts); got["a"] != 4 || len(got) != 1 {
		t.Fatalf("deployments after a's probe answered: %v, want 4 on a", got)
	}
	h.run(acts)
	if s := h.jobState("j"); s != JobRunning {
		t.Fatalf("job %s, want RUNNING", s)
	}
	// b's probe fails: it is lost, and told to register again.
	h.c.Probed("b", "b-1", errors.New("connection refused"), h.now)
	if tm := h.c.tms["b"]; !tm.lost || tm.suspected {
		t.Fatalf("b after a failed probe: lost %v, suspected %v", tm.lost, tm.suspected)
	}
	if rereg, _ := h.c.Heartbeat("b", "b-1", nil, h.now); !rereg {
		t.Error("lost b not told to register again")
	}
	if r := h.c.ReregisterReason("b", "b-1"); !strings.Contains(r, "declared lost: probe failed: connection refused") {
		t.Errorf("reason to register again %q", r)
	}
	if s := h.jobState("j"); s != JobRunning {
		t.Fatalf("job %s after losing b, which ran none of its tasks", s)
	}
}

func TestCoreFailedProbeFailsOver(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.register("b", 2)
	strategy := &countingStrategy{delay: time.Second}
	deploys := h.submitOpts("j", 2, 2, JobOptions{Restart: strategy})
	h.run(deploys)
	onB := deployTargets(deploys)["b"]
	if onB == 0 {
		t.Fatalf("no task placed on b: %v", deployTargets(deploys))
	}
	h.c.Suspect("b", "b-1", "its connection broke", h.now)
	acts := h.c.Probed("b", "b-1", errors.New("no answer"), h.now)
	if s := h.jobState("j"); s != JobRestarting {
		t.Fatalf("job %s after b's probe failed, want RESTARTING", s)
	}
	if len(strategy.failures) != 1 {
		t.Fatalf("restart strategy asked %d times, want once", len(strategy.failures))
	}
	// a has 2 slots and the job needs 2: all of it goes to a.
	redeploys := h.restart(acts)
	if got := deployTargets(asActions(redeploys)); got["b"] != 0 || got["a"] != 4 {
		t.Fatalf("redeployments %v, want all 4 on a", got)
	}
}

func TestCoreReplacedInstanceRefused(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.run(h.submit("j", 2, 2, time.Minute))
	// A new process registers as a (a restart at the same address).
	if _, err := h.c.Register(Registration{ID: "a", Instance: "a-2", Addr: "a:1", Slots: 2}, h.now); err != nil {
		t.Fatal(err)
	}
	if s := h.jobState("j"); s != JobFailing && s != JobFailed {
		t.Fatalf("job %s after its only taskmanager was replaced (no restart strategy)", s)
	}
	if rereg, _ := h.c.Heartbeat("a", "a-1", nil, h.now); !rereg {
		t.Error("heartbeat of the replaced process accepted")
	}
	if rereg, _ := h.c.Heartbeat("a", "a-2", nil, h.now); rereg {
		t.Error("heartbeat of the new process refused")
	}
	// The old process may not take the id back.
	_, err := h.c.Register(Registration{ID: "a", Instance: "a-1", Addr: "a:1", Slots: 2}, h.now)
	if !errors.Is(err, ErrTaskManagerReplaced) {
		t.Fatalf("re-registration of the replaced process: %v, want ErrTaskManagerReplaced", err)
	}
	if tm := h.c.tms["a"]; tm.instance != "a-2" || tm.lost {
		t.Fatalf("a is instance %s (lost %v) after the refused registration, want a-2", tm.instance, tm.lost)
	}
	if _, err := h.c.Register(Registration{ID: "b", Addr: "b:1", Slots: 1}, h.now); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("registration without an instance id: %v", err)
	}
}

func TestCoreBrokenPeerSuspected(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 2)
	h.register("b", 2)
	deploys := actionsOf[DeployAction](h.submitOpts("j", 2, 2, JobOptions{Restart: &countingStrategy{delay: time.Second}}))
	h.run(asActions(deploys))
	var onA DeployAction
	for _, d := range deploys {
		if d.TaskManager == "a" {
			onA = d
		}
	}
	if onA.TaskManager == "" {
		t.Fatal("nothing deployed on a")
	}
	acts := h.c.Report("a", TaskReport{JobID: "j", Vertex: onA.Task.Head, Subtask: onA.Subtask, Attempt: onA.Attempt,
		State: TaskFailed, Err: "network stream to taskmanager b:1 broke", BrokenPeer: "b:1"}, h.now)
	if p := actionsOf[ProbeAction](acts); len(p) != 1 || p[0].TaskManager != "b" {
		t.Fatalf("actions %v, want a probe of b", acts)
	}
	if !h.c.tms["b"].suspected || h.c.tms["a"].suspected {
		t.Fatalf("suspected: a %v, b %v; want b only", h.c.tms["a"].suspected, h.c.tms["b"].suspected)
	}
	// While b is suspected the restarted job goes to a's slots only.
	redeploys := h.restart(acts)
	if got := deployTargets(asActions(redeploys)); got["b"] != 0 {
		t.Fatalf("redeployed onto suspected b: %v", got)
	}
}

// Deployment failures in a row count as one failure for the restart
// strategy and back off, doubling; a job that runs again starts over.
func TestCoreDeployFailuresBackOff(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	strategy := &countingStrategy{delay: 50 * time.Millisecond}
	deploys := actionsOf[DeployAction](h.submitOpts("j", 2, 2, JobOptions{Restart: strategy}))
	failAll := func(ds []DeployAction) []Action {
		var acts []Action
		for _, d := range ds {
			acts = append(acts, h.c.DeployDone(d, errString("connection refused"), h.now)...)
		}
		return acts
	}
	// The first failure asks the strategy (50ms); then 100ms, 200ms, 400ms.
	acts := failAll(deploys)
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if s := h.jobState("j"); s != JobRestarting {
			t.Fatalf("round %d: job %s, want RESTARTING", i, s)
		}
		if got := actionsOf[DeployAction](append(acts, h.advance(want-time.Millisecond)...)); len(got) != 0 {
			t.Fatalf("round %d: redeployed before the %v backoff", i, want)
		}
		deploys = actionsOf[DeployAction](h.advance(time.Millisecond))
		if len(deploys) != 4 {
			t.Fatalf("round %d: %d redeployments after %v, want 4", i, len(deploys), want)
		}
		if i < 3 {
			acts = failAll(deploys)
		}
	}
	if len(strategy.failures) != 1 {
		t.Fatalf("restart strategy asked %d times for 4 failed deployments in a row, want once", len(strategy.failures))
	}
	h.run(asActions(deploys))
	if s := h.jobState("j"); s != JobRunning {
		t.Fatalf("job %s, want RUNNING", s)
	}
	failAll(nil)
	if h.c.jobs["j"].deployFailures != 0 {
		t.Fatalf("deployment failures in a row %d after the job ran, want 0", h.c.jobs["j"].deployFailures)
	}
	// A task failure now is a new failure for the strategy.
	h.fail(deploys[0], "boom")
	if len(strategy.failures) != 2 {
		t.Fatalf("restart strategy asked %d times, want 2", len(strategy.failures))
	}
}
