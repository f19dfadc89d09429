package recovery

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// TestJobManagerRestartWithoutHA kills the only jobmanager (no HA) with
// SIGKILL while the exactly-once job runs and starts it again with the
// same configuration, twice: each time the restarted jobmanager finds the
// job in its data directory, lists it before serving, and resumes it from
// its latest completed checkpoint. It prints
//
//	jobmanager_restarts=<n> lost=0 duplicated=0
func TestJobManagerRestartWithoutHA(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "info"})
	job := clustertest.NewSequenceJob(t, "survivor", 20, 2000, 32)
	jobID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, jobID, time.Time{}, 2, "before the first restart")
	restarts := 0
	for range 2 {
		c.KillJobManager(0)
		killed := time.Now()
		c.RestartJobManager()
		restarts++
		// Recovered before the jobmanager serves: listed at once.
		resp, err := c.Job(jobID)
		if err != nil {
			t.Fatalf("restart %d: the job is not listed: %v", restarts, err)
		}
		if s := resp.GetJob().GetState(); s == weirpb.JobState_JOB_STATE_FAILED || s == weirpb.JobState_JOB_STATE_CANCELED {
			t.Fatalf("restart %d: job %v: %s", restarts, s, resp.GetJob().GetError())
		}
		clustertest.WaitCheckpointsSince(t, c, jobID, killed, 2, fmt.Sprintf("after restart %d", restarts))
	}
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	fmt.Printf("jobmanager_restarts=%d lost=%d duplicated=%d\n", restarts, lost, duplicated)
	if restarts < 2 || lost != 0 || duplicated != 0 {
		t.Fatalf("jobmanager_restarts=%d lost=%d duplicated=%d", restarts, lost, duplicated)
	}
}

// TestCorruptCheckpointFailsJob corrupts, while the jobmanager is down,
// the state objects of every checkpoint of one job and the manifests of
// every checkpoint of another (the taskmanagers are restarted too, so
// that no local copy of the state hides the corruption). The restarted
// jobmanager must end both jobs FAILED, at once and without restarts,
// with an error naming the checkpoint, list them, and list them again
// after one more restart.
func TestCorruptCheckpointFailsJob(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 4, LogLevel: "info", TaskManagerArgs: stateObjectsOnly})
	state := clustertest.NewSequenceJob(t, "corrupt-state", 60, 1000, 16)
	manifest := clustertest.NewSequenceJob(t, "corrupt-manifest", 60, 1000, 16)
	stateID, manifestID := state.Submit(t, c), manifest.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, stateID, time.Time{}, 2, "of the job whose state will be corrupted")
	clustertest.WaitCheckpointsSince(t, c, manifestID, time.Time{}, 2, "of the job whose manifest will be corrupted")
	c.KillJobManager(0)
	c.KillTaskManager(0)
	c.KillTaskManager(1)

	// Every checkpoint, so that whichever the job store names is corrupt.
	corruptCheckpoints(t, state, stateID, false)
	corruptCheckpoints(t, manifest, manifestID, true)

	c.RestartTaskManager(0)
	c.RestartTaskManager(1)
	c.RestartJobManager()
	check := func(when string) {
		for _, id := range []string{stateID, manifestID} {
			checkFailedOnCorruption(t, c, id, when)
		}
	}
	check("after the restart")
	if out, err := c.Weir("jobs", "list"); err != nil || !strings.Contains(out, stateID) || !strings.Contains(out, manifestID) {
		t.Fatalf("jobs list after the restart: %v\n%s", err, out)
	}
	c.RestartJobManager()
	check("after one more restart")
	fmt.Printf("corrupt_jobs=2 failed=2 restarts=0\n")
}

