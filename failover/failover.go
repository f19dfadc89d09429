package failover

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/weirstream/weir/stream"
)

// Strategy decides restarts for one job. It is not safe for concurrent use.
type Strategy interface {
	// OnFailure records a failure at now and says whether to restart and
	// after what delay. Calls must come with non-decreasing times.
	OnFailure(now time.Time, cause string) (restart bool, delay time.Duration)
	// OnHealthy may be called periodically while the job runs; strategies
	// that forgive failures after a healthy period (exponential-delay) use
	// it. Calling it is never required: OnFailure also looks at the time
	// since the previous failure.
	OnHealthy(now time.Time)
	// Name is the strategy's type: "none", "fixed-delay", "failure-rate" or
	// "exponential-delay".
	Name() string
}

// The strategy types.
const (
	None             = "none"
	FixedDelay       = "fixed-delay"
	FailureRate      = "failure-rate"
	ExponentialDelay = "exponential-delay"
)

// Types lists the strategy types.
var Types = []string{None, FixedDelay, FailureRate, ExponentialDelay}

// Defaults.
const (
	DefaultAttempts          = 1
	DefaultDelay             = time.Second
	DefaultMaxFailures       = 1
	DefaultInterval          = time.Minute
	DefaultInitialBackoff    = time.Second
	DefaultMaxBackoff        = time.Minute
	DefaultMultiplier        = 1.5
	DefaultJitter            = 0.1
	DefaultResetBackoffAfter = time.Hour
)

// ErrInvalidConfig is wrapped by every validation error.
var ErrInvalidConfig = errors.New("failover: invalid restart strategy")

// WithDefaults returns cfg with its Type resolved (an empty Type becomes
// exponential-delay when checkpointing, none otherwise) and the zero fields
// of that type set to their defaults. Fields of other types are left alone.
func WithDefaults(cfg stream.RestartConfig, checkpointing bool) stream.RestartConfig {
	if cfg.Type == "" {
		cfg.Type = None
		if checkpointing {
			cfg.Type = ExponentialDelay
		}
	}
	switch cfg.Type {
	case FixedDelay:
		cfg.Attempts = orInt(cfg.Attempts, DefaultAttempts)
		cfg.Delay = orDur(cfg.Delay, DefaultDelay)
	case FailureRate:
		cfg.MaxFailures = orInt(cfg.MaxFailures, DefaultMaxFailures)
		cfg.Interval = orDur(cfg.Interval, DefaultInterval)
		cfg.Delay = orDur(cfg.Delay, DefaultDelay)
	case ExponentialDelay:
		cfg.InitialBackoff = orDur(cfg.InitialBackoff, DefaultInitialBackoff)
		cfg.MaxBackoff = orDur(cfg.MaxBackoff, DefaultMaxBackoff)
		if cfg.Multiplier == 0 {
			cfg.Multiplier = DefaultMultiplier
		}
		if cfg.Jitter == 0 {
			cfg.Jitter = DefaultJitter
		}
		cfg.ResetBackoffAfter = orDur(cfg.ResetBackoffAfter, DefaultResetBackoffAfter)
	}
	return cfg
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func orDur(v, d time.Duration) time.Duration {
	if v == 0 {
		return d
	}
	return v
}

// Validate reports the first invalid setting of cfg (after WithDefaults),
// naming the option (as in a job spec's restartStrategy mapping), the reason
// and the allowed values.
func Validate(cfg stream.RestartConfig, checkpointing bool) error {
	c := WithDefaults(cfg, checkpointing)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("restartStrategy.%s: %w", fmt.Sprintf(format, a...), ErrInvalidConfig)
	}
	negative := func(name string, d time.Duration) error {
		if d < 0 {
			return bad("%s %v: must not be negative (0 takes the default)", name, d)
		}
		return nil
	}
	switch c.Type {
	case None:
		return nil
	case FixedDelay:
		if c.Attempts < 0 {
			return bad("attempts %d: must be at least 1 (0 takes the default %d)", c.Attempts, DefaultAttempts)
		}
		return negative("delay", c.Delay)
	case FailureRate:
		if c.MaxFailures < 0 {
			return bad("maxFailures %d: must be at least 1 (0 takes the default %d)", c.MaxFailures, DefaultMaxFailures)
		}
		if err := negative("interval", c.Interval); err != nil {
			return err
		}
		return negative("delay", c.Delay)
	case ExponentialDelay:
		for _, o := range []struct {
			name string
			d    time.Duration
		}{{"initialBackoff", c.InitialBackoff}, {"maxBackoff", c.MaxBackoff}, {"resetBackoffAfter", c.ResetBackoffAfter}} {
			if err := negative(o.name, o.d); err != nil {
				return err
			}
		}
		if c.MaxBackoff < c.InitialBackoff {
			return bad("maxBackoff %v: must be at least initialBackoff (%v)", c.MaxBackoff, c.InitialBackoff)
		}
		if !(c.Multiplier >= 1) || math.IsInf(c.Multiplier, 0) {
			return bad("multiplier %v: must be a finite number of at least 1 (0 takes the default %v)", c.Multiplier, DefaultMultiplier)
		}
		if !(c.Jitter >= 0 && c.Jitter <= 1) {
			return bad("jitter %v: must be between 0 and 1 (a fraction of the backoff; 0 takes the default %v)", c.Jitter, DefaultJitter)
		}
		return nil
	}
	return bad("type %q: unknown restart strategy; want one of %s", cfg.Type, strings.Join(Types, ", "))
}

