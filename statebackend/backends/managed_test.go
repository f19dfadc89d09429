package backends_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// managedCtx is the context of subtask 0 of 1 owning key groups 0..7.
func managedCtx(t *testing.T, backend, dir string) *stream.OperatorContext {
	t.Helper()
	return &stream.OperatorContext{OperatorUID: "op/1", Subtask: 0, Parallelism: 1, MaxParallelism: 8,
		KeyGroups: stream.KeyGroupRange{Start: 0, End: 7}, StateBackend: backend, LocalStateDir: dir}
}

// putCounts sets key "k<i>" (key group i%8) to i+base for i < n.
func putCounts(t *testing.T, b statebackend.Backend, n, base int) {
	t.Helper()
	v, err := statebackend.GetValueState(b, "n", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b.SetCurrentKey(fmt.Appendf(nil, "k%d", i), i%8)
		v.Update(int64(i + base))
	}
}

// checkCounts checks what putCounts wrote, independently of how it got
// there.
func checkCounts(t *testing.T, b statebackend.Backend, n, base int) {
	t.Helper()
	v, err := statebackend.GetValueState(b, "n", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b.SetCurrentKey(fmt.Appendf(nil, "k%d", i), i%8)
		if got, ok := v.Value(); !ok || got != int64(i+base) {
			t.Fatalf("key k%d = %d, %v; want %d", i, got, ok, i+base)
		}
	}
}

// listDirs returns the paths of directories under root, relative to it.
func listDirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestManagedPebbleLifecycle: incremental snapshots keep the newest
// LocalSnapshotsKept local directories, a restore from a local snapshot
// gets the state back and drops the other directories, and closing a
// finished task leaves nothing behind.
func TestManagedPebbleLifecycle(t *testing.T) {
	dir := t.TempDir()
	m, err := backends.OpenManaged(managedCtx(t, stream.StateBackendPebble, dir), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var last *stream.OperatorSnapshot
	for id := int64(1); id <= 5; id++ {
		putCounts(t, m.Backend(), 500, int(id))
		c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: m.KeyGroups()}
		if err := m.Snapshot(c); err != nil {
			t.Fatal(err)
		}
		if len(c.State.Files) == 0 || len(c.State.Keyed) != 0 {
			t.Fatalf("checkpoint %d: %d files, %d key groups of chunks; want files only", id, len(c.State.Files), len(c.State.Keyed))
		}
		last = &c.State
	}
	snaps := filepath.Dir(backends.SnapshotDir(dir, "op/1", 0))
	entries, _ := os.ReadDir(snaps)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"chk-3", "chk-4", "chk-5"}; !slices.Equal(names, want) {
		t.Fatalf("local snapshots %v, want %v", names, want)
	}
	if err := m.Close(true); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(true); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, d := range listDirs(t, dir) {
		if !strings.HasPrefix(d, "snapshots") {
			t.Fatalf("after Close(keep) %s is left; only local snapshots should be", d)
		}
	}

	// Restart from checkpoint 5, reusing its local files in place.
	m, err = backends.OpenManaged(managedCtx(t, stream.StateBackendPebble, dir), 5, last)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, m.Backend(), 500, 5)
	entries, _ = os.ReadDir(snaps)
	if len(entries) != 1 || entries[0].Name() != "chk-5" {
		t.Fatalf("after the restore the local snapshots are %v; want only chk-5", entries)
	}
	if err := m.Close(false); err != nil {
		t.Fatal(err)
	}
	if left := listDirs(t, dir); len(left) != 0 {
		t.Fatalf("after a finished task's Close these are left: %v", left)
	}
}

