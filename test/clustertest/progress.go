package clustertest

// Waits on a job's progress, as its jobmanager reports it (completed
// checkpoints, the job's state), shared by the process-test packages
// under test/: they pace faults by the job's progress, not by time.

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/polltest"
)

// CompletedSince returns the checkpoints of the job completed that were
// triggered after since, and when the first of them completed (trigger +
// duration). It returns 0 while the jobmanager cannot be asked.
func CompletedSince(c *Cluster, jobID string, since time.Time) (n int, firstDone time.Time) {
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		return 0, time.Time{}
	}
	for _, ck := range resp.GetCheckpoints() {
		if ck.GetStatus() != weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED || ck.GetTriggerTimeMs() <= since.UnixMilli() {
			continue
		}
		n++
		done := time.UnixMilli(ck.GetTriggerTimeMs() + ck.GetDurationMs())
		if firstDone.IsZero() || done.Before(firstDone) {
			firstDone = done
		}
	}
	return n, firstDone
}

// JobEnded reports whether the job reached a terminal state (false while
// the jobmanager cannot be asked).
func JobEnded(c *Cluster, jobID string) bool {
	resp, err := c.Job(jobID)
	if err != nil {
		return false
	}
	s := resp.GetJob().GetState()
	return s == weirpb.JobState_JOB_STATE_FINISHED || s == weirpb.JobState_JOB_STATE_FAILED || s == weirpb.JobState_JOB_STATE_CANCELED
}

// WaitCheckpointsSince waits until at least n checkpoints triggered after
// since have completed, and returns when the first of them completed. It
// fails the test if the job ends first: the job was sized too small for
// the faults.
func WaitCheckpointsSince(t *testing.T, c *Cluster, jobID string, since time.Time, n int, what string) time.Time {
	t.Helper()
	var first time.Time
	polltest.Eventually(t, 2*time.Minute, fmt.Sprintf("%d checkpoints %s", n, what), func() bool {
		var got int
		got, first = CompletedSince(c, jobID, since)
		if got < n && JobEnded(c, jobID) {
			t.Fatalf("job %s ended before %d checkpoints %s; give it more rows", jobID, n, what)
		}
		return got >= n
	})
	return first
}

// WaitProgress waits until a checkpoint completes that was triggered after
// since, or the job ends; it reports whether the job still runs.
func WaitProgress(t *testing.T, c *Cluster, jobID string, since time.Time) bool {
	t.Helper()
	polltest.Eventually(t, 3*time.Minute, "checkpoints to progress", func() bool {
		n, _ := CompletedSince(c, jobID, since)
		return n > 0 || JobEnded(c, jobID)
	})
	return !JobEnded(c, jobID)
}

// FinishAndVerify waits for the sequence job (job.ID) to finish and counts
// its committed output against the expected one.
func FinishAndVerify(t *testing.T, c *Cluster, job *SequenceJob) (lost, duplicated int) {
	t.Helper()
	final := c.WaitJob(job.ID, 5*time.Minute)
	if s := final.GetJob().GetState(); s != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", s, final.GetJob().GetError())
	}
	return job.Verify(t)
}

// RecoveryTimes collects how long each fault took to recover from.
type RecoveryTimes []time.Duration

// Wait waits until a checkpoint triggered after the fault at `at`
// completes (the job runs again end to end) and records how long after
// the fault it completed.
func (r *RecoveryTimes) Wait(t *testing.T, c *Cluster, jobID string, at time.Time) {
	t.Helper()
	var done time.Time
	polltest.Eventually(t, 3*time.Minute, "a checkpoint triggered after the fault at "+at.Format(time.TimeOnly), func() bool {
		var n int
		n, done = CompletedSince(c, jobID, at)
		return n > 0 || JobEnded(c, jobID)
	})
	if done.IsZero() {
		t.Fatalf("the job ended before it recovered from the fault at %s: its input is too small", at.Format(time.TimeOnly))
	}
	took := done.Sub(at)
	*r = append(*r, took)
	if took > 15*time.Second {
		// Rare and worth understanding: keep the jobmanager's view.
		t.Logf("slow recovery (%v) after the fault at %s; jobmanager log tail:\n%s", took, at.Format(time.TimeOnly), TailLines(c.JM.Log(), 60))
	}
}

// Quantile returns the q-quantile (nearest rank) in seconds, 0 if none
// was recorded.
func (r RecoveryTimes) Quantile(q float64) float64 {
	if len(r) == 0 {
		return 0
	}
	s := slices.Clone(r)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)].Seconds()
}

// TailLines returns the last n lines of s (a process's log).
func TailLines(s string, n int) string { return tail(s, n) }
