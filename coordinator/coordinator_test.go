package coordinator

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

func TestConfigFrom(t *testing.T) {
	tests := []struct {
		name string
		in   stream.CheckpointConfig
		want Config
	}{
		{"defaults", stream.CheckpointConfig{Interval: time.Second},
			Config{Interval: time.Second, Timeout: 10 * time.Minute, MaxConcurrent: 1, Retained: 1}},
		{"off", stream.CheckpointConfig{},
			Config{Timeout: 10 * time.Minute, MaxConcurrent: 1, Retained: 1}},
		{"all set", stream.CheckpointConfig{Interval: 5 * time.Second, Timeout: time.Minute, MinPause: 2 * time.Second,
			MaxConcurrent: 3, TolerableFailures: 4, Retained: 5, Mode: stream.AtLeastOnce},
			Config{Interval: 5 * time.Second, Timeout: time.Minute, MinPause: 2 * time.Second,
				MaxConcurrent: 3, TolerableFailures: 4, Retained: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ConfigFrom(tt.in); got != tt.want {
				t.Errorf("ConfigFrom(%+v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestNormalized(t *testing.T) {
	tests := []struct {
		in, want Config
	}{
		{Config{}, Config{Timeout: DefaultTimeout, MaxConcurrent: 1, Retained: 1}},
		{Config{Interval: -1, Timeout: -1, MinPause: -1, MaxConcurrent: -1, TolerableFailures: -1, Retained: -1},
			Config{Timeout: DefaultTimeout, MaxConcurrent: 1, Retained: 1}},
		{Config{Interval: 1, Timeout: 2, MinPause: 3, MaxConcurrent: 4, TolerableFailures: 5, Retained: 6},
			Config{Interval: 1, Timeout: 2, MinPause: 3, MaxConcurrent: 4, TolerableFailures: 5, Retained: 6}},
	}
	for _, tt := range tests {
		if got := tt.in.normalized(); got != tt.want {
			t.Errorf("%+v.normalized() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestTriggerNowErrors(t *testing.T) {
	src := []TaskID{{0, 0}}
	tests := []struct {
		name  string
		setup func(c *Coordinator)
		want  error
	}{
		{"ok", func(*Coordinator) {}, nil},
		{"too many", func(c *Coordinator) { mustTrigger(t, c) }, ErrTooManyPending},
		{"stopped", func(c *Coordinator) { c.Stop(t0, CauseJobEnded, "cancel") }, ErrStopped},
		{"failed", func(c *Coordinator) { c.Decline(t0, src[0], mustTrigger(t, c), "x") }, ErrStopped},
		{"sources finished", func(c *Coordinator) { c.TaskFinished(t0, src[0]) }, ErrNoSources},
		{"reset after stop", func(c *Coordinator) { c.Stop(t0, CauseFailover, "x"); c.Reset(t0, src, src) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{}, src, src, 1, t0)
			tt.setup(c)
			_, err := c.TriggerNow(t0)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("TriggerNow: %v, want %v", err, tt.want)
			}
		})
	}
}

func mustTrigger(t *testing.T, c *Coordinator) int64 {
	t.Helper()
	id, err := c.TriggerNow(t0)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestFirstID(t *testing.T) {
	for _, tt := range []struct{ first, want int64 }{{0, 1}, {-5, 1}, {1, 1}, {77, 77}} {
		c := New(Config{}, []TaskID{{0, 0}}, []TaskID{{0, 0}}, tt.first, t0)
		if got := mustTrigger(t, c); got != tt.want {
			t.Errorf("New(firstID %d): first id %d, want %d", tt.first, got, tt.want)
		}
	}
}

func TestHistoryBounded(t *testing.T) {
	task := TaskID{0, 0}
	c := New(Config{TolerableFailures: 1000}, []TaskID{task}, []TaskID{task}, 1, t0)
	now := t0
	for i := range 2 * HistorySize {
		now = now.Add(time.Second)
		id, err := c.TriggerNow(now)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			c.Ack(now, task, id, id, AckStats{Bytes: id})
			c.ManifestWritten(now, id, nil)
		} else {
			c.Decline(now, task, id, "no")
		}
	}
	h := c.History()
	if len(h) != HistorySize {
		t.Fatalf("History has %d entries, want %d", len(h), HistorySize)
	}
	for i, s := range h {
		wantID := int64(2*HistorySize - i)
		wantStatus := Completed
		if wantID%2 == 0 {
			wantStatus = Failed
		}
		if s.ID != wantID || s.Status != wantStatus {
			t.Errorf("History[%d] = %d %v, want %d %v", i, s.ID, s.Status, wantID, wantStatus)
		}
	}
	if _, done, failed := c.Counts(); done != HistorySize || failed != HistorySize {
		t.Errorf("Counts: completed %d failed %d, want %d each", done, failed, HistorySize)
	}
}

func TestLatestIsACopy(t *testing.T) {
	task := TaskID{0, 0}
	c := New(Config{}, []TaskID{task}, []TaskID{task}, 1, t0)
	id := mustTrigger(t, c)
	c.Ack(t0, task, id, "handle", AckStats{})
	c.ManifestWritten(t0, id, nil)
	_, p, ok := c.Latest()
	if !ok || p[task] != "handle" {
		t.Fatalf("Latest: %v %v", p, ok)
	}
	p[task] = "changed"
	if _, p2, _ := c.Latest(); p2[task] != "handle" {
		t.Errorf("Latest returned the coordinator's own map")
	}
}

// Example shows the shell's loop: feed events, then carry out Ready's
// actions in order.
func Example() {
	src, sink := TaskID{0, 0}, TaskID{1, 0}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(Config{Interval: time.Second}, []TaskID{src, sink}, []TaskID{src}, 1, start)

	now := start.Add(time.Second)
	c.Tick(now)
	for _, a := range c.Ready() {
		fmt.Println(a) // the shell sends TriggerCheckpoint to the sources
	}
	c.Ack(now, src, 1, "offsets.bin", AckStats{Bytes: 8})
	c.Ack(now, sink, 1, "txn.bin", AckStats{Bytes: 64})
	for _, a := range c.Ready() {
		fmt.Println(a) // the shell writes the manifest and the pointer
		if w, ok := a.(WriteManifestAction); ok {
			c.ManifestWritten(now, w.ID, nil)
		}
	}
	for _, a := range c.Ready() {
		fmt.Println(a) // the shell notifies the tasks
	}
	// Output:
	// trigger 1 sources=[0/0]
	// write-manifest 1 acks=[0/0=offsets.bin 1/0=txn.bin] retained=[1]
	// notify-complete 1 tasks=[0/0 1/0]
}
