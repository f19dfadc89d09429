package jobspec

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/stream"
)

var (
	checkpointKeys = []string{"interval", "timeout", "minPause", "maxConcurrent", "mode", "tolerableFailures",
		"retained", "retention", "storage", "onCorruption", "unaligned", "alignedCheckpointTimeout", "maxOverhead", "minInterval", "maxInterval"}
	restartKeys = []string{"type", "attempts", "delay", "maxFailures", "interval", "initialBackoff", "maxBackoff",
		"multiplier", "jitter", "resetBackoffAfter"}
	stateKeys          = []string{"backend", "incremental"}
	restartTypes       = []string{"none", "fixed-delay", "failure-rate", "exponential-delay"}
	corruptionPolicies = []string{"fail", "fallback"}
)

func asDuration(n *yaml.Node) (time.Duration, error) {
	s, err := asString(n)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 500ms, 10s or 1m, got %q", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %s", s)
	}
	return d, nil
}

func asFloat(n *yaml.Node) (float64, error) {
	d := deref(n)
	if d.Kind == yaml.ScalarNode && (d.Tag == "!!float" || d.Tag == "!!int") {
		if f, err := strconv.ParseFloat(d.Value, 64); err == nil {
			return f, nil
		}
	}
	return 0, fmt.Errorf("must be a number, got %s", describe(n))
}

// asFraction reads a fraction in (0, 1), written as a number (0.03) or a
// percentage (3%).
func asFraction(n *yaml.Node) (float64, error) {
	var f float64
	d := deref(n)
	if s, ok := strings.CutSuffix(d.Value, "%"); ok && d.Kind == yaml.ScalarNode && d.ShortTag() == "!!str" {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return 0, fmt.Errorf("want a percentage such as 3%% or a fraction such as 0.03, got %q", d.Value)
		}
		f = v / 100
	} else {
		v, err := asFloat(n)
		if err != nil {
			return 0, fmt.Errorf("want a percentage such as 3%% or a fraction such as 0.03, got %s", describe(n))
		}
		f = v
	}
	if !(f > 0 && f < 1) {
		return 0, fmt.Errorf("must be between 0 and 100%% (exclusive), got %s; use a value such as 3%% or 0.03", d.Value)
	}
	return f, nil
}

// parseCheckpointing reads the `checkpointing:` mapping into g.Checkpoint.
func (p *parser) parseCheckpointing(n *yaml.Node) error {
	ps, at, err := pairs(n)
	if err != nil {
		return p.errAt(at, "checkpointing: %v", err)
	}
	c := &p.g.Checkpoint
	for _, kv := range ps {
		k, err := stringKey(kv.key)
		if err != nil {
			return p.errAt(kv.key, "checkpointing: %v", err)
		}
		switch k {
		case "interval":
			// A duration, or adaptive (stream.CheckpointConfig.Adaptive).
			if s, serr := asString(kv.val); serr == nil && s == "adaptive" {
				c.Adaptive = true
			} else if c.Interval, err = asDuration(kv.val); err != nil {
				err = fmt.Errorf("want a duration such as 500ms, 10s or 1m, or adaptive, got %s", describe(kv.val))
			}
		case "maxOverhead":
			c.MaxOverhead, err = asFraction(kv.val)
		case "minInterval":
			c.MinInterval, err = asDuration(kv.val)
		case "maxInterval":
			c.MaxInterval, err = asDuration(kv.val)
		case "timeout":
			c.Timeout, err = asDuration(kv.val)
		case "minPause":
			c.MinPause, err = asDuration(kv.val)
		case "maxConcurrent":
			c.MaxConcurrent, err = asInt(kv.val)
			if err == nil && c.MaxConcurrent < 1 {
				err = fmt.Errorf("must be at least 1, got %d", c.MaxConcurrent)
			}
		case "mode":
			var s string
			if s, err = asString(kv.val); err == nil {
				c.Mode, err = stream.ParseCheckpointMode(s)
			}
		case "tolerableFailures":
			c.TolerableFailures, err = asInt(kv.val)
			if err == nil && c.TolerableFailures < 0 {
				err = fmt.Errorf("must not be negative, got %d", c.TolerableFailures)
			}
		case "retained":
			c.Retained, err = asInt(kv.val)
			if err == nil && c.Retained < 1 {
				err = fmt.Errorf("must be at least 1, got %d", c.Retained)
			}
		case "retention":
			var s string
			if s, err = asString(kv.val); err == nil {
				switch s {
				case "delete":
					c.Retention = stream.DeleteOnCancel
				case "retain":
					c.Retention = stream.RetainOnCancel
				default:
					err = fmt.Errorf("want delete or retain, got %q", s)
				}
			}
		case "storage":
			c.Storage, err = asString(kv.val)
			if err == nil && !strings.HasPrefix(c.Storage, "file://") && !strings.HasPrefix(c.Storage, "s3://") {
				err = fmt.Errorf("want file:///path or s3://bucket/prefix, got %q", c.Storage)
			}
		case "onCorruption":
			// fail (the default): the job fails; fallback: it restarts
			// from an older retained checkpoint.
			if s, serr := asString(kv.val); serr != nil {
				err = fmt.Errorf("want fail or fallback, got %s", describe(kv.val))
			} else if c.OnCorruption, err = stream.ParseCorruptionPolicy(s); err != nil {
				err = fmt.Errorf("want fail or fallback, got %q%s", s, suggest(s, corruptionPolicies))
			}
		case "unaligned":
			// true: barriers overtake the data a backpressured source
			// could not send yet (stream.CheckpointConfig.Unaligned).
			c.Unaligned, err = asBool(kv.val)
		case "alignedCheckpointTimeout":
			// With unaligned: how long a checkpoint aligns at a task before
			// it switches to unaligned (0: unaligned from the start).
			if c.AlignedCheckpointTimeout, err = asDuration(kv.val); err != nil {
				err = fmt.Errorf("%v; use a duration such as 2s, or 0 for unaligned checkpoints from the start", err)
			}
		default:
			return p.errAt(kv.key, "checkpointing: unknown key %q%s; it has %s", k, suggest(k, checkpointKeys), strings.Join(checkpointKeys, ", "))
		}
		if err != nil {
			return p.errAt(kv.val, "checkpointing: %s: %v", k, err)
		}
	}
	if err := c.Validate(); err != nil {
		return p.errAt(n, "%v", err)
	}
	if c.Adaptive && c.Interval == 0 {
		c.Interval = c.WithDefaults().Interval // the starting interval
	}
	return nil
}

