package recovery

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// TestCorruptCheckpointFallsBack runs the exactly-once job with
// checkpointing onCorruption: fallback and three retained checkpoints,
// kills both taskmanagers, and while the job waits for slots corrupts the
// state objects of its latest checkpoint only. The restarted taskmanagers
// find the corruption on restore; the jobmanager, still the same process,
// must mark that checkpoint corrupt, log the fallback and restart the job
// from the next older retained checkpoint, which the job then finishes
// from. Falling back rewinds past output the file sink may already have
// committed, so rows may be duplicated (that is why the fallback is
// opt-in) but none may be lost. It prints
//
//	corrupt_checkpoint=<n> fallback_checkpoint=<m> lost=0 duplicated=<d>
func TestCorruptCheckpointFallsBack(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "info", SlotWaitTimeout: 2 * time.Minute,
		TaskManagerArgs: stateObjectsOnly})
	job := clustertest.NewSequenceJobOn(t, "fallback", 20, 1000, 16, "", "  retained: 3\n  onCorruption: fallback\n")
	id := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, id, time.Time{}, 3, "before the taskmanagers are killed")
	c.KillTaskManager(0)
	c.KillTaskManager(1)

	// Once the job stopped and no checkpoint is in progress, none can
	// complete until the taskmanagers are back: the latest is the one
	// the restart restores.
	var completed []int64
	polltest.Eventually(t, 2*time.Minute, "the job stopped with no checkpoint in progress", func() bool {
		resp, err := c.Job(id)
		if err != nil || resp.GetJob().GetState() == weirpb.JobState_JOB_STATE_RUNNING {
			return false
		}
		cks, err := c.Checkpoints(id)
		if err != nil || cks.GetInProgress() != 0 {
			return false
		}
		completed = completed[:0]
		for _, ck := range cks.GetCheckpoints() {
			if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				completed = append(completed, ck.GetCheckpointId())
			}
		}
		return true
	})
	slices.Sort(completed)
	if len(completed) < 2 {
		t.Fatalf("completed checkpoints %v: want at least two, so that one is older than the latest", completed)
	}
	latest, older := completed[len(completed)-1], completed[len(completed)-2]
	corruptStateOf(t, job, id, latest)

	c.RestartTaskManager(0)
	c.RestartTaskManager(1)
	polltest.Eventually(t, 2*time.Minute, fmt.Sprintf("the job running again, restored from checkpoint %d", older), func() bool {
		resp, err := c.Job(id)
		if err != nil {
			return false
		}
		if s := resp.GetJob().GetState(); s == weirpb.JobState_JOB_STATE_FAILED || s == weirpb.JobState_JOB_STATE_FINISHED {
			t.Fatalf("job %s ended %v before it ran again: %s", id, s, resp.GetJob().GetError())
		}
		cks, err := c.Checkpoints(id)
		return err == nil && resp.GetJob().GetState() == weirpb.JobState_JOB_STATE_RUNNING && cks.GetRestoredFrom() == older
	})
	fallback := fmt.Sprintf("corruptCheckpoint=%d fallbackCheckpoint=%d", latest, older)
	if !slices.ContainsFunc(strings.Split(c.JM.Log(), "\n"), func(l string) bool {
		return strings.Contains(l, "level=WARN") && strings.Contains(l, "falling back to an older retained checkpoint") && strings.Contains(l, fallback)
	}) {
		t.Errorf("the jobmanager logged no warning with %s", fallback)
	}
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	fmt.Printf("corrupt_checkpoint=%d fallback_checkpoint=%d lost=%d duplicated=%d\n", latest, older, lost, duplicated)
	if lost != 0 {
		t.Fatalf("lost=%d duplicated=%d after falling back from checkpoint %d to %d", lost, duplicated, latest, older)
	}
	if n := c.JobRestarts(id); n < 2 {
		t.Errorf("job %s restarted %d times, want at least 2: after the taskmanagers were lost and for the fallback", id, n)
	}
}

// corruptStateOf flips a byte in the middle of every state object (not
// the manifest) of checkpoint n of job id under the job's file://
// checkpoint storage.
func corruptStateOf(t *testing.T, job *clustertest.SequenceJob, id string, n int64) {
	t.Helper()
	root := filepath.Join(filepath.Dir(job.Spec), "ckpt", id, fmt.Sprintf("chk-%d", n))
	count := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(path) == "_manifest" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil || len(data) == 0 {
			return err
		}
		data[len(data)/2] ^= 0xff
		count++
		return os.WriteFile(path, data, 0o644)
	})
	if err != nil || count == 0 {
		t.Fatalf("corrupting checkpoint %d of job %s under %s: %d objects: %v", n, id, root, count, err)
	}
}
