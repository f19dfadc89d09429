package checkpoint

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/proto/weirpb"
)

// TestManifestChannelState: a manifest whose handles carry channel state
// (an unaligned checkpoint) says how much, and one without says nothing;
// the field survives the manifest's encoding.
func TestManifestChannelState(t *testing.T) {
	m := &weirpb.Manifest{Version: 1, JobId: "job-1", CheckpointId: 7, MaxParallelism: 8,
		Operators: []*weirpb.OperatorState{{OperatorUid: "src", Parallelism: 2, Handles: []*weirpb.StateHandle{
			{OperatorUid: "src", Subtask: 0, Parallelism: 2, Key: "a", Size: 10, ChannelStateBytes: 2048},
			{OperatorUid: "src", Subtask: 1, Parallelism: 2, Key: "b", Size: 10, ChannelStateBytes: 1024},
		}}}}
	if got := ChannelStateBytes(m); got != 3072 {
		t.Fatalf("ChannelStateBytes = %d, want 3072", got)
	}
	if text := FormatManifest(m); !strings.Contains(text, "channel state:   3.0 KiB") {
		t.Fatalf("FormatManifest does not show the channel state:\n%s", text)
	}
	_, data, err := encodeManifest(m, "manifest")
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeManifest(data, "manifest", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := ChannelStateBytes(back); got != 3072 {
		t.Fatalf("after encoding, ChannelStateBytes = %d, want 3072", got)
	}
	for _, h := range m.Operators[0].Handles {
		h.ChannelStateBytes = 0
	}
	if text := FormatManifest(m); strings.Contains(text, "channel state") {
		t.Fatalf("an aligned checkpoint's manifest mentions channel state:\n%s", text)
	}
}
