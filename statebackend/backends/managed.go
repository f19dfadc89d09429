package backends

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// LocalSnapshotsKept is how many local snapshot directories of incremental
// checkpoints a Managed keeps for local recovery: the newest ones, which the
// taskmanager reuses instead of downloading when the task restarts on it.
const LocalSnapshotsKept = 3

// Managed is the keyed state of one operator subtask as the task runtime
// owns it: the backend chosen by the job (Open), restored from the
// checkpoint the task starts from, snapshotted at every barrier (Snapshot)
// and closed with its local files removed when the task ends (Close). The
// operator reaches the backend through stream.OperatorContext.KeyedState.
//
// A Managed is not safe for concurrent use: the task goroutine owns it.
type Managed struct {
	octx    stream.OperatorContext
	backend statebackend.Backend
	// snaps are the local snapshot directories kept for local recovery,
	// oldest first.
	snaps []string
}

// OpenManaged opens the keyed-state backend of octx (Open) for
// octx.KeyGroups and loads the keyed part of snap, the operator's state in
// checkpoint checkpointID (nil or empty: start empty): incremental snapshot
// files (downloaded by the taskmanager, or reused from local recovery) are
// opened as the backend's database, chunks per key group are restored into
// it. A checkpoint may hold both when its subtasks took different kinds of
// snapshot. The restore directories (RestoreDir) of those files are removed
// once opened, and also when opening them fails. Local snapshot directories
// of other checkpoints, left by earlier attempts of the task, are removed;
// the restored checkpoint's own is kept, so that a task that fails again
// before its next checkpoint still restores locally.
//
// A checkpoint whose keyed state cannot be restored fails with a
// *RestoreError naming the operator; a chunk that cannot be restored is a
// *FormatError inside it.
func OpenManaged(octx *stream.OperatorContext, checkpointID int64, snap *stream.OperatorSnapshot) (*Managed, error) {
	m := &Managed{octx: *octx}
	m.octx.KeyedState = nil
	if octx.Parallelism <= 0 {
		// Not placed by a runtime (a test calling an operator directly):
		// own every key group.
		maxPar := m.octx.MaxParallelism
		if maxPar <= 0 {
			maxPar = stream.DefaultMaxParallelism
		}
		m.octx.KeyGroups = stream.KeyGroupRange{Start: 0, End: maxPar - 1}
	}
	var err error
	if snap != nil && len(snap.Files) > 0 {
		var dirs []string
		for _, f := range snap.Files {
			if d := filepath.Dir(f.Path); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		m.backend, err = openFromSnapshots(&m.octx, dirs, pebblestate.FetchFrom(snap.Files))
		// The backend has hard-linked or copied what it needs; after a
		// failure the next attempt fetches the files again.
		m.removeRestoreDirs(dirs)
		if err != nil {
			return nil, &RestoreError{OperatorUID: octx.OperatorUID, CheckpointID: checkpointID, Err: err}
		}
	} else if m.backend, err = Open(&m.octx); err != nil {
		return nil, err
	}
	if snap != nil && len(snap.Keyed) > 0 {
		rc := &stream.RestoreContext{CheckpointID: checkpointID, KeyGroups: m.octx.KeyGroups, State: snap}
		if err := m.backend.Restore(rc); err != nil {
			m.backend.Close()
			return nil, &RestoreError{OperatorUID: octx.OperatorUID, CheckpointID: checkpointID, Err: err}
		}
	}
	m.adoptLocalSnapshots(checkpointID)
	return m, nil
}

// RestoreError is the error of OpenManaged when the keyed state an
// operator's checkpoint holds cannot be restored into its backend. Err says
// why: for chunks, a *FormatError (wrapping statebackend.ErrCorrupt,
// ErrFormatVersion or statebackend.ErrConflict); for incremental snapshot
// files, the Pebble backend's error.
type RestoreError struct {
	OperatorUID  string
	CheckpointID int64
	Err          error
}

func (e *RestoreError) Error() string {
	return fmt.Sprintf("operator %q: restoring keyed state from checkpoint %d: %v", e.OperatorUID, e.CheckpointID, e.Err)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// FormatError is a chunk of keyed state that a backend cannot restore: it
// says which checkpoint, key group, chunk and state (table), what is wrong,
// what the chunk holds and what was expected. It is the error type of the
// chunk format (statebackend/internal/chunk), named here for callers
// outside statebackend; inspect it with errors.As.
type FormatError = chunk.FormatError

// ErrFormatVersion is wrapped, with statebackend.ErrCorrupt, by the
// FormatError of a chunk in a format version this build does not read.
var ErrFormatVersion = chunk.ErrVersion

// Backend is the managed backend.
func (m *Managed) Backend() statebackend.Backend { return m.backend }

// KeyGroups is the key-group range the backend owns.
func (m *Managed) KeyGroups() stream.KeyGroupRange { return m.octx.KeyGroups }

// Snapshot writes the keyed state of checkpoint c.CheckpointID into c: a
// backend that snapshots incrementally (Pebble, unless the job asks for full
// snapshots) writes its files into a local snapshot directory and lists them
// in c.State.Files for the runtime to upload; any other writes chunks per key
// group (c.State.Keyed), the canonical format every backend restores.
func (m *Managed) Snapshot(c *stream.SnapshotContext) error {
	inc, ok := m.backend.(statebackend.IncrementalSnapshotter)
	if !ok || c.Full {
		return m.backend.Snapshot(c)
	}
	if m.octx.LocalStateDir == "" {
		return fmt.Errorf("incremental snapshot of checkpoint %d: the task has no local state directory", c.CheckpointID)
	}
	dir := SnapshotDir(m.octx.LocalStateDir, m.octx.OperatorUID, c.CheckpointID)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	files, err := inc.SnapshotFiles(dir)
	if err != nil {
		// Not kept in m.snaps: a half-written directory would outlive
		// the rotation below.
		_ = os.RemoveAll(dir)
		return fmt.Errorf("incremental snapshot of checkpoint %d: %w", c.CheckpointID, err)
	}
	c.State.Files = append(c.State.Files, files...)
	m.snaps = slices.DeleteFunc(m.snaps, func(d string) bool { return d == dir })
	m.snaps = append(m.snaps, dir)
	for len(m.snaps) > LocalSnapshotsKept {
		_ = os.RemoveAll(m.snaps[0])
		m.snaps = m.snaps[1:]
	}
	return nil
}

// Close closes the backend, which removes its working files. With
// keepLocalSnapshots (a task that failed or was cancelled, and may be
// restarted on this taskmanager) the local snapshot directories stay for
// local recovery; otherwise (the task finished) they are removed too. The
// taskmanager removes whatever is left of a job's local state when the job
// ends. Close is idempotent.
func (m *Managed) Close(keepLocalSnapshots bool) error {
	var err error
	if m.backend != nil {
		err = m.backend.Close()
		m.backend = nil
		if errors.Is(err, statebackend.ErrClosed) {
			err = nil
		}
	}
	if !keepLocalSnapshots && m.octx.LocalStateDir != "" {
		for _, d := range m.snaps {
			_ = os.RemoveAll(d)
		}
		m.snaps = nil
		_ = os.RemoveAll(filepath.Dir(SnapshotDir(m.octx.LocalStateDir, m.octx.OperatorUID, 0)))
		_ = os.RemoveAll(filepath.Dir(RestoreDir(m.octx.LocalStateDir, m.octx.OperatorUID, 0, 0)))
		// The parents, when no other operator of the task uses them.
		_ = os.Remove(SnapshotRoot(m.octx.LocalStateDir))
		_ = os.Remove(RestoreRoot(m.octx.LocalStateDir))
	}
	return err
}

// adoptLocalSnapshots removes the local snapshot directories of this
// operator other than checkpoint keep's (left by earlier attempts) and
// keeps that one, if present, as the oldest of m.snaps.
func (m *Managed) adoptLocalSnapshots(keep int64) {
	if m.octx.LocalStateDir == "" {
		return
	}
	parent := filepath.Dir(SnapshotDir(m.octx.LocalStateDir, m.octx.OperatorUID, 0))
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(parent, e.Name())
		if n, ok := snapshotID(e.Name()); ok && n == keep && keep > 0 {
			m.snaps = append(m.snaps, path)
			continue
		}
		_ = os.RemoveAll(path)
	}
}

// removeRestoreDirs removes those of dirs that are restore directories
// (under RestoreRoot) of the task, and their parents once empty.
func (m *Managed) removeRestoreDirs(dirs []string) {
	if m.octx.LocalStateDir == "" {
		return
	}
	root := RestoreRoot(m.octx.LocalStateDir)
	for _, d := range dirs {
		if !isUnder(d, root) {
			continue
		}
		_ = os.RemoveAll(d)
		// Fails, as it should, while another restore directory is there.
		for p := filepath.Dir(d); isUnder(p, root); p = filepath.Dir(p) {
			if os.Remove(p) != nil {
				break
			}
		}
	}
}

// isUnder reports whether path is root or inside it.
func isUnder(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
