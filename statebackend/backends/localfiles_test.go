package backends_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// TestManagedFailedRestoreLeavesNoFiles: when the files of an incremental
// snapshot cannot be opened, OpenManaged fails with a RestoreError and
// leaves neither the restore directory nor a Pebble working directory
// behind; local snapshots of the task stay for the next attempt.
func TestManagedFailedRestoreLeavesNoFiles(t *testing.T) {
	dir := t.TempDir()
	octx := managedCtx(t, stream.StateBackendPebble, dir)
	keep := backends.SnapshotDir(dir, "op/1", 4)
	restore := backends.RestoreDir(dir, "op/1", 4, 0)
	for _, d := range []string{keep, restore} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(restore, "MANIFEST-000001")
	if err := os.WriteFile(path, []byte("not a pebble manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap := &stream.OperatorSnapshot{Files: []stream.SnapshotFile{{Path: path, Name: "MANIFEST-000001", Size: 21}}}
	_, err := backends.OpenManaged(octx, 4, snap)
	var re *backends.RestoreError
	if !errors.As(err, &re) {
		t.Fatalf("OpenManaged of a broken snapshot: %v; want a RestoreError", err)
	}
	left := listDirs(t, dir)
	want := []string{"snapshots", filepath.Join("snapshots", "op_1"), filepath.Join("snapshots", "op_1", "chk-4")}
	if len(left) != len(want) {
		t.Fatalf("after the failed restore these directories are left: %v; want only the local snapshot %v", left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Fatalf("after the failed restore these directories are left: %v; want only the local snapshot %v", left, want)
		}
	}
}

// TestNewestLocalSnapshot: the highest checkpoint id among the local
// snapshot directories of every operator of a task.
func TestNewestLocalSnapshot(t *testing.T) {
	dir := t.TempDir()
	if _, ok := backends.NewestLocalSnapshot(dir); ok {
		t.Fatal("a local snapshot found in an empty directory")
	}
	for _, d := range []string{
		backends.SnapshotDir(dir, "a", 7),
		backends.SnapshotDir(dir, "a", 12),
		backends.SnapshotDir(dir, "b", 9),
		filepath.Join(backends.SnapshotRoot(dir), "b", "chk-99.tmp"), // not a snapshot
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if id, ok := backends.NewestLocalSnapshot(dir); !ok || id != 12 {
		t.Fatalf("NewestLocalSnapshot = %d, %v; want 12, true", id, ok)
	}
}
