package coordinator

import (
	"math"
	"time"

	"github.com/weirstream/weir/stream"
)

// AdaptiveConfig makes the periodic interval follow the measured checkpoint
// overhead. After each completed periodic checkpoint (not a manual one or a
// savepoint) the coordinator takes its pause: the largest
// SyncDuration+AlignmentDuration any task acknowledged. Its overhead is
// pause ÷ interval, the interval being the one in force when the
// checkpoint completed.
//
// The largest task, not the mean: a task that is snapshotting or aligning
// processes no records, and through backpressure it holds back every task
// upstream of it, so the job loses about as much throughput as its most
// paused task. A mean would let one slow, skewed subtask hide behind many
// idle ones.
//
// The interval that would give exactly the target is pause ÷ MaxOverhead;
// the coordinator aims at Headroom of the target (so that noise keeps the
// overhead under it) and moves a damped step toward that goal: the next
// interval is interval × (goal ÷ interval)^Damping, the factor clamped to
// [1/MaxStep, MaxStep] and the result to [MinInterval, MaxInterval]. With
// Damping ½ the error, on a log scale, halves with every checkpoint, so a
// step change in the pause settles within a handful of checkpoints without
// overshooting. Factors within Deadband of 1 leave the interval unchanged.
type AdaptiveConfig struct {
	// MaxOverhead is the target fraction of the interval, in (0, 1).
	// Default stream.DefaultMaxOverhead (0.03).
	MaxOverhead float64
	// MinInterval and MaxInterval bound the interval. Defaults
	// stream.DefaultMinInterval (1s) and stream.DefaultMaxInterval (60s).
	MinInterval, MaxInterval time.Duration
}

// The adaptive interval's controller constants (see AdaptiveConfig).
const (
	Headroom = 0.8
	Damping  = 0.5
	MaxStep  = 2.0
	Deadband = 0.05
)

func (a AdaptiveConfig) normalized() AdaptiveConfig {
	if a.MaxOverhead <= 0 || a.MaxOverhead >= 1 {
		a.MaxOverhead = stream.DefaultMaxOverhead
	}
	if a.MinInterval <= 0 {
		a.MinInterval = stream.DefaultMinInterval
	}
	if a.MaxInterval <= 0 {
		a.MaxInterval = stream.DefaultMaxInterval
	}
	a.MaxInterval = max(a.MaxInterval, a.MinInterval)
	return a
}

// next returns the interval after a checkpoint taken at interval paused the
// job for pause. a is normalized.
func (a AdaptiveConfig) next(interval, pause time.Duration) time.Duration {
	if interval <= 0 {
		return a.MinInterval
	}
	goal := float64(pause) / (a.MaxOverhead * Headroom)
	f := math.Pow(goal/float64(interval), Damping) // goal 0: f = 0, clamped below
	f = min(max(f, 1/MaxStep), MaxStep)
	if math.Abs(f-1) < Deadband {
		return interval
	}
	next := time.Duration(float64(interval) * f)
	return min(max(next, a.MinInterval), a.MaxInterval)
}

// Interval returns the current periodic interval: Config.Interval, or with
// Config.Adaptive the interval the coordinator chose last.
func (c *Coordinator) Interval() time.Duration { return c.interval }
