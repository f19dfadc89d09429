package ha

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/internal/syncbuf"

	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) {
	// No ignores: the embedded etcd servers and the clients leave no
	// goroutines behind once closed.
	goleak.VerifyTestMain(m)
}

// testConfig is a config for srv with a short lease.
func testConfig(srv *etcdtest.Server, ttl time.Duration, logs *syncbuf.Buffer) Config {
	cfg := DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	cfg.LeaseTTL = ttl
	cfg.DialTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return cfg
}

// connect connects a Client to srv and closes it at the end of the test.
func connect(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := Connect(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// campaign campaigns in the background; the result arrives on the channel.
type campaignResult struct {
	l   *Leadership
	err error
}

func campaignAsync(ctx context.Context, c *Client, id string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := c.Campaign(ctx, id, id+".example:6123")
		ch <- campaignResult{l, err}
	}()
	return ch
}

func waitCampaign(t *testing.T, ch <-chan campaignResult, within time.Duration) *Leadership {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Campaign: %v", r.err)
		}
		return r.l
	case <-time.After(within):
		t.Fatalf("Campaign did not win within %v", within)
		return nil
	}
}

// waitClosed fails the test unless ch is closed within d and returns how
// long that took.
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
		return 0
	}
}

// checkFor polls cond until it holds or d passes.
func checkFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	polltest.NoError(t, d, what, cond)
}
