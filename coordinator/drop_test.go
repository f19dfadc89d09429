package coordinator

import (
	"slices"
	"testing"
	"time"
)

// TestDropCompleted: a dropped checkpoint is no longer the latest nor
// retained, no DiscardAction ever names it, retention counts only the
// others, and ids keep increasing past it.
func TestDropCompleted(t *testing.T) {
	task := TaskID{0, 0}
	c := New(Config{Retained: 3}, []TaskID{task}, []TaskID{task}, 1, t0)
	now := t0
	var discarded []int64
	complete := func() int64 {
		t.Helper()
		now = now.Add(time.Second)
		id := mustTrigger(t, c)
		c.Ack(now, task, id, id, AckStats{})
		c.ManifestWritten(now, id, nil)
		for _, a := range c.Ready() {
			if d, ok := a.(DiscardAction); ok {
				discarded = append(discarded, d.IDs...)
			}
		}
		return id
	}
	for range 3 {
		complete()
	}
	if !c.DropCompleted(3) {
		t.Fatal("DropCompleted(3) = false; 3 was retained")
	}
	if c.DropCompleted(3) || c.DropCompleted(9) {
		t.Error("DropCompleted of a checkpoint not retained reported true")
	}
	if a := c.Ready(); len(a) != 0 {
		t.Errorf("DropCompleted emitted %v", a)
	}
	if id, p, ok := c.Latest(); !ok || id != 2 || p[task] != int64(2) {
		t.Errorf("Latest after dropping 3: %d %v %v, want 2 with its payload", id, p, ok)
	}
	if r := c.Retained(); !slices.Equal(r, []int64{1, 2}) {
		t.Errorf("Retained %v, want [1 2]", r)
	}
	if id := complete(); id != 4 {
		t.Errorf("next checkpoint %d, want 4", id)
	}
	if r := c.Retained(); !slices.Equal(r, []int64{1, 2, 4}) || len(discarded) != 0 {
		t.Errorf("Retained %v discarded %v, want [1 2 4] and none discarded", r, discarded)
	}
	complete()
	if r := c.Retained(); !slices.Equal(r, []int64{2, 4, 5}) || !slices.Equal(discarded, []int64{1}) {
		t.Errorf("Retained %v discarded %v, want [2 4 5] and [1]", r, discarded)
	}
	// Dropping every retained checkpoint leaves none to restore.
	for _, id := range []int64{5, 4, 2} {
		c.DropCompleted(id)
	}
	if id, _, ok := c.Latest(); ok {
		t.Errorf("Latest %d after dropping every checkpoint", id)
	}
}
