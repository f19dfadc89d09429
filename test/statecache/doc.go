// Package statecache holds the process-level test of keyed state several
// times the taskmanagers' state caches: a keyed count on Pebble state
// through an injected failure and a restore from an incremental
// checkpoint, every committed count checked exactly against an
// independent computation, with the taskmanager's peak RSS reported. It
// is the longest of the process tests and has its package to itself.
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package statecache
