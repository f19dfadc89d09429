package ha

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Config configures a Client. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Endpoints are the etcd client URLs or host:port pairs, for example
	// "http://10.0.0.1:2379". At least one is required.
	Endpoints []string
	// Prefix is the cluster prefix every key lives under, so that several
	// Weir clusters can share one etcd. Default "/weir". Trailing slashes
	// are ignored.
	Prefix string
	// LeaseTTL is the lifetime of a jobmanager's session lease: how long
	// etcd keeps its campaign (and leadership) after it stops hearing from
	// it, and so bounds how long a dead leader blocks a takeover. Rounded up
	// to whole seconds; at least 1s. Default 10s. A leader steps down on its
	// own a little earlier (see Leadership.Lost).
	LeaseTTL time.Duration
	// DialTimeout bounds Connect's first contact with etcd. Default 5s.
	DialTimeout time.Duration
	// Logger receives the package's logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults; the caller still sets Endpoints.
func DefaultConfig() Config {
	return Config{
		Prefix:      "/weir",
		LeaseTTL:    10 * time.Second,
		DialTimeout: 5 * time.Second,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("ha: config: no etcd endpoints; set ha.endpoints to the etcd client URLs (for example http://127.0.0.1:2379)")
	}
	for i, ep := range c.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return fmt.Errorf("ha: config: etcd endpoint %d is empty; give host:port or a URL", i)
		}
	}
	if strings.Trim(c.Prefix, "/") == "" {
		return fmt.Errorf("ha: config: prefix %q names no key space; use something like /weir", c.Prefix)
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("ha: config: lease TTL %v is below 1s; etcd leases are granted in whole seconds", c.LeaseTTL)
	}
	if c.DialTimeout <= 0 {
		return fmt.Errorf("ha: config: dial timeout %v must be positive", c.DialTimeout)
	}
	return nil
}

// ttlSeconds is LeaseTTL rounded up to whole seconds.
func (c Config) ttlSeconds() int64 {
	return int64((c.LeaseTTL + time.Second - 1) / time.Second)
}

// prefix is the cluster prefix without trailing slashes.
func (c Config) prefix() string {
	return strings.TrimRight(c.Prefix, "/")
}
