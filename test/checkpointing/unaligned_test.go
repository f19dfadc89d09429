package checkpointing

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// unalignedDatagen emits 20000 rows per second over two subtasks; the
// throttle behind it passes 2 × 1000, a tenth of that, so the sources are
// backpressured for the whole run.
const unalignedDatagen = `{"rows": 40000, "ratePerSecond": 20000, "seed": 17, "batchSize": 64, "fields": [
  {"name": "key", "kind": "key", "cardinality": 16, "prefix": "k"},
  {"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 999}]}`

const unalignedSpec = `name: unaligned-it
parallelism: 2
checkpointing:
  interval: 300ms
  mode: exactly_once
  unaligned: true%s
  retained: 3
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 20
  delay: 200ms
operators:
  - uid: events
    type: datagen
    config: %s
  - uid: slow
    type: throttle
    keyBy: [key]
    config: {rowsPerSecond: 1000}
  - uid: counts
    type: running_count
    keyBy: [key]
  - uid: chaos
    type: fail
    config:
      failures:
        - {attempt: 1, at: records, after: 3000}
        - {attempt: 2, at: snapshot}
        - {attempt: 3, at: restore}
        - {attempt: 4, at: notify}
  - uid: counts-out
    type: file
    config: {path: %q, format: csv}
`

// TestUnalignedCheckpointsUnderBackpressure runs a job whose sources are
// backpressured by a sink-side throttle at a tenth of their rate, with
// unaligned checkpoints: checkpoints keep completing, some of them keep
// channel state (the manifest says so), and the job survives four injected
// failures and a taskmanager SIGKILL with its output exactly once (every
// key's running count 1..N exactly once). Mode "unaligned" takes unaligned
// checkpoints from the start; mode "timeout" starts them aligned with a
// 50 ms alignedCheckpointTimeout, so the throttled tasks switch them to
// unaligned (the channel state in the manifests shows they did).
func TestUnalignedCheckpointsUnderBackpressure(t *testing.T) {
	for _, mode := range []string{"unaligned", "timeout"} {
		t.Run(mode, func(t *testing.T) { testUnaligned(t, mode) })
	}
}

func testUnaligned(t *testing.T, mode string) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
	dir := t.TempDir()
	ckpt, out := filepath.Join(dir, "ckpt"), filepath.Join(dir, "counts")
	timeout := ""
	if mode == "timeout" {
		timeout = "\n  alignedCheckpointTimeout: 50ms"
	}
	body := fmt.Sprintf(unalignedSpec, timeout, "file://"+ckpt, unalignedDatagen, out)
	jobID := clustertest.SubmitSpec(t, c, filepath.Join(dir, "job.yaml"), body)
	// The same job at another parallelism, to be started from a checkpoint
	// with channel state: refused.
	rescaled := filepath.Join(dir, "rescaled.yaml")
	if err := os.WriteFile(rescaled, []byte(strings.Replace(body, "parallelism: 2", "parallelism: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var refusal string // the refused rescale's output

	var channelState bool // a completed checkpoint's manifest shows channel state
	inspected := map[int64]bool{}
	killed := false
	var killedAt int64 // the last completed checkpoint when the taskmanager died
	job := c.WaitJobWhile(jobID, 5*time.Minute, func() {
		resp, err := c.Checkpoints(jobID)
		if err != nil {
			return
		}
		var last int64
		for _, ck := range resp.GetCheckpoints() {
			if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				last = max(last, ck.GetCheckpointId())
			}
		}
		// The newest completed checkpoint is retained (older ones may be
		// gone already).
		if last > 0 && !inspected[last] && (!channelState || !refused(refusal)) {
			inspected[last] = true
			text, err := c.Weir("checkpoints", "inspect", jobID, strconv.FormatInt(last, 10))
			if err == nil && strings.Contains(text, "channel state:") {
				channelState = true
				if text, err := c.Weir("submit", rescaled, "--from", fmt.Sprintf("%s@%d", jobID, last)); err != nil {
					refusal = text
				} else {
					t.Errorf("a rescaled restore from unaligned checkpoint %d was accepted:\n%s", last, text)
				}
			}
		}
		// After the injected failures, and once a checkpoint completed
		// since: SIGKILL a taskmanager and start it again.
		if !killed && last > 0 && c.JobRestarts(jobID) >= 4 {
			if killedAt == 0 {
				killedAt = last
				return
			}
			if last > killedAt {
				c.KillTaskManager(0)
				c.RestartTaskManager(0)
				killed = true
			}
		}
	})
	if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
	}
	if !killed {
		t.Fatal("the job finished before the taskmanager could be killed: its input is too small for this machine's pace")
	}
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		t.Fatal(err)
	}
	failures := c.JobRestarts(jobID) // the injected ones and the SIGKILL's
	lost, duplicated := clustertest.CheckRunningCounts(t, out, unalignedDatagen)
	fmt.Printf("mode=%s failures=%d checkpoints=%d lost=%d duplicated=%d\n", mode, failures, resp.GetCompleted(), lost, duplicated)
	if failures < 5 {
		t.Errorf("the job restarted %d times; the injected failures and the kill should have caused 5", failures)
	}
	if !refused(refusal) {
		t.Errorf("the rescaled restore from an unaligned checkpoint was not refused with advice to take a savepoint: %q", refusal)
	}
	if !channelState {
		t.Errorf("no completed checkpoint's manifest showed channel state: the barriers never overtook data")
	}
	if resp.GetCompleted() < 5 {
		t.Errorf("only %d checkpoints completed under backpressure", resp.GetCompleted())
	}
	if lost != 0 || duplicated != 0 {
		// Which counts are missing says where rows were lost (the tail
		// of a key: the end of the input; a gap: a restore).
		_, rows := clustertest.CommittedRows(t, out)
		seen := map[string]map[int64]bool{}
		for _, r := range rows {
			n, _ := strconv.ParseInt(r[1], 10, 64)
			if seen[r[0]] == nil {
				seen[r[0]] = map[int64]bool{}
			}
			seen[r[0]][n] = true
		}
		for k, m := range seen {
			var mx int64
			var missing []int64
			for n := range m {
				mx = max(mx, n)
			}
			for i := int64(1); i <= mx+30; i++ {
				if !m[i] {
					missing = append(missing, i)
				}
			}
			t.Logf("key %s: highest committed count %d; missing (first 40, up to 30 past it): %v", k, mx, missing[:min(len(missing), 40)])
		}
		t.Fatalf("not exactly-once: lost=%d duplicated=%d", lost, duplicated)
	}
}

// refused reports whether out is the refusal of a rescaled restore from an
// unaligned checkpoint, with its advice.
func refused(out string) bool {
	return strings.Contains(out, "unaligned") && strings.Contains(out, "savepoint")
}
