package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// Tests of onCorruption: fallback beyond the scenarios in
// testdata/corruption.txt: what the job records and logs, and the
// checkpoints it cannot fall back to.

// corrupt reports deploy d's execution FAILED because the checkpoint it
// restored does not verify.
func (h *coreHarness) corrupt(d DeployAction) []Action {
	return h.c.Report(d.TaskManager, TaskReport{JobID: d.JobID, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt,
		State: TaskFailed, Err: "restore: object chk-x/y: checksum mismatch", Corrupt: true}, h.now)
}

func fallbackOptions(t *testing.T, retained int) JobOptions {
	ck := stream.CheckpointConfig{Interval: time.Second, Retained: retained, OnCorruption: stream.FallbackOnCorruption}.WithDefaults()
	return JobOptions{Restart: fixedDelay(t, 5, time.Second), Checkpoint: ck, Storage: "file:///ck"}
}

// TestFallbackRestoresTheOlderCheckpoint: the redeployments restore the
// very checkpoint the shell reported for the older id, the fallback is
// logged at Warn with the job and both ids, and the job's last failure
// says what happened once it runs again.
func TestFallbackRestoresTheOlderCheckpoint(t *testing.T) {
	h := newCoreHarness(t)
	h.register("a", 4)
	deploys := actionsOf[DeployAction](h.submitOpts("j", 1, 1, fallbackOptions(t, 2)))
	h.run(asActions(deploys))
	cp1, _ := h.checkpointOnce(deploys, time.Second)
	cp2, _ := h.checkpointOnce(deploys, time.Second)
	redeploys := h.restart(h.fail(deploys[0], "boom"))
	if len(redeploys) != 2 || redeploys[0].Restore != Checkpoint(cp2) {
		t.Fatalf("redeploys %v, want both restoring checkpoint 2", redeploys)
	}
	h.ackAll(asActions(redeploys))
	h.c.Logs()
	acts := h.corrupt(redeploys[1])
	var warned bool
	for _, e := range h.c.Logs() {
		if e.Level == LevelWarn && strings.Contains(e.Msg, "falling back") {
			warned = slices.Equal(e.Attrs[:2], []any{"job", "j"}) && slices.Contains(e.Attrs, any("corruptCheckpoint")) &&
				slices.Contains(e.Attrs, any(int64(2))) && slices.Contains(e.Attrs, any("fallbackCheckpoint")) &&
				slices.Contains(e.Attrs, any(int64(1)))
		}
	}
	if !warned {
		t.Errorf("no Warn entry naming the job, checkpoint 2 and checkpoint 1")
	}
	again := h.restart(acts)
	if len(again) != 2 {
		t.Fatalf("%d redeploys after the fallback, want 2", len(again))
	}
	for _, d := range again {
		if d.Restore != Checkpoint(cp1) || d.Attempt != 3 {
			t.Fatalf("redeploy attempt %d restores %v, want attempt 3 restoring checkpoint 1", d.Attempt, d.Restore)
		}
	}
	h.run(asActions(again))
	v, _ := h.c.Job("j")
	if v.State != JobRunning || v.Restarts != 2 || v.RestoredFrom != 1 || v.Err != "" ||
		!strings.Contains(v.LastFailure, "checkpoint 2 does not verify") || !strings.Contains(v.LastFailure, "falling back to retained checkpoint 1") {
		t.Fatalf("after the fallback: state %s restarts %d restored from %d err %q last failure %q", v.State, v.Restarts, v.RestoredFrom, v.Err, v.LastFailure)
	}
	cv, _ := h.c.Checkpoints("j")
	if cv.Latest != 1 || !slices.Equal(cv.Retained, []int64{1}) {
		t.Errorf("checkpoints: latest %d retained %v, want 1 and [1]", cv.Latest, cv.Retained)
	}
	// Checkpointing resumes above the corrupt checkpoint's id.
	cp3, _ := h.checkpointOnce(again, time.Second)
	if cp3.id != 3 || h.c.jobs["j"].latest != Checkpoint(cp3) {
		t.Errorf("next checkpoint %d, want 3 and the latest", cp3.id)
	}
}

// TestFallbackNothingRestorable: a job recovered by a new leader knows the
// older retained checkpoints only by id, and a job started from another
// job's checkpoint has none of its own: neither falls back, and the error
// says what is left to do.
func TestFallbackNothingRestorable(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*JobOptions)
		want []string
	}{
		{"recovered by a new leader", func(o *JobOptions) {
			o.Restore, o.RestoreRetained, o.FirstCheckpointID = &testCheckpoint{id: 5}, []int64{3, 4}, 6
		}, []string{"checkpoint 5 does not verify", "no older retained checkpoint was left", "marked corrupt: 5",
			"resubmit the job from retained checkpoint 3 or 4", "earlier jobmanager leader"}},
		{"started from another job's checkpoint", func(o *JobOptions) {
			o.Restore, o.RestoreForeign = &testCheckpoint{id: 7}, true
		}, []string{"checkpoint 7 does not verify", "no older retained checkpoint was left",
			"repair the object and resubmit the job from checkpoint 7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCoreHarness(t)
			h.register("a", 4)
			opts := fallbackOptions(t, 3)
			tc.opts(&opts)
			deploys := actionsOf[DeployAction](h.submitOpts("j", 1, 1, opts))
			h.ackAll(asActions(deploys))
			h.confirmCancels(h.corrupt(deploys[1]))
			v, _ := h.c.Job("j")
			if v.State != JobFailed || v.Restarts != 0 {
				t.Fatalf("state %s after %d restarts, want FAILED at once", v.State, v.Restarts)
			}
			for _, w := range tc.want {
				if !strings.Contains(v.Err, w) {
					t.Errorf("error %q does not say %q", v.Err, w)
				}
			}
		})
	}
}
