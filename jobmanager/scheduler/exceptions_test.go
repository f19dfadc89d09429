package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// TestExceptionsBounded records more failures than the history keeps: the
// newest MaxExceptions remain, newest first.
func TestExceptionsBounded(t *testing.T) {
	j := &job{id: "j"}
	c := &Scheduler{jobs: map[string]*job{"j": j}}
	t0 := time.Unix(1_700_000_000, 0)
	for i := range MaxExceptions + 5 {
		c.recordException(j, fmt.Sprintf("failure %d", i), ScopeGlobal, nil, t0.Add(time.Duration(i)*time.Second))
	}
	got, err := c.Exceptions("j")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxExceptions {
		t.Fatalf("%d exceptions kept, want %d", len(got), MaxExceptions)
	}
	for i, e := range got {
		if want := fmt.Sprintf("failure %d", MaxExceptions+4-i); e.Cause != want || e.Task != "" {
			t.Errorf("exception %d: %q (task %q), want %q", i, e.Cause, e.Task, want)
		}
	}
	if _, err := c.Exceptions("nosuch"); err == nil {
		t.Error("exceptions of an unknown job: no error")
	}
}
