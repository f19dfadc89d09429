package pebblestate

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Loading many keys through a small value cache with no checkpoint (so no
// flush) keeps neither the evicted values nor an unbounded list of
// evicted entries, and every value reads back.
func TestEvictedEntriesReleaseTheirValues(t *testing.T) {
	t.Parallel()
	const n = 50_000
	kgs := stream.KeyGroupRange{Start: 0, End: 127}
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: 64 << 10, DeleteOnClose: true}, kgs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := statebackend.GetValueState(b, "v", statebackend.BytesCodec)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15) }
	val := func(i int) []byte { return binary.LittleEndian.AppendUint64(make([]byte, 0, 100), uint64(i)*7)[:8] }
	maxDirty := 0
	for i := range n {
		b.SetCurrentKey(key(i), i%128)
		s.Update(val(i))
		maxDirty = max(maxDirty, len(b.cache.dirty))
		if limit := 2*len(b.cache.ring) + 64 + 1; len(b.cache.dirty) > limit {
			t.Fatalf("after %d keys %d entries wait for the flush, %d cached: the list grows with the evicted ones", i+1, len(b.cache.dirty), len(b.cache.ring))
		}
	}
	for _, e := range b.cache.dirty {
		if e.gone && (e.enc != nil || e.v != nil) {
			t.Fatal("an evicted entry still holds its value")
		}
	}
	for i := 0; i < n; i += 97 {
		b.SetCurrentKey(key(i), i%128)
		got, ok := s.Value()
		if !ok || string(got) != string(val(i)) {
			t.Fatalf("key %d reads %x, %v; want %x", i, got, ok, val(i))
		}
	}
	t.Logf("at most %d entries waited for a flush (%d keys written)", maxDirty, n)
}
