package coordinator

import (
	"slices"
	"time"
)

// SubtaskStats is one task's acknowledgement of a checkpoint: when it came
// and what the task measured.
type SubtaskStats struct {
	Task    TaskID
	AckTime time.Time
	AckStats
}

// EndToEnd is the time from the checkpoint's trigger to this
// acknowledgement.
func (s SubtaskStats) EndToEnd(trigger time.Time) time.Duration {
	return max(s.AckTime.Sub(trigger), 0)
}

// StartDelay is the time from the checkpoint's trigger to the task's first
// barrier. The barrier's time is on the task's clock and the trigger's on
// the coordinator's; the result is clamped into what the coordinator's own
// clock allows (at least 0, at most EndToEnd less the task's alignment,
// sync and async durations), so that clock skew cannot show an impossible
// delay. It is 0 when the task did not say when its barrier came.
func (s SubtaskStats) StartDelay(trigger time.Time) time.Duration {
	if s.BarrierReceived.IsZero() {
		return 0
	}
	limit := max(s.EndToEnd(trigger)-s.AlignmentDuration-s.SyncDuration-s.AsyncDuration, 0)
	// The barrier's time comes in whole milliseconds.
	return min(max(s.BarrierReceived.Sub(trigger.Truncate(time.Millisecond)), 0), limit)
}

// SubtaskStats returns the acknowledgements of checkpoint id, ordered by
// task; false when id is not among the checkpoints History reports. The
// slice is a copy.
func (c *Coordinator) SubtaskStats(id int64) ([]SubtaskStats, bool) {
	if !slices.ContainsFunc(c.history, func(s *Stats) bool { return s.ID == id }) {
		return nil, false
	}
	out := slices.Clone(c.subtasks[id])
	slices.SortFunc(out, func(a, b SubtaskStats) int { return compareTasks(a.Task, b.Task) })
	return out, true
}
