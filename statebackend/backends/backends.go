// Package backends owns the choice of keyed-state backend for an operator
// subtask: it turns stream.OperatorContext.StateBackend and LocalStateDir
// into a statebackend.Backend, and, for the task runtime, restores and
// snapshots it (Managed), and hands out the block cache a process's Pebble
// backends share (SharedCache). It may import stream, statebackend, the
// backend packages (heap, pebblestate) and statebackend/internal/chunk,
// whose errors it names for callers outside statebackend (FormatError,
// ErrFormatVersion); operators import it instead of a backend package so
// that a job chooses its backend.
package backends

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// Open returns the keyed-state backend octx asks for, owning octx.KeyGroups:
// heap for "" and stream.StateBackendHeap, Pebble in
// octx.LocalStateDir/<operator uid> for stream.StateBackendPebble (a
// temporary directory when LocalStateDir is empty). A Pebble directory left
// by an earlier attempt of the task is removed first: state comes back from
// checkpoints through Backend.Restore. The Pebble directory is deleted when
// the backend is closed, or at once when Open fails.
//
// With octx.FullSnapshots the Pebble backend is returned as a plain
// statebackend.Backend that is not a statebackend.IncrementalSnapshotter,
// so operators take full snapshots (Backend.Snapshot, the canonical chunk
// format) instead of uploading Pebble checkpoint files.
func Open(octx *stream.OperatorContext) (statebackend.Backend, error) {
	switch octx.StateBackend {
	case "", stream.StateBackendHeap:
		return heap.New(octx.KeyGroups), nil
	case stream.StateBackendPebble:
		base := octx.LocalStateDir
		if base == "" {
			base = filepath.Join(os.TempDir(), "weir-state")
		}
		dir := filepath.Join(base, safeName(octx.OperatorUID))
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("state backend of operator %q: cannot clear local state directory %s: %w; check its permissions or set another --state-dir", octx.OperatorUID, dir, err)
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, fmt.Errorf("state backend of operator %q: cannot create local state directory %s: %w; check its permissions or set another --state-dir", octx.OperatorUID, base, err)
		}
		b, err := pebblestate.New(pebbleOptions(octx, dir), octx.KeyGroups)
		if err != nil {
			// Whatever Pebble created there is of no use.
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("state backend of operator %q: %w", octx.OperatorUID, err)
		}
		if octx.FullSnapshots {
			return fullSnapshots{b}, nil
		}
		return b, nil
	}
	return nil, fmt.Errorf("operator %q: %w", octx.OperatorUID, stream.ValidateStateBackend(octx.StateBackend))
}

// fullSnapshots hides the Pebble backend's IncrementalSnapshotter: only
// the methods of statebackend.Backend are promoted, and SlotMemory and
// KeyScanner.
type fullSnapshots struct{ statebackend.Backend }

// ReserveSlotMemory passes the Pebble backend's statebackend.SlotMemory on.
func (f fullSnapshots) ReserveSlotMemory() int64 {
	return f.Backend.(statebackend.SlotMemory).ReserveSlotMemory()
}

// ScanKeys passes the Pebble backend's statebackend.KeyScanner on.
func (f fullSnapshots) ScanKeys(table string, fn func(key []byte, keyGroup int) bool) {
	f.Backend.(statebackend.KeyScanner).ScanKeys(table, fn)
}

// safeName maps an operator uid to a file name: characters other than
// letters, digits, '-', '_' and '.' become '_'.
func safeName(uid string) string {
	b := []byte(uid)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "op_" + string(b)
	}
	return string(b)
}

// SnapshotDir is where an operator writes the local files of incremental
// snapshot checkpointID (under the task's LocalStateDir). The taskmanager
// looks there for files it can reuse on restore (local recovery).
func SnapshotDir(localStateDir, operatorUID string, checkpointID int64) string {
	return filepath.Join(SnapshotRoot(localStateDir), safeName(operatorUID), snapshotPrefix+strconv.FormatInt(checkpointID, 10))
}

// SnapshotRoot is the directory under a task's LocalStateDir that holds
// the local snapshot directories (SnapshotDir) of all its operators.
func SnapshotRoot(localStateDir string) string { return filepath.Join(localStateDir, "snapshots") }

// snapshotPrefix starts the name of a SnapshotDir; the checkpoint id
// follows.
const snapshotPrefix = "chk-"

// NewestLocalSnapshot returns the highest checkpoint id of the local
// snapshot directories (SnapshotDir) under localStateDir, of any
// operator, and false when there is none.
func NewestLocalSnapshot(localStateDir string) (int64, bool) {
	ops, err := os.ReadDir(SnapshotRoot(localStateDir))
	if err != nil {
		return 0, false
	}
	var newest int64
	found := false
	for _, op := range ops {
		entries, err := os.ReadDir(filepath.Join(SnapshotRoot(localStateDir), op.Name()))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if id, ok := snapshotID(e.Name()); ok && (!found || id > newest) {
				newest, found = id, true
			}
		}
	}
	return newest, found
}

// snapshotID parses the checkpoint id of a SnapshotDir's name.
func snapshotID(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, snapshotPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}

