package coordinator

import (
	"math"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// adaptiveRun drives a coordinator with an adaptive interval through
// periodic checkpoints. pause gives, for the n-th checkpoint (from 0), the
// sync and alignment durations of the two tasks' acknowledgements; the
// largest sum is what the coordinator must measure. It returns the interval
// after each completed checkpoint.
func adaptiveRun(t *testing.T, a AdaptiveConfig, start time.Duration, n int, pause func(i int) [2]AckStats) []time.Duration {
	t.Helper()
	tasks := []TaskID{{0, 0}, {1, 0}}
	now := time.Unix(1000, 0)
	c := New(Config{Interval: start, Adaptive: &a}, tasks, tasks[:1], 1, now)
	var out []time.Duration
	for i := range n {
		now = now.Add(c.Interval())
		c.Tick(now)
		acts := c.Ready()
		if len(acts) != 1 {
			t.Fatalf("checkpoint %d: Tick at the interval gave %v, want one TriggerAction", i, acts)
		}
		tr, ok := acts[0].(TriggerAction)
		if !ok {
			t.Fatalf("checkpoint %d: got %T, want TriggerAction", i, acts[0])
		}
		ps := pause(i)
		for j, task := range tasks {
			c.Ack(now, task, tr.ID, nil, ps[j])
		}
		if _, ok := c.Ready()[0].(WriteManifestAction); !ok {
			t.Fatalf("checkpoint %d: no WriteManifestAction after every ack", i)
		}
		c.ManifestWritten(now, tr.ID, nil)
		c.Ready()
		out = append(out, c.Interval())
	}
	return out
}

// constPause: task 0 pauses for p (split between sync and alignment), task
// 1 for a tenth of it.
func constPause(p time.Duration) func(int) [2]AckStats {
	return func(int) [2]AckStats {
		return [2]AckStats{
			{SyncDuration: p / 4, AlignmentDuration: p - p/4, AsyncDuration: time.Hour},
			{SyncDuration: p / 10},
		}
	}
}

func TestAdaptiveDirection(t *testing.T) {
	a := AdaptiveConfig{MaxOverhead: 0.03, MinInterval: time.Second, MaxInterval: time.Minute}
	start := 10 * time.Second
	tests := []struct {
		name  string
		pause time.Duration // overhead = pause / 10s
		check func(next time.Duration) bool
	}{
		// 3% of 10s is 300ms: 600ms is above the target.
		{"above target lengthens", 600 * time.Millisecond, func(n time.Duration) bool { return n > start }},
		{"well below shortens", 30 * time.Millisecond, func(n time.Duration) bool { return n < start }},
		{"zero pause shortens by the largest step", 0, func(n time.Duration) bool { return n == start/2 }},
		{"far above grows by the largest step", 10 * time.Second, func(n time.Duration) bool { return n == 2*start }},
		// goal = 240ms / (0.03·0.8) = 10s: on target, no change.
		{"at the goal holds", 240 * time.Millisecond, func(n time.Duration) bool { return n == start }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := adaptiveRun(t, a, start, 1, constPause(tt.pause))[0]
			if !tt.check(got) {
				t.Errorf("pause %v at interval %v: next interval %v", tt.pause, start, got)
			}
		})
	}
}

// TestAdaptiveMeasuresLargestTask checks that the pause is the largest
// per-task sync+alignment, not the largest sync plus the largest
// alignment of different tasks, and that async time does not count.
func TestAdaptiveMeasuresLargestTask(t *testing.T) {
	a := AdaptiveConfig{MaxOverhead: 0.03, MinInterval: time.Second, MaxInterval: time.Minute}
	got := adaptiveRun(t, a, 10*time.Second, 1, func(int) [2]AckStats {
		return [2]AckStats{
			{SyncDuration: 240 * time.Millisecond, AsyncDuration: time.Hour},
			{AlignmentDuration: 240 * time.Millisecond},
		}
	})[0]
	if got != 10*time.Second {
		t.Errorf("two tasks each paused 240ms (the goal at 10s): interval moved to %v, want 10s", got)
	}
}

