package statebackend

import "github.com/weirstream/weir/stream"

// SnapshotFile is one local file of an incremental snapshot.
type SnapshotFile = stream.SnapshotFile

// IncrementalSnapshotter is implemented by a Backend that can snapshot its
// state as local files (pebblestate: a Pebble checkpoint), so that a
// checkpoint uploads only the files storage does not hold yet. It is
// optional: operators fall back to Backend.Snapshot.
type IncrementalSnapshotter interface {
	// SnapshotFiles writes a snapshot of all state into dir, which must
	// not exist, and returns its files.
	SnapshotFiles(dir string) ([]SnapshotFile, error)
}