// parseRestart reads the `restartStrategy:` mapping into g.Restart.
func (p *parser) parseRestart(n *yaml.Node) error {
	ps, at, err := pairs(n)
	if err != nil {
		return p.errAt(at, "restartStrategy: %v", err)
	}
	r := &p.g.Restart
	for _, kv := range ps {
		k, err := stringKey(kv.key)
		if err != nil {
			return p.errAt(kv.key, "restartStrategy: %v", err)
		}
		switch k {
		case "type":
			if r.Type, err = asString(kv.val); err == nil && !contains(restartTypes, r.Type) {
				err = fmt.Errorf("unknown strategy %q%s; want %s", r.Type, suggest(r.Type, restartTypes), strings.Join(restartTypes, ", "))
			}
		case "attempts":
			r.Attempts, err = asInt(kv.val)
		case "delay":
			r.Delay, err = asDuration(kv.val)
		case "maxFailures":
			r.MaxFailures, err = asInt(kv.val)
		case "interval":
			r.Interval, err = asDuration(kv.val)
		case "initialBackoff":
			r.InitialBackoff, err = asDuration(kv.val)
		case "maxBackoff":
			r.MaxBackoff, err = asDuration(kv.val)
		case "multiplier":
			r.Multiplier, err = asFloat(kv.val)
		case "jitter":
			r.Jitter, err = asFloat(kv.val)
		case "resetBackoffAfter":
			r.ResetBackoffAfter, err = asDuration(kv.val)
		default:
			return p.errAt(kv.key, "restartStrategy: unknown key %q%s; it has %s", k, suggest(k, restartKeys), strings.Join(restartKeys, ", "))
		}
		if err != nil {
			return p.errAt(kv.val, "restartStrategy: %s: %v", k, err)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ParseRestartStrategy reads a restart strategy given as a decoded YAML
// mapping with the keys of a job spec's restartStrategy (for the
// jobmanager's config file, where it is the cluster default).
func ParseRestartStrategy(m map[string]any) (stream.RestartConfig, error) {
	var doc yaml.Node
	if err := doc.Encode(m); err != nil {
		return stream.RestartConfig{}, fmt.Errorf("restartStrategy: %v", err)
	}
	p := &parser{file: "restartStrategy"}
	if err := p.parseRestart(&doc); err != nil {
		return stream.RestartConfig{}, err
	}
	return p.g.Restart, nil
}

// parseState reads the `state:` mapping into g.State. `incremental: false`
// sets FullSnapshots; `incremental: true` is the default, and an error with
// `backend: heap`, which snapshots in full only.
func (p *parser) parseState(n *yaml.Node) (err error) {
	ps, at, err := pairs(n)
	if err != nil {
		return p.errAt(at, "state: %v", err)
	}
	var incremental *yaml.Node
	defer func() {
		if incremental != nil && !p.g.State.FullSnapshots && p.g.State.Backend == stream.StateBackendHeap && err == nil {
			err = p.errAt(incremental, "state: incremental: the heap backend takes full snapshots only; remove incremental: true or use backend: pebble")
		}
	}()
	for _, kv := range ps {
		k, err := stringKey(kv.key)
		if err != nil {
			return p.errAt(kv.key, "state: %v", err)
		}
		switch k {
		case "backend":
			var s string
			if s, err = asString(kv.val); err == nil {
				err = stream.ValidateStateBackend(s)
				p.g.State.Backend = s
			}
		case "incremental":
			d := deref(kv.val)
			if d.Kind != yaml.ScalarNode || d.ShortTag() != "!!bool" {
				err = fmt.Errorf("must be true or false, got %s", describe(kv.val))
				break
			}
			var inc bool
			if err = d.Decode(&inc); err == nil {
				p.g.State.FullSnapshots = !inc
				incremental = kv.val
			}
		default:
			return p.errAt(kv.key, "state: unknown key %q%s; it has %s", k, suggest(k, stateKeys), strings.Join(stateKeys, ", "))
		}
		if err != nil {
			return p.errAt(kv.val, "state: %s: %v", k, err)
		}
	}
	return nil
}

func asBool(n *yaml.Node) (bool, error) {
	d := deref(n)
	if d.Kind != yaml.ScalarNode || d.ShortTag() != "!!bool" {
		return false, fmt.Errorf("must be true or false, got %s", describe(n))
	}
	var v bool
	err := d.Decode(&v)
	return v, err
}
