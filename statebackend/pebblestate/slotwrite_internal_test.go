package pebblestate

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// A Slots writes its resident keys back without reading them again, even
// when the value cache has long forgotten their lengths (a cache of one
// byte keeps nothing): it passes the length it read when the key became
// resident (statebackend.SizedWriter). SizeBytes stays exact: it equals
// the bytes of the keys and values a scan of the database finds.
func TestSlotsWriteBackReadsNothing(t *testing.T) {
	t.Parallel()
	kgs := stream.KeyGroupRange{Start: 0, End: 15}
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: 1, DeleteOnClose: true}, kgs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := statebackend.GetSlots(b, statebackend.SlotDescriptor{Name: "w", Words: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15) }
	flushReads := func(what string) {
		t.Helper()
		before := b.reads
		s.Flush()
		if got := b.reads - before; got != 0 {
			t.Fatalf("%s: Flush read %d keys, want none", what, got)
		}
	}
	for i := range n {
		id, _ := s.Slot(key(i), i%16, 1)
		s.Words(id)[0] = int64(i)
	}
	flushReads("new keys")
	if spilled := s.Evict(nil); spilled != n {
		t.Fatalf("%d keys spilled, want all %d", spilled, n)
	}
	if s.Len() != 0 {
		t.Fatalf("%d slots still resident", s.Len())
	}
	// Back into memory, one Peek each: then change some, add slots to
	// others, and take every slot of some keys (a Delete at write-back).
	for i := range n {
		g := i % 16
		switch i % 3 {
		case 0:
			id, created := s.Slot(key(i), g, 1)
			if created {
				t.Fatalf("key %d lost its slot", i)
			}
			s.Words(id)[1] = 7
		case 1:
			id, _ := s.Slot(key(i), g, 2)
			s.Words(id)[0] = 3
		default:
			s.Delete(key(i), g, 1)
		}
	}
	flushReads("restored keys")
	b.flush()
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: kgPrefix(kgs.Start), UpperBound: kgPrefix(kgs.End + 1)})
	if err != nil {
		t.Fatal(err)
	}
	var scanned int64
	keys := 0
	for ok := it.First(); ok; ok = it.Next() {
		scanned += int64(len(it.Key()) + len(it.Value()))
		keys++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if want := n - n/3; keys != want {
		t.Fatalf("the database holds %d keys, want %d", keys, want)
	}
	if b.SizeBytes() != scanned {
		t.Fatalf("SizeBytes %d, the database's keys and values take %d", b.SizeBytes(), scanned)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}
