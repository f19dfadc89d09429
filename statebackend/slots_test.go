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

// TestSlotsDropEmptiedKeys: a resident key whose slots are all deleted
// leaves the index at the next Evict, even with the budget far from
// reached, and its deletion reaches the table; a key that keeps a slot
// stays, and an emptied key given a slot again starts from the initial
// words.
func TestSlotsDropEmptiedKeys(t *testing.T) {
	kg := stream.KeyGroupRange{Start: 0, End: 15}
	b, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(t.TempDir(), "db"), DeleteOnClose: true}, kg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := statebackend.SlotDescriptor{Name: "s", Words: 1, Init: []int64{-1}}
	s, err := statebackend.GetSlots(b, d)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	key := func(i int) ([]byte, int) { return binary.BigEndian.AppendUint32(nil, uint32(i)), i % 16 }
	for i := range n {
		k, g := key(i)
		for ns := range int64(2) {
			slot, _ := s.Slot(k, g, ns)
			s.Words(slot)[0] = int64(i)
		}
	}
	s.Flush() // every key is in the table now
	for i := range n {
		k, g := key(i)
		s.Delete(k, g, 0)
		if i%2 == 0 { // even keys lose both slots
			s.Delete(k, g, 1)
		}
	}
	if spilled := s.Evict(nil); spilled != 0 {
		t.Fatalf("Evict spilled %d keys for the budget; want none", spilled)
	}
	s.Flush()
	for i := range n {
		k, g := key(i)
		if got, want := s.Resident(k, g), i%2 == 1; got != want {
			t.Fatalf("key %d: resident %v, want %v", i, got, want)
		}
		if recs := s.ReadKey(k, g); i%2 == 0 && len(recs) != 0 {
			t.Fatalf("key %d lost its slots but the table still holds %v", i, recs)
		}
	}
	for i := range n {
		k, g := key(i)
		w, ok := s.Lookup(k, g, 1)
		switch {
		case i%2 == 1 && (!ok || w[0] != int64(i)):
			t.Fatalf("key %d: slot 1 reads %v, %v; want [%d]", i, w, ok, i)
		case i%2 == 0 && ok:
			t.Fatalf("key %d: slot 1 reads %v after it was deleted", i, w)
		}
		if i%2 == 0 {
			slot, created := s.Slot(k, g, 1)
			if !created || s.Words(slot)[0] != -1 {
				t.Fatalf("key %d: a new slot after the key emptied: created %v, words %v; want the initial [-1]", i, created, s.Words(slot))
			}
		}
	}
}
