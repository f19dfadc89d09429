package scheduler

import (
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// sizedCheckpoint is a checkpoint that knows what each subtask restores:
// 1000 × (head+1) + subtask bytes, and records finished subtasks.
type sizedCheckpoint struct {
	testCheckpoint
}

var _ RestoreSizer = (*sizedCheckpoint)(nil)

func (c *sizedCheckpoint) RestoreBytes(_ *stream.JobGraph, t *Task, subtask int) int64 {
	return 1000*int64(t.Head+1) + int64(subtask)
}

// TestRestoreProgress follows the restore of a job started from a
// checkpoint through taskmanager reports that arrive out of order, repeat,
// and overshoot: the job's restored bytes never decrease, never exceed the
// total, and reach it exactly when every execution said it loaded its
// state; an execution that had finished restores nothing; a restart starts
// the count again for the new attempts.
func TestRestoreProgress(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	cp := &sizedCheckpoint{testCheckpoint{id: 7, finished: map[string][]int{"src": {1}}}}
	g := planned(t, pipeline(t, 2, 2), testRegistry(t))
	acts, err := h.c.Submit("j", g, JobOptions{Restore: cp, RestoreForeign: true, Checkpoint: stream.CheckpointConfig{Interval: time.Hour},
		Restart: fixedDelay(t, 1, time.Second)}, h.now)
	if err != nil {
		t.Fatal(err)
	}
	deployActs := acts
	deploys := actionsOf[DeployAction](acts)
	var want int64
	for _, d := range deploys {
		if !(d.Task.Head == 0 && d.Subtask == 1) {
			want += 1000*int64(d.Task.Head+1) + int64(d.Subtask)
		}
	}
	view := func() RestoreView {
		t.Helper()
		v, err := h.c.Job("j")
		if err != nil {
			t.Fatal(err)
		}
		return v.Restore
	}
	var last int64
	check := func(what string, restoring int) {
		t.Helper()
		v := view()
		if v.RestoreBytes != want || v.RestoredBytes < last || v.RestoredBytes > want || v.TasksRestoring != restoring {
			t.Fatalf("%s: restore %+v (before: %d restored); want %d in all, growing, %d tasks restoring", what, v, last, want, restoring)
		}
		last = v.RestoredBytes
	}
	check("deploying", len(deploys))
	h.ackAll(deployActs)
	report := func(d DeployAction, restoring bool, bytes int64) {
		h.c.Report(d.TaskManager, TaskReport{JobID: d.JobID, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt,
			State: TaskRunning, Restoring: restoring, RestoredBytes: bytes}, h.now)
	}
	for _, d := range deploys {
		report(d, true, 10)
	}
	if h.jobState("j") != JobRunning {
		t.Fatalf("job is %v with every task reported RUNNING", h.jobState("j"))
	}
	check("every task restoring", len(deploys))
	for i, d := range deploys {
		full := 1000*int64(d.Task.Head+1) + int64(d.Subtask)
		if d.Task.Head == 0 && d.Subtask == 1 {
			full = 0
		}
		report(d, true, full/2)
		check("half way", len(deploys)-i)
		report(d, false, full)
		report(d, true, full/3)      // a heartbeat taken before, delivered after
		report(d, false, full+12345) // more than expected: capped
		check("one more loaded", len(deploys)-i-1)
	}
	if v := view(); v.RestoredBytes != want {
		t.Fatalf("all loaded: %d bytes restored, want exactly %d", v.RestoredBytes, want)
	}

	// A restart: the new attempts restore anew.
	for _, d := range deploys[:1] {
		h.c.Report(d.TaskManager, TaskReport{JobID: d.JobID, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt,
			State: TaskFailed, Err: "boom"}, h.now)
	}
	acts = h.reportAll(deployActs, TaskCanceled)
	acts = append(acts, h.advance(2*time.Second)...)
	redeploys := actionsOf[DeployAction](acts)
	if len(redeploys) == 0 {
		t.Fatal("no redeployment after the failure")
	}
	last = 0
	v := view()
	if v.RestoredBytes != 0 || v.TasksRestoring != len(deploys) {
		t.Fatalf("after the restart: %+v; want nothing restored, %d tasks restoring", v, len(deploys))
	}
}
