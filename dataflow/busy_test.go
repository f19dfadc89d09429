package dataflow

import (
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// TestIdleAndBusyTime: a count task whose inputs deliver nothing is idle
// (its IdleTime grows, its BusyTime stays far below it), and both stop
// once Run returned; a task that never ran has neither.
func TestIdleAndBusyTime(t *testing.T) {
	st := newCkState()
	reg := newCkRegistry(st)
	x := localExchange(t, "local")
	spec := countSpec(t, reg, kcountConfig{})
	r := startCk(t, []*TaskSpec{spec}, reg, stream.ExactlyOnce, 0, nil, func(*TaskSpec) *Exchange { return x })
	m := r.tasks[0].Metrics()
	waitFor(t, "the starved task to be idle for 100ms", func() bool { return m.IdleTime() > 100*time.Millisecond })
	if busy, idle := m.BusyTime(), m.IdleTime(); busy > idle/2 {
		t.Fatalf("starved task: busy %v, idle %v; want it mostly idle", busy, idle)
	}
	r.stop()
	// After Run returned the counters stop.
	idle, busy := m.IdleTime(), m.BusyTime()
	if again := m.IdleTime(); again != idle {
		t.Fatalf("idle time grew from %v to %v after the task ended", idle, again)
	}
	if again := m.BusyTime(); again != busy {
		t.Fatalf("busy time grew from %v to %v after the task ended", busy, again)
	}

	var zero Metrics
	if zero.BusyTime() != 0 || zero.IdleTime() != 0 {
		t.Fatal("a task that never ran has busy or idle time")
	}
}
