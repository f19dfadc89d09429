package pebblestate_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
)

func TestSnapshotFiles(t *testing.T) {
	root := t.TempDir()
	be, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db")}, full)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	var inc statebackend.IncrementalSnapshotter = be
	s, err := statebackend.GetValueState(be, "n", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	be.SetCurrentKey([]byte("a"), 1)
	s.Update(7)
	files, err := inc.SnapshotFiles(filepath.Join(root, "chk-1"))
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, f := range files {
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if int64(len(data)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Fatalf("%s: size %d sha %s, listed as %d %s", f.Name, len(data), hex.EncodeToString(sum[:]), f.Size, f.SHA256)
		}
		if f.Shared != (f.Name != pebblestate.ChainFile) {
			t.Fatalf("%s: Shared=%v", f.Name, f.Shared)
		}
		if f.Shared {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("a snapshot with state has no shared file")
	}
	r, err := pebblestate.OpenFromCheckpoint(pebblestate.Options{Dir: filepath.Join(root, "restored")}, filepath.Join(root, "chk-1"), full)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rs, err := statebackend.GetValueState(r, "n", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	r.SetCurrentKey([]byte("a"), 1)
	if v, ok := rs.Value(); !ok || v != 7 {
		t.Fatalf("restored value %d, %v; want 7", v, ok)
	}
}
