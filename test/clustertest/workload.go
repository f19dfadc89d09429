package clustertest

// The sequence workload: the exactly-once job of the fault tests, shared
// by the process-test packages under test/.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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

// SequenceJob is the exactly-once workload of the fault tests (chaos, HA):
// a bounded, rate-limited job whose committed output is known in advance,
// so that lost and duplicated rows can be counted after any faults. Its
// spec is the file at Spec, in a directory of the test's that also holds
// its output (Out) and, by default, its checkpoints (the directory "ckpt"
// beside Spec).
type SequenceJob struct {
	keys   int64
	perKey int64
	// Out is the file sink's directory.
	Out string
	// Spec is the job spec's path; a test may rewrite the file before it
	// submits the job.
	Spec string
	// ID is the job's id, set by Submit (a test that submits the spec
	// itself sets it, for FinishAndVerify).
	ID string
}

// NewSequenceJob writes the spec of a job that emits about `seconds` worth
// of rows at `rate` rows per second over `keys` keys (whole sequences per
// key), checkpointing every 500ms into its directory.
func NewSequenceJob(t *testing.T, name string, seconds float64, rate, keys int) *SequenceJob {
	t.Helper()
	return NewSequenceJobOn(t, name, seconds, rate, keys, "", "")
}

// NewSequenceJobOn is NewSequenceJob with checkpoints in storage (default
// a file:// directory of the test's) and extra lines for the checkpointing
// block (each "  key: value\n").
func NewSequenceJobOn(t *testing.T, name string, seconds float64, rate, keys int, storage, checkpointing string) *SequenceJob {
	t.Helper()
	dir := t.TempDir()
	j := &SequenceJob{keys: int64(keys), Out: filepath.Join(dir, "out"), Spec: filepath.Join(dir, "job.yaml")}
	j.perKey = int64(seconds*float64(rate)) / j.keys
	rows := j.perKey * j.keys
	if storage == "" {
		storage = "file://" + filepath.Join(dir, "ckpt")
	}
	body := fmt.Sprintf(sequenceSpec, name, storage, checkpointing, rows, rate, keys, keys, j.Out)
	if err := os.WriteFile(j.Spec, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return j
}

// Submit submits the job with the weir CLI, sets ID and returns it.
func (j *SequenceJob) Submit(t *testing.T, c *Cluster) string {
	t.Helper()
	text, err := c.Weir("submit", j.Spec)
	if err != nil {
		t.Fatalf("weir submit: %v\n%s", err, text)
	}
	fields := strings.Fields(text)
	j.ID = fields[len(fields)-1]
	return j.ID
}

// Verify counts, against the expected 1..perKey of every key, the rows the
// sink committed that are missing (lost) or extra (duplicated, including
// rows that should not exist at all).
func (j *SequenceJob) Verify(t *testing.T) (lost, duplicated int) {
	t.Helper()
	_, got := CommittedRows(t, j.Out)
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
	return LostAndDuplicated(want, seen)
}