// TestSubmitFromRetainedCheckpoint cancels the exactly-once job, whose
// checkpoints are retained on cancel, and submits it again from its
// latest retained checkpoint (weir submit --from JOB@N) into the same
// output directory: the file sink of the new job takes the directory
// over, commits what the old one had pending and drops what it had not,
// and the output is exactly once. A spec that drops an operator with state
// is refused first, without --allow-non-restored-state, by weir jobs plan
// and by weir submit. It prints
//
//	restored_from_checkpoint=<n> lost=0 duplicated=0
func TestSubmitFromRetainedCheckpoint(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "info"})
	job := clustertest.NewSequenceJobOn(t, "upgrade", 20, 1000, 16, "", "  retention: retain\n")
	oldID := job.Submit(t, c)
	clustertest.WaitCheckpointsSince(t, c, oldID, time.Time{}, 2, "before the cancel")
	if out, err := c.Weir("jobs", "cancel", oldID); err != nil {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	if s := c.WaitJob(oldID, 2*time.Minute).GetJob().GetState(); s != weirpb.JobState_JOB_STATE_CANCELED {
		t.Fatalf("the cancelled job ended %v", s)
	}
	cks, err := c.Checkpoints(oldID)
	if err != nil {
		t.Fatal(err)
	}
	var latest int64
	for _, ck := range cks.GetCheckpoints() {
		if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			latest = max(latest, ck.GetCheckpointId())
		}
	}
	if latest == 0 {
		t.Fatal("no completed checkpoint to restore")
	}
	from := oldID + "@" + strconv.FormatInt(latest, 10)

	// The same job without its keyed operator: its state would be dropped.
	spec, err := os.ReadFile(job.Spec)
	if err != nil {
		t.Fatal(err)
	}
	dropped := strings.Replace(string(spec), "  - uid: continuity\n    type: sequence_check\n    keyBy: [key]\n    config: {field: n}\n", "", 1)
	if dropped == string(spec) {
		t.Fatal("the spec has no continuity operator to drop")
	}
	droppedSpec := filepath.Join(t.TempDir(), "dropped.yaml")
	if err := os.WriteFile(droppedSpec, []byte(dropped), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Weir("jobs", "plan", droppedSpec, "--from", from); err == nil || !strings.Contains(out, "dropped") || !strings.Contains(out, "would refuse") {
		t.Fatalf("plan of a submission dropping state: %v\n%s", err, out)
	}
	if out, err := c.Weir("submit", droppedSpec, "--from", from); err == nil || !strings.Contains(out, "allow-non-restored-state") {
		t.Fatalf("a submission dropping state was not refused: %v\n%s", err, out)
	}
	if out, err := c.Weir("jobs", "plan", job.Spec, "--from", from); err != nil || !strings.Contains(out, "restored") || !strings.Contains(out, "would accept") {
		t.Fatalf("plan of the same job: %v\n%s", err, out)
	}

	out, err := c.Weir("submit", job.Spec, "--from", from)
	if err != nil {
		t.Fatalf("submit --from %s: %v\n%s", from, err, out)
	}
	fields := strings.Fields(out)
	job.ID = fields[len(fields)-1]
	lost, duplicated := clustertest.FinishAndVerify(t, c, job)
	// The restored job's checkpoint ids go on after the one it started
	// from (two-phase-commit sinks name transactions by them).
	cks, err = c.Checkpoints(job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cks.GetCheckpoints()) == 0 {
		t.Fatal("the restored job lists no checkpoints")
	}
	for _, ck := range cks.GetCheckpoints() {
		if ck.GetCheckpointId() <= latest {
			t.Errorf("the job restored from checkpoint %d took checkpoint %d; its ids must go on after %d", latest, ck.GetCheckpointId(), latest)
		}
	}
	fmt.Printf("restored_from_checkpoint=%d lost=%d duplicated=%d\n", latest, lost, duplicated)
	if lost != 0 || duplicated != 0 {
		t.Fatalf("restored_from_checkpoint=%d lost=%d duplicated=%d", latest, lost, duplicated)
	}
}

