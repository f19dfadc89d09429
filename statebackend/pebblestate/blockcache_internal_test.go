package pebblestate

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// TestSharedBlockCache opens two backends on one block cache
// (Options.Cache), releases the caller's reference right after creating
// them, as the option allows, and checks that both keep working on it:
// blocks one backend reads are in the cache the other reports, each
// reads back its own state after a flush to sstables, and closing one
// leaves the other usable.
func TestSharedBlockCache(t *testing.T) {
	c := pebble.NewCache(8 << 20)
	kg := stream.KeyGroupRange{Start: 0, End: 15}
	var bs [2]*Backend
	for i := range bs {
		b, err := New(Options{Dir: filepath.Join(t.TempDir(), fmt.Sprint("db-", i)), Cache: c, ValueCacheBytes: 1, DeleteOnClose: true}, kg)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		bs[i] = b
	}
	c.Unref()
	const n = 2000
	key := func(j int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(j)) }
	states := make([]statebackend.ValueState[int64], len(bs))
	for i, b := range bs {
		s, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
		if err != nil {
			t.Fatal(err)
		}
		states[i] = s
		for j := range n {
			b.SetCurrentKey(key(j), j%16)
			s.Update(int64(i*n + j))
		}
		if _, err := b.Checkpoint(filepath.Join(t.TempDir(), "chk")); err != nil { // commits and flushes
			t.Fatal(err)
		}
	}
	check := func(i int) {
		t.Helper()
		for j := range n {
			bs[i].SetCurrentKey(key(j), j%16)
			if v, ok := states[i].Value(); !ok || v != int64(i*n+j) {
				t.Fatalf("backend %d, key %d: %d, %v; want %d", i, j, v, ok, i*n+j)
			}
		}
	}
	check(0)
	check(1)
	m0, m1 := bs[0].db.Metrics().BlockCache, bs[1].db.Metrics().BlockCache
	if m0.Size == 0 || m0.Size != m1.Size || m0.Count != m1.Count {
		t.Fatalf("block caches: %+v and %+v; want one non-empty cache", m0, m1)
	}
	if err := bs[0].Close(); err != nil {
		t.Fatal(err)
	}
	check(1)
}