func TestAdaptiveClamps(t *testing.T) {
	a := AdaptiveConfig{MaxOverhead: 0.05, MinInterval: 2 * time.Second, MaxInterval: 20 * time.Second}
	for _, tt := range []struct {
		name  string
		pause time.Duration
		want  time.Duration
	}{
		{"max", time.Minute, 20 * time.Second},
		{"min", 0, 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := adaptiveRun(t, a, 5*time.Second, 30, constPause(tt.pause))
			for i, d := range got {
				if d < a.MinInterval || d > a.MaxInterval {
					t.Fatalf("checkpoint %d: interval %v outside [%v, %v]", i, d, a.MinInterval, a.MaxInterval)
				}
			}
			if last := got[len(got)-1]; last != tt.want {
				t.Errorf("after 30 checkpoints with pause %v: interval %v, want the clamp %v", tt.pause, last, tt.want)
			}
		})
	}
}

// TestAdaptiveConverges steps the pause from 100ms to 500ms and back and
// checks that the interval settles, monotonically and within a few
// checkpoints, near the independent goal pause ÷ (MaxOverhead·Headroom), and
// that the measured overhead then stays under the target.
func TestAdaptiveConverges(t *testing.T) {
	a := AdaptiveConfig{MaxOverhead: 0.03, MinInterval: time.Second, MaxInterval: time.Minute}
	pauses := []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 100 * time.Millisecond}
	const phase = 20
	got := adaptiveRun(t, a, time.Second, phase*len(pauses), func(i int) [2]AckStats {
		return constPause(pauses[i/phase])(i)
	})
	prev := time.Second
	for k, p := range pauses {
		goal := float64(p) / (a.MaxOverhead * Headroom)
		seg := got[k*phase : (k+1)*phase]
		up := float64(seg[0]) > float64(prev)
		for i, d := range seg {
			if i > 0 && (up && d < seg[i-1] || !up && d > seg[i-1]) {
				t.Errorf("pause %v: interval not monotone at checkpoint %d: %v after %v", p, i, d, seg[i-1])
			}
		}
		settled := 8 // the log error halves each checkpoint (Damping ½)
		for i, d := range seg[settled:] {
			if r := float64(d) / goal; math.Abs(math.Log(r)) > math.Log(1.15) {
				t.Errorf("pause %v, checkpoint %d: interval %v, want within 15%% of %v", p, settled+i, d, time.Duration(goal))
			}
			if o := float64(p) / float64(d); o > a.MaxOverhead {
				t.Errorf("pause %v, checkpoint %d: overhead %.4f above the target %.2f", p, settled+i, o, a.MaxOverhead)
			}
		}
		prev = seg[len(seg)-1]
		t.Logf("pause=%v goal=%v settled=%v", p, time.Duration(goal), prev)
	}
}

func TestAdaptiveIgnoresManualAndFailed(t *testing.T) {
	a := &AdaptiveConfig{MaxOverhead: 0.03, MinInterval: time.Second, MaxInterval: time.Minute}
	tasks := []TaskID{{0, 0}}
	now := time.Unix(1000, 0)
	c := New(Config{Interval: 10 * time.Second, Adaptive: a}, tasks, tasks, 1, now)
	id, err := c.TriggerNow(now)
	if err != nil {
		t.Fatal(err)
	}
	c.Ack(now, tasks[0], id, nil, AckStats{SyncDuration: time.Minute})
	c.ManifestWritten(now, id, nil)
	if got := c.Interval(); got != 10*time.Second {
		t.Errorf("after a manual checkpoint: interval %v, want 10s unchanged", got)
	}
	now = now.Add(10 * time.Second)
	c.Tick(now)
	c.Decline(now, tasks[0], c.NextID()-1, "test")
	if got := c.Interval(); got != 10*time.Second {
		t.Errorf("after a declined checkpoint: interval %v, want 10s unchanged", got)
	}
}

func TestConfigFromAdaptive(t *testing.T) {
	got := ConfigFrom(stream.CheckpointConfig{Adaptive: true})
	if got.Adaptive == nil || *got.Adaptive != (AdaptiveConfig{MaxOverhead: 0.03, MinInterval: time.Second, MaxInterval: time.Minute}) {
		t.Fatalf("ConfigFrom(adaptive defaults).Adaptive = %+v", got.Adaptive)
	}
	if got.Interval != time.Second {
		t.Errorf("starting interval %v, want minInterval 1s", got.Interval)
	}
	// New clamps a starting interval outside the bounds.
	c := New(Config{Interval: time.Hour, Adaptive: got.Adaptive}, nil, nil, 1, time.Unix(0, 0))
	if c.Interval() != time.Minute {
		t.Errorf("start 1h with maxInterval 1m: Interval() = %v", c.Interval())
	}
}
