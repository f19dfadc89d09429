// Package state holds the process-level tests of keyed state and
// checkpoints: exactly-once and at-least-once through injected failures
// (in processing, snapshot, restore and notify), on heap and on Pebble
// state with incremental and full checkpoints, a sliding window on Pebble
// through a taskmanager SIGKILL with its state beyond the caches (`make
// bigstate` runs TestWindowBigState with a million keys,
// WEIR_BIGSTATE_KEYS; `make test` with 4,000), and local state removed
// when jobs end or are cancelled. Package statecache holds the keyed count
// on Pebble state several times the caches.
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package state
