package failover

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is a time offset from t0.
func at(d time.Duration) time.Time { return t0.Add(d) }

type step struct {
	at      time.Duration // failure time, from t0
	restart bool
	delay   time.Duration
}

func run(t *testing.T, s Strategy, steps []step) {
	t.Helper()
	for i, st := range steps {
		restart, delay := s.OnFailure(at(st.at), "boom")
		if restart != st.restart || delay != st.delay {
			t.Errorf("failure %d at %v: restart=%v delay=%v, want restart=%v delay=%v",
				i, st.at, restart, delay, st.restart, st.delay)
		}
	}
}

func TestNone(t *testing.T) {
	for _, cfg := range []stream.RestartConfig{{Type: None}, {}} {
		s, err := New(cfg, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name() != None {
			t.Errorf("%+v: Name %q, want none", cfg, s.Name())
		}
		run(t, s, []step{{0, false, 0}, {time.Hour, false, 0}})
	}
}

func TestFixedDelay(t *testing.T) {
	tests := []struct {
		name  string
		cfg   stream.RestartConfig
		steps []step
	}{
		{"defaults: one restart after 1s", stream.RestartConfig{Type: FixedDelay},
			[]step{{0, true, time.Second}, {time.Hour, false, 0}, {2 * time.Hour, false, 0}}},
		{"3 attempts, 250ms", stream.RestartConfig{Type: FixedDelay, Attempts: 3, Delay: 250 * time.Millisecond},
			[]step{
				{0, true, 250 * time.Millisecond},
				{time.Second, true, 250 * time.Millisecond},
				// attempts are counted over the job's life, however far apart
				{48 * time.Hour, true, 250 * time.Millisecond},
				{49 * time.Hour, false, 0},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name() != FixedDelay {
				t.Errorf("Name %q", s.Name())
			}
			run(t, s, tt.steps)
		})
	}
}

func TestFailureRate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     stream.RestartConfig
		healthy []time.Duration // OnHealthy calls before the failures
		steps   []step
	}{
		{"defaults: 1 failure per minute", stream.RestartConfig{Type: FailureRate},
			nil,
			[]step{
				{0, true, time.Second},
				{59 * time.Second, false, 0}, // 2 failures within 1m
			}},
		{"defaults: spaced failures keep restarting", stream.RestartConfig{Type: FailureRate},
			nil,
			[]step{
				{0, true, time.Second},
				{61 * time.Second, true, time.Second},
				{122 * time.Second, true, time.Second},
			}},
		{"a failure exactly interval ago counts", stream.RestartConfig{Type: FailureRate},
			nil,
			[]step{
				{0, true, time.Second},
				{time.Minute, false, 0},
			}},
		{"3 per 10s", stream.RestartConfig{Type: FailureRate, MaxFailures: 3, Interval: 10 * time.Second, Delay: 2 * time.Second},
			[]time.Duration{time.Hour},
			[]step{
				{0, true, 2 * time.Second},
				{2 * time.Second, true, 2 * time.Second},
				{4 * time.Second, true, 2 * time.Second},
				{9 * time.Second, false, 0}, // 4 within [−1s, 9s]
				// at 13s the window holds 4s, 9s and 13s: 3 failures
				{13 * time.Second, true, 2 * time.Second},
				{14 * time.Second, false, 0}, // 4s, 9s, 13s, 14s
				{30 * time.Second, true, 2 * time.Second},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range tt.healthy {
				s.OnHealthy(at(h))
			}
			if s.Name() != FailureRate {
				t.Errorf("Name %q", s.Name())
			}
			run(t, s, tt.steps)
		})
	}
}

// expectedJitter reproduces the jitter draw independently: a uniform
// fraction in [-jitter, +jitter] of the backoff from the same seeded source.
func withJitter(r *rand.Rand, backoff time.Duration, jitter float64) time.Duration {
	b := float64(backoff)
	return time.Duration(b + (r.Float64()*2-1)*jitter*b)
}

