package filestore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/blobstore/filestore"
)

func newStore(t *testing.T) *filestore.Store {
	s, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	blobstoretest.RunConformance(t, func(t *testing.T) blobstore.Store { return newStore(t) })
}

func TestLayoutOnDisk(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "job/chk-1/op/0-a1", []byte("state")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(s.Root(), "job", "chk-1", "op", "0-a1"))
	if err != nil || string(got) != "state" {
		t.Fatalf("file on disk = %q, %v; want the object at its key's path", got, err)
	}
	// No temporary files are left behind.
	var names []string
	filepath.WalkDir(s.Root(), func(path string, d os.DirEntry, err error) error {
		if strings.HasPrefix(d.Name(), ".weirtmp-") {
			names = append(names, path)
		}
		return nil
	})
	if len(names) > 0 {
		t.Fatalf("temporary files left: %q", names)
	}
	// Delete removes the emptied directories, but not the root.
	if err := s.Delete(ctx, "job/chk-1/op/0-a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "job")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory job/ still there after deleting its only object: %v", err)
	}
	if _, err := os.Stat(s.Root()); err != nil {
		t.Fatalf("root removed: %v", err)
	}
}

func TestReservedAndConflictingKeys(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "a/.weirtmp-1", []byte("x")); !errors.Is(err, blobstore.ErrBadKey) {
		t.Fatalf("Put(reserved name) = %v, want ErrBadKey", err)
	}
	if err := s.Put(ctx, "a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a/b", []byte("y")); err == nil || !strings.Contains(err.Error(), `"a/b"`) {
		t.Fatalf("Put(a/b) under object a = %v; want an error naming the key", err)
	}
}

func TestNewRejectsRelativeRoot(t *testing.T) {
	if _, err := filestore.New("relative/dir"); err == nil {
		t.Fatal("New(relative) succeeded")
	}
}
