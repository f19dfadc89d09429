// Package polltest is the one way Weir's tests wait for a condition: poll
// it, with a deadline, instead of sleeping for a guessed time (nats-server's
// checkFor idea). It imports the standard library only; only tests and test
// helpers import it.
package polltest

import (
	"testing"
	"time"
)

// maxInterval bounds the pause between two polls. Polls start 1ms apart
// and back off to it, so that fast conditions are seen at once and slow
// ones (processes, networks) cost little.
const maxInterval = 50 * time.Millisecond

// Eventually polls cond until it holds or timeout passes, then fails the
// test naming what it waited for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	NoError(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// NoError polls cond until it returns nil or timeout passes, then fails the
// test naming what it waited for and the last error.
func NoError(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(interval) // polling interval, not synchronisation
		interval = min(2*interval, maxInterval)
	}
}

type notYet struct{}

func (notYet) Error() string { return "condition not met" }

var errNotYet error = notYet{}
