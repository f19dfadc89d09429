package jobspec

import (
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

func TestCheckpointingAndRestartSettings(t *testing.T) {
	spec := `name: j
checkpointing:
  interval: 2s
  timeout: 1m
  minPause: 100ms
  maxConcurrent: 2
  mode: at_least_once
  tolerableFailures: 3
  retained: 2
  retention: retain
  storage: s3://bucket/ckpt
restartStrategy:
  type: fixed-delay
  attempts: 5
  delay: 250ms
operators:
  - {uid: g, type: gen}
  - {uid: s, type: sink}
`
	g, err := Parse("job.yaml", []byte(spec), testRegistry())
	if err != nil {
		t.Fatal(err)
	}
	want := stream.CheckpointConfig{Interval: 2 * time.Second, Timeout: time.Minute, MinPause: 100 * time.Millisecond,
		MaxConcurrent: 2, Mode: stream.AtLeastOnce, TolerableFailures: 3, Retained: 2, Retention: stream.RetainOnCancel,
		Storage: "s3://bucket/ckpt"}
	if g.Checkpoint != want {
		t.Fatalf("checkpoint config %+v, want %+v", g.Checkpoint, want)
	}
	if r := g.Restart; r.Type != "fixed-delay" || r.Attempts != 5 || r.Delay != 250*time.Millisecond {
		t.Fatalf("restart config %+v", r)
	}
}

func TestCheckpointingSettingErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"checkpointing: {interval: 5}", `job.yaml:2: checkpointing: interval: `},
		{"checkpointing: {interval: fast}", `job.yaml:2: checkpointing: interval: want a duration such as 500ms, 10s or 1m, got "fast"`},
		{"checkpointing: {intervall: 1s}", `job.yaml:2: checkpointing: unknown key "intervall" (did you mean "interval"?)`},
		{"checkpointing: {mode: twice}", `job.yaml:2: checkpointing: mode: unknown checkpoint mode "twice"`},
		{"checkpointing: {interval: 1s, maxConcurrent: 0}", `job.yaml:2: checkpointing: maxConcurrent: must be at least 1, got 0`},
		{"checkpointing: {interval: 1s, storage: hdfs://x}", `job.yaml:2: checkpointing: storage: want file:///path or s3://bucket/prefix`},
		{"checkpointing: {retention: keep}", `job.yaml:2: checkpointing: retention: want delete or retain, got "keep"`},
		{"restartStrategy: {type: fixed}", `job.yaml:2: restartStrategy: type: unknown strategy "fixed"`},
		{"restartStrategy: {delay: -1s}", `job.yaml:2: restartStrategy: delay: must not be negative`},
		{"restartStrategy: {multiplier: x}", `job.yaml:2: restartStrategy: multiplier: must be a number`},
		{"state: {backend: rocksdb}", `job.yaml:2: state: backend: unknown state backend "rocksdb"; want heap or pebble`},
		{"state: {backnd: heap}", `job.yaml:2: state: unknown key "backnd" (did you mean "backend"?)`},
		{"state: {backend: pebble, incremental: no}", `job.yaml:2: state: incremental: must be true or false, got`},
		{"state: {backend: pebble, incremental: 0}", `job.yaml:2: state: incremental: must be true or false, got`},
		{"state: {backend: heap, incremental: true}", `job.yaml:2: state: incremental: the heap backend takes full snapshots only; remove incremental: true or use backend: pebble`},
		{"state: {incremental: true, backend: heap}", `job.yaml:2: state: incremental: the heap backend takes full snapshots only`},
		{"state: {incrementl: false}", `job.yaml:2: state: unknown key "incrementl" (did you mean "incremental"?)`},
	} {
		spec := "name: j\n" + tc.body + "\noperators:\n  - {uid: g, type: gen}\n"
		_, err := Parse("job.yaml", []byte(spec), testRegistry())
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant prefix %s", tc.body, err, tc.want)
		}
	}
}

func TestParseRestartStrategyForClusterConfig(t *testing.T) {
	r, err := ParseRestartStrategy(map[string]any{"type": "failure-rate", "maxFailures": 3, "interval": "5m", "delay": "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Type != "failure-rate" || r.MaxFailures != 3 || r.Interval != 5*time.Minute || r.Delay != 2*time.Second {
		t.Fatalf("got %+v", r)
	}
	if _, err := ParseRestartStrategy(map[string]any{"type": "sometimes"}); err == nil || !strings.Contains(err.Error(), `unknown strategy "sometimes"`) {
		t.Fatalf("want an unknown-strategy error, got %v", err)
	}
}

func TestStateBackendSetting(t *testing.T) {
	for _, tc := range []struct {
		body, want string
		full       bool
	}{
		{"", "", false},
		{"state: {backend: heap}\n", "heap", false},
		{"state: {backend: pebble}\n", "pebble", false},
		{"state: {backend: pebble, incremental: true}\n", "pebble", false},
		{"state: {backend: pebble, incremental: false}\n", "pebble", true},
		{"state: {backend: heap, incremental: false}\n", "heap", true},
		{"state: {incremental: false}\n", "", true},
	} {
		spec := "name: j\n" + tc.body + "operators:\n  - {uid: g, type: gen}\n"
		g, err := Parse("job.yaml", []byte(spec), testRegistry())
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if g.State.Backend != tc.want || g.State.FullSnapshots != tc.full {
			t.Errorf("%q: backend %q, full snapshots %v; want %q, %v", tc.body, g.State.Backend, g.State.FullSnapshots, tc.want, tc.full)
		}
	}
}
