// Package checkpointing holds the process-level tests of checkpoints under
// backpressure: unaligned checkpoints through injected failures and a
// taskmanager SIGKILL behind a throttled sink, the refused rescale from an
// unaligned checkpoint, and the per-subtask checkpoint statistics and
// `weir checkpoints explain` against a slow sink. Each runs a real cluster
// (clustertest) and counts lost and duplicated records.
//
// The tests live in their own package, like each group of process tests
// under test/, so that `go test ./...` runs the groups side by side.
package checkpointing
