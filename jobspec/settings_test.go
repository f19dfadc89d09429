package jobspec

import (
	"errors"
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
	// Every problem is on line 2; the message names the setting, the
	// value and what to write instead.
	for _, tc := range []struct {
		body  string
		names []string
	}{
		{"checkpointing: {interval: 5}", []string{"checkpointing", "interval"}},
		{"checkpointing: {interval: fast}", []string{"checkpointing", "interval", "500ms", `"fast"`}},
		{"checkpointing: {intervall: 1s}", []string{"checkpointing", `"intervall"`, `"interval"`}},
		{"checkpointing: {mode: twice}", []string{"checkpointing", "mode", `"twice"`}},
		{"checkpointing: {interval: 1s, maxConcurrent: 0}", []string{"checkpointing", "maxConcurrent", "at least 1"}},
		{"checkpointing: {interval: 1s, storage: hdfs://x}", []string{"checkpointing", "storage", "file:///path or s3://bucket/prefix"}},
		{"checkpointing: {retention: keep}", []string{"checkpointing", "retention", "delete or retain", `"keep"`}},
		{"restartStrategy: {type: fixed}", []string{"restartStrategy", "type", `"fixed"`}},
		{"restartStrategy: {delay: -1s}", []string{"restartStrategy", "delay", "negative"}},
		{"restartStrategy: {multiplier: x}", []string{"restartStrategy", "multiplier", "number"}},
		{"state: {backend: rocksdb}", []string{"state", "backend", `"rocksdb"`, "heap or pebble"}},
		{"state: {backnd: heap}", []string{"state", `"backnd"`, `"backend"`}},
		{"state: {backend: pebble, incremental: no}", []string{"state", "incremental", "true or false"}},
		{"state: {backend: pebble, incremental: 0}", []string{"state", "incremental", "true or false"}},
		{"state: {backend: heap, incremental: true}", []string{"state", "incremental", "heap", "remove incremental: true or use backend: pebble"}},
		{"state: {incremental: true, backend: heap}", []string{"state", "incremental", "heap"}},
		{"state: {incrementl: false}", []string{"state", `"incrementl"`, `"incremental"`}},
	} {
		t.Run(tc.body, func(t *testing.T) {
			spec := "name: j\n" + tc.body + "\noperators:\n  - {uid: g, type: gen}\n"
			_, err := Parse("job.yaml", []byte(spec), testRegistry())
			checkSpecError(t, err, "job.yaml", 2, tc.names...)
		})
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
	var se *Error
	if _, err := ParseRestartStrategy(map[string]any{"type": "sometimes"}); !errors.As(err, &se) || !strings.Contains(err.Error(), `"sometimes"`) {
		t.Fatalf("want an error naming the unknown strategy, got %v", err)
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

// TestAutoWatermarkInterval: the job-level autoWatermarkInterval goes into
// the config of every operator whose type takes it and does not set its
// own, keeping the config's other keys in order; other types' configs are
// untouched; without the key nothing changes.
func TestAutoWatermarkInterval(t *testing.T) {
	reg := testRegistry()
	reg.Register(stream.OperatorType{
		Name: "wm", Kind: stream.KindTransform, NewOperator: noOperator, AutoWatermarkInterval: true,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil },
	})
	ops := `operators:
  - {uid: g, type: gen, config: {rows: 3}}
  - {uid: a, type: wm}
  - {uid: b, type: wm, config: {field: ts, other: 1}}
  - {uid: c, type: wm, config: {autoWatermarkInterval: 0s, field: ts}}
  - {uid: s, type: sink}
`
	for _, tc := range []struct {
		top  string
		want []string // configs of g, a, b, c, s
	}{
		{"autoWatermarkInterval: 50ms\n", []string{`{"rows":3}`, `{"autoWatermarkInterval":"50ms"}`,
			`{"field":"ts","other":1,"autoWatermarkInterval":"50ms"}`, `{"autoWatermarkInterval":"0s","field":"ts"}`, ``}},
		{"autoWatermarkInterval: 0s\n", []string{`{"rows":3}`, `{"autoWatermarkInterval":"0s"}`,
			`{"field":"ts","other":1,"autoWatermarkInterval":"0s"}`, `{"autoWatermarkInterval":"0s","field":"ts"}`, ``}},
		{"", []string{`{"rows":3}`, ``, `{"field":"ts","other":1}`, `{"autoWatermarkInterval":"0s","field":"ts"}`, ``}},
	} {
		t.Run(tc.top, func(t *testing.T) {
			g, err := Parse("job.yaml", []byte("name: j\n"+tc.top+ops), reg)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range g.Vertices {
				if got := string(v.Config); got != tc.want[i] {
					t.Errorf("operator %s: config %s, want %s", v.UID, got, tc.want[i])
				}
			}
		})
	}
	for _, tc := range []struct{ body, want string }{
		{"autoWatermarkInterval: soon", "want a duration"},
		{"autoWatermarkInterval: -1s", "negative"},
		{"autoWatermarkInterval: 1500us", "whole number of milliseconds"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte("name: j\n"+tc.body+"\n"+ops), reg)
			checkSpecError(t, err, "job.yaml", 2, "autoWatermarkInterval", tc.want)
		})
	}
}
