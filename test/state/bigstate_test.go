package state

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// windowBigStateSpec is a sliding window on Pebble over keys 0..K-1, each seen
// twice (key = seq mod K, v = seq, ts = seq ms), with windows K ms long
// sliding by K/2: every key has state until the end, so the window's state
// holds all K keys at once.
const windowBigStateSpec = `name: window-bigstate
parallelism: 2
state: {backend: pebble, incremental: false}
checkpointing: {interval: %ds, storage: %q}
restartStrategy: {type: fixed-delay, attempts: 5, delay: 200ms}
operators:
  - uid: events
    type: datagen
    config:
      rows: %d
      ratePerSecond: %d
      fields:
        - {name: key, kind: sequence, modulo: %d}
        - {name: v, kind: sequence}
        - {name: ts, kind: timestamp, start: 0, stepMillis: 1}
  - uid: stamped
    type: watermarks
    config: {timestampField: ts}
  - uid: windows
    type: sliding_window
    keyBy: [key]
    config:
      size: %dms
      slide: %dms
      aggregates: [{fn: count, as: n}, {fn: sum, field: v, as: total}]
  - uid: out
    type: file
    config: {path: %q, format: csv}
`

// TestWindowBigState runs a sliding window on Pebble, SIGKILLs a
// taskmanager once a checkpoint holds the window's state, and checks every
// window exactly against windows computed from the generator's formula. It
// prints window_bigstate keys= state_bytes=<largest checkpoint>
// cache_bytes=<the taskmanager's --state-cache-bytes> lost= duplicated=.
//
// make test runs it with 4,000 keys (under the race detector). With
// WEIR_BIGSTATE_KEYS set (make bigstate sets 1,000,000) it also requires the
// state to be at least 10 times the state cache.
func TestWindowBigState(t *testing.T) {
	keys, full := int64(4_000), false
	if v := os.Getenv("WEIR_BIGSTATE_KEYS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 2 || n%2 != 0 {
			t.Fatalf("WEIR_BIGSTATE_KEYS=%q: want an even number of keys", v)
		}
		keys, full = n, true
	}
	const cacheBytes = 512 << 10 // the smallest the two slots allow
	rows := 2 * keys
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2,
		TaskManagerArgs: []string{"--state-cache-bytes", strconv.Itoa(cacheBytes)}})
	dir := t.TempDir()
	out := filepath.Join(dir, "windows")
	spec := filepath.Join(dir, "job.yaml")
	// Full snapshots hold all the state: one a second would be most of
	// the work with a million keys.
	interval := max(1, keys/100_000)
	body := fmt.Sprintf(windowBigStateSpec, interval, "file://"+filepath.Join(dir, "ckpt"), rows, rows/6, keys, keys, keys/2, out)
	jobID := clustertest.SubmitSpec(t, c, spec, body)

	// Kill a taskmanager once a checkpoint holds state, while the job runs.
	polltest.Eventually(t, 3*time.Minute, "a completed checkpoint with state while the job runs", func() bool {
		cks, err := c.Checkpoints(jobID)
		if err != nil {
			return false
		}
		for _, ck := range cks.GetCheckpoints() {
			if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && ck.GetSizeBytes() > 0 {
				return true
			}
		}
		return false
	})
	c.KillTaskManager(1)
	c.RestartTaskManager(1)

	job := c.WaitJob(jobID, 40*time.Minute)
	if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("job ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
	}
	if c.JobRestarts(jobID) < 1 {
		t.Errorf("the job did not restart after the taskmanager was killed")
	}
	var stateBytes int64
	if cks, err := c.Checkpoints(jobID); err == nil {
		for _, ck := range cks.GetCheckpoints() {
			stateBytes = max(stateBytes, ck.GetSizeBytes())
		}
	}

	// The windows from the formula: row seq has key seq%keys, v seq and
	// ts seq; windows [s, s+keys) for s a multiple of keys/2.
	type win struct{ key, start int64 }
	type agg struct{ n, total int64 }
	want := map[win]agg{}
	slide := keys / 2
	for seq := int64(0); seq < rows; seq++ {
		for s := seq - seq%slide; s > seq-keys; s -= slide {
			w := win{seq % keys, s}
			a := want[w]
			a.n++
			a.total += seq
			want[w] = a
		}
	}
	_, got := clustertest.CommittedRows(t, out)
	seen := make(map[win]bool, len(got))
	lost, duplicated, wrong := 0, 0, 0
	for _, r := range got {
		key, _ := strconv.ParseInt(r[0], 10, 64)
		w := win{key, clustertest.ParseTime(t, r[1])}
		n, _ := strconv.ParseInt(r[3], 10, 64)
		total, _ := strconv.ParseInt(r[4], 10, 64)
		if seen[w] {
			duplicated++
			continue
		}
		seen[w] = true
		if a, ok := want[w]; !ok || a != (agg{n, total}) {
			wrong++
			if wrong <= 3 {
				t.Errorf("window %+v: got n=%d total=%d, want %+v (present: %v)", w, n, total, a, ok)
			}
		}
	}
	for w := range want {
		if !seen[w] {
			lost++
		}
	}
	fmt.Printf("window_bigstate keys=%d state_bytes=%d cache_bytes=%d lost=%d duplicated=%d\n", keys, stateBytes, cacheBytes, lost, duplicated)
	if lost != 0 || duplicated != 0 || wrong != 0 {
		t.Fatalf("not exactly-once: lost=%d duplicated=%d wrong=%d of %d windows", lost, duplicated, wrong, len(want))
	}
	if full && stateBytes < 10*cacheBytes {
		t.Errorf("the largest checkpoint holds %d bytes of state, less than 10 × the %d bytes of state cache: the test does not test state beyond the cache", stateBytes, cacheBytes)
	}
	waitNoLocalState(t, c, 2)
}
