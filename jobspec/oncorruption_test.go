package jobspec

import (
	"testing"

	"github.com/weirstream/weir/stream"
)

func TestCheckpointingOnCorruption(t *testing.T) {
	for _, tc := range []struct {
		body string
		want stream.CorruptionPolicy
	}{
		{"", 0}, // the default, fail, applies later (CheckpointConfig.WithDefaults)
		{"checkpointing: {interval: 1s, onCorruption: fail}\n", stream.FailOnCorruption},
		{"checkpointing: {interval: 1s, retained: 3, onCorruption: fallback}\n", stream.FallbackOnCorruption},
	} {
		spec := "name: j\n" + tc.body + "operators:\n  - {uid: g, type: gen}\n"
		g, err := Parse("job.yaml", []byte(spec), testRegistry())
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if got := g.Checkpoint.OnCorruption; got != tc.want {
			t.Errorf("%q: onCorruption %v, want %v", tc.body, got, tc.want)
		}
	}
	if got := (stream.CheckpointConfig{}).WithDefaults().OnCorruption; got != stream.FailOnCorruption {
		t.Errorf("default onCorruption %v, want fail", got)
	}
}

func TestCheckpointingOnCorruptionErrors(t *testing.T) {
	// Every problem is on line 2; the message names the setting and the
	// values it takes.
	for _, tc := range []struct {
		body  string
		names []string
	}{
		{"checkpointing: {onCorruption: retry}", []string{"checkpointing", "onCorruption", "fail or fallback", `"retry"`}},
		{"checkpointing: {onCorruption: falback}", []string{"checkpointing", "onCorruption", "fail or fallback", `did you mean "fallback"`}},
		{"checkpointing: {onCorruption: FAIL}", []string{"checkpointing", "onCorruption", "fail or fallback", `"FAIL"`}},
		{"checkpointing: {onCorruption: true}", []string{"checkpointing", "onCorruption", "fail or fallback", "bool true"}},
		{"checkpointing: {onCorruption: [fail]}", []string{"checkpointing", "onCorruption", "fail or fallback", "a list"}},
		{"checkpointing: {onCorruption: }", []string{"checkpointing", "onCorruption", "fail or fallback", "null"}},
		{"checkpointing: {onCorrupt: fail}", []string{"checkpointing", `"onCorrupt"`, `did you mean "onCorruption"`}},
	} {
		t.Run(tc.body, func(t *testing.T) {
			spec := "name: j\n" + tc.body + "\noperators:\n  - {uid: g, type: gen}\n"
			_, err := Parse("job.yaml", []byte(spec), testRegistry())
			checkSpecError(t, err, "job.yaml", 2, tc.names...)
		})
	}
}
