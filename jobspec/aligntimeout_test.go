package jobspec

import (
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
)

func TestCheckpointingAlignedTimeout(t *testing.T) {
	for _, tc := range []struct {
		body string
		want time.Duration
	}{
		{"checkpointing: {interval: 1s, unaligned: true}\n", 0},
		{"checkpointing: {interval: 1s, mode: exactly_once, unaligned: true, alignedCheckpointTimeout: 2s}\n", 2 * time.Second},
		{"checkpointing: {interval: 1s, unaligned: true, alignedCheckpointTimeout: 150ms}\n", 150 * time.Millisecond},
	} {
		spec := "name: j\n" + tc.body + "operators:\n  - {uid: g, type: gen}\n"
		g, err := Parse("job.yaml", []byte(spec), testRegistry())
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if got := g.Checkpoint.AlignedCheckpointTimeout; got != tc.want {
			t.Errorf("%q: alignedCheckpointTimeout %v, want %v", tc.body, got, tc.want)
		}
		// The job graph carries it.
		if got := weirpb.ToCheckpointConfig(weirpb.FromCheckpointConfig(g.Checkpoint)); got != g.Checkpoint {
			t.Errorf("%q: round trip through CheckpointSettings gives %+v, want %+v", tc.body, got, g.Checkpoint)
		}
	}
}

func TestCheckpointingAlignedTimeoutErrors(t *testing.T) {
	for _, tc := range []struct {
		body  string
		names []string
	}{
		{"checkpointing: {interval: 1s, alignedCheckpointTimeout: 2s}", []string{"alignedCheckpointTimeout", "unaligned: true"}},
		{"checkpointing: {interval: 1s, unaligned: false, alignedCheckpointTimeout: 2s}", []string{"alignedCheckpointTimeout", "unaligned: true"}},
		{"checkpointing: {interval: 1s, unaligned: true, alignedCheckpointTimeout: -1s}", []string{"alignedCheckpointTimeout", "negative", "0"}},
		{"checkpointing: {interval: 1s, unaligned: true, alignedCheckpointTimeout: soon}", []string{"checkpointing", "alignedCheckpointTimeout"}},
		{"checkpointing: {alignedCheckpointTimout: 2s}", []string{"checkpointing", `did you mean "alignedCheckpointTimeout"`}},
	} {
		t.Run(tc.body, func(t *testing.T) {
			spec := "name: j\n" + tc.body + "\noperators:\n  - {uid: g, type: gen}\n"
			_, err := Parse("job.yaml", []byte(spec), testRegistry())
			checkSpecError(t, err, "job.yaml", 2, tc.names...)
		})
	}
}
