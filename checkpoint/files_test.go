package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/stream"
)

func writeFiles(t *testing.T, dir string, content map[string]string) []stream.SnapshotFile {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out []stream.SnapshotFile
	for name, c := range content {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(c))
		out = append(out, stream.SnapshotFile{Path: p, Name: name, Size: int64(len(c)), SHA256: hex.EncodeToString(sum[:]), Shared: filepath.Ext(name) == ".sst"})
	}
	return out
}

func TestUploadDownloadFiles(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMem()
	s := NewStorage(mem)
	root := t.TempDir()
	f1 := writeFiles(t, filepath.Join(root, "c1"), map[string]string{"000001.sst": "aaaa", "MANIFEST-1": "m1"})
	h1, n1, err := s.UploadFiles(ctx, "job", 1, "op", 0, 1, f1)
	if err != nil {
		t.Fatal(err)
	}
	if n1 != 6 {
		t.Fatalf("first upload wrote %d bytes, want 6", n1)
	}
	// The second checkpoint shares 000001.sst: only the new files go up.
	f2 := writeFiles(t, filepath.Join(root, "c2"), map[string]string{"000001.sst": "aaaa", "000002.sst": "bbbbbbbb", "MANIFEST-2": "m22"})
	h2, n2, err := s.UploadFiles(ctx, "job", 2, "op", 0, 1, f2)
	if err != nil {
		t.Fatal(err)
	}
	if n2 != 11 {
		t.Fatalf("second upload wrote %d bytes, want 11 (new sstable and manifest only)", n2)
	}
	for _, f := range append(h1, h2...) {
		if f.GetShared() != IsSharedKey("job", f.GetKey()) {
			t.Fatalf("%s: shared=%v but key %s", f.GetName(), f.GetShared(), f.GetKey())
		}
	}
	// Download without local files, then with them (local recovery: no bytes).
	got, n, err := s.DownloadFiles(ctx, h2, filepath.Join(root, "r1"), DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n != 15 || len(got) != 3 {
		t.Fatalf("download fetched %d bytes, %d files; want 15, 3", n, len(got))
	}
	for _, f := range got {
		data, err := os.ReadFile(f.Path)
		if err != nil || int64(len(data)) != f.Size {
			t.Fatalf("%s: %v, %d bytes", f.Path, err, len(data))
		}
	}
	local := filepath.Join(root, "c2")
	_, n, err = s.DownloadFiles(ctx, h2, filepath.Join(root, "r2"), DownloadOptions{Reuse: func(name string) string { return filepath.Join(local, name) }})
	if err != nil || n != 0 {
		t.Fatalf("local recovery downloaded %d bytes (err %v); want 0", n, err)
	}
	// A damaged local file is not reused; a damaged object fails.
	if err := os.WriteFile(filepath.Join(local, "000002.sst"), []byte("BBBBBBBB"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, n, err = s.DownloadFiles(ctx, h2, filepath.Join(root, "r3"), DownloadOptions{Reuse: func(name string) string { return filepath.Join(local, name) }})
	if err != nil || n != 8 {
		t.Fatalf("download with a damaged local file fetched %d bytes (err %v); want 8", n, err)
	}
	sum := sha256.Sum256([]byte("bbbbbbbb"))
	if err := mem.Put(ctx, SharedKey("job", hex.EncodeToString(sum[:])), []byte("xxxxxxxx")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.DownloadFiles(ctx, h2, filepath.Join(root, "r4"), DownloadOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("download of a damaged object = %v, want ErrCorrupt", err)
	}
	// So does one longer or shorter than the manifest says, and neither
	// leaves a file behind.
	for i, bad := range []string{"bbbbbbbbb", "bbbb"} {
		if err := mem.Put(ctx, SharedKey("job", hex.EncodeToString(sum[:])), []byte(bad)); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, fmt.Sprintf("r%d", 5+i))
		if _, _, err := s.DownloadFiles(ctx, h2, dir, DownloadOptions{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("download of a %d-byte object for an 8-byte file = %v, want ErrCorrupt", len(bad), err)
		}
		if _, err := os.Stat(filepath.Join(dir, "000002.sst")); err == nil {
			t.Fatalf("a failed download left 000002.sst in %s", dir)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
			t.Fatalf("a failed download left %v", left)
		}
		// Streamed, the same object fails when read, and the file is not
		// written to dir at all.
		stream := DownloadOptions{Stream: func(name string) bool { return name == "000002.sst" }}
		got, n, err := s.DownloadFiles(ctx, h2, dir+"-streamed", stream)
		if err != nil || n != 15 {
			t.Fatalf("download streaming 000002.sst: %d bytes, %v; want 15 (the streamed file counts)", n, err)
		}
		for _, f := range got {
			_, statErr := os.Stat(f.Path)
			if (f.Fetch != nil) != (f.Name == "000002.sst") || (f.Fetch != nil) != os.IsNotExist(statErr) {
				t.Fatalf("%s: streamed %v, on disk: %v", f.Name, f.Fetch != nil, statErr)
			}
			if f.Fetch == nil {
				continue
			}
			var buf bytes.Buffer
			if _, err := f.Fetch(&buf); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("streaming a %d-byte object for an 8-byte file = %v, want ErrCorrupt", len(bad), err)
			}
			if buf.Len() > 8 {
				t.Fatalf("streaming a %d-byte object for an 8-byte file wrote %d bytes", len(bad), buf.Len())
			}
		}
	}
}
