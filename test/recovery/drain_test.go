package recovery

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
)

// drainDatagen is the source of the drain test: one subtask (so that the
// rows it emitted are rows 0..P-1), rate-limited so that the stop comes
// while it runs, timestamps in order (no row is late).
const drainDatagen = `{"rows": 48000, "ratePerSecond": 6000, "seed": 5, "batchSize": 64, "fields": [
  {"name": "key", "kind": "key", "cardinality": 11, "prefix": "k"},
  {"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 999},
  {"name": "ts", "kind": "timestamp", "start": "2026-01-01T00:00:00Z", "stepMillis": 4, "jitterMillis": 0}]}`

const drainSpec = `name: %s
parallelism: 2
checkpointing:
  interval: 500ms
  tolerableFailures: 10
  mode: exactly_once
  storage: %q
restartStrategy: {type: fixed-delay, attempts: 3, delay: 200ms}
operators:
  - uid: events
    type: datagen
    parallelism: 1
    config: %s
  - uid: stamped
    type: watermarks
    parallelism: 1
    config: {timestampField: ts, maxOutOfOrderness: 50ms}
  - uid: windows
    type: tumbling_window
    keyBy: [key]
    config:
      size: 1s
      aggregates:
        - {fn: count, as: n}
        - {fn: sum, field: value, as: total}
        - {fn: max, field: value, as: top}
  - uid: out
    type: file
    config: {path: %q, format: csv}
`

// drainWindows computes the windows of the first rows rows of
// drainDatagen, independently of the engine; last is the window of the
// last of them.
func drainWindows(t *testing.T, rows int64) (want map[clustertest.WindowKey]clustertest.WindowAgg, last clustertest.WindowKey) {
	t.Helper()
	var cfg connectors.DatagenConfig
	if err := json.Unmarshal([]byte(drainDatagen), &cfg); err != nil {
		t.Fatal(err)
	}
	want = make(map[clustertest.WindowKey]clustertest.WindowAgg)
	for seq := range rows {
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
		last = k
	}
	return want, last
}

