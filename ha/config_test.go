package ha

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Endpoints = []string{"127.0.0.1:2379"}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // what the message names
	}{
		{"defaults with endpoint", func(*Config) {}, ""},
		{"no endpoints", func(c *Config) { c.Endpoints = nil }, "ha.endpoints"},
		{"blank endpoint", func(c *Config) { c.Endpoints = []string{" "} }, "endpoint 0"},
		{"empty prefix", func(c *Config) { c.Prefix = "/" }, "prefix"},
		{"short ttl", func(c *Config) { c.LeaseTTL = 500 * time.Millisecond }, "lease TTL 500ms"},
		{"zero dial timeout", func(c *Config) { c.DialTimeout = 0 }, "dial timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigDerived(t *testing.T) {
	tests := []struct {
		ttl    time.Duration
		prefix string
		secs   int64
		want   string
	}{
		{time.Second, "/weir", 1, "/weir"},
		{1500 * time.Millisecond, "/weir/", 2, "/weir"},
		{10 * time.Second, "/a/b//", 10, "/a/b"},
	}
	for _, tt := range tests {
		c := Config{LeaseTTL: tt.ttl, Prefix: tt.prefix}
		if got := c.ttlSeconds(); got != tt.secs {
			t.Errorf("ttlSeconds(%v) = %d, want %d", tt.ttl, got, tt.secs)
		}
		if got := c.prefix(); got != tt.want {
			t.Errorf("prefix(%q) = %q, want %q", tt.prefix, got, tt.want)
		}
	}
}
