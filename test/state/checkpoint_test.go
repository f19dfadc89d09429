package state

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// eoDatagen is the source of the exactly-once test: rate-limited so that
// checkpoints and failures happen while data flows.
const eoDatagen = `{"rows": 120000, "ratePerSecond": 20000, "seed": 11, "batchSize": 256, "fields": [
  {"name": "key", "kind": "key", "cardinality": 16, "prefix": "k"},
  {"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 999},
  {"name": "ts", "kind": "timestamp", "start": "2026-01-01T00:00:00Z", "stepMillis": 2, "jitterMillis": 10}]}`

const eoSpec = `name: exactly-once-it
parallelism: 4
checkpointing:
  interval: 300ms
  mode: exactly_once
  retained: 3
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 10
  delay: 200ms
operators:
  - uid: events
    type: datagen
    parallelism: 2
    config: %s
  - uid: stamped
    type: watermarks
    parallelism: 2
    config: {timestampField: ts, maxOutOfOrderness: 50ms}
  - uid: counts
    type: running_count
    keyBy: [key]
  - uid: chaos
    type: fail
    config:
      failures:
        - {attempt: 1, at: records, after: 8000}
        - {attempt: 2, at: snapshot}
        - {attempt: 3, at: restore}
        - {attempt: 4, at: notify}
  - uid: counts-out
    type: file
    config: {path: %q, format: csv}
  - uid: windows
    type: tumbling_window
    input: stamped
    keyBy: [key]
    config:
      size: 1s
      aggregates:
        - {fn: count, as: n}
        - {fn: sum, field: value, as: total}
        - {fn: max, field: value, as: top}
  - uid: windows-out
    type: file
    config: {path: %q, format: csv}
`

func TestExactlyOnceUnderInjectedFailures(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
	dir := t.TempDir()
	ckpt, countsOut, windowsOut := filepath.Join(dir, "ckpt"), filepath.Join(dir, "counts"), filepath.Join(dir, "windows")
	spec := filepath.Join(dir, "job.yaml")
	jobID := clustertest.SubmitSpec(t, c, spec, fmt.Sprintf(eoSpec, "file://"+ckpt, eoDatagen, countsOut, windowsOut))

	// While the job runs, a completed checkpoint can be listed and inspected.
	var inspected bool
	job := c.WaitJobWhile(jobID, 5*time.Minute, func() {
		if inspected {
			return
		}
		resp, err := c.Checkpoints(jobID)
		if err != nil {
			return
		}
		for _, ck := range resp.GetCheckpoints() {
			if ck.GetStatus() != weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				continue
			}
			text, err := c.Weir("checkpoints", "inspect", jobID, strconv.FormatInt(ck.GetCheckpointId(), 10))
			if err == nil && strings.Contains(text, "counts") && strings.Contains(text, "events") {
				inspected = true
				// A dry-run garbage collection lists but never deletes.
				gc, err := c.Weir("checkpoints", "gc", jobID, "--dry-run", "--min-age", "0s")
				if err != nil || !strings.Contains(gc, "would delete") {
					t.Errorf("weir checkpoints gc --dry-run: %v\n%s", err, gc)
				}
			}
			return
		}
	})
	if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
	}
	resp, err := c.Checkpoints(jobID)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Weir("checkpoints", "list", jobID)
	if err != nil || !strings.Contains(list, "completed") {
		t.Fatalf("weir checkpoints list: %v\n%s", err, list)
	}
	failures := c.JobRestarts(jobID)

	lost, duplicated := clustertest.CheckRunningCounts(t, countsOut, eoDatagen)

	wlost, wdup, wrong := checkWindows(t, windowsOut)
	lost += wlost
	duplicated += wdup
	fmt.Printf("failures=%d checkpoints=%d lost=%d duplicated=%d\n", failures, resp.GetCompleted(), lost, duplicated)
	if failures < 4 {
		t.Errorf("the job restarted %d times; the injected failures should have caused 4", failures)
	}
	if !inspected {
		t.Errorf("no completed checkpoint could be inspected while the job ran")
	}
	if lost != 0 || duplicated != 0 || wrong != 0 {
		t.Fatalf("not exactly-once: lost=%d duplicated=%d wrong windows=%d", lost, duplicated, wrong)
	}
}

const aloSpec = `name: at-least-once-it
parallelism: 4
checkpointing:
  interval: 200ms
  mode: at_least_once
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 5
  delay: 100ms
operators:
  - uid: events
    type: datagen
    parallelism: 2
    config: {rows: 80000, ratePerSecond: 20000, seed: 5, fields: [{name: id, kind: sequence}, {name: key, kind: key, cardinality: 32}]}
  - uid: chaos
    type: fail
    keyBy: [key]
    config:
      failures:
        - {attempt: 1, at: records, after: 6000}
  - uid: out
    type: file
    config: {path: %q, format: csv}
`

func TestAtLeastOnceLosesNothing(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(aloSpec, "file://"+filepath.Join(dir, "ckpt"), out)), 0o644); err != nil {
		t.Fatal(err)
	}
	text, err := c.Weir("submit", spec, "--wait")
	if err != nil {
		t.Fatalf("weir submit --wait: %v\n%s", err, text)
	}
	_, rows := clustertest.CommittedRows(t, out)
	seen := make(map[int64]int)
	for _, r := range rows {
		id, err := strconv.ParseInt(r[0], 10, 64)
		if err != nil {
			t.Fatalf("bad row %v", r)
		}
		seen[id]++
	}
	lost, duplicated := 0, 0
	for id := int64(0); id < 80000; id++ {
		switch n := seen[id]; {
		case n == 0:
			lost++
		case n > 1:
			duplicated += n - 1
		}
	}
	var ids []int64
	for id := range seen {
		if id < 0 || id >= 80000 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	fields := strings.Fields(text)
	restarts := c.JobRestarts(fields[len(fields)-2])
	fmt.Printf("mode=at_least_once failures=%d lost=%d duplicated=%d\n", restarts, lost, duplicated)
	if restarts < 1 {
		t.Errorf("the injected failure did not restart the job")
	}
	if lost != 0 || len(ids) != 0 {
		t.Fatalf("at-least-once lost %d records (and produced %d unknown ids)", lost, len(ids))
	}
}

// checkWindows checks the tumbling windows of eoSpec's windows-out against
// windows computed from eoDatagen's rows: it returns how many windows are
// missing, duplicated and wrong.
func checkWindows(t *testing.T, windowsOut string) (lost, duplicated, wrong int) {
	t.Helper()
	// Every window exactly once with the right aggregates.
	want := map[clustertest.WindowKey]clustertest.WindowAgg{}
	var cfg connectors.DatagenConfig
	_ = json.Unmarshal([]byte(eoDatagen), &cfg)
	for seq := int64(0); seq < cfg.Rows; seq++ {
		row := connectors.GenerateRow(cfg, seq)
		key, value, ts := row[0].(string), row[1].(int64), row[2].(int64)
		k := clustertest.WindowKey{Key: key, Start: ts - ((ts%1000)+1000)%1000}
		a, seen := want[k]
		a.N++
		a.Total += value
		if !seen || value > a.Top {
			a.Top = value
		}
		want[k] = a
	}
	got, duplicated := clustertest.CommittedWindows(t, windowsOut)
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			lost++
		case g != w:
			wrong++
			if wrong <= 3 {
				t.Errorf("window %v: got %+v, want %+v", k, g, w)
			}
		}
	}
	return lost, duplicated, wrong
}