// RestoreDir is where the taskmanager puts the files of checkpoint
// checkpointID written by subtask of operatorUID, for the operator to open.
func RestoreDir(localStateDir, operatorUID string, checkpointID int64, subtask int) string {
	return filepath.Join(RestoreRoot(localStateDir), safeName(operatorUID), fmt.Sprintf("chk-%d-s%d", checkpointID, subtask))
}

// RestoreRoot is the directory under a task's LocalStateDir that holds the
// restore directories (RestoreDir) of all its operators. Their files are
// of use only while the task opens its state: the runtime may remove
// RestoreRoot whenever no attempt of the task is starting.
func RestoreRoot(localStateDir string) string { return filepath.Join(localStateDir, "restore") }

// OpenFromSnapshots opens a Pebble backend for octx from the local
// directories of incremental snapshots (each a Pebble checkpoint, from
// SnapshotFiles), keeping only octx.KeyGroups: the first directory is opened
// and trimmed, the others are merged into it. With octx.FullSnapshots the
// backend snapshots in full from then on, as in Open.
func OpenFromSnapshots(octx *stream.OperatorContext, dirs []string) (statebackend.Backend, error) {
	b, err := openFromSnapshots(octx, dirs, nil)
	if err != nil {
		return nil, fmt.Errorf("state backend of operator %q: %w", octx.OperatorUID, err)
	}
	return b, nil
}

// StreamedOnRestore reports whether a restore leaves the snapshot file
// name in storage, for the backend to read when it opens
// (stream.SnapshotFile.Fetch; checkpoint.DownloadOptions.Stream): the
// Pebble backend's changelog segments, which it replays once.
func StreamedOnRestore(name string) bool { return pebblestate.IsChangelogSegment(name) }

// openFromSnapshots is OpenFromSnapshots with errors that do not name the
// operator; fetch reads the streamed files (Options.FetchSegment).
func openFromSnapshots(octx *stream.OperatorContext, dirs []string, fetch func(string, io.Writer) (int64, error)) (statebackend.Backend, error) {
	if len(dirs) == 0 {
		return nil, errors.New("restore from no snapshot directories")
	}
	if octx.StateBackend != stream.StateBackendPebble {
		return nil, fmt.Errorf("the checkpoint holds incremental Pebble snapshots but the job's state backend is %q; restore it with state.backend: pebble", octx.StateBackend)
	}
	dir := filepath.Join(localBase(octx), safeName(octx.OperatorUID))
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("cannot clear local state directory %s: %w", dir, err)
	}
	opts := pebbleOptions(octx, dir)
	opts.FetchSegment = fetch
	b, err := pebblestate.OpenFromCheckpoint(opts, dirs[0], octx.KeyGroups)
	if err != nil {
		// The clone of the snapshot, possibly half made, is of no use.
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if len(dirs) > 1 {
		if err := pebblestate.MergeInto(b, dirs[1:]); err != nil {
			b.Close()
			return nil, err
		}
	}
	if octx.FullSnapshots {
		// Switching a job from incremental to full snapshots: restore the
		// files, snapshot in full from now on.
		return fullSnapshots{b}, nil
	}
	return b, nil
}

// pebbleOptions are the options of a Pebble backend in dir for octx: its
// cache budget, octx.StateCacheBytes, goes half to the block cache (which
// holds compressed blocks of every key read from disk), an eighth to the
// timer index and the rest to the write-back value cache (decoded values
// of hot keys, resident window state, and writes not yet in Pebble); the
// key filter of a new backend may take up to a quarter of the value
// cache's share on top (pebblestate.Options.KeyFilterBytes); 0 keeps the
// pebblestate defaults. With octx.StateCache (a *SharedCache)
// the block cache is the shared one and the block-cache half of the budget
// is the process's, not the backend's.
func pebbleOptions(octx *stream.OperatorContext, dir string) pebblestate.Options {
	o := pebblestate.Options{Dir: dir, DeleteOnClose: true}
	if n := octx.StateCacheBytes; n > 0 {
		o.CacheBytes = max(n/2, 1)
		o.TimerCacheBytes = max(n/8, 1)
		o.ValueCacheBytes = max(n-n/2-n/8, 1)
	}
	if c, ok := octx.StateCache.(*SharedCache); ok && c != nil {
		c.Use(&o)
	}
	return o
}

// SharedCache is the Pebble block cache the Pebble backends of a process
// share (stream.OperatorContext.StateCache).
type SharedCache = pebblestate.SharedCache

// DefaultBlockCacheBytes is the block cache a Pebble backend has of its
// own by default; a process sharing one among its slots gives it as much
// per slot.
const DefaultBlockCacheBytes = pebblestate.DefaultCacheBytes

// NewSharedCache returns a block cache of bytes bytes (> 0) for the
// process's Pebble backends to share.
func NewSharedCache(bytes int64) *SharedCache { return pebblestate.NewSharedCache(bytes) }

func localBase(octx *stream.OperatorContext) string {
	if octx.LocalStateDir == "" {
		return filepath.Join(os.TempDir(), "weir-state")
	}
	return octx.LocalStateDir
}