func TestExponentialDelay(t *testing.T) {
	const s1 = time.Second
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	tests := []struct {
		name     string
		cfg      stream.RestartConfig
		healthy  []time.Duration
		failures []time.Duration
		backoffs []time.Duration // before jitter
	}{
		{"defaults", stream.RestartConfig{}, nil,
			[]time.Duration{0, 10 * s1, 20 * s1, 30 * s1, 40 * s1},
			[]time.Duration{s1, ms(1500), ms(2250), ms(3375), ms(5062.5)}},
		{"capped at max", stream.RestartConfig{Type: ExponentialDelay, InitialBackoff: 10 * s1, MaxBackoff: 30 * s1, Multiplier: 2}, nil,
			[]time.Duration{0, s1, 2 * s1, 3 * s1},
			[]time.Duration{10 * s1, 20 * s1, 30 * s1, 30 * s1}},
		{"reset after an hour since the last failure", stream.RestartConfig{}, nil,
			[]time.Duration{0, time.Minute, time.Minute + time.Hour - 1, 2*time.Hour + time.Minute - 1, 2*time.Hour + 2*time.Minute},
			[]time.Duration{s1, ms(1500), ms(2250), s1, ms(1500)}},
		{"custom reset, OnHealthy does not change the outcome", stream.RestartConfig{ResetBackoffAfter: 10 * s1},
			[]time.Duration{5 * s1, 100 * s1},
			[]time.Duration{0, 9 * s1, 19 * s1, 29*s1 - 1},
			[]time.Duration{s1, ms(1500), s1, ms(1500)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg, true, rand.New(rand.NewPCG(42, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if s.Name() != ExponentialDelay {
				t.Errorf("Name %q", s.Name())
			}
			jitter := WithDefaults(tt.cfg, true).Jitter
			ref := rand.New(rand.NewPCG(42, 1))
			h := tt.healthy
			for i, f := range tt.failures {
				for len(h) > 0 && h[0] <= f {
					s.OnHealthy(at(h[0]))
					h = h[1:]
				}
				restart, delay := s.OnFailure(at(f), "boom")
				want := withJitter(ref, tt.backoffs[i], jitter)
				if !restart || delay != want {
					t.Errorf("failure %d at %v: restart=%v delay=%v, want true %v (backoff %v)", i, f, restart, delay, want, tt.backoffs[i])
				}
				lo, hi := float64(tt.backoffs[i])*(1-jitter), float64(tt.backoffs[i])*(1+jitter)
				if float64(delay) < lo-1 || float64(delay) > hi+1 {
					t.Errorf("failure %d: delay %v outside [%v, %v]", i, delay, time.Duration(lo), time.Duration(hi))
				}
			}
		})
	}
}

// TestExponentialJitterSpread checks that the jitter really spans ±Jitter.
func TestExponentialJitterSpread(t *testing.T) {
	s, err := New(stream.RestartConfig{Type: ExponentialDelay, Jitter: 0.5, ResetBackoffAfter: time.Nanosecond}, true, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := time.Hour, time.Duration(0)
	for i := range 1000 {
		// every failure comes after a reset: the backoff is always 1s
		_, d := s.OnFailure(at(time.Duration(i)*time.Second), "x")
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 500*time.Millisecond || hi > 1500*time.Millisecond || lo > 550*time.Millisecond || hi < 1450*time.Millisecond {
		t.Errorf("delays span [%v, %v], want about [500ms, 1.5s]", lo, hi)
	}
}

func TestNilRandIsDeterministic(t *testing.T) {
	a, _ := New(stream.RestartConfig{}, true, nil)
	b, _ := New(stream.RestartConfig{}, true, nil)
	for i := range 5 {
		_, da := a.OnFailure(at(time.Duration(i)*time.Second), "x")
		_, db := b.OnFailure(at(time.Duration(i)*time.Second), "x")
		if da != db {
			t.Errorf("failure %d: %v vs %v", i, da, db)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	tests := []struct {
		name          string
		in            stream.RestartConfig
		checkpointing bool
		want          stream.RestartConfig
	}{
		{"empty without checkpointing", stream.RestartConfig{}, false, stream.RestartConfig{Type: None}},
		{"empty with checkpointing", stream.RestartConfig{}, true, stream.RestartConfig{Type: ExponentialDelay,
			InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 1.5, Jitter: 0.1, ResetBackoffAfter: time.Hour}},
		{"fixed-delay", stream.RestartConfig{Type: FixedDelay}, true, stream.RestartConfig{Type: FixedDelay, Attempts: 1, Delay: time.Second}},
		{"failure-rate", stream.RestartConfig{Type: FailureRate, Delay: 5 * time.Second}, false,
			stream.RestartConfig{Type: FailureRate, MaxFailures: 1, Interval: time.Minute, Delay: 5 * time.Second}},
		{"explicit type wins over checkpointing", stream.RestartConfig{Type: None}, true, stream.RestartConfig{Type: None}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WithDefaults(tt.in, tt.checkpointing); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  stream.RestartConfig
		want string // substring of the error; "" for valid
	}{
		{"unknown type", stream.RestartConfig{Type: "fixed"}, `restartStrategy.type "fixed": unknown restart strategy; want one of none, fixed-delay, failure-rate, exponential-delay`},
		{"multiplier below 1", stream.RestartConfig{Type: ExponentialDelay, Multiplier: 0.5}, "restartStrategy.multiplier 0.5: must be a finite number of at least 1"},
		{"multiplier NaN", stream.RestartConfig{Multiplier: math.NaN()}, "restartStrategy.multiplier NaN"},
		{"multiplier Inf", stream.RestartConfig{Multiplier: math.Inf(1)}, "restartStrategy.multiplier +Inf"},
		{"jitter negative", stream.RestartConfig{Jitter: -0.1}, "restartStrategy.jitter -0.1: must be between 0 and 1"},
		{"jitter above 1", stream.RestartConfig{Jitter: 1.5}, "restartStrategy.jitter 1.5: must be between 0 and 1"},
		{"jitter 1", stream.RestartConfig{Jitter: 1}, ""},
		{"max below initial", stream.RestartConfig{InitialBackoff: 2 * time.Minute}, "restartStrategy.maxBackoff 1m0s: must be at least initialBackoff (2m0s)"},
		{"negative initial", stream.RestartConfig{InitialBackoff: -time.Second}, "restartStrategy.initialBackoff -1s: must not be negative"},
		{"negative reset", stream.RestartConfig{ResetBackoffAfter: -time.Second}, "restartStrategy.resetBackoffAfter -1s"},
		{"negative attempts", stream.RestartConfig{Type: FixedDelay, Attempts: -1}, "restartStrategy.attempts -1: must be at least 1"},
		{"negative delay", stream.RestartConfig{Type: FixedDelay, Delay: -time.Second}, "restartStrategy.delay -1s: must not be negative"},
		{"negative max failures", stream.RestartConfig{Type: FailureRate, MaxFailures: -2}, "restartStrategy.maxFailures -2: must be at least 1"},
		{"negative interval", stream.RestartConfig{Type: FailureRate, Interval: -time.Minute}, "restartStrategy.interval -1m0s"},
		{"negative failure-rate delay", stream.RestartConfig{Type: FailureRate, Delay: -1}, "restartStrategy.delay -1ns"},
		{"fields of other types are ignored", stream.RestartConfig{Type: FixedDelay, Multiplier: 0.1}, ""},
		{"none", stream.RestartConfig{Type: None, Jitter: 7}, ""},
		{"default checkpointing", stream.RestartConfig{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg, true, nil)
			if tt.want == "" {
				if err != nil || s == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: error %v, want one containing %q and wrapping ErrInvalidConfig", err, tt.want)
			}
			if s != nil {
				t.Errorf("New returned a strategy with an error")
			}
		})
	}
}
