package weirpb

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/stream"
)

// TestCheckpointSettingsRoundTrip: every checkpoint setting survives the
// conversion to protobuf, the wire and back; an unset on_corruption (a
// client older than the field) reads as the default.
func TestCheckpointSettingsRoundTrip(t *testing.T) {
	for _, c := range []stream.CheckpointConfig{
		{},
		{Interval: time.Second, Timeout: time.Minute, MinPause: 10 * time.Millisecond, MaxConcurrent: 2, Mode: stream.AtLeastOnce,
			TolerableFailures: 3, Retained: 4, Retention: stream.RetainOnCancel, Storage: "file:///ck", OnCorruption: stream.FallbackOnCorruption},
		{Interval: time.Second, OnCorruption: stream.FailOnCorruption},
	} {
		b, err := proto.Marshal(FromCheckpointConfig(c))
		if err != nil {
			t.Fatal(err)
		}
		var back CheckpointSettings
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := ToCheckpointConfig(&back); got != c {
			t.Errorf("round trip of %+v gave %+v", c, got)
		}
	}
	if got := ToCheckpointConfig(&CheckpointSettings{IntervalMs: 1000}).WithDefaults().OnCorruption; got != stream.FailOnCorruption {
		t.Errorf("unset on_corruption reads as %v, want fail", got)
	}
}
