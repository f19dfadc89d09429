package scheduler

import (
	"testing"
	"time"
)

// TestRates feeds one execution's reports: rates come from the two latest
// reports at least RateWindow apart, and start over with a new attempt or
// counters that go backwards.
func TestRates(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var r rates
	check := func(step string, in, out, bp float64) {
		t.Helper()
		if r.inRate != in || r.outRate != out || r.backpressure != bp {
			t.Errorf("%s: in %v/s out %v/s backpressure %v; want %v, %v, %v", step, r.inRate, r.outRate, r.backpressure, in, out, bp)
		}
	}
	r.observe(1, 100, 50, 0, t0)
	check("first report", 0, 0, 0)
	r.observe(1, 150, 60, 0, t0.Add(RateWindow/2)) // too soon: folded into the next
	check("too soon", 0, 0, 0)
	r.observe(1, 1100, 550, 500*time.Millisecond, t0.Add(2*time.Second))
	check("two seconds later", 500, 250, 0.25)
	r.observe(1, 1100, 550, 1500*time.Millisecond, t0.Add(3*time.Second))
	check("stalled", 0, 0, 1)
	r.observe(1, 10, 5, 0, t0.Add(4*time.Second)) // counters went back
	check("counters went back", 0, 0, 0)
	r.observe(2, 5000, 5000, 0, t0.Add(5*time.Second))
	check("new attempt", 0, 0, 0)
	if r.attempt != 2 {
		t.Errorf("attempt %d, want 2", r.attempt)
	}
	r.observe(2, 6000, 5500, 3*time.Second, t0.Add(6*time.Second)) // more backpressure than time: clamped
	check("clamped", 1000, 500, 1)
}
