package statebackendtest

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// The processing-time timer tests. Snapshots, restores and rescaling of
// processing-time timers are checked with the event-time ones (populate
// registers both), and the model test drives both domains.

func testProcTimerOrder(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	ts := b.Timers()
	checkNextProcessingTime(t, "empty backend", b, nil)
	keys := keysIn(fullRange, 20)
	var want []firedTimer
	for i, k := range keys {
		setKey(b, k)
		// Timestamps in a scrambled order, several per key, many shared.
		for j := range 3 {
			at := int64((i*7+j*13)%50) + int64(j)*50
			ts.RegisterProcessingTimeTimer(at)
			want = append(want, firedTimer{k, kgOf(k), at})
		}
	}
	slices.SortFunc(want, compareFired)
	checkNextProcessingTime(t, "registered", b, want)
	n := 0
	for n < len(want) && want[n].TS <= 60 {
		n++
	}
	// fireAllProc checks the (timestamp, key group, key) order; the lists
	// are compared in that order too.
	if got := fireAllProc(t, b, 60); !slices.Equal(got, want[:n]) {
		t.Errorf("time 60 fired %v\nwant %v", got, want[:n])
	}
	if again := fireAllProc(t, b, 60); len(again) != 0 {
		t.Errorf("timers fired twice: %v", again)
	}
	checkNextProcessingTime(t, "after time 60", b, want[n:])
	if rest := fireAllProc(t, b, math.MaxInt64); !slices.Equal(rest, want[n:]) {
		t.Errorf("the last time fired %v\nwant %v", rest, want[n:])
	}
	checkNextProcessingTime(t, "all fired", b, nil)
}

func testProcTimerDedupAndDelete(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	ts := b.Timers()
	setKey(b, "a")
	ts.RegisterProcessingTimeTimer(10)
	ts.RegisterProcessingTimeTimer(10)
	ts.RegisterProcessingTimeTimer(20)
	ts.RegisterProcessingTimeTimer(30)
	ts.DeleteProcessingTimeTimer(20)
	ts.DeleteProcessingTimeTimer(25) // none
	ts.RegisterProcessingTimeTimer(30)
	ts.DeleteProcessingTimeTimer(40)
	setKey(b, "b")
	ts.RegisterProcessingTimeTimer(5)
	checkNextProcessingTime(t, "after registering b's timer at 5", b, []firedTimer{{"b", kgOf("b"), 5}})
	ts.DeleteProcessingTimeTimer(5) // the earliest goes: the next one is a's at 10
	checkNextProcessingTime(t, "after deleting it", b, []firedTimer{{"a", kgOf("a"), 10}})
	ts.RegisterProcessingTimeTimer(10)
	ts.DeleteProcessingTimeTimer(30) // a's timer is not b's
	ts.RegisterProcessingTimeTimer(50)
	ts.DeleteProcessingTimeTimer(50)
	ts.RegisterProcessingTimeTimer(50)
	// Many registrations and deletions (exercises any compaction).
	for i := range 1000 {
		ts.RegisterProcessingTimeTimer(int64(1000 + i))
		ts.DeleteProcessingTimeTimer(int64(1000 + i))
	}
	want := []firedTimer{
		{"a", kgOf("a"), 10}, {"b", kgOf("b"), 10},
		{"a", kgOf("a"), 30}, {"b", kgOf("b"), 50},
	}
	slices.SortFunc(want, compareFired)
	checkNextProcessingTime(t, "after deletions", b, want)
	setKey(b, "a")
	ts.DeleteProcessingTimeTimer(10)
	checkNextProcessingTime(t, "after deleting a's timer at 10", b, want[1:])
	ts.RegisterProcessingTimeTimer(10)
	checkNextProcessingTime(t, "after registering it again", b, want)
	checkTimers(t, "dedup and delete", fireAllProc(t, b, math.MaxInt64), sortFired(want))
}

func testProcTimerCurrentKey(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 10)
	for i, k := range keys {
		setKey(b, k)
		s.val.Update(int64(i))
		b.Timers().RegisterProcessingTimeTimer(int64(i))
	}
	b.SetCurrentKey([]byte("outer"), 3)
	n := 0
	err := b.Timers().AdvanceProcessingTime(100, func(key []byte, kg int, ts int64) error {
		// State reads go to the timer's key; state writes too.
		if v, ok := s.val.Value(); !ok || v != ts {
			t.Errorf("processing-time timer %d of %q: value state reads %d, %v", ts, key, v, ok)
		}
		s.val.Update(ts * 100)
		n++
		return nil
	})
	must(t, err)
	if n != len(keys) {
		t.Fatalf("fired %d processing-time timers, want %d", n, len(keys))
	}
	if k, kg := b.CurrentKey(); string(k) != "outer" || kg != 3 {
		t.Errorf("current key after AdvanceProcessingTime = %q, %d; want outer, 3", k, kg)
	}
	for i, k := range keys {
		setKey(b, k)
		if v, _ := s.val.Value(); v != int64(i*100) {
			t.Errorf("key %s: value written while firing = %d, want %d", k, v, i*100)
		}
	}
}

func testProcTimerRegisterDuringFiring(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	ts := b.Timers()
	setKey(b, "a")
	ts.RegisterProcessingTimeTimer(10)
	var fired []int64
	err := ts.AdvanceProcessingTime(20, func(key []byte, kg int, at int64) error {
		fired = append(fired, at)
		if len(fired) > 10 {
			return errors.New("a timer keeps firing")
		}
		switch {
		case at == 10 && len(fired) == 1:
			ts.RegisterProcessingTimeTimer(15) // at or below the time: fires now
			ts.RegisterProcessingTimeTimer(20)
			ts.RegisterProcessingTimeTimer(25) // above: waits
			ts.RegisterProcessingTimeTimer(10) // the one firing: registered anew
			ts.RegisterEventTimeTimer(12)      // another domain: does not fire here
		case at == 15:
			b.SetCurrentKey([]byte("other"), kgOf("other"))
			ts.RegisterProcessingTimeTimer(18)
		}
		return nil
	})
	must(t, err)
	if !slices.Equal(fired, []int64{10, 10, 15, 18, 20}) {
		t.Fatalf("fired %v, want [10 10 15 18 20]", fired)
	}
	checkNextProcessingTime(t, "after firing", b, []firedTimer{{"a", kgOf("a"), 25}})
	checkTimers(t, "later", fireAllProc(t, b, 100), []firedTimer{{"a", kgOf("a"), 25}})
	checkTimers(t, "event-time timer registered while firing", fireAll(t, b, 100), []firedTimer{{"a", kgOf("a"), 12}})
}

func testProcTimerFireError(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	setKey(b, "a")
	for ts := int64(1); ts <= 5; ts++ {
		b.Timers().RegisterProcessingTimeTimer(ts)
	}
	boom := errors.New("boom")
	var fired []int64
	err := b.Timers().AdvanceProcessingTime(10, func(_ []byte, _ int, ts int64) error {
		fired = append(fired, ts)
		if ts == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("AdvanceProcessingTime returned %v, want the error of fire", err)
	}
	if !slices.Equal(fired, []int64{1, 2, 3}) {
		t.Fatalf("fired %v before the error, want [1 2 3]", fired)
	}
	rest := []firedTimer{{"a", kgOf("a"), 4}, {"a", kgOf("a"), 5}}
	checkNextProcessingTime(t, "after the error", b, rest)
	checkTimers(t, "after the error", fireAllProc(t, b, 10), rest)
}

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
