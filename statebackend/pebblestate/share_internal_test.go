package pebblestate

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// newSST returns the bytes of next's shared files that prev does not hold
// (by name and SHA-256), and the bytes of all of next's shared files.
func newSST(prev, next []SSTFile) (newBytes, total int64) {
	have := make(map[string]bool)
	for _, f := range prev {
		have[f.Name+"/"+f.SHA256] = true
	}
	for _, f := range next {
		if !f.Shared {
			continue
		}
		total += f.Size
		if !have[f.Name+"/"+f.SHA256] {
			newBytes += f.Size
		}
	}
	return newBytes, total
}

// TestSecondCheckpointSharesFiles changes 1% of the keys between two
// checkpoints: the second must reuse the first's sstables and add about
// the changed bytes. The LSM is compacted first and automatic compactions
// are off, so that no background compaction rewrites files between the two
// checkpoints (whether one does depends on timing).
func TestSecondCheckpointSharesFiles(t *testing.T) {
	const n = 40_000
	root := t.TempDir()
	kgs := stream.KeyGroupRange{Start: 0, End: 127}
	b, err := New(Options{Dir: filepath.Join(root, "db"), DeleteOnClose: true,
		Configure: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }}, kgs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := statebackend.GetValueState(b, "v", statebackend.BytesCodec)
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 104)
	put := func(i int, gen uint64) {
		b.SetCurrentKey(binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15), i%128)
		for j := 0; j < len(val); j += 8 {
			binary.LittleEndian.PutUint64(val[j:], uint64(i)*31+uint64(j)*gen*0x9e3779b97f4a7c15)
		}
		s.Update(val)
	}
	for i := range n {
		put(i, 1)
	}
	if err := b.commit(); err != nil {
		t.Fatal(err)
	}
	if err := b.db.Compact(context.Background(), kgPrefix(0), metaPrefix, true); err != nil {
		t.Fatal(err)
	}
	first, err := b.Checkpoint(filepath.Join(root, "chk1"))
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i := 0; i < n; i += 100 {
		put(i, 2)
		changed++
	}
	second, err := b.Checkpoint(filepath.Join(root, "chk2"))
	if err != nil {
		t.Fatal(err)
	}
	newBytes, total := newSST(first, second)
	changedBytes := int64(changed * (len(val) + 20))
	t.Logf("checkpoint 2: %d of %d sstable bytes new; %d bytes of state changed (ratio %.2f); files %d → %d",
		newBytes, total, changedBytes, float64(newBytes)/float64(changedBytes), len(first), len(second))
	if newBytes == 0 || newBytes > total/10 {
		t.Errorf("second checkpoint has %d new sstable bytes of %d; want a small nonzero part", newBytes, total)
	}
	var shared int
	for _, f := range second {
		if f.Shared {
			for _, g := range first {
				if g.Name == f.Name && g.SHA256 == f.SHA256 {
					shared++
				}
			}
		}
	}
	if shared == 0 {
		t.Errorf("no sstable of the first checkpoint is in the second:\n%v\n%v", first, second)
	}
	for _, f := range second {
		if !f.Shared && f.Size > 1<<20 {
			t.Errorf("per-checkpoint file %s is %d bytes", f.Name, f.Size)
		}
	}
}
