// Package storage holds the process-level tests of checkpoint storage on
// a real S3 server (versitygw) behind a fault proxy: storage unreachable
// during uploads and at the manifest write, the server killed and slow
// past the checkpoint timeout, and, across a leader takeover with
// leftovers planted, a bucket holding exactly what retention names. It
// also holds the soak (`make soak`, skipped unless WEIR_SOAK_DURATION is
// set): a random mix of every fault the harness has, on an HA cluster
// with checkpoints on S3, reporting per window.
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package storage