// New validates cfg and returns its strategy. An empty cfg.Type means
// exponential-delay when checkpointing is on and none otherwise. rnd is the
// only source of randomness (exponential-delay's jitter); nil means a fixed
// seed, which makes every job's jitter the same, so the jobmanager should
// pass a source it seeded.
func New(cfg stream.RestartConfig, checkpointing bool, rnd *rand.Rand) (Strategy, error) {
	if err := Validate(cfg, checkpointing); err != nil {
		return nil, err
	}
	c := WithDefaults(cfg, checkpointing)
	switch c.Type {
	case FixedDelay:
		return &fixedDelay{attempts: c.Attempts, delay: c.Delay}, nil
	case FailureRate:
		return &failureRate{max: c.MaxFailures, interval: c.Interval, delay: c.Delay}, nil
	case ExponentialDelay:
		if rnd == nil {
			rnd = rand.New(rand.NewPCG(1, 2))
		}
		return &exponentialDelay{
			initial:    float64(c.InitialBackoff),
			max:        float64(c.MaxBackoff),
			multiplier: c.Multiplier,
			jitter:     c.Jitter,
			reset:      c.ResetBackoffAfter,
			rnd:        rnd,
		}, nil
	}
	return noRestart{}, nil
}

type noRestart struct{}

func (noRestart) OnFailure(time.Time, string) (bool, time.Duration) { return false, 0 }
func (noRestart) OnHealthy(time.Time)                               {}
func (noRestart) Name() string                                      { return None }

type fixedDelay struct {
	attempts int
	delay    time.Duration
	used     int
}

func (s *fixedDelay) OnFailure(time.Time, string) (bool, time.Duration) {
	if s.used >= s.attempts {
		return false, 0
	}
	s.used++
	return true, s.delay
}

func (s *fixedDelay) OnHealthy(time.Time) {}
func (s *fixedDelay) Name() string        { return FixedDelay }

type failureRate struct {
	max      int
	interval time.Duration
	delay    time.Duration
	failures []time.Time // within the last interval, oldest first
}

func (s *failureRate) OnFailure(now time.Time, _ string) (bool, time.Duration) {
	s.forget(now)
	s.failures = append(s.failures, now)
	if len(s.failures) > s.max {
		return false, 0
	}
	return true, s.delay
}

// forget drops failures more than interval before now.
func (s *failureRate) forget(now time.Time) {
	i := 0
	for i < len(s.failures) && now.Sub(s.failures[i]) > s.interval {
		i++
	}
	s.failures = append(s.failures[:0], s.failures[i:]...)
}

func (s *failureRate) OnHealthy(now time.Time) { s.forget(now) }
func (s *failureRate) Name() string            { return FailureRate }

type exponentialDelay struct {
	initial, max       float64 // nanoseconds
	multiplier, jitter float64
	reset              time.Duration
	rnd                *rand.Rand

	backoff     float64 // of the previous failure; 0 before the first
	lastFailure time.Time
}

func (s *exponentialDelay) OnFailure(now time.Time, _ string) (bool, time.Duration) {
	s.OnHealthy(now)
	if s.backoff == 0 {
		s.backoff = s.initial
	} else {
		s.backoff = math.Min(s.backoff*s.multiplier, s.max)
	}
	s.lastFailure = now
	d := s.backoff + (2*s.rnd.Float64()-1)*s.jitter*s.backoff
	return true, time.Duration(math.Max(d, 0))
}

// OnHealthy resets the backoff when ResetBackoffAfter has passed since the
// last failure.
func (s *exponentialDelay) OnHealthy(now time.Time) {
	if s.backoff != 0 && now.Sub(s.lastFailure) >= s.reset {
		s.backoff = 0
	}
}

func (s *exponentialDelay) Name() string { return ExponentialDelay }
