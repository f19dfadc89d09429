package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// TestExactlyOnceOnPebbleState runs the exactly-once job with
// state.backend: pebble, checkpointing incrementally (the default: shared
// sstables under <job>/shared/) and with incremental: false (full snapshots
// in the canonical chunk format, no shared files). Either way the counts
// stay exactly-once across the injected failures and restores.
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
			if err := os.WriteFile(spec, []byte(fmt.Sprintf(body, "file://"+ckpt, eoDatagen, countsOut, windowsOut)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := c.Weir("submit", spec)
			if err != nil {
				t.Fatalf("weir submit: %v\n%s", err, out)
			}
			fields := strings.Fields(out)
			jobID := fields[len(fields)-1]
			job := c.WaitJobWhile(jobID, 5*time.Minute, func() {})
			if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
				t.Fatalf("job ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
			}
			if failures := c.JobRestarts(jobID); failures < 4 {
				t.Errorf("the job restarted %d times; the injected failures should have caused 4", failures)
			}
			lost, duplicated := checkRunningCounts(t, countsOut, eoDatagen)
			if lost != 0 || duplicated != 0 {
				t.Fatalf("not exactly-once on pebble state (%s): lost=%d duplicated=%d", tc.name, lost, duplicated)
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
