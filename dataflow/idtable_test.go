package dataflow

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIDTableModel applies seeded random opens and closes to an idTable
// and to a map, in the patterns a stream sees (ids in order, in waves; a
// long-lived channel among short-lived ones; ids far ahead of or below
// the rest), and checks after every step that both hold the same
// channels, and that the table's slice stays within four slots a channel
// (or idTableSparse).
func TestIDTableModel(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var tab idTable[int]
		model := map[uint32]*int{}
		next := uint32(rng.IntN(1 << 20))
		var live []uint32
		check := func(step int, op string) {
			t.Helper()
			if n := len(tab.dense); n > max(idTableSparse, 4*tab.live) {
				t.Fatalf("seed %d step %d (%s): window of %d slots for %d live ids", seed, step, op, n, tab.live)
			}
			if n := tab.live + len(tab.far); n != len(model) {
				t.Fatalf("seed %d step %d (%s): %d ids, want %d", seed, step, op, n, len(model))
			}
			ids := live
			if step%100 != 0 && len(live) > 64 {
				ids = nil
				for range 64 {
					ids = append(ids, live[rng.IntN(len(live))])
				}
			}
			for _, id := range ids {
				if got := tab.get(id); got != model[id] {
					t.Fatalf("seed %d step %d (%s): get(%d) = %p, want %p", seed, step, op, id, got, model[id])
				}
			}
			for _, id := range []uint32{next, next + 1, tab.base - 1, tab.base + uint32(len(tab.dense))} {
				if model[id] == nil && tab.get(id) != nil {
					t.Fatalf("seed %d step %d (%s): get(%d) of an unknown id found %d", seed, step, op, id, *tab.get(id))
				}
			}
		}
		open := func(id uint32) {
			if model[id] != nil {
				return
			}
			v := new(int)
			*v = int(id)
			tab.set(id, v)
			model[id] = v
			live = append(live, id)
		}
		closeAt := func(k int) {
			id := live[k]
			tab.delete(id)
			delete(model, id)
			live = slices.Delete(live, k, k+1)
		}
		for step := range 4000 {
			var op string
			switch r := rng.IntN(100); {
			case r < 2: // a wave of opens in order
				op = "wave"
				for range rng.IntN(3000) {
					open(next)
					next++
				}
			case r < 45:
				op = "open"
				open(next)
				next++
			case r < 48: // an id far ahead
				op = "far"
				open(next + 1<<16 + uint32(rng.IntN(1<<20)))
			case r < 50: // an id below every other
				op = "below"
				open(tab.base - 1 - uint32(rng.IntN(100)))
			case r < 53 && len(live) > 0: // the oldest third goes
				op = "close wave"
				for k := len(live) / 3; k > 0 && len(live) > 1; k-- {
					closeAt(1) // live[0] stays: a long-lived channel
				}
			case len(live) > 0:
				op = "close"
				closeAt(rng.IntN(len(live)))
			}
			check(step, op)
		}
		seen := map[uint32]bool{}
		tab.each(func(id uint32, v *int) {
			if seen[id] || model[id] != v {
				t.Fatalf("seed %d: each gave id %d twice or with another channel", seed, id)
			}
			seen[id] = true
		})
		for id := range seen {
			tab.delete(id)
		}
		if n := tab.live + len(tab.far); len(seen) != len(model) || n != 0 {
			t.Fatalf("seed %d: each gave %d ids of %d; %d left after deleting them", seed, len(seen), len(model), n)
		}
	}
}

// TestIDTableKeepsWavesInWindow opens channels in waves, as the jobs of a
// stream do, keeps one channel of the first wave for good and a few of
// each wave a while longer, and a few ids out of order: the channels of
// the newest wave must be in the window, and the window no longer than
// four slots a channel (or idTableSparse).
func TestIDTableKeepsWavesInWindow(t *testing.T) {
	var tab idTable[int]
	var next uint32
	var waves [][]uint32
	v := new(int)
	for w := range 30 {
		var ids []uint32
		for range 2000 {
			tab.set(next, v)
			ids = append(ids, next)
			next++
		}
		tab.set(next+1<<20, v) // out of order, for good
		tab.set(tab.base-5, v)
		waves = append(waves, ids)
		if w >= 2 { // the wave before last goes, but for a few
			old := waves[w-2]
			for k, id := range old {
				if (w == 2 && k == 0) || k%100 == 1 {
					continue
				}
				tab.delete(id)
			}
		}
		if n := len(tab.dense); n > max(idTableSparse, 4*tab.live) {
			t.Fatalf("wave %d: window of %d slots for %d live ids", w, n, tab.live)
		}
		for _, id := range waves[w] {
			if i := id - tab.base; i >= uint32(len(tab.dense)) || tab.dense[i] == nil {
				t.Fatalf("wave %d: id %d of the newest wave is not in the window [%d, %d)", w, id, tab.base, tab.base+uint32(len(tab.dense)))
			}
		}
	}
}
