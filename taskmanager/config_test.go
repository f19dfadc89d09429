package taskmanager

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := func() error { c := DefaultConfig(); return c.Validate() }(); err != nil {
		t.Fatalf("DefaultConfig is invalid: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // substring of the error
	}{
		{"empty id", func(c *Config) { c.ID = "" }, "id is empty"},
		{"jobmanager address without port", func(c *Config) { c.JobManagerAddress = "jm.example" }, `jobmanager address "jm.example"`},
		{"empty jobmanager address", func(c *Config) { c.JobManagerAddress = "" }, "jobmanager address"},
		{"rpc address without port", func(c *Config) { c.RPCAddress = "0.0.0.0" }, `rpc address "0.0.0.0"`},
		{"zero slots", func(c *Config) { c.Slots = 0 }, "slots 0"},
		{"negative slots", func(c *Config) { c.Slots = -2 }, "slots -2"},
		{"zero credits", func(c *Config) { c.CreditsPerChannel = 0 }, "credits per channel 0"},
		{"unknown compression", func(c *Config) { c.ExchangeCompression = "lzma" }, `exchange compression "lzma"`},
		{"negative coalesce rows", func(c *Config) { c.ExchangeCoalesceRows = -1 }, "exchange coalesce rows -1"},
		{"coalesce rows too many", func(c *Config) { c.ExchangeCoalesceRows = 1<<20 + 1 }, "exchange coalesce rows 1048577"},
		{"negative dictionary bytes", func(c *Config) { c.ExchangeDictionaryBytes = -1 }, "exchange dictionary bytes -1"},
		{"dictionary too large", func(c *Config) { c.ExchangeDictionaryBytes = 16<<20 + 1 }, "exchange dictionary bytes 16777217"},
		{"zero coalesce timeout", func(c *Config) { c.ExchangeCoalesceTimeout = 0 }, "exchange coalesce timeout 0s"},
		{"tiny exchange memory", func(c *Config) { c.ExchangeMemoryBytes = 1000 }, "exchange memory 1000 bytes"},
		{"zero register retry", func(c *Config) { c.RegisterRetry = 0 }, "register retry"},
		{"negative register retry", func(c *Config) { c.RegisterRetry = -time.Second }, "register retry -1s"},
		{"negative checkpoint ack delay", func(c *Config) { c.CheckpointAckDelay = -time.Millisecond }, "checkpoint ack delay -1ms"},
		{"checkpoint ack delay too long", func(c *Config) { c.CheckpointAckDelay = time.Minute }, "checkpoint ack delay 1m0s"},
		{"negative state cache", func(c *Config) { c.StateCacheBytes = -1 }, "state cache bytes -1"},
		{"negative gc heap floor", func(c *Config) { c.GCHeapFloorBytes = -1 }, "gc heap floor bytes -1: must be between 0"},
		{"gc heap floor too large", func(c *Config) { c.GCHeapFloorBytes = 1<<40 + 1 }, "gc heap floor bytes 1099511627777"},
		{"negative cpu cores", func(c *Config) { c.CPUCores = -1 }, "cpu cores -1: must be between 0"},
		{"cpu cores too many", func(c *Config) { c.CPUCores = 4097 }, "cpu cores 4097"},
		{"state cache too small per slot", func(c *Config) { c.StateCacheBytes, c.Slots = 300<<10, 2 }, "153600 bytes per slot (2 slots)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v; want an error containing %q", err, tc.want)
			}
			if _, err := New(c, newTestRegistry(newTestState())); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.ID == "" || c.JobManagerAddress != "127.0.0.1:6123" || c.RPCAddress != "127.0.0.1:0" ||
		c.Slots != 2 || c.CreditsPerChannel != 8 || c.RegisterRetry != time.Second || c.CheckpointAckDelay != 50*time.Millisecond {
		t.Fatalf("DefaultConfig() = %+v; does not match the documented defaults", c)
	}
}
