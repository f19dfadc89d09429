package coordinator

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestSubtaskStatsKeptForHistory(t *testing.T) {
	a, b := TaskID{0, 0}, TaskID{1, 0}
	c := New(Config{TolerableFailures: 1000}, []TaskID{a, b}, []TaskID{a}, 1, t0)
	now := t0
	var ids []int64
	for range HistorySize + 3 {
		now = now.Add(time.Second)
		id, err := c.TriggerNow(now)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		trigger := now
		// b acks first, a second: SubtaskStats orders by task anyway.
		c.Ack(trigger.Add(300*time.Millisecond), b, id, nil, AckStats{SyncDuration: 10 * time.Millisecond,
			AlignmentDuration: 20 * time.Millisecond, AsyncDuration: 30 * time.Millisecond, Bytes: id, ChannelStateBytes: 7,
			BarrierReceived: trigger.Add(100 * time.Millisecond)})
		c.Ack(trigger.Add(50*time.Millisecond), a, id, nil, AckStats{Bytes: 2 * id, BarrierReceived: trigger.Add(-time.Second)})
		c.ManifestWritten(now, id, nil)
	}
	if _, ok := c.SubtaskStats(ids[2]); ok {
		t.Errorf("checkpoint %d is older than the history but still has subtask stats", ids[2])
	}
	if len(c.subtasks) != HistorySize {
		t.Errorf("subtask stats kept for %d checkpoints, want %d (HistorySize)", len(c.subtasks), HistorySize)
	}
	last := ids[len(ids)-1]
	got, ok := c.SubtaskStats(last)
	if !ok || len(got) != 2 {
		t.Fatalf("SubtaskStats(%d) = %v, %v; want 2 entries", last, got, ok)
	}
	trigger := now
	if got[0].Task != a || got[1].Task != b {
		t.Fatalf("order %v, %v; want %v then %v", got[0].Task, got[1].Task, a, b)
	}
	if got[1].Bytes != last || got[1].ChannelStateBytes != 7 || got[0].Bytes != 2*last {
		t.Errorf("bytes %d/%d, channel %d", got[0].Bytes, got[1].Bytes, got[1].ChannelStateBytes)
	}
	if h := c.History()[0]; h.ID != last || h.MaxStartDelay != 100*time.Millisecond || h.ChannelStateBytes != 7 {
		t.Errorf("History[0]: id %d, max start delay %v, channel state %d; want %d, 100ms, 7", h.ID, h.MaxStartDelay, h.ChannelStateBytes, last)
	}
	if d := got[1].EndToEnd(trigger); d != 300*time.Millisecond {
		t.Errorf("b end to end %v, want 300ms", d)
	}
	if d := got[1].StartDelay(trigger); d != 100*time.Millisecond {
		t.Errorf("b start delay %v, want 100ms", d)
	}
	// a's clock runs behind: its barrier seems to come before the trigger.
	if d := got[0].StartDelay(trigger); d != 0 {
		t.Errorf("a start delay %v, want 0 (clamped)", d)
	}
	// A clock running ahead cannot make the delay exceed what the ack
	// time leaves.
	ahead := SubtaskStats{AckTime: trigger.Add(time.Second), AckStats: AckStats{SyncDuration: 100 * time.Millisecond,
		BarrierReceived: trigger.Add(time.Hour)}}
	if d := ahead.StartDelay(trigger); d != 900*time.Millisecond {
		t.Errorf("skewed start delay %v, want 900ms", d)
	}
	if d := (SubtaskStats{AckTime: trigger.Add(time.Second)}).StartDelay(trigger); d != 0 {
		t.Errorf("unknown barrier time: start delay %v, want 0", d)
	}
}

// The coordinator keeps acknowledgements in a compact form; what
// SubtaskStats gives back is what was acknowledged: the same instants
// (AckTime relative to the trigger, to the nanosecond), durations and
// counts.
func TestAckLogKeepsEverything(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	trigger := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	l := &ackLog{trigger: trigger}
	var want []SubtaskStats
	for i := range 500 {
		s := SubtaskStats{Task: TaskID{Vertex: rng.IntN(5), Subtask: i}, AckTime: trigger.Add(time.Duration(rng.Int64N(int64(time.Hour)))),
			AckStats: AckStats{SyncDuration: time.Duration(rng.Int64()), AsyncDuration: time.Duration(rng.Int64()),
				AlignmentDuration: time.Duration(rng.Int64()), Bytes: rng.Int64(), ChannelStateBytes: rng.Int64(),
				Storage: StorageRequests{Put: rng.Int64(), Get: rng.Int64(), List: rng.Int64(), Delete: rng.Int64()}}}
		switch i % 3 {
		case 0: // none reported
		case 1:
			s.BarrierReceived = time.UnixMilli(rng.Int64N(4e12))
		case 2: // far from now, on any clock
			s.BarrierReceived = time.Unix(rng.Int64()>>1-1<<61, rng.Int64N(1e9))
		}
		l.add(s)
		want = append(want, s)
	}
	got := l.stats()
	if len(got) != len(want) {
		t.Fatalf("%d stats, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Task != w.Task || !g.AckTime.Equal(w.AckTime) || g.EndToEnd(trigger) != w.EndToEnd(trigger) ||
			!g.BarrierReceived.Equal(w.BarrierReceived) || g.BarrierReceived.IsZero() != w.BarrierReceived.IsZero() ||
			g.AckStats.SyncDuration != w.SyncDuration || g.AsyncDuration != w.AsyncDuration || g.AlignmentDuration != w.AlignmentDuration ||
			g.Bytes != w.Bytes || g.ChannelStateBytes != w.ChannelStateBytes || g.Storage != w.Storage ||
			g.StartDelay(trigger) != w.StartDelay(trigger) {
			t.Fatalf("ack %d: got %+v, want %+v", i, g, w)
		}
	}
}
