package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/stream"
)

// Tests of region failover in the scheduler, with a fake clock, the real
// coordinator and fanOut graphs (one region per subtask index).

// countingStrategy always restarts after delay and records the failures it
// was asked about.
type countingStrategy struct {
	delay    time.Duration
	failures []string
}

func (s *countingStrategy) OnFailure(_ time.Time, cause string) (bool, time.Duration) {
	s.failures = append(s.failures, cause)
	return true, s.delay
}

func (*countingStrategy) Name() string { return "counting" }

func (h *coreHarness) submitGraph(id string, g *stream.JobGraph, opts JobOptions) []Action {
	h.t.Helper()
	planned(h.t, g, testRegistry(h.t))
	if opts.SlotWait == 0 {
		opts.SlotWait = time.Minute
	}
	acts, err := h.c.Submit(id, g, opts, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return acts
}

// loseTM lets taskmanager id miss its heartbeats until it is lost, while
// the others heartbeat; it returns the actions of the tick that lost it.
func (h *coreHarness) loseTM(id string) []Action {
	h.t.Helper()
	h.now = h.now.Add(h.c.cfg.HeartbeatTimeout)
	for other, tm := range h.c.tms {
		if other != id && !tm.lost {
			h.c.Heartbeat(other, tm.instance, nil, h.now)
		}
	}
	acts := h.c.Tick(h.now)
	if !h.c.tms[id].lost {
		h.t.Fatalf("taskmanager %s not lost", id)
	}
	return acts
}

// deployOf finds the deployment of task head/subtask in ds.
func deployOf(t *testing.T, ds []DeployAction, head, subtask int) DeployAction {
	t.Helper()
	for _, d := range ds {
		if d.Task.Head == head && d.Subtask == subtask {
			return d
		}
	}
	t.Fatalf("no deployment of %d/%d in %v", head, subtask, ds)
	return DeployAction{}
}

type execAttempt struct {
	head, subtask int
	attempt       int64
}

func cancelSet(acts []Action) []execAttempt {
	var out []execAttempt
	for _, ca := range actionsOf[CancelAction](acts) {
		out = append(out, execAttempt{ca.Vertex, ca.Subtask, ca.Attempt})
	}
	slices.SortFunc(out, func(a, b execAttempt) int { return a.head*100 + a.subtask - b.head*100 - b.subtask })
	return out
}

// attempts maps "head/subtask" to the execution's attempt.
func (h *coreHarness) attempts(id string) map[string]int64 {
	out := make(map[string]int64)
	for _, ex := range h.c.jobs[id].execs {
		out[fmt.Sprintf("%d/%d", ex.spec.Head, ex.subtask)] = ex.attempt
	}
	return out
}

func TestCoreRegionFailover(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	strategy := &countingStrategy{delay: 2 * time.Second}
	ck := stream.CheckpointConfig{Interval: time.Second}.WithDefaults()
	deploys := actionsOf[DeployAction](h.submitGraph("j", fanOut(t, 2), JobOptions{Restart: strategy, Checkpoint: ck, Storage: "file:///ck"}))
	j := h.c.jobs["j"]
	if len(deploys) != 6 || len(j.regions) != 2 {
		t.Fatalf("%d deploys, %d regions; want 6 and 2", len(deploys), len(j.regions))
	}
	var all []Action // every action from here on
	rec := func(acts []Action) []Action { all = append(all, acts...); return acts }
	rec(h.run(asActions(deploys)))
	m1, after := h.checkpointOnce(deploys, time.Second)
	rec(after)

	// Checkpoint 2 is pending (one acknowledgement) when b (1/2) fails.
	trig := actionsOf[TriggerAction](rec(h.advance(time.Second)))
	if len(trig) != 2 || trig[0].CheckpointID != 2 {
		t.Fatalf("triggers %v", trig)
	}
	src1 := deployOf(t, deploys, 0, 1)
	rec(h.c.Ack("a", "j", 0, 1, 1, 2, handlesFor(src1.Graph, src1, 2), AckStats{}, h.now))

	acts := rec(h.fail(deployOf(t, deploys, 1, 0), "boom"))
	if got, want := cancelSet(acts), []execAttempt{{0, 0, 1}, {3, 0, 1}}; !slices.Equal(got, want) {
		t.Fatalf("cancels %v, want only region 1's other executions %v", got, want)
	}
	if dels := actionsOf[DeleteCheckpointsAction](acts); len(dels) != 1 || !slices.Equal(dels[0].IDs, []int64{2}) {
		t.Errorf("pending checkpoint 2 not aborted and deleted: %v", acts)
	}
	if s, aborts := h.jobState("j"), j.coord.AbortCounts(); s != JobRunning || !j.coord.Stopped() ||
		!maps.Equal(aborts, map[coordinator.AbortCause]int{coordinator.CauseFailover: 1}) {
		t.Fatalf("state %s, coordinator stopped %v, aborts %v; want RUNNING, stopped, one aborted by the failover", s, j.coord.Stopped(), aborts)
	}
	v, _ := h.c.Job("j")
	if len(v.RestartingRegions) != 1 {
		t.Fatalf("restarting regions %+v", v.RestartingRegions)
	}
	rv := v.RestartingRegions[0]
	if rv.ID != 1 || rv.Of != 2 || rv.Phase != RegionCanceling || rv.Attempt != 2 ||
		!slices.Equal(rv.Tasks, []string{"src (1/2)", "b -> bsink (1/2)", "d (1/2)"}) {
		t.Errorf("region view %+v", rv)
	}
	const cause = "task b -> bsink (1/2) on taskmanager a failed: boom"
	if rv.Cause != cause || rv.Due.Sub(h.now) != 2*time.Second {
		t.Errorf("region cause %q due in %s, want %q in 2s", rv.Cause, rv.Due.Sub(h.now), cause)
	}
	if _, _, err := h.c.TriggerNow("j", h.now); !errors.Is(err, ErrJobNotRunning) {
		t.Errorf("manual trigger during a region restart: %v", err)
	}

	// One cancelled execution reports FAILED instead of CANCELED: not
	// another failure.
	cancels := actionsOf[CancelAction](acts)
	rec(h.c.Report("a", TaskReport{JobID: "j", Vertex: cancels[0].Vertex, Subtask: 0, Attempt: 1, State: TaskFailed, Err: "interrupted"}, h.now))
	rec(h.confirmCancels(asActions(cancels[1:])))
	if v, _ := h.c.Job("j"); v.RestartingRegions[0].Phase != RegionWaiting {
		t.Errorf("phase %s, want WAITING", v.RestartingRegions[0].Phase)
	}
	if acts := rec(h.advance(1999 * time.Millisecond)); count[DeployAction](acts) != 0 || count[TriggerAction](acts) != 0 {
		t.Fatalf("deployed or triggered during the restart delay: %v", acts)
	}
	redeploys := actionsOf[DeployAction](rec(h.advance(time.Millisecond)))
	if len(redeploys) != 3 {
		t.Fatalf("%d redeploys, want region 1's 3", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Subtask != 0 || d.Attempt != 2 || d.Restore != m1 {
			t.Fatalf("redeploy %s subtask %d attempt %d restore %v", d.Task.Name, d.Subtask, d.Attempt, checkpointID(d.Restore))
		}
	}
	if v, _ := h.c.Job("j"); v.RestartingRegions[0].Phase != RegionDeploying || v.RestartingRegions[0].Attempt != 2 {
		t.Errorf("region view while deploying %+v", v.RestartingRegions[0])
	}

	// Reports of attempt 1 of region 1 are stale; a running one is told to
	// cancel (once per heartbeat timeout). Region 2's attempt 1 is current.
	stale := h.c.staleReports
	acts = rec(h.c.Report("a", TaskReport{JobID: "j", Vertex: 0, Subtask: 0, Attempt: 1, State: TaskRunning}, h.now))
	if ca := actionsOf[CancelAction](acts); len(ca) != 1 || !ca[0].Stale || ca[0].Attempt != 1 || ca[0].Subtask != 0 {
		t.Errorf("stale running attempt: %v", acts)
	}
	if acts := h.c.Report("a", TaskReport{JobID: "j", Vertex: 0, Subtask: 0, Attempt: 1, State: TaskRunning}, h.now); len(acts) != 0 {
		t.Errorf("stale cancel repeated at once: %v", acts)
	}
	h.c.CancelDone(actionsOf[CancelAction](acts)[0], errString("not found"), true, h.now) // changes nothing
	h.c.Report("a", TaskReport{JobID: "j", Vertex: 0, Subtask: 1, Attempt: 1, State: TaskRunning, RecordsIn: 5}, h.now)
	if h.c.staleReports != stale+2 {
		t.Errorf("staleReports %d, want %d", h.c.staleReports, stale+2)
	}
	// An old-attempt deploy or cancel outcome changes nothing either.
	h.c.DeployDone(deployOf(t, deploys, 0, 0), errString("late"), h.now)
	h.c.CancelDone(cancels[0], nil, true, h.now)
	if ex := j.exec(0, 0); ex.state != TaskDeploying || ex.attempt != 2 {
		t.Fatalf("redeployed execution %s attempt %d", ex.state, ex.attempt)
	}

	rec(h.run(asActions(redeploys)))
	v, _ = h.c.Job("j")
	if len(v.RestartingRegions) != 0 || v.State != JobRunning || j.coord.Stopped() || v.Restarts != 1 || v.Attempt != 2 || v.RestoredFrom != 1 {
		t.Fatalf("after the region restart: %+v, coordinator stopped %v", v, j.coord.Stopped())
	}
	if len(strategy.failures) != 1 || strategy.failures[0] != cause {
		t.Errorf("failures counted %q, want just %q", strategy.failures, cause)
	}
	for _, tv := range v.Tasks {
		if want := int64(2 - tv.Subtask); tv.Attempt != want {
			t.Errorf("task %s attempt %d, want %d", tv.Name, tv.Attempt, want)
		}
	}

	// Checkpoints resume: checkpoint 3 completes with the acknowledgements
	// of the new attempt in region 1 and of the old one in region 2.
	current := append(slices.Clone(redeploys), deployOf(t, deploys, 0, 1), deployOf(t, deploys, 1, 1), deployOf(t, deploys, 3, 1))
	m3, after := h.checkpointOnce(current, time.Second)
	rec(after)
	if m3.id != 3 || len(m3.acks) != 6 {
		t.Fatalf("checkpoint %d with %d acknowledgements after the restart, want 3 with 6", m3.id, len(m3.acks))
	}
	for _, a := range m3.acks {
		task := a.Task
		for _, key := range a.Payload.([]string) {
			if want := fmt.Sprintf("/%d-%d", task.Subtask, 2-task.Subtask); !strings.HasSuffix(key, want) {
				t.Errorf("task %v acknowledged %s, want subtask-attempt %s", task, key, want)
			}
		}
	}
	staleAcks := h.c.staleAcks
	h.c.Ack("a", "j", 0, 0, 1, 4, nil, AckStats{}, h.now)
	h.c.Decline("a", "j", 1, 0, 1, 4, "old", h.now)
	if h.c.staleAcks != staleAcks+2 {
		t.Errorf("staleAcks %d, want %d", h.c.staleAcks, staleAcks+2)
	}

	// Region 2 was never touched: no cancel, no deploy, no restart.
	for _, a := range all {
		switch a := a.(type) {
		case CancelAction:
			if a.Subtask == 1 {
				t.Errorf("region 2 execution cancelled: %+v", a)
			}
		case DeployAction:
			if a.Subtask == 1 {
				t.Errorf("region 2 execution deployed again: %s", a.Task.Name)
			}
		}
	}
	if got := h.attempts("j"); got["0/1"] != 1 || got["1/1"] != 1 || got["3/1"] != 1 || got["0/0"] != 2 || got["1/0"] != 2 || got["3/0"] != 2 {
		t.Errorf("attempts %v", got)
	}
}

// A keyed job is one region: a failure restarts the whole job, as
// RESTARTING, with every execution at the next attempt.
func TestCoreKeyedJobRestartsWhole(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := actionsOf[DeployAction](h.submitOpts("j", 2, 4, JobOptions{Restart: fixedDelay(t, 3, time.Second)}))
	if n := len(h.c.jobs["j"].regions); n != 1 {
		t.Fatalf("%d regions, want 1", n)
	}
	h.run(asActions(deploys))
	acts := h.fail(deploys[2], "boom")
	v, _ := h.c.Job("j")
	if v.State != JobRestarting || len(v.RestartingRegions) != 0 || count[CancelAction](acts) != 5 {
		t.Fatalf("state %s, regions %v, %d cancels; want RESTARTING, none, 5", v.State, v.RestartingRegions, count[CancelAction](acts))
	}
	redeploys := h.restart(acts)
	if len(redeploys) != 6 {
		t.Fatalf("%d redeploys", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Attempt != 2 {
			t.Errorf("%s attempt %d", d.Task.Name, d.Attempt)
		}
	}
}

// A lost taskmanager fails the regions that had executions on it, as one
// failure; they are redeployed on the remaining taskmanager while the
// other region runs on.
func TestCoreTaskManagerLossRestartsItsRegions(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 3)
	h.register("b", 4)
	// Slots: b, a, b (most free first): regions 1 and 3 on b, region 2 on
	// a. After b's loss regions 1 and 3 restart on a's two free slots.
	// Fixed-delay allows one restart: the loss is one failure.
	deploys := actionsOf[DeployAction](h.submitGraph("j", fanOut(t, 3), JobOptions{Restart: fixedDelay(t, 1, time.Second)}))
	h.run(asActions(deploys))
	j := h.c.jobs["j"]
	if got := []string{j.slots[0].id, j.slots[1].id, j.slots[2].id}; !slices.Equal(got, []string{"b", "a", "b"}) {
		t.Fatalf("slots %v", got)
	}
	acts := h.loseTM("b")
	if n := count[CancelAction](acts); n != 0 {
		t.Fatalf("%d cancels; every execution of regions 1 and 3 was on b", n)
	}
	v, _ := h.c.Job("j")
	if v.State != JobRunning || len(v.RestartingRegions) != 2 || v.RestartingRegions[0].ID != 1 || v.RestartingRegions[1].ID != 3 {
		t.Fatalf("state %s, restarting %+v", v.State, v.RestartingRegions)
	}
	if !strings.Contains(v.RestartingRegions[0].Cause, "taskmanager b at b:1 lost: no heartbeat for 10s") {
		t.Errorf("cause %q", v.RestartingRegions[0].Cause)
	}
	h.c.Heartbeat("a", "a-1", nil, h.now)
	redeploys := actionsOf[DeployAction](h.advance(time.Second))
	if len(redeploys) != 6 {
		t.Fatalf("%d redeploys, want 6 (regions 1 and 3)", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Subtask == 1 || d.Attempt != 2 || d.TaskManager != "a" {
			t.Errorf("redeploy %s attempt %d on %s", d.Task.Name, d.Attempt, d.TaskManager)
		}
		// Its own slot is on a; a slot still to be re-placed (region 3's,
		// while region 1 is deployed) has no address.
		if d.SlotAddrs[d.Subtask] != "a:1" || slices.Contains(d.SlotAddrs, "b:1") {
			t.Errorf("%s (%d) slot addresses %v", d.Task.Name, d.Subtask, d.SlotAddrs)
		}
	}
	h.run(asActions(redeploys))
	v, _ = h.c.Job("j")
	if v.State != JobRunning || len(v.RestartingRegions) != 0 || v.Restarts != 2 {
		t.Fatalf("after the restart %+v", v)
	}
	if tv := h.c.TaskManagers(); tv[0].ID != "a" || tv[0].Free != 0 {
		t.Errorf("taskmanagers %+v", tv)
	}
}

// A region that finds too few slots waits; a taskmanager that registers
// (here the lost one again, at a new address) ends the wait at once. The
// wait counts as a failure only when it times out.
func TestCoreRegionWaitsForSlots(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 1)
	h.register("b", 1)
	deploys := actionsOf[DeployAction](h.submitGraph("j", fanOut(t, 2), JobOptions{Restart: fixedDelay(t, 2, time.Second), SlotWait: 5 * time.Second}))
	h.run(asActions(deploys))
	h.loseTM("b")
	h.c.Heartbeat("a", "a-1", nil, h.now)
	if acts := h.advance(time.Second); len(acts) != 0 {
		t.Fatalf("actions without free slots: %v", acts)
	}
	v, _ := h.c.Job("j")
	if v.State != JobRunning || len(v.RestartingRegions) != 1 || v.RestartingRegions[0].Phase != RegionWaitingForSlots {
		t.Fatalf("state %s, regions %+v; want RUNNING with region 2 waiting for slots", v.State, v.RestartingRegions)
	}
	if rv := v.RestartingRegions[0]; rv.ID != 2 || rv.Attempt != 2 || len(rv.Tasks) != 3 || rv.SlotDeadline.Sub(h.now) != 5*time.Second {
		t.Errorf("region %+v; want region 2, attempt 2, 3 tasks, waiting for slots for 5s more", rv)
	}
	h.c.Heartbeat("a", "a-1", nil, h.now.Add(4*time.Second))
	if acts := h.advance(4 * time.Second); len(acts) != 0 {
		t.Fatalf("actions while waiting: %v", acts)
	}

	// b comes back at a new address: region 2 is deployed there at once.
	acts, err := h.c.Register(Registration{ID: "b", Instance: "b-2", Addr: "b:2", Slots: 1}, h.now)
	if err != nil {
		t.Fatal(err)
	}
	redeploys := actionsOf[DeployAction](acts)
	if len(redeploys) != 3 {
		t.Fatalf("%d redeploys on registration, want 3", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Subtask != 1 || d.Attempt != 2 || d.Addr != "b:2" || !slices.Equal(d.SlotAddrs, []string{"a:1", "b:2"}) {
			t.Errorf("redeploy %s attempt %d to %s, slots %v", d.Task.Name, d.Attempt, d.Addr, d.SlotAddrs)
		}
	}
	h.run(asActions(redeploys))
	if v, _ := h.c.Job("j"); len(v.RestartingRegions) != 0 || v.State != JobRunning {
		t.Fatalf("after redeploy %+v", v)
	}
	if tv := h.c.TaskManagers(); tv[1].ID != "b" || tv[1].Free != 0 || tv[1].Addr != "b:2" {
		t.Errorf("taskmanagers %+v", tv)
	}

	// b is lost again (failure 2, the last restart allowed); this time no
	// taskmanager comes: the slot wait times out, failure 3 ends the job.
	h.loseTM("b")
	h.c.Heartbeat("a", "a-1", nil, h.now)
	h.advance(time.Second)
	h.c.Heartbeat("a", "a-1", nil, h.now.Add(5*time.Second))
	acts = h.advance(5 * time.Second)
	if got := cancelSet(acts); !slices.Equal(got, []execAttempt{{0, 0, 1}, {1, 0, 1}, {3, 0, 1}}) {
		t.Fatalf("cancels %v, want region 1's", got)
	}
	h.confirmCancels(acts)
	jb := h.c.jobs["j"]
	const want = "not enough free slots: region 2 of job j needs 1, cluster has 0 free across 1 taskmanager(s); start more taskmanagers or lower parallelism; restart strategy fixed-delay gave up"
	if jb.state != JobFailed || jb.err != want {
		t.Fatalf("state %s error %q, want FAILED %q", jb.state, jb.err, want)
	}
}

// When the failed regions and those already down are all of the job, it
// restarts as a whole, every execution at one more than the highest
// attempt.
func TestCoreRegionsAllDownRestartWhole(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := actionsOf[DeployAction](h.submitGraph("j", fanOut(t, 2), JobOptions{Restart: &countingStrategy{delay: time.Second}}))
	h.run(asActions(deploys))
	acts := h.fail(deployOf(t, deploys, 1, 0), "first")
	acts = append(acts, h.fail(deployOf(t, deploys, 1, 1), "second")...)
	v, _ := h.c.Job("j")
	if v.State != JobRestarting || len(v.RestartingRegions) != 0 {
		t.Fatalf("state %s, regions %+v; want RESTARTING as a whole", v.State, v.RestartingRegions)
	}
	redeploys := h.restart(acts)
	if len(redeploys) != 6 {
		t.Fatalf("%d redeploys", len(redeploys))
	}
	h.run(asActions(redeploys))
	// Region 1 alone restarts: attempt 3 there, 2 in region 2.
	redeploys = h.restart(h.fail(deployOf(t, redeploys, 3, 0), "third"))
	if len(redeploys) != 3 || redeploys[0].Attempt != 3 {
		t.Fatalf("region redeploys %v", redeploys)
	}
	h.run(asActions(redeploys))
	// A whole-job failure (as too many failed checkpoints cause): all at 4.
	acts = h.c.jobFailure(h.c.jobs["j"], "checkpointing failed: test", h.now)
	redeploys = h.restart(acts)
	if len(redeploys) != 6 {
		t.Fatalf("%d redeploys", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Attempt != 4 {
			t.Errorf("%s (%d) attempt %d, want 4", d.Task.Name, d.Subtask, d.Attempt)
		}
	}
}
