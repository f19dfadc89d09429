package state

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// TestExactlyOnceOnPebbleState runs the exactly-once job with
// state.backend: pebble, checkpointing incrementally (the default: shared
// sstables under <job>/shared/) and with incremental: false (full snapshots
// in the canonical chunk format, no shared files). Either way the counts
// and the tumbling windows stay exactly-once across the injected failures
// and restores.
func TestExactlyOnceOnPebbleState(t *testing.T) {
	for _, tc := range []struct {
		name, state string
		shared      bool
	}{
		{"incremental", "{backend: pebble}", true},
		{"full", "{backend: pebble, incremental: false}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
			dir := t.TempDir()
			ckpt, countsOut, windowsOut := filepath.Join(dir, "ckpt"), filepath.Join(dir, "counts"), filepath.Join(dir, "windows")
			body := strings.Replace(eoSpec, "parallelism: 4\n", "parallelism: 4\nstate: "+tc.state+"\n", 1)
			// Keep the checkpoints once the job ends, to look at them.
			body = strings.Replace(body, "  retained: 3\n", "  retained: 3\n  retention: retain\n", 1)
			spec := filepath.Join(dir, "job.yaml")
			jobID := clustertest.SubmitSpec(t, c, spec, fmt.Sprintf(body, "file://"+ckpt, eoDatagen, countsOut, windowsOut))
			job := c.WaitJobWhile(jobID, 5*time.Minute, func() {})
			if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
				t.Fatalf("job ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
			}
			if failures := c.JobRestarts(jobID); failures < 4 {
				t.Errorf("the job restarted %d times; the injected failures should have caused 4", failures)
			}
			waitNoLocalState(t, c, 2)
			lost, duplicated := clustertest.CheckRunningCounts(t, countsOut, eoDatagen)
			// The tumbling windows' state is on Pebble too.
			wlost, wdup, wrong := checkWindows(t, windowsOut)
			if lost != 0 || duplicated != 0 || wlost != 0 || wdup != 0 || wrong != 0 {
				t.Fatalf("not exactly-once on pebble state (%s): counts lost=%d duplicated=%d, windows lost=%d duplicated=%d wrong=%d", tc.name, lost, duplicated, wlost, wdup, wrong)
			}
			sharedDir := filepath.Join(ckpt, jobID, "shared")
			shared, _ := filepath.Glob(filepath.Join(sharedDir, "*"))
			switch {
			case tc.shared && len(shared) == 0:
				t.Fatalf("no shared snapshot files under %s: the pebble state was not checkpointed incrementally", sharedDir)
			case !tc.shared && len(shared) > 0:
				t.Fatalf("%d shared snapshot files under %s with incremental: false; want full snapshots only", len(shared), sharedDir)
			}
		})
	}
}

// waitNoLocalState waits until no local state is left on the first n
// taskmanagers: every task removes its working files when it ends, and
// each taskmanager removes the local snapshots it kept for local recovery
// once the jobmanager no longer lists the job as running.
func waitNoLocalState(t *testing.T, c *clustertest.Cluster, n int) {
	t.Helper()
	var left []string
	polltest.Eventually(t, time.Minute, "no local state directory left on the taskmanagers", func() bool {
		left = left[:0]
		for i := range n {
			entries, _ := os.ReadDir(c.StateDir(i))
			for _, e := range entries {
				left = append(left, filepath.Join(c.StateDir(i), e.Name()))
			}
		}
		return len(left) == 0
	})
}

// TestLocalStateRemovedOnCancel: a cancelled job on Pebble state leaves no
// local state directory on its taskmanagers.
func TestLocalStateRemovedOnCancel(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	body := fmt.Sprintf(`name: cancel-local-state
parallelism: 2
state: {backend: pebble}
checkpointing: {interval: 200ms, storage: %q}
operators:
  - uid: events
    type: datagen
    config: {ratePerSecond: 20000, seed: 3, fields: [{name: key, kind: key, cardinality: 1000, prefix: k}]}
  - uid: counts
    type: running_count
    keyBy: [key]
  - uid: out
    type: discard
`, "file://"+filepath.Join(dir, "ckpt"))
	jobID := clustertest.SubmitSpec(t, c, spec, body)
	polltest.Eventually(t, time.Minute, "two completed checkpoints", func() bool {
		cks, err := c.Checkpoints(jobID)
		return err == nil && cks.GetCompleted() >= 2
	})
	// Local snapshots exist while the job runs.
	var snaps []string
	for i := range 2 {
		m, _ := filepath.Glob(filepath.Join(c.StateDir(i), jobID, "*", "snapshots", "*", "chk-*"))
		snaps = append(snaps, m...)
	}
	if len(snaps) == 0 {
		t.Fatalf("no local snapshot directories under %s or %s while the job runs", c.StateDir(0), c.StateDir(1))
	}
	if out, err := c.Weir("jobs", "cancel", jobID); err != nil {
		t.Fatalf("weir jobs cancel: %v\n%s", err, out)
	}
	job := c.WaitJob(jobID, time.Minute)
	if s := job.GetJob().GetState(); s != weirpb.JobState_JOB_STATE_CANCELED {
		t.Fatalf("job state %v after cancel", s)
	}
	waitNoLocalState(t, c, 2)
}
