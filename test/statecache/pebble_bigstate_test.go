package statecache

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
)

// bigStateDatagen produces 160,000 rows over 80,000 distinct keys of about
// 30 bytes: the running counts hold about 3 MB of keys and counts, several
// times the taskmanager's 512 KiB of state caches.
const bigStateDatagen = `{"rows": 160000, "ratePerSecond": 100000, "seed": 29, "batchSize": 512, "fields": [
  {"name": "key", "kind": "key", "cardinality": 80000, "prefix": "account-0000000000000000-"},
  {"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 999}]}`

const bigStateSpec = `name: pebble-bigger-than-cache
parallelism: 2
state: {backend: pebble}
checkpointing:
  interval: 500ms
  mode: exactly_once
  storage: %q
restartStrategy:
  type: fixed-delay
  attempts: 5
  delay: 200ms
operators:
  - uid: events
    type: datagen
    parallelism: 2
    config: %s
  - uid: counts
    type: running_count
    keyBy: [key]
  - uid: chaos
    type: fail
    config:
      failures:
        - {attempt: 1, at: records, after: 30000}
  - uid: counts-out
    type: file
    config: {path: %q, format: csv}
`

// stateCacheBytes is the taskmanager's --state-cache-bytes: with two slots,
// 256 KiB per subtask (128 KiB block cache, 128 KiB value cache), the
// smallest share a taskmanager accepts.
const stateCacheBytes = 512 << 10

// TestPebbleStateLargerThanCache runs a keyed count whose Pebble state is
// several times the taskmanagers' configured state caches, through a failure
// and a restore from an incremental checkpoint, and checks every committed
// count exactly against an independent computation. It prints the state
// size (keys and counts, and as checkpointed: compressed sstables) and the
// taskmanager's peak RSS.
func TestPebbleStateLargerThanCache(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 1, Slots: 2,
		TaskManagerArgs: []string{"--state-cache-bytes", strconv.Itoa(stateCacheBytes)}})
	dir := t.TempDir()
	ckpt, countsOut := filepath.Join(dir, "ckpt"), filepath.Join(dir, "counts")
	spec := filepath.Join(dir, "job.yaml")
	jobID := clustertest.SubmitSpec(t, c, spec, fmt.Sprintf(bigStateSpec, "file://"+ckpt, bigStateDatagen, countsOut))

	var checkpointBytes int64
	job := c.WaitJobWhile(jobID, 12*time.Minute, func() {
		if cps, err := c.Checkpoints(jobID); err == nil {
			for _, cp := range cps.GetCheckpoints() {
				checkpointBytes = max(checkpointBytes, cp.GetSizeBytes())
			}
		}
	})
	if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
	}
	if n := c.JobRestarts(jobID); n < 1 {
		t.Errorf("the job restarted %d times; the injected failure should have restored it once", n)
	}
	lost, duplicated := clustertest.CheckRunningCounts(t, countsOut, bigStateDatagen)
	// The logical state: every distinct key and its 8-byte count.
	var cfg connectors.DatagenConfig
	if err := json.Unmarshal([]byte(bigStateDatagen), &cfg); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	connectors.GenerateRows(cfg, 0, cfg.Rows, func(_ int64, row []any) { keys[row[0].(string)] = true })
	var stateBytes int64
	for k := range keys {
		stateBytes += int64(len(k)) + 8
	}
	t.Logf("state_cache_bytes=%d state_bytes=%d largest_checkpoint_bytes=%d taskmanager_peak_rss_bytes=%d lost=%d duplicated=%d",
		stateCacheBytes, stateBytes, checkpointBytes, peakRSS(c.TMs[0].Pid()), lost, duplicated)
	if lost != 0 || duplicated != 0 {
		t.Fatalf("keyed counts on Pebble state larger than the cache: lost=%d duplicated=%d", lost, duplicated)
	}
	if stateBytes < 4*stateCacheBytes {
		t.Fatalf("%d bytes of state are not several times the %d bytes of state cache: the test does not test what it claims", stateBytes, stateCacheBytes)
	}
}

// peakRSS returns a process's peak resident set size in bytes (VmHWM), or 0
// when it cannot be read.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
