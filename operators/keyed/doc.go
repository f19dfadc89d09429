// Package keyed owns Weir's built-in keyed record operators and a test
// operator for fault injection:
//
//   - "running_count" counts the records of each key and emits, for every
//     input record, the key fields and the key's count so far;
//   - "sequence_check" verifies that an int64 field of each key arrives as
//     1, 2, 3, ... and fails the task on a gap or a repeat;
//   - "fail" (registered by RegisterFailureInjection, for test binaries
//     only) passes records through and fails the task at a configured
//     point (after N records, in a snapshot, in a restore, in a checkpoint
//     notification) of a configured attempt, to test recovery.
//
// Register adds the three types to a stream.Registry. running_count and
// sequence_check require a keyBy input; their per-key state (one int64 per
// key) lives in this package's compact key-group-partitioned table and is
// written per key group at checkpoints, so a restore at another parallelism
// gets exactly its key groups (state format in state.go). They move to
// package statebackend's keyed value state once that exists.
//
// The package imports the standard library, package stream, statebackend
// and statebackend/backends (the keyed state it keeps), and
// operators/internal/rowenc (the encoding of key values in the state).
package keyed