// TestManagedRestoreStreamsSegments restores incremental files whose
// changelog segments were left in storage (stream.SnapshotFile.Fetch, as a
// taskmanager restores): the backend reads every segment through its
// Fetch, none from the restore directory, and has the state of the
// checkpoint.
func TestManagedRestoreStreamsSegments(t *testing.T) {
	dir := t.TempDir()
	m, err := backends.OpenManaged(managedCtx(t, stream.StateBackendPebble, dir), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var last stream.OperatorSnapshot
	for id := int64(1); id <= 4; id++ {
		putCounts(t, m.Backend(), 300, int(id))
		c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: m.KeyGroups()}
		if err := m.Snapshot(c); err != nil {
			t.Fatal(err)
		}
		last = c.State
	}
	// What a taskmanager's download leaves: every file but the segments
	// in a restore directory, the segments to be fetched.
	restoreDir := t.TempDir()
	var fetched atomic.Int64 // the backend fetches from more than one goroutine
	segments := 0
	snap := &stream.OperatorSnapshot{}
	for _, f := range last.Files {
		local := f
		local.Path = filepath.Join(restoreDir, f.Name)
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if backends.StreamedOnRestore(f.Name) {
			segments++
			local.Fetch = func(w io.Writer) (int64, error) {
				fetched.Add(1)
				n, err := w.Write(data)
				return int64(n), err
			}
		} else {
			if err := os.WriteFile(local.Path, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		snap.Files = append(snap.Files, local)
	}
	if segments == 0 {
		t.Fatalf("checkpoint 4 lists no changelog segment among %d files; the test streams none", len(last.Files))
	}
	if err := m.Close(false); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	m, err = backends.OpenManaged(managedCtx(t, stream.StateBackendPebble, other), 4, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(false)
	if fetched.Load() != int64(segments) {
		t.Fatalf("%d of %d segments fetched", fetched.Load(), segments)
	}
	checkCounts(t, m.Backend(), 300, 4)
}

// TestManagedAcrossBackends: chunk snapshots (heap, or Pebble with full
// snapshots) restore into either backend at another key-group split;
// incremental files do not restore into the heap backend.
func TestManagedAcrossBackends(t *testing.T) {
	for _, from := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		for _, to := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
			t.Run(from+"_to_"+to, func(t *testing.T) {
				octx := managedCtx(t, from, t.TempDir())
				octx.FullSnapshots = true
				m, err := backends.OpenManaged(octx, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close(false)
				putCounts(t, m.Backend(), 400, 7)
				c := &stream.SnapshotContext{CheckpointID: 9, KeyGroups: m.KeyGroups()}
				if err := m.Snapshot(c); err != nil {
					t.Fatal(err)
				}
				if len(c.State.Files) != 0 || len(c.State.Keyed) != 8 {
					t.Fatalf("full snapshot: %d files, %d key groups; want chunks of 8 key groups", len(c.State.Files), len(c.State.Keyed))
				}
				// Two subtasks of the new parallelism split the key groups.
				for sub, r := range []stream.KeyGroupRange{{Start: 0, End: 3}, {Start: 4, End: 7}} {
					o := managedCtx(t, to, t.TempDir())
					o.Subtask, o.Parallelism, o.KeyGroups = sub, 2, r
					n, err := backends.OpenManaged(o, 9, &c.State)
					if err != nil {
						t.Fatal(err)
					}
					v, _ := statebackend.GetValueState(n.Backend(), "n", statebackend.Int64Codec)
					for i := range 400 {
						if !r.Contains(i % 8) {
							continue
						}
						n.Backend().SetCurrentKey(fmt.Appendf(nil, "k%d", i), i%8)
						if got, ok := v.Value(); !ok || got != int64(i+7) {
							t.Fatalf("subtask %d key k%d = %d, %v; want %d", sub, i, got, ok, i+7)
						}
					}
					var keys int
					for kg := 0; kg < 8; kg++ {
						n.Backend().Keys("n", kg, func([]byte) bool { keys++; return true })
					}
					if keys != 200 {
						t.Fatalf("subtask %d holds %d keys, want 200", sub, keys)
					}
					n.Close(false)
				}
			})
		}
	}
	octx := managedCtx(t, stream.StateBackendPebble, t.TempDir())
	m, err := backends.OpenManaged(octx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(false)
	putCounts(t, m.Backend(), 10, 0)
	c := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: m.KeyGroups()}
	if err := m.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	_, err = backends.OpenManaged(managedCtx(t, stream.StateBackendHeap, t.TempDir()), 1, &c.State)
	var re *backends.RestoreError
	if !errors.As(err, &re) || re.OperatorUID != "op/1" || re.CheckpointID != 1 || !strings.Contains(err.Error(), "state.backend: pebble") {
		t.Fatalf("incremental files into heap = %v; want a RestoreError of operator op/1 saying to restore with the pebble backend", err)
	}
	if strings.Count(err.Error(), "op/1") != 1 {
		t.Errorf("error %q names the operator more than once", err)
	}
}

// TestManagedRestoreErrors: chunks that cannot be restored fail OpenManaged
// with a RestoreError naming the operator and checkpoint, holding the
// FormatError of the chunk, on either backend.
func TestManagedRestoreErrors(t *testing.T) {
	octx := managedCtx(t, stream.StateBackendHeap, t.TempDir())
	m, err := backends.OpenManaged(octx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(true)
	putCounts(t, m.Backend(), 20, 0)
	c := &stream.SnapshotContext{CheckpointID: 3, KeyGroups: m.KeyGroups()}
	if err := m.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	good := c.State.Keyed[5][0]
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	newVersion := bytes.Clone(good)
	newVersion[3] = 99 // a version no build writes yet
	binary.LittleEndian.PutUint32(newVersion[len(newVersion)-4:], crc32.Checksum(newVersion[:len(newVersion)-4], castagnoli))
	tests := []struct {
		name  string
		chunk []byte
		want  error
		found string
	}{
		{"truncated", good[:len(good)-1], statebackend.ErrCorrupt, ""},
		{"newer version", newVersion, backends.ErrFormatVersion, "99"},
		{"filed under another key group", c.State.Keyed[6][0], statebackend.ErrCorrupt, "6"},
	}
	for _, tt := range tests {
		for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
			t.Run(tt.name+"/"+backend, func(t *testing.T) {
				snap := &stream.OperatorSnapshot{Keyed: map[int][][]byte{5: {tt.chunk}}}
				_, err := backends.OpenManaged(managedCtx(t, backend, t.TempDir()), 3, snap)
				var re *backends.RestoreError
				var fe *backends.FormatError
				if !errors.As(err, &re) || !errors.As(err, &fe) || !errors.Is(err, tt.want) {
					t.Fatalf("error %v, want a RestoreError holding a FormatError, wrapping %v", err, tt.want)
				}
				if re.OperatorUID != "op/1" || re.CheckpointID != 3 || fe.CheckpointID != 3 || fe.KeyGroup != 5 || !strings.HasPrefix(fe.Found, tt.found) {
					t.Errorf("error %v: RestoreError %+v, FormatError %+v", err, re, fe)
				}
				if !strings.HasPrefix(err.Error(), `operator "op/1": restoring keyed state from checkpoint 3: `) {
					t.Errorf("error %q does not start with the operator and checkpoint", err)
				}
			})
		}
	}
}

// TestManagedSavepointSnapshot: a savepoint's snapshot (Full) of an
// incremental Pebble backend is in the canonical chunk format, restores
// into the heap backend, and the next ordinary checkpoint is incremental
// again.
func TestManagedSavepointSnapshot(t *testing.T) {
	m, err := backends.OpenManaged(managedCtx(t, stream.StateBackendPebble, t.TempDir()), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(false)
	putCounts(t, m.Backend(), 300, 7)
	sp := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: m.KeyGroups(), Full: true}
	if err := m.Snapshot(sp); err != nil {
		t.Fatal(err)
	}
	if len(sp.State.Files) != 0 || len(sp.State.Keyed) == 0 {
		t.Fatalf("savepoint snapshot: %d files, %d key groups of chunks; want chunks only", len(sp.State.Files), len(sp.State.Keyed))
	}
	heap, err := backends.OpenManaged(managedCtx(t, stream.StateBackendHeap, t.TempDir()), 1, &sp.State)
	if err != nil {
		t.Fatalf("restoring the savepoint into the heap backend: %v", err)
	}
	checkCounts(t, heap.Backend(), 300, 7)
	heap.Close(false)
	next := &stream.SnapshotContext{CheckpointID: 2, KeyGroups: m.KeyGroups()}
	if err := m.Snapshot(next); err != nil {
		t.Fatal(err)
	}
	if len(next.State.Files) == 0 {
		t.Fatal("the checkpoint after a savepoint is not incremental")
	}
}
