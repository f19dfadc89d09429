package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/failover"
	"github.com/weirstream/weir/stream"
)

// Tests of the scheduler's restart and checkpoint transitions, with a fake
// clock and the real (pure) coordinator and restart strategies.

func fixedDelay(t *testing.T, attempts int, delay time.Duration) RestartStrategy {
	t.Helper()
	s, err := failover.New(stream.RestartConfig{Type: failover.FixedDelay, Attempts: attempts, Delay: delay}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// submitOpts submits pipeline(srcPar, winPar) with opts.
func (h *coreHarness) submitOpts(id string, srcPar, winPar int, opts JobOptions) []Action {
	h.t.Helper()
	g := planned(h.t, pipeline(h.t, srcPar, winPar), testRegistry(h.t))
	if opts.SlotWait == 0 {
		opts.SlotWait = time.Minute
	}
	acts, err := h.c.Submit(id, g, opts, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	return acts
}

// run acknowledges and reports RUNNING for the deploys in acts, returning
// the follow-up actions.
func (h *coreHarness) run(acts []Action) []Action {
	out := h.ackAll(acts)
	return append(out, h.reportAll(acts, TaskRunning)...)
}

// confirmCancels reports CANCELED for every cancel in acts.
func (h *coreHarness) confirmCancels(acts []Action) []Action {
	var out []Action
	for _, a := range acts {
		if ca, ok := a.(CancelAction); ok {
			out = append(out, h.c.Report(ca.TaskManager, TaskReport{JobID: ca.JobID, Vertex: ca.Vertex, Subtask: ca.Subtask,
				Attempt: ca.Attempt, State: TaskCanceled}, h.now)...)
		}
	}
	return out
}

// restart confirms the cancels in acts, waits out the default restart
// delay (1s) and returns the redeployments.
func (h *coreHarness) restart(acts []Action) []DeployAction {
	out := actionsOf[DeployAction](append(acts, h.confirmCancels(acts)...))
	return append(out, actionsOf[DeployAction](h.advance(time.Second))...)
}

func actionsOf[T Action](acts []Action) []T {
	var out []T
	for _, a := range acts {
		if x, ok := a.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// fail reports deploy d's execution FAILED.
func (h *coreHarness) fail(d DeployAction, msg string) []Action {
	return h.c.Report(d.TaskManager, TaskReport{JobID: d.JobID, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt,
		State: TaskFailed, Err: msg}, h.now)
}

func TestCoreRestartWithDelay(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := h.submitOpts("j", 2, 2, JobOptions{Restart: fixedDelay(t, 3, 5*time.Second)})
	h.run(deploys)
	if s := h.jobState("j"); s != JobRunning {
		t.Fatalf("state %s", s)
	}
	acts := h.fail(actionsOf[DeployAction](deploys)[0], "boom")
	if s := h.jobState("j"); s != JobRestarting {
		t.Fatalf("state %s, want RESTARTING", s)
	}
	cancels := actionsOf[CancelAction](acts)
	if len(cancels) != 3 {
		t.Fatalf("%d cancels, want 3: %v", len(cancels), acts)
	}
	v, _ := h.c.Job("j")
	if v.Attempt != 1 || v.RestartDue.Sub(h.now) != 5*time.Second || v.Err != "task src -> map (1/2) on taskmanager a failed: boom" {
		t.Errorf("view: attempt %d, restart due in %s after %q", v.Attempt, v.RestartDue.Sub(h.now), v.Err)
	}
	if n := count[DeployAction](h.confirmCancels(asActions(cancels))); n != 0 {
		t.Fatalf("redeployed before the delay")
	}
	if acts := h.advance(4999 * time.Millisecond); count[DeployAction](acts) != 0 {
		t.Fatalf("redeployed before the delay: %v", acts)
	}
	redeploys := actionsOf[DeployAction](h.advance(time.Millisecond))
	if len(redeploys) != 4 {
		t.Fatalf("%d redeploys, want 4", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Attempt != 2 || d.Restore != nil {
			t.Errorf("redeploy %+v: want attempt 2 and no restore (no checkpoint)", d)
		}
	}
	// Old-attempt reports are stale; the new attempt runs.
	stale := h.c.staleReports
	h.reportAll(deploys, TaskFailed)
	if h.c.staleReports != stale+4 || h.jobState("j") != JobScheduled {
		t.Fatalf("old attempt's reports: stale %d→%d, state %s", stale, h.c.staleReports, h.jobState("j"))
	}
	h.run(asActions(redeploys))
	v, _ = h.c.Job("j")
	if v.State != JobRunning || v.Attempt != 2 || v.Restarts != 1 || !strings.Contains(v.LastFailure, "boom") || v.Err != "" {
		t.Fatalf("after restart: %+v", v)
	}
	if tv := h.c.TaskManagers(); tv[0].Free != 2 {
		t.Errorf("slots after restart: %+v (want 2 of 4 used)", tv)
	}
}

func TestCoreRestartStrategyGivesUp(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := h.submitOpts("j", 1, 1, JobOptions{Restart: fixedDelay(t, 1, 0 /* default 1s */)})
	h.run(deploys)
	acts := h.fail(actionsOf[DeployAction](deploys)[1], "first")
	redeploys := h.restart(acts)
	if len(redeploys) != 2 || redeploys[0].Attempt != 2 {
		t.Fatalf("want redeploy at attempt 2, got %v", redeploys)
	}
	h.run(asActions(redeploys))
	acts = h.fail(redeploys[0], "second")
	if s := h.jobState("j"); s != JobFailing {
		t.Fatalf("state %s, want FAILING", s)
	}
	h.confirmCancels(acts)
	j := h.c.jobs["j"]
	const want = "task src -> map (1/1) on taskmanager a failed: second; restart strategy fixed-delay gave up"
	if j.state != JobFailed || j.err != want {
		t.Fatalf("state %s error %q, want FAILED %q", j.state, j.err, want)
	}
	if tv := h.c.TaskManagers(); tv[0].Free != 4 {
		t.Errorf("slots not freed: %+v", tv)
	}
}

func TestCoreCancelWhileRestarting(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := h.submitOpts("j", 1, 1, JobOptions{Restart: fixedDelay(t, 5, time.Minute)})
	h.run(deploys)
	h.confirmCancels(h.fail(actionsOf[DeployAction](deploys)[0], "boom"))
	if s := h.jobState("j"); s != JobRestarting {
		t.Fatalf("state %s", s)
	}
	acts, err := h.c.Cancel("j", h.now)
	if err != nil || len(acts) != 0 {
		t.Fatalf("cancel: %v %v", acts, err)
	}
	if s := h.jobState("j"); s != JobCanceled {
		t.Fatalf("state %s, want CANCELED", s)
	}
	if acts := h.advance(2 * time.Minute); count[DeployAction](acts) != 0 {
		t.Fatalf("cancelled job redeployed: %v", acts)
	}
}

func TestCoreRestartWithoutSlots(t *testing.T) {
	h := newCoreHarness(t)
	h.c.cfg.HeartbeatTimeout = time.Hour
	h.register("a", 2)
	h.register("b", 2)
	deploys := h.submitOpts("j", 2, 4, JobOptions{SlotWait: 10 * time.Second, Restart: fixedDelay(t, 2, time.Second)})
	h.run(deploys)
	// b restarts (re-registers with 1 slot): its tasks are gone, and the
	// job no longer fits.
	acts, err := h.c.Register(Registration{ID: "b", Instance: "b-2", Addr: "b:2", Slots: 1}, h.now)
	if err != nil {
		t.Fatal(err)
	}
	h.confirmCancels(acts)
	if acts := h.advance(time.Second); count[DeployAction](acts) != 0 || h.jobState("j") != JobScheduled {
		t.Fatalf("deployed without slots: %v, %s", acts, h.jobState("j"))
	}
	// The slot wait ends: another failure, another restart (the last).
	h.advance(10 * time.Second)
	if s := h.jobState("j"); s != JobRestarting {
		t.Fatalf("state %s, want RESTARTING after the slot wait", s)
	}
	h.advance(time.Second) // attempt 3 waits for slots too
	h.advance(10 * time.Second)
	j := h.c.jobs["j"]
	if j.state != JobFailed || !strings.Contains(j.err, "not enough free slots: job needs 4, cluster has 3 free") ||
		!strings.HasSuffix(j.err, "restart strategy fixed-delay gave up") {
		t.Fatalf("state %s error %q", j.state, j.err)
	}
}

// handlesFor is what a deployment's execution acknowledges for checkpoint
// id (the scheduler passes payloads through unread): the keys of one state
// file per operator of its chain.
func handlesFor(g *stream.JobGraph, d DeployAction, id int64) []string {
	var out []string
	for _, v := range d.Task.Chain {
		out = append(out, fmt.Sprintf("j/chk-%d/%s/%d-%d", id, g.Vertices[v].UID, d.Subtask, d.Attempt))
	}
	return out
}

// testCheckpoint is a completed checkpoint as the shell would report it,
// less the manifest: its id, the acknowledgements and the tasks recorded
// as finished.
type testCheckpoint struct {
	id       int64
	acks     []coordinator.Ack
	finished map[string][]int // operator uid → subtasks
}

func (c *testCheckpoint) CheckpointID() int64 { return c.id }

func (c *testCheckpoint) Finished(uid string, subtask, _ int) bool {
	return slices.Contains(c.finished[uid], subtask)
}

// checkpointOf is the checkpoint a written manifest describes.
func checkpointOf(a WriteManifestAction) *testCheckpoint {
	cp := &testCheckpoint{id: a.ID, acks: a.Acks, finished: make(map[string][]int)}
	for _, t := range a.Finished {
		uid := a.Graph.Vertices[t.Vertex].UID
		cp.finished[uid] = append(cp.finished[uid], t.Subtask)
	}
	return cp
}

// checkpointOnce triggers a checkpoint by ticking, acknowledges it from
// every deployment and writes its manifest; it returns the checkpoint and
// the actions that followed.
func (h *coreHarness) checkpointOnce(deploys []DeployAction, interval time.Duration) (*testCheckpoint, []Action) {
	h.t.Helper()
	triggers := actionsOf[TriggerAction](h.advance(interval))
	if len(triggers) == 0 {
		h.t.Fatal("no trigger")
	}
	for _, tr := range triggers {
		if h.c.jobs[tr.JobID].graph.Vertices[tr.Vertex].Type != "gen" {
			h.t.Fatalf("trigger sent to non-source %+v", tr)
		}
	}
	id := triggers[0].CheckpointID
	var acts []Action
	for _, d := range deploys {
		acts = append(acts, h.c.Ack(d.TaskManager, d.JobID, d.Task.Head, d.Subtask, d.Attempt, id, handlesFor(d.Graph, d, id),
			AckStats{AlignmentDuration: time.Duration(d.Subtask) * time.Millisecond, Bytes: 10}, h.now)...)
	}
	writes := actionsOf[WriteManifestAction](acts)
	if len(writes) != 1 {
		h.t.Fatalf("want one manifest write, got %v", acts)
	}
	h.now = h.now.Add(10 * time.Millisecond)
	cp := checkpointOf(writes[0])
	return cp, h.c.ManifestWritten("j", cp, nil, h.now)
}

func TestCoreCheckpointAndRestore(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	ck := stream.CheckpointConfig{Interval: time.Second}.WithDefaults()
	deploys := actionsOf[DeployAction](h.submitOpts("j", 2, 4, JobOptions{Restart: fixedDelay(t, 3, 0 /* default 1s */), Checkpoint: ck, Storage: "file:///ck"}))
	for _, d := range deploys {
		if d.Checkpointing != (TaskCheckpointing{Enabled: true, Mode: stream.ExactlyOnce, Storage: "file:///ck"}) || d.Restore != nil {
			t.Fatalf("deploy %+v", d)
		}
	}
	h.run(asActions(deploys))
	if acts := h.advance(999 * time.Millisecond); count[TriggerAction](acts) != 0 {
		t.Fatal("triggered before the interval")
	}
	m1, after := h.checkpointOnce(deploys, time.Millisecond)
	if m1.id != 1 {
		t.Fatalf("first checkpoint has id %d", m1.id)
	}
	notes := actionsOf[NotifyAction](after)
	if len(notes) != 6 || !notes[0].Complete || notes[0].CheckpointID != 1 {
		t.Fatalf("notifications %+v: want checkpoint 1 complete to all 6 tasks", notes)
	}
	m := h.c.jobs["j"].latest
	if m != Checkpoint(m1) || len(m1.acks) != 6 {
		t.Fatalf("latest checkpoint %v, want checkpoint 1 with 6 acknowledgements", m)
	}
	for _, a := range m1.acks {
		d := deployOf(t, deploys, a.Task.Vertex, a.Task.Subtask)
		if !slices.Equal(a.Payload.([]string), handlesFor(d.Graph, d, 1)) {
			t.Errorf("task %v acknowledged %v", a.Task, a.Payload)
		}
	}

	// A window task fails: the job restarts from checkpoint 1.
	acts := h.fail(deploys[3], "boom")
	redeploys := h.restart(acts)
	if len(redeploys) != 6 {
		t.Fatalf("%d redeploys", len(redeploys))
	}
	for _, d := range redeploys {
		if d.Attempt != 2 || d.Restore != m {
			t.Fatalf("redeploy attempt %d restore %v", d.Attempt, d.Restore)
		}
	}

	// Acks and declines of attempt 1 are stale now, also while attempt 2
	// deploys; the job is not running, so nothing is triggered either.
	h.c.Ack("a", "j", 0, 0, 1, 2, nil, AckStats{}, h.now)
	h.c.Decline("a", "j", 0, 0, 2, 2, "not running yet", h.now)
	if h.c.staleAcks != 2 {
		t.Errorf("staleAcks = %d, want 2", h.c.staleAcks)
	}
	h.run(asActions(redeploys))
	h.c.Ack("a", "j", 0, 0, 1, 2, nil, AckStats{}, h.now)
	if h.c.staleAcks != 3 {
		t.Errorf("staleAcks = %d, want 3", h.c.staleAcks)
	}
	_, _ = h.checkpointOnce(redeploys, time.Second)
	cv, _ := h.c.Checkpoints("j")
	if cv.Completed != 2 || cv.Latest != 2 || cv.RestoredFrom != 1 || !slices.Equal(cv.Retained, []int64{2}) {
		t.Fatalf("checkpoints view %+v", cv)
	}
	if cv.History[0].ID != 2 || cv.TaskNames[cv.History[0].SlowestTask] == "" {
		t.Errorf("history %+v", cv.History[0])
	}

	// Cancel deletes the retained checkpoint (DeleteOnCancel).
	acts, err := h.c.Cancel("j", h.now)
	if err != nil {
		t.Fatal(err)
	}
	acts = append(acts, h.confirmCancels(acts)...)
	dels := actionsOf[DeleteCheckpointsAction](acts)
	if h.jobState("j") != JobCanceled || len(dels) != 1 || !slices.Equal(dels[0].IDs, []int64{2}) {
		t.Fatalf("state %s, deletes %+v", h.jobState("j"), dels)
	}
}

func asActions[T Action](xs []T) []Action {
	out := make([]Action, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func TestCoreCheckpointFailureFailsOver(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	ck := stream.CheckpointConfig{Interval: time.Second, Retention: stream.RetainOnCancel}.WithDefaults()
	deploys := actionsOf[DeployAction](h.submitOpts("j", 1, 1, JobOptions{Restart: fixedDelay(t, 1, 0 /* default 1s */), Checkpoint: ck, Storage: "file:///ck"}))
	h.run(asActions(deploys))
	trig := actionsOf[TriggerAction](h.advance(time.Second))
	if len(trig) != 1 {
		t.Fatalf("triggers %v", trig)
	}
	// The trigger cannot be delivered: a decline, and with no tolerable
	// failures the job fails over.
	acts := h.c.TriggerFailed(trig[0], errString("connection refused"), h.now)
	if s := h.jobState("j"); s != JobRestarting {
		t.Fatalf("state %s, want RESTARTING", s)
	}
	dels := actionsOf[DeleteCheckpointsAction](acts)
	if len(dels) != 1 || dels[0].IDs[0] != 1 {
		t.Errorf("aborted checkpoint not deleted: %v", acts)
	}
	cv, _ := h.c.Checkpoints("j")
	if len(cv.History) != 1 || cv.History[0].ID != 1 || cv.History[0].Cause != coordinator.CauseDeclined {
		t.Errorf("history %+v, want checkpoint 1 declined", cv.History)
	}
	if failed, aborted := checkpointFailures(h.c.jobs["j"]); failed != 1 || aborted != 0 {
		t.Errorf("%d failed, %d aborted checkpoints; want 1 failed", failed, aborted)
	}
	// The restart cause tells people why: the trigger's delivery error.
	if cause := h.c.jobs["j"].restartCause; !strings.Contains(cause, "connection refused") {
		t.Errorf("restart cause %q does not name the delivery error", cause)
	}
	redeploys := h.restart(acts)
	h.run(asActions(redeploys))
	if h.jobState("j") != JobRunning {
		t.Fatalf("state %s", h.jobState("j"))
	}
	// Checkpointing resumed after the restart with the next id.
	_, _ = h.checkpointOnce(redeploys, time.Second)
	cv, _ = h.c.Checkpoints("j")
	if cv.Latest != 2 || cv.Failed != 1 || cv.Completed != 1 {
		t.Errorf("checkpoints %+v", cv)
	}
	acts, _ = h.c.Cancel("j", h.now)
	acts = append(acts, h.confirmCancels(acts)...)
	var deletes, tidies int
	for _, a := range acts {
		if d, ok := a.(DeleteCheckpointsAction); ok && (len(d.IDs) > 0 || d.All) {
			deletes++
		} else if ok && d.Tidy {
			tidies++
		}
	}
	if h.jobState("j") != JobCanceled || deletes != 0 || tidies != 1 {
		t.Fatalf("RetainOnCancel: state %s, actions %v; want no checkpoint deleted, one tidy", h.jobState("j"), acts)
	}
}

// A failure while a manifest is being written waits for the write: the
// coordinator stops at once but ends that checkpoint only when the write
// returns. Written, it is kept and restored, never deleted; failed, it is
// deleted and the restart restores nothing.
func TestCoreFailureDuringManifestWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		writeErr error
	}{
		{"write succeeds", nil},
		{"write fails", errString("s3: 503 slow down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCoreHarness(t)
			h.register("a", 4)
			ck := stream.CheckpointConfig{Interval: time.Second}.WithDefaults()
			deploys := actionsOf[DeployAction](h.submitOpts("j", 1, 1, JobOptions{Restart: fixedDelay(t, 1, 0 /* default 1s */), Checkpoint: ck, Storage: "file:///ck"}))
			h.run(asActions(deploys))
			id := actionsOf[TriggerAction](h.advance(time.Second))[0].CheckpointID
			var acts []Action
			for _, d := range deploys {
				acts = append(acts, h.c.Ack("a", "j", d.Task.Head, d.Subtask, 1, id, handlesFor(d.Graph, d, id), AckStats{}, h.now)...)
			}
			w := actionsOf[WriteManifestAction](acts)[0]
			acts = h.confirmCancels(h.fail(deploys[0], "boom"))
			acts = append(acts, h.advance(2*time.Second)...) // past the restart delay
			if count[DeployAction](acts) != 0 || count[DeleteCheckpointsAction](acts) != 0 {
				t.Fatalf("restarted or deleted while the manifest is being written: %v", acts)
			}
			j := h.c.jobs["j"]
			if !j.coord.Stopped() || !writingManifest(j) {
				t.Fatalf("coordinator stopped %v, writing %v; want stopped with the write in flight", j.coord.Stopped(), writingManifest(j))
			}
			acts = h.c.ManifestWritten("j", checkpointOf(w), tc.writeErr, h.now)
			redeploys := actionsOf[DeployAction](acts)
			dels := actionsOf[DeleteCheckpointsAction](acts)
			if len(redeploys) != 2 {
				t.Fatalf("after the write: %v", acts)
			}
			failed, aborted := checkpointFailures(j)
			if tc.writeErr == nil {
				if len(dels) != 0 || checkpointID(redeploys[0].Restore) != id || failed != 0 || aborted != 0 {
					t.Fatalf("after the write: %v; %d failed, %d aborted", acts, failed, aborted)
				}
				return
			}
			// The failed write is a failed checkpoint, though not one that
			// counts against the tolerance: the coordinator was stopped.
			if len(dels) != 1 || !slices.Equal(dels[0].IDs, []int64{id}) || redeploys[0].Restore != nil || failed != 1 || aborted != 0 {
				t.Fatalf("after the failed write: %v; %d failed, %d aborted", acts, failed, aborted)
			}
			if got := j.coord.AbortCounts(); !maps.Equal(got, map[coordinator.AbortCause]int{coordinator.CauseWriteFailed: 1}) {
				t.Fatalf("aborts %v, want one write failure", got)
			}
		})
	}
}

// Too many checkpoint failures fail the job over while another
// checkpoint's manifest is being written: the restart waits for the write,
// which completes that checkpoint, and restores it.
func TestCoreCheckpointFailureDuringOtherWrite(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	ck := stream.CheckpointConfig{Interval: time.Second, MaxConcurrent: 2}.WithDefaults()
	deploys := actionsOf[DeployAction](h.submitOpts("j", 1, 1, JobOptions{Restart: fixedDelay(t, 1, 0 /* default 1s */), Checkpoint: ck, Storage: "file:///ck"}))
	h.run(asActions(deploys))
	first := actionsOf[TriggerAction](h.advance(time.Second))[0].CheckpointID
	var acts []Action
	for _, d := range deploys {
		acts = append(acts, h.c.Ack("a", "j", d.Task.Head, d.Subtask, 1, first, handlesFor(d.Graph, d, first), AckStats{}, h.now)...)
	}
	w := actionsOf[WriteManifestAction](acts)[0]
	second := actionsOf[TriggerAction](h.advance(time.Second))[0]
	acts = h.c.TriggerFailed(second, errString("connection refused"), h.now)
	if s := h.jobState("j"); s != JobRestarting {
		t.Fatalf("state %s, want RESTARTING", s)
	}
	if dels := actionsOf[DeleteCheckpointsAction](acts); len(dels) != 1 || !slices.Equal(dels[0].IDs, []int64{second.CheckpointID}) {
		t.Fatalf("deletes %+v, want only the declined checkpoint %d", dels, second.CheckpointID)
	}
	acts = h.confirmCancels(acts)
	acts = append(acts, h.advance(2*time.Second)...)
	if count[DeployAction](acts) != 0 || count[DeleteCheckpointsAction](acts) != 0 {
		t.Fatalf("restarted or deleted while the manifest is being written: %v", acts)
	}
	acts = h.c.ManifestWritten("j", checkpointOf(w), nil, h.now)
	redeploys := actionsOf[DeployAction](acts)
	if count[DeleteCheckpointsAction](acts) != 0 || len(redeploys) != 2 || checkpointID(redeploys[0].Restore) != first {
		t.Fatalf("after the write: %v", acts)
	}
	if got := h.c.jobs["j"].coord.AbortCounts(); !maps.Equal(got, map[coordinator.AbortCause]int{coordinator.CauseDeclined: 1}) {
		t.Errorf("aborts %v, want the one decline", got)
	}
}

// A job recovered by a new leader starts from the checkpoint an earlier
// leader completed: it is retained (the coordinator adopts it) until
// retention discards it, and a job that ends before it ever ran deletes it.
func TestCoreRecoveredCheckpointRetained(t *testing.T) {
	restored := &testCheckpoint{id: 7}
	ck := stream.CheckpointConfig{Interval: time.Second}.WithDefaults()
	opts := func() JobOptions {
		return JobOptions{Checkpoint: ck, Storage: "file:///ck", Restore: restored, FirstCheckpointID: 8}
	}
	t.Run("discarded by retention", func(t *testing.T) {
		h := newCoreHarness(t)
		h.register("a", 4)
		deploys := actionsOf[DeployAction](h.submitOpts("j", 1, 1, opts()))
		if cv, _ := h.c.Checkpoints("j"); !slices.Equal(cv.Retained, []int64{7}) || cv.Latest != 7 {
			t.Fatalf("before running: %+v", cv)
		}
		h.run(asActions(deploys))
		if cv, _ := h.c.Checkpoints("j"); !slices.Equal(cv.Retained, []int64{7}) {
			t.Fatalf("running: retained %v, want [7]", cv.Retained)
		}
		m, acts := h.checkpointOnce(deploys, time.Second)
		dels := actionsOf[DeleteCheckpointsAction](acts)
		if m.id != 8 || len(dels) != 1 || !slices.Equal(dels[0].IDs, []int64{7}) {
			t.Fatalf("checkpoint %d, deletes %+v; want 8, and 7 deleted", m.id, dels)
		}
		if cv, _ := h.c.Checkpoints("j"); !slices.Equal(cv.Retained, []int64{8}) || cv.Latest != 8 {
			t.Fatalf("after checkpoint 8: %+v", cv)
		}
	})
	t.Run("cancelled before running", func(t *testing.T) {
		h := newCoreHarness(t)
		h.submitOpts("j", 1, 1, opts()) // no taskmanager: waits for slots
		acts, err := h.c.Cancel("j", h.now)
		if err != nil {
			t.Fatal(err)
		}
		dels := actionsOf[DeleteCheckpointsAction](acts)
		if h.jobState("j") != JobCanceled || len(dels) != 1 || !dels[0].All || !slices.Equal(dels[0].IDs, []int64{7}) {
			t.Fatalf("state %s, deletes %+v", h.jobState("j"), dels)
		}
		if cv, _ := h.c.Checkpoints("j"); len(cv.Retained) != 0 {
			t.Fatalf("retained %v after the sweep", cv.Retained)
		}
	})
}

func TestCoreFinalCheckpointWhenSourcesEnd(t *testing.T) {
	// The interval is an hour; once both source subtasks say their input
	// ended, the final checkpoint is triggered at once, not an hour later.
	h := newCoreHarness(t)
	h.register("a", 4)
	ck := stream.CheckpointConfig{Interval: time.Hour}.WithDefaults()
	deploys := actionsOf[DeployAction](h.submitOpts("j", 2, 4, JobOptions{Restart: fixedDelay(t, 3, 0), Checkpoint: ck, Storage: "file:///ck"}))
	h.run(asActions(deploys))
	var sources []DeployAction
	for _, d := range deploys {
		if len(d.Graph.Inputs(d.Task.Head)) == 0 {
			sources = append(sources, d)
		}
	}
	if len(sources) != 2 {
		t.Fatalf("%d source executions, want 2", len(sources))
	}
	ended := func(d DeployAction) []Action {
		return h.c.SourceInputEnded(d.TaskManager, d.JobID, d.Task.Head, d.Subtask, d.Attempt, h.now)
	}
	if acts := ended(sources[0]); count[TriggerAction](acts) != 0 {
		t.Fatal("triggered while the other source still reads")
	}
	acts := ended(sources[1])
	if n := count[TriggerAction](acts); n != 2 {
		t.Fatalf("%d triggers after every source's input ended, want 2 (one per source)", n)
	}
	// A report from a stale attempt changes nothing.
	stale := sources[0]
	stale.Attempt = 7
	if acts := ended(stale); len(acts) != 0 {
		t.Fatalf("stale report produced %v", acts)
	}
}
