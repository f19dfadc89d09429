package statebackendtest

import (
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// The checks of processing-time timers that event time has no counterpart
// of. The timer tests common to both domains are in conformance.go and run
// in each (timerDomain); snapshots, restores and rescaling of
// processing-time timers are checked with the event-time ones (populate
// registers both), and the model test drives both domains.

// testProcTimerPast checks that processing time is not kept as the
// watermark is: a timer registered below a time already passed fires at
// the next AdvanceProcessingTime, even one with an earlier time.
func testProcTimerPast(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	ts := b.Timers()
	setKey(b, "a")
	ts.RegisterProcessingTimeTimer(50)
	checkTimers(t, "time 50", fireAllProc(t, b, 50), []firedTimer{{"a", kgOf("a"), 50}})
	ts.RegisterProcessingTimeTimer(40)
	ts.RegisterProcessingTimeTimer(47)
	checkNextProcessingTime(t, "timers in the past", b, []firedTimer{{"a", kgOf("a"), 40}})
	checkTimers(t, "time 45", fireAllProc(t, b, 45), []firedTimer{{"a", kgOf("a"), 40}})
	checkTimers(t, "time 50 again", fireAllProc(t, b, 50), []firedTimer{{"a", kgOf("a"), 47}})
	if wm := ts.CurrentWatermark(); wm != stream.MinWatermark {
		t.Errorf("watermark %d after processing time advanced, want stream.MinWatermark", wm)
	}
}

// testTimerDomains checks that event-time and processing-time timers are
// separate: the same (key, timestamp) in both is two timers, each fired,
// deleted and snapshotted in its own domain only.
func testTimerDomains(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	ts := b.Timers()
	a := func(at int64) firedTimer { return firedTimer{"a", kgOf("a"), at} }
	setKey(b, "a")
	ts.RegisterEventTimeTimer(10)
	ts.RegisterProcessingTimeTimer(10)
	ts.RegisterProcessingTimeTimer(20)
	ts.RegisterEventTimeTimer(30)
	ts.RegisterEventTimeTimer(40)
	ts.RegisterProcessingTimeTimer(40)
	ts.DeleteEventTimeTimer(20)      // none: the processing-time timer at 20 stays
	ts.DeleteProcessingTimeTimer(30) // none: the event-time timer at 30 stays
	ts.DeleteEventTimeTimer(40)      // the processing-time timer at 40 stays
	checkNextProcessingTime(t, "both domains", b, []firedTimer{a(10)})

	// Snapshotted and restored, each timer stays in its domain.
	b2 := restore(t, newBackend, fullRange, snapshot(t, b, 1), 1)
	for _, x := range []struct {
		what string
		b    statebackend.Backend
	}{{"original", b}, {"restored", b2}} {
		checkTimers(t, x.what+": watermark 100", fireAll(t, x.b, 100), []firedTimer{a(10), a(30)})
		checkNextProcessingTime(t, x.what+": after the watermark", x.b, []firedTimer{a(10)})
		checkTimers(t, x.what+": time 100", fireAllProc(t, x.b, 100), []firedTimer{a(10), a(20), a(40)})
		if wm := x.b.Timers().CurrentWatermark(); wm != 100 {
			t.Errorf("%s: watermark %d after processing time advanced, want 100", x.what, wm)
		}
		checkTimers(t, x.what+": watermark 200", fireAll(t, x.b, 200), nil)
	}
}
