package statebackend

// SnapshotFile is one local file of an incremental snapshot.
type SnapshotFile struct {
	// Path is the file's location on the local disk; Name its name inside
	// the snapshot.
	Path, Name string
	Size       int64
	// SHA256 is the hex SHA-256 of the content.
	SHA256 string
	// Shared marks an immutable file that later snapshots may name again:
	// storage keeps one copy per content hash and reference-counts it.
	Shared bool
}

// IncrementalSnapshotter is implemented by a Backend that can snapshot its
// state as local files (pebblestate: a Pebble checkpoint), so that a
// checkpoint uploads only the files storage does not hold yet. It is
// optional: operators fall back to Backend.Snapshot.
type IncrementalSnapshotter interface {
	// SnapshotFiles writes a snapshot of all state into dir, which must
	// not exist, and returns its files.
	SnapshotFiles(dir string) ([]SnapshotFile, error)
}
