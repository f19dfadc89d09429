package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// sequenceSpec: every key of `keys` emits 1, 2, 3, ... in order (key = seq
// % keys, n = 1 + seq / keys); sequence_check fails the task if a key's n
// ever skips or repeats in its state; the two-phase-commit file sink writes
// what the test reads back.
const sequenceSpec = `name: %s
parallelism: 4
checkpointing:
  interval: 500ms
  storage: %q
%srestartStrategy:
  type: fixed-delay
  attempts: 100000
  delay: 100ms
operators:
  - uid: events
    type: datagen
    parallelism: 2
    config:
      rows: %d
      ratePerSecond: %d
      batchSize: 64
      fields:
        - {name: key, kind: sequence, modulo: %d}
        - {name: n, kind: sequence, divide: %d, start: 1}
  - uid: continuity
    type: sequence_check
    keyBy: [key]
    config: {field: n}
  - uid: out
    type: file
    config: {path: %q, format: csv}
`

// sequenceJob is the exactly-once workload of the fault tests (chaos, HA):
// a bounded, rate-limited job whose committed output is known in advance,
// so that lost and duplicated rows can be counted after any faults.
type sequenceJob struct {
	keys   int64
	perKey int64
	out    string // the file sink's directory
	spec   string // the job spec's path
	id     string // set by submit
}

// newSequenceJob writes the spec of a job that emits about `seconds` worth
// of rows at `rate` rows per second over `keys` keys (whole sequences per
// key), checkpointing every 500ms into dir.
func newSequenceJob(t *testing.T, name string, seconds float64, rate, keys int) *sequenceJob {
	t.Helper()
	return newSequenceJobOn(t, name, seconds, rate, keys, "", "")
}

// newSequenceJobOn is newSequenceJob with checkpoints in storage (default
// a file:// directory of the test's) and extra lines for the checkpointing
// block (each "  key: value\n").
func newSequenceJobOn(t *testing.T, name string, seconds float64, rate, keys int, storage, checkpointing string) *sequenceJob {
	t.Helper()
	dir := t.TempDir()
	j := &sequenceJob{keys: int64(keys), out: filepath.Join(dir, "out"), spec: filepath.Join(dir, "job.yaml")}
	j.perKey = int64(seconds*float64(rate)) / j.keys
	rows := j.perKey * j.keys
	if storage == "" {
		storage = "file://" + filepath.Join(dir, "ckpt")
	}
	body := fmt.Sprintf(sequenceSpec, name, storage, checkpointing, rows, rate, keys, keys, j.out)
	if err := os.WriteFile(j.spec, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return j
}

// submit submits the job with the weir CLI and returns its id.
func (j *sequenceJob) submit(t *testing.T, c *clustertest.Cluster) string {
	t.Helper()
	text, err := c.Weir("submit", j.spec)
	if err != nil {
		t.Fatalf("weir submit: %v\n%s", err, text)
	}
	fields := stringsFields(text)
	j.id = fields[len(fields)-1]
	return j.id
}

// verify counts, against the expected 1..perKey of every key, the rows the
// sink committed that are missing (lost) or extra (duplicated, including
// rows that should not exist at all).
func (j *sequenceJob) verify(t *testing.T) (lost, duplicated int) {
	t.Helper()
	_, got := clustertest.CommittedRows(t, j.out)
	seen := make(map[int64]map[int64]int)
	for _, r := range got {
		k, err1 := strconv.ParseInt(r[0], 10, 64)
		n, err2 := strconv.ParseInt(r[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad row %v", r)
		}
		if seen[k] == nil {
			seen[k] = make(map[int64]int)
		}
		seen[k][n]++
	}
	want := make(map[int64]int64, j.keys)
	for k := range j.keys {
		want[k] = j.perKey
	}
	return clustertest.LostAndDuplicated(want, seen)
}

// checkpointsOf summarises a job's checkpoint list as its jobmanager
// reports it.
type checkpointsOf struct {
	completed   int64 // the jobmanager's count of completed checkpoints
	lastTrigger int64 // trigger time (unix ms) of the latest completed one
}

func checkpointProgress(c *clustertest.Cluster, jobID string) checkpointsOf {
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		return checkpointsOf{}
	}
	p := checkpointsOf{completed: resp.GetCompleted()}
	for _, ck := range resp.GetCheckpoints() {
		if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			p.lastTrigger = max(p.lastTrigger, ck.GetTriggerTimeMs())
		}
	}
	return p
}

// completedSince returns the checkpoints completed that were triggered
// after since, and when the first of them completed (trigger + duration).
func completedSince(c *clustertest.Cluster, jobID string, since time.Time) (n int, firstDone time.Time) {
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

// jobEnded reports whether the job reached a terminal state.
func jobEnded(c *clustertest.Cluster, jobID string) bool {
	resp, err := c.Job(jobID)
	if err != nil {
		return false
	}
	s := resp.GetJob().GetState()
	return s == weirpb.JobState_JOB_STATE_FINISHED || s == weirpb.JobState_JOB_STATE_FAILED || s == weirpb.JobState_JOB_STATE_CANCELED
}
