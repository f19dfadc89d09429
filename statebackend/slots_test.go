package statebackend_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// TestSlotsSpillManyKeys writes more keys through a Slots on Pebble than
// its filter of stored keys was first sized for (so that the filter is
// built again from a scan while keys are written), with a memory budget
// of a few keys, so that almost every key is spilled; then every key's
// slot must read back, and a second Slots on the same table, which builds
// its filter from a scan, must find them too.
func TestSlotsSpillManyKeys(t *testing.T) {
	kg := stream.KeyGroupRange{Start: 0, End: 15}
	b, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: 4 << 10, DeleteOnClose: true}, kg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := statebackend.SlotDescriptor{Name: "s", Words: 1}
	s, err := statebackend.GetSlots(b, d)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40_000
	key := func(i int) ([]byte, int) { return binary.BigEndian.AppendUint32(nil, uint32(i)), i % 16 }
	for i := range n {
		k, g := key(i)
		slot, created := s.Slot(k, g, 7)
		if !created {
			t.Fatalf("key %d: a slot existed before it was written", i)
		}
		s.Words(slot)[0] = int64(i)
		if i%100 == 99 {
			s.Flush()
			s.Evict(nil)
		}
	}
	s.Flush()
	s.Evict(nil)
	check := func(what string, s *statebackend.Slots) {
		t.Helper()
		for i := range n {
			k, g := key(i)
			if w, ok := s.Lookup(k, g, 7); !ok || w[0] != int64(i) {
				t.Fatalf("%s: key %d: %v, %v; want [%d]", what, i, w, ok, i)
			}
			if i%100 == 99 {
				s.Evict(nil)
			}
		}
	}
	check("same Slots", s)
	s2, err := statebackend.GetSlots(b, d)
	if err != nil {
		t.Fatal(err)
	}
	check("new Slots", s2)
}
