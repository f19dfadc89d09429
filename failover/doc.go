// Package failover owns the restart strategies that decide whether, and after
// what delay, a failed job is restarted: none, fixed-delay, failure-rate and
// exponential-delay, with the semantics and defaults set out below.
//
// Strategies are pure: no goroutines, clocks or I/O. The jobmanager passes the
// time of each failure and, for jitter, a *rand.Rand it seeds itself. A
// Strategy is not safe for concurrent use. The package imports the standard
// library and package stream (for stream.RestartConfig) only.
//
// # Strategies and defaults
//
// Zero fields of stream.RestartConfig take these defaults. An empty
// Type means exponential-delay when the job checkpoints and none otherwise.
//
//   - none: never restart.
//   - fixed-delay: restart Attempts times (default 1) in the job's life, each
//     after Delay (default 1s); the next failure is final.
//   - failure-rate: restart after Delay (default 1s) unless more than
//     MaxFailures (default 1) failures, this one included, happened within
//     the last Interval (default 1m; a failure exactly Interval ago counts).
//   - exponential-delay: always restart. The first failure waits
//     InitialBackoff (default 1s); each further failure multiplies the backoff
//     by Multiplier (default 1.5) up to MaxBackoff (default 1m). When at least
//     ResetBackoffAfter (default 1h) has passed since the previous failure,
//     the backoff starts again from InitialBackoff. The delay is the backoff
//     plus a uniform jitter in ±Jitter (default 0.1) × backoff, so it may
//     exceed MaxBackoff by that fraction.
//
// Because zero means "default", a zero Delay, InitialBackoff or Jitter cannot
// be expressed; use a tiny value (such as 1ns or 1e-9) instead.
package failover
