package nexmark_test

import (
	"os"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors/nexmark"
)

// TestQuerySpeed runs each query on the task runtime in this process
// (dataflowtest.RunGraph) over WEIR_NEXMARK_SPEED_EVENTS events at the default
// rate and logs events/s. It is skipped unless the variable is set.
func TestQuerySpeed(t *testing.T) {
	v := os.Getenv("WEIR_NEXMARK_SPEED_EVENTS")
	if v == "" {
		t.Skip("set WEIR_NEXMARK_SPEED_EVENTS to run")
	}
	var events int64
	for _, c := range v {
		events = events*10 + int64(c-'0')
	}
	cfg := nexmark.Config{Events: events, Seed: 42}
	for _, q := range []string{"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8"} {
		start := time.Now()
		rows := runQuery(t, q, cfg)
		el := time.Since(start)
		t.Logf("%s: %d events in %v = %.0f events/s, %d result rows", q, events, el, float64(events)/el.Seconds(), len(rows))
	}
}