// sourcePosition reads from the savepoint at loc how many rows the
// drain test's source (one split: rows 0, 1, 2, …) had emitted at its
// barrier: the position datagen's state records ("positions": version 2,
// then varints start, stride and the index of the next row).
func sourcePosition(t *testing.T, loc string) int64 {
	t.Helper()
	store, err := storeuri.Open(t.Context(), loc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := checkpoint.ReadSavepoint(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range m.GetOperators() {
		if op.GetOperatorUid() != "events" {
			continue
		}
		snap, err := checkpoint.NewStorage(store).LoadOperatorState(t.Context(), op.GetHandles(), stream.KeyGroupRangeFor(int(m.GetMaxParallelism()), 1, 0), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		items := snap.List["positions"]
		if len(items) != 1 || len(items[0]) == 0 || items[0][0] != 2 {
			t.Fatalf("the source's state in %s is %d items, not one version-2 split", loc, len(items))
		}
		b := items[0][1:]
		var v [3]int64
		for i := range v {
			n := 0
			if v[i], n = binary.Varint(b); n <= 0 {
				t.Fatalf("the source's split in %s is truncated", loc)
			}
			b = b[n:]
		}
		if v[0] != 0 || v[1] != 1 {
			t.Fatalf("the source's split in %s starts at %d with stride %d; want the one split 0, 1", loc, v[0], v[1])
		}
		return v[2]
	}
	t.Fatalf("no state of the source in %s", loc)
	return 0
}

// compareWindows counts the windows of want missing from got, and those
// in got that are not in want or differ.
func compareWindows(t *testing.T, want, got map[clustertest.WindowKey]clustertest.WindowAgg) (lost, wrong int) {
	t.Helper()
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
	for k, g := range got {
		if _, ok := want[k]; !ok {
			wrong++
			if wrong <= 3 {
				t.Errorf("window %v = %+v was not expected", k, g)
			}
		}
	}
	return lost, wrong
}

// TestStopWithDrain stops a keyed event-time window job with weir jobs stop
// --drain while its source runs: the job ends FINISHED, and the committed
// output is every window of the rows the source emitted before the
// savepoint's barrier (its position in the savepoint), each exactly once
// and with the right aggregates, the windows still open at the stop
// included: the maximum watermark fired them (without --drain the
// watermark is below their end, so they would be missing). The same job stopped without --drain and resumed from
// its savepoint to the end of its bounded input commits exactly every
// window of the whole input. It prints
//
//	drain_rows=R drained_windows=W lost=0 duplicated=0 wrong=0 resumed_windows=V resumed_lost=0 resumed_duplicated=0 resumed_wrong=0
func TestStopWithDrain(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "info"})
	spDir := "file://" + filepath.Join(t.TempDir(), "savepoints")
	writeSpec := func(name string) (spec, out string) {
		dir := t.TempDir()
		spec, out = filepath.Join(dir, "job.yaml"), filepath.Join(dir, "out")
		body := fmt.Sprintf(drainSpec, name, "file://"+filepath.Join(dir, "ckpt"), drainDatagen, out)
		if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return spec, out
	}
	submit := func(args ...string) string {
		t.Helper()
		out, err := c.Weir(append([]string{"submit"}, args...)...)
		if err != nil {
			t.Fatalf("weir submit %v: %v\n%s", args, err, out)
		}
		fields := strings.Fields(out)
		return fields[len(fields)-1]
	}
	stop := func(id string, args ...string) string {
		t.Helper()
		out, err := c.Weir(append([]string{"jobs", "stop", id, "--savepoint-dir", spDir}, args...)...)
		if err != nil {
			t.Fatalf("weir jobs stop %s %v: %v\n%s", id, args, err, out)
		}
		if s := c.WaitJob(id, 2*time.Minute).GetJob().GetState(); s != weirpb.JobState_JOB_STATE_FINISHED {
			t.Fatalf("the stopped job %s is %v, want FINISHED", id, s)
		}
		fields := strings.Fields(out)
		return fields[len(fields)-1]
	}

	// Stopped with --drain.
	spec, out := writeSpec("drained")
	id := submit(spec)
	clustertest.WaitCheckpointsSince(t, c, id, time.Time{}, 2, "before the drained stop")
	emitted := sourcePosition(t, stop(id, "--drain"))
	if emitted == 0 || emitted >= 48000 {
		t.Fatalf("the source had emitted %d rows at the drained savepoint; want some of the 48000, the stop coming while it ran", emitted)
	}
	got, duplicated := clustertest.CommittedWindows(t, out)
	want, last := drainWindows(t, emitted)
	lost, wrong := compareWindows(t, want, got)
	if _, ok := got[last]; !ok {
		t.Errorf("the window %v of the last row before the barrier was not emitted: the maximum watermark did not fire it", last)
	}
	fmt.Printf("drain_rows=%d drained_windows=%d lost=%d duplicated=%d wrong=%d", emitted, len(got), lost, duplicated, wrong)
	if lost != 0 || duplicated != 0 || wrong != 0 {
		fmt.Println()
		t.Fatalf("drained: lost=%d duplicated=%d wrong=%d", lost, duplicated, wrong)
	}

	// Stopped without --drain, then resumed to the end of the input.
	spec, out = writeSpec("resumed")
	id = submit(spec)
	clustertest.WaitCheckpointsSince(t, c, id, time.Time{}, 2, "before the stop")
	sp := stop(id)
	id = submit(spec, "--from", sp)
	if s := c.WaitJob(id, 5*time.Minute).GetJob(); s.GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("the resumed job ended %v: %s", s.GetState(), s.GetError())
	}
	got, duplicated = clustertest.CommittedWindows(t, out)
	want, _ = drainWindows(t, 48000)
	lost, wrong = compareWindows(t, want, got)
	fmt.Printf(" resumed_windows=%d resumed_lost=%d resumed_duplicated=%d resumed_wrong=%d\n", len(got), lost, duplicated, wrong)
	if lost != 0 || duplicated != 0 || wrong != 0 {
		t.Fatalf("resumed: lost=%d duplicated=%d wrong=%d", lost, duplicated, wrong)
	}
}
