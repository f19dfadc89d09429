package statebackendtest

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// slotKey addresses one slot of the model.
type slotKey struct {
	key string
	ns  int64
}

// testSlots drives statebackend.Slots with random updates, deletes, flushes
// and reads against a map model, through a snapshot restored into the full
// range and into two halves.
func testSlots(t *testing.T, nb nbFunc, newBackend NewBackend) {
	rng := rand.New(rand.NewPCG(7, 11))
	d := statebackend.SlotDescriptor{Name: "slots", Words: 3, Init: []int64{0, 100, -5}}
	b := nb(t, fullRange)
	s, err := statebackend.GetSlots(b, d)
	must(t, err)
	keys := keysIn(fullRange, 40)
	model := make(map[slotKey][]int64)

	step := func(s *statebackend.Slots, keys []string, model map[slotKey][]int64) {
		k := keys[rng.IntN(len(keys))]
		ns := int64(rng.IntN(6)-2) * 1000
		sk := slotKey{k, ns}
		switch r := rng.IntN(10); {
		case r < 6:
			slot, created := s.Slot([]byte(k), kgOf(k), ns)
			if _, had := model[sk]; created == had {
				t.Fatalf("Slot(%s, %d): created=%v, model has it: %v", k, ns, created, had)
			}
			if created {
				model[sk] = slices.Clone(d.Init)
			}
			w := s.Words(slot)
			w[0]++
			w[1] = min(w[1], int64(rng.IntN(200)))
			w[2] += int64(rng.IntN(7) - 3)
			m := model[sk]
			m[0]++
			m[1] = min(m[1], w[1])
			m[2] = w[2]
			if !slices.Equal(w, m) {
				t.Fatalf("slot %s/%d words %v, model %v", k, ns, w, m)
			}
		case r < 8:
			s.Delete([]byte(k), kgOf(k), ns)
			delete(model, sk)
		case r < 9:
			s.Flush()
			if rng.IntN(2) == 0 {
				s.Evict(func(key []byte, group int, slots []int32) {
					for _, id := range slots {
						if sk, g, _ := s.SlotKey(id); string(sk) != string(key) || g != group {
							t.Fatalf("Evict: key %s is given a slot of key %s", key, sk)
						}
					}
				})
			}
			if !s.Spills() || s.Resident([]byte(k), kgOf(k)) {
				break
			}
			// A key that is not resident, read and written whole: drop
			// its first slot.
			recs := s.ReadKey([]byte(k), kgOf(k))
			want := 0
			for mk := range model {
				if mk.key == k {
					want++
				}
			}
			if len(recs) != want {
				t.Fatalf("ReadKey(%s): %d slots, model %d", k, len(recs), want)
			}
			for _, r := range recs {
				if m := model[slotKey{k, r.NS}]; !slices.Equal(r.Words, m) {
					t.Fatalf("ReadKey(%s): slot %d words %v, model %v", k, r.NS, r.Words, m)
				}
			}
			if len(recs) > 0 {
				delete(model, slotKey{k, recs[0].NS})
				s.WriteKey([]byte(k), kgOf(k), slices.Clone(recs[1:]))
			}
		default:
			got := make(map[int64][]int64)
			s.Range([]byte(k), kgOf(k), func(ns int64, w []int64) bool {
				got[ns] = slices.Clone(w)
				return true
			})
			want := make(map[int64][]int64)
			for mk, w := range model {
				if mk.key == k {
					want[mk.ns] = w
				}
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("Range(%s) = %v, model %v", k, got, want)
			}
		}
	}
	check := func(what string, s *statebackend.Slots, keys []string, model map[slotKey][]int64) {
		t.Helper()
		for _, k := range keys {
			for ns := int64(-2000); ns <= 3000; ns += 1000 {
				w, ok := s.Lookup([]byte(k), kgOf(k), ns)
				m, had := model[slotKey{k, ns}]
				if ok != had || (ok && !slices.Equal(w, m)) {
					t.Fatalf("%s: Lookup(%s, %d) = %v %v, model %v %v", what, k, ns, w, ok, m, had)
				}
			}
		}
	}
	for range 3000 {
		step(s, keys, model)
	}
	check("live", s, keys, model)
	s.Flush()
	snap := snapshot(t, b, 3)

	// The whole range, and each half with the keys and model it owns.
	half := (fullRange.Start + fullRange.End) / 2
	for _, r := range []stream.KeyGroupRange{fullRange, {Start: fullRange.Start, End: half}, {Start: half + 1, End: fullRange.End}} {
		b2 := restore(t, newBackend, r, snap, 3)
		s2, err := statebackend.GetSlots(b2, d)
		must(t, err)
		var rk []string
		for _, k := range keys {
			if r.Contains(kgOf(k)) {
				rk = append(rk, k)
			}
		}
		m2 := make(map[slotKey][]int64)
		for mk, w := range model {
			if r.Contains(kgOf(mk.key)) {
				m2[mk] = slices.Clone(w)
			}
		}
		check("restored into "+r.String(), s2, rk, m2)
		for range 1000 {
			step(s2, rk, m2)
		}
		check("restored and changed", s2, rk, m2)
	}

	// A descriptor with another width is a conflict, not a misread.
	if _, err := statebackend.GetSlots(b, statebackend.SlotDescriptor{Name: "slots", Words: 4}); err == nil {
		t.Error("GetSlots with another width of an existing table succeeded")
	}
}
