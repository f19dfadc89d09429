package jobspec

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

func TestCheckpointingAdaptive(t *testing.T) {
	for _, tc := range []struct {
		body string
		want stream.CheckpointConfig
	}{
		{"checkpointing: {interval: adaptive}\n",
			stream.CheckpointConfig{Adaptive: true, Interval: time.Second}},
		{"checkpointing: {interval: adaptive, maxOverhead: 3%, minInterval: 1s, maxInterval: 60s}\n",
			stream.CheckpointConfig{Adaptive: true, Interval: time.Second, MaxOverhead: 0.03, MinInterval: time.Second, MaxInterval: time.Minute}},
		{"checkpointing: {interval: adaptive, maxOverhead: 0.1, minInterval: 5s}\n",
			stream.CheckpointConfig{Adaptive: true, Interval: 5 * time.Second, MaxOverhead: 0.1, MinInterval: 5 * time.Second}},
		{"checkpointing: {interval: adaptive, maxOverhead: 2.5 %, maxInterval: 500ms}\n",
			stream.CheckpointConfig{Adaptive: true, Interval: 500 * time.Millisecond, MaxOverhead: 0.025, MaxInterval: 500 * time.Millisecond}},
		{"checkpointing: {interval: 2s}\n", stream.CheckpointConfig{Interval: 2 * time.Second}},
	} {
		spec := "name: j\n" + tc.body + "operators:\n  - {uid: g, type: gen}\n"
		g, err := Parse("job.yaml", []byte(spec), testRegistry())
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if g.Checkpoint != tc.want {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.body, g.Checkpoint, tc.want)
		}
		if !g.Checkpoint.Enabled() {
			t.Errorf("%q: checkpointing not enabled", tc.body)
		}
		// The settings reach the jobmanager through protobuf.
		b, err := proto.Marshal(weirpb.FromCheckpointConfig(g.Checkpoint))
		if err != nil {
			t.Fatal(err)
		}
		var back weirpb.CheckpointSettings
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := weirpb.ToCheckpointConfig(&back); got != tc.want {
			t.Errorf("%q: protobuf round trip gave %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

func TestCheckpointingAdaptiveErrors(t *testing.T) {
	for _, tc := range []struct {
		body  string
		names []string
	}{
		{"checkpointing: {interval: adaptiv}", []string{"checkpointing", "interval", "duration", "adaptive"}},
		{"checkpointing: {interval: adaptive, maxOverhead: 0}", []string{"maxOverhead", "between 0 and 100%", "3%"}},
		{"checkpointing: {interval: adaptive, maxOverhead: 150%}", []string{"maxOverhead", "between 0 and 100%"}},
		{"checkpointing: {interval: adaptive, maxOverhead: lots}", []string{"maxOverhead", "percentage", "0.03"}},
		{"checkpointing: {interval: adaptive, maxOverhead: x%}", []string{"maxOverhead", "percentage"}},
		{"checkpointing: {interval: adaptive, minInterval: 10s, maxInterval: 5s}", []string{"maxInterval", "minInterval", "raise"}},
		{"checkpointing: {interval: adaptive, minInterval: 1ms}", []string{"minInterval", "10ms"}},
		{"checkpointing: {interval: 1s, maxOverhead: 5%}", []string{"maxOverhead", "adaptive"}},
		{"checkpointing: {interval: adaptive, maxIntervall: 5s}", []string{"checkpointing", `did you mean "maxInterval"`}},
	} {
		t.Run(tc.body, func(t *testing.T) {
			spec := "name: j\n" + tc.body + "\noperators:\n  - {uid: g, type: gen}\n"
			_, err := Parse("job.yaml", []byte(spec), testRegistry())
			checkSpecError(t, err, "job.yaml", 2, tc.names...)
		})
	}
}
