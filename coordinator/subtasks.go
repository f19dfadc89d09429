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

// ackLog holds the acknowledgements of one checkpoint, as they came.
type ackLog struct {
	trigger time.Time
	recs    []ackRecord
}

// ackRecord is a SubtaskStats as the coordinator keeps it, without
// pointers (a time.Time has one): the garbage collector need not scan the
// HistorySize × tasks of them, which at 10,000 tasks are half a million.
type ackRecord struct {
	task TaskID
	// after is AckTime less the trigger time.
	after time.Duration
	// barrierSec and barrierNsec are BarrierReceived (Unix time) unless
	// noBarrier.
	barrierSec             int64
	barrierNsec            int32
	noBarrier              bool
	sync, async, alignment time.Duration
	bytes, channelBytes    int64
	storage                StorageRequests
}

func (l *ackLog) add(s SubtaskStats) {
	r := ackRecord{task: s.Task, after: s.AckTime.Sub(l.trigger), noBarrier: s.BarrierReceived.IsZero(),
		sync: s.SyncDuration, async: s.AsyncDuration, alignment: s.AlignmentDuration,
		bytes: s.Bytes, channelBytes: s.ChannelStateBytes, storage: s.Storage}
	if !r.noBarrier {
		r.barrierSec, r.barrierNsec = s.BarrierReceived.Unix(), int32(s.BarrierReceived.Nanosecond())
	}
	l.recs = append(l.recs, r)
}

// stats returns the acknowledgements as SubtaskStats. AckTime is the
// trigger time plus the time to the acknowledgement, on the clock (and
// in the location) of the trigger time; BarrierReceived is in local time.
func (l *ackLog) stats() []SubtaskStats {
	if len(l.recs) == 0 {
		return nil
	}
	out := make([]SubtaskStats, len(l.recs))
	for i, r := range l.recs {
		out[i] = SubtaskStats{Task: r.task, AckTime: l.trigger.Add(r.after), AckStats: AckStats{
			SyncDuration: r.sync, AsyncDuration: r.async, AlignmentDuration: r.alignment,
			Bytes: r.bytes, ChannelStateBytes: r.channelBytes, Storage: r.storage}}
		if !r.noBarrier {
			out[i].BarrierReceived = time.Unix(r.barrierSec, int64(r.barrierNsec))
		}
	}
	return out
}

// SubtaskStats returns the acknowledgements of checkpoint id, ordered by
// task; false when id is not among the checkpoints History reports. The
// slice is a copy.
func (c *Coordinator) SubtaskStats(id int64) ([]SubtaskStats, bool) {
	if !slices.ContainsFunc(c.history, func(s *Stats) bool { return s.ID == id }) {
		return nil, false
	}
	var out []SubtaskStats
	if l := c.subtasks[id]; l != nil {
		out = l.stats()
	}
	slices.SortFunc(out, func(a, b SubtaskStats) int { return compareTasks(a.Task, b.Task) })
	return out, true
}
