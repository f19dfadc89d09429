package stream

import (
	"fmt"
	"io"
)

// State backend names, for JobGraph.State.Backend and
// OperatorContext.StateBackend. Empty means the cluster default.
const (
	StateBackendHeap   = "heap"
	StateBackendPebble = "pebble"
)

// StateConfig is a job's keyed-state settings.
type StateConfig struct {
	// Backend is StateBackendHeap, StateBackendPebble, or empty for the
	// cluster default.
	Backend string
	// FullSnapshots makes a backend that can checkpoint incrementally
	// (Pebble) take full snapshots instead, in the canonical per-key-group
	// format the heap backend writes too: every checkpoint uploads all
	// state and writes no shared files, and the checkpoint restores into
	// either backend. Default false (incremental where the backend can).
	// In a job spec: `state: {incremental: false}`.
	FullSnapshots bool
}

// ValidateStateBackend reports a state backend name that is not known.
func ValidateStateBackend(name string) error {
	switch name {
	case "", StateBackendHeap, StateBackendPebble:
		return nil
	}
	return fmt.Errorf("unknown state backend %q; want %s or %s", name, StateBackendHeap, StateBackendPebble)
}

// SnapshotFile is a local file of an operator's incremental snapshot (a
// state backend's checkpoint files, OperatorSnapshot.Files). The task
// runtime uploads it; on restore Path is where it was downloaded to, or,
// for a file with Fetch, where it would be.
type SnapshotFile struct {
	// Path is the file on the local disk; Name its name inside its
	// snapshot directory (files of one directory share filepath.Dir(Path)).
	Path, Name string
	Size       int64
	// SHA256 is the hex SHA-256 of the content.
	SHA256 string
	// Shared marks an immutable file that later snapshots may name again:
	// storage keeps one copy per content hash and reference-counts it.
	Shared bool
	// Fetch, set on restore for a file that was not downloaded (Path does
	// not exist), reads it from storage into w when the state backend
	// needs it, a buffer at a time: a Pebble restore streams its changelog
	// segments into its replay this way rather than writing them to disk
	// and reading them back. It fails, wrapping the storage's corrupt-object
	// error, unless the content has Size bytes with SHA256; w then has
	// received part or all of it. It returns the bytes written to w.
	Fetch func(w io.Writer) (int64, error)
}