// corruptCheckpoints flips a byte in the middle of every state object
// (manifests: every manifest) of every checkpoint of job id under the
// job's file:// checkpoint storage.
// stateObjectsOnly makes taskmanagers write every snapshot as an object,
// none inline in the manifest, for the tests that corrupt state objects
// (an inline snapshot's damage is found the same way: checkpoint's
// TestInlineSnapshots).
var stateObjectsOnly = []string{"--state-inline-bytes", "0"}

func corruptCheckpoints(t *testing.T, job *clustertest.SequenceJob, id string, manifests bool) {
	t.Helper()
	root := filepath.Join(filepath.Dir(job.Spec), "ckpt", id)
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, "/chk-") {
			return err
		}
		if (filepath.Base(path) == "_manifest") != manifests {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil || len(data) == 0 {
			return err
		}
		data[len(data)/2] ^= 0xff
		n++
		return os.WriteFile(path, data, 0o644)
	})
	if err != nil || n == 0 {
		t.Fatalf("corrupting job %s under %s: %d objects: %v", id, root, n, err)
	}
}

// checkFailedOnCorruption checks that job id ended FAILED at once (no
// restart) with an error naming a checkpoint that does not verify.
func checkFailedOnCorruption(t *testing.T, c *clustertest.Cluster, id, when string) {
	t.Helper()
	job := c.WaitJob(id, 2*time.Minute).GetJob()
	if job.GetState() != weirpb.JobState_JOB_STATE_FAILED || !strings.Contains(job.GetError(), "does not verify") {
		t.Fatalf("%s: job %s ended %v, want FAILED naming a checkpoint that does not verify: %s", when, id, job.GetState(), job.GetError())
	}
	if n := c.JobRestarts(id); n != 0 {
		t.Fatalf("%s: job %s restarted %d times on a corrupt checkpoint, want 0", when, id, n)
	}
}

// TestCorruptCheckpointFailsJobHA is TestCorruptCheckpointFailsJob in ha:
// etcd mode: each job takes one checkpoint (triggered by hand, no periodic
// ones), its state objects or manifest are corrupted, and the leader is
// killed: the new leader lists both jobs FAILED, at once, naming the
// checkpoint.
func TestCorruptCheckpointFailsJobHA(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := clustertest.StartHA(t, false, clustertest.HA{Endpoints: etcd.Endpoints(), Prefix: "/weir-hatest", LeaseTTL: clustertest.HALeaseTTL}, stateObjectsOnly...)
	state := clustertest.NewSequenceJob(t, "corrupt-state-ha", 60, 1000, 16)
	manifest := clustertest.NewSequenceJob(t, "corrupt-manifest-ha", 60, 1000, 16)
	var ids []string
	for _, j := range []*clustertest.SequenceJob{state, manifest} {
		spec, err := os.ReadFile(j.Spec)
		if err != nil {
			t.Fatal(err)
		}
		// Parallelism 2 each, so that both fit the cluster's 4 slots.
		body := strings.Replace(string(spec), "interval: 500ms", "interval: 1h", 1)
		body = strings.Replace(body, "parallelism: 4\n", "parallelism: 2\n", 1)
		if err := os.WriteFile(j.Spec, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		id := j.Submit(t, c)
		polltest.NoError(t, 2*time.Minute, "a checkpoint triggered by hand", func() error {
			_, err := c.Weir("checkpoints", "trigger", id)
			return err
		})
		clustertest.WaitCheckpointsSince(t, c, id, time.Time{}, 1, "triggered by hand")
		ids = append(ids, id)
	}
	corruptCheckpoints(t, state, ids[0], false)
	corruptCheckpoints(t, manifest, ids[1], true)
	leader, epoch, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	c.KillJobManager(leader)
	c.WaitLeader(epoch)
	for _, id := range ids {
		checkFailedOnCorruption(t, c, id, "after the takeover")
	}
	fmt.Printf("corrupt_jobs=2 failed=2 restarts=0 ha=etcd\n")
}
