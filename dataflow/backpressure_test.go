package dataflow

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBackpressureCountsCreditWaits: a send that waits for credit is
// counted in Metrics.BackpressuredTime while it waits and after, and the
// count stops growing once the send returned.
func TestBackpressureCountsCreditWaits(t *testing.T) {
	var m Metrics
	o := &outputChannel{wake: make(chan struct{}, 1), backpressure: &m}
	o.mu.connected = true // no credit granted
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- o.send(ctx, event{kind: eventBatch}) }()
	waitFor(t, "the blocked send counts as backpressure", func() bool { return m.BackpressuredTime() > 20*time.Millisecond })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("send returned %v, want context.Canceled", err)
	}
	after := m.BackpressuredTime()
	if after < 20*time.Millisecond {
		t.Fatalf("backpressure %v after the wait, want at least 20ms", after)
	}
	if again := m.BackpressuredTime(); again != after {
		t.Fatalf("backpressure grew from %v to %v with no send waiting", after, again)
	}

}
