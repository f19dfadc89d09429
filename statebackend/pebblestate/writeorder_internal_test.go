package pebblestate

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// orderKeys returns n distinct keys meant to make a prefix sort go wrong:
// short keys, keys with zero bytes where a shorter key is padded, and
// long keys that share their first 16 bytes and more.
func orderKeys(rng *rand.Rand, n int) [][]byte {
	seen := map[string]bool{}
	var keys [][]byte
	for len(keys) < n {
		var k []byte
		switch rng.IntN(4) {
		case 0: // short
			k = []byte{byte(rng.IntN(4))}
			for range rng.IntN(3) {
				k = append(k, byte(rng.IntN(3)))
			}
		case 1: // a short key and zeros
			k = append([]byte{byte(rng.IntN(4))}, make([]byte, 1+rng.IntN(20))...)
		case 2: // a shared 24-byte prefix
			k = append(bytes.Repeat([]byte{7}, 24), byte(rng.IntN(256)), byte(rng.IntN(256)))
		default:
			k = fmt.Appendf(nil, "key-%08d", rng.IntN(1_000_000))
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// openTestBackend opens a backend of key groups kgs in the test's temporary
// directory (cacheBytes 0: the default value cache), closed when the test
// ends.
func openTestBackend(t *testing.T, kgs stream.KeyGroupRange, cacheBytes int64) *Backend {
	t.Helper()
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: cacheBytes, DeleteOnClose: true}, kgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// int64State returns b's int64 value state name.
func int64State(t *testing.T, b *Backend, name string) statebackend.ValueState[int64] {
	t.Helper()
	s, err := statebackend.GetValueState(b, name, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// flush writes dirty entries in key order, each once, and only the dirty
// ones: sortedDirty returns the live dirty entries, sorted by their whole
// keys, and clears every listed flag.
func TestSortedDirtyIsInKeyOrder(t *testing.T) {
	t.Parallel()
	b := openTestBackend(t, stream.KeyGroupRange{Start: 0, End: 3}, 0)
	s := int64State(t, b, "v")
	rng := rand.New(rand.NewPCG(1, 2))
	keys := orderKeys(rng, 3000)
	want := map[string]bool{} // state keys of the dirty entries
	for i, k := range keys {
		g := rng.IntN(4)
		b.SetCurrentKey(k, g)
		s.Update(int64(i))
		want[string(appendStateKey(nil, g, 1, k))] = true
	}
	refs := b.cache.sortedDirty()
	var got [][]byte
	for _, r := range refs {
		got = append(got, bytes.Clone(b.cache.at(r.slot).key()))
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries to write, want %d", len(got), len(want))
	}
	for i, k := range got {
		if !want[string(k)] {
			t.Fatalf("entry %d (%x) was not written", i, k)
		}
		if i > 0 && bytes.Compare(got[i-1], k) >= 0 {
			t.Fatalf("entries %d and %d out of order: %x then %x", i-1, i, got[i-1], k)
		}
	}
	for _, i := range b.cache.dirty {
		if b.cache.at(i).flags&entListed != 0 {
			t.Fatal("a listed flag survived the sort")
		}
	}
	b.cache.dirty = b.cache.dirty[:0] // as flush does after writing
}

// Eviction sweeps write their dirty victims back after the sweep, in key
// order: under a small value cache, random reads, puts and deletes of
// many keys read what a model holds at every step, and end with the
// database holding exactly the model's state (read from Pebble after a
// flush, not from the cache).
func TestEvictionWritesBackInKeyOrder(t *testing.T) {
	t.Parallel()
	b := openTestBackend(t, stream.KeyGroupRange{Start: 0, End: 7}, 32<<10)
	s := int64State(t, b, "v")
	rng := rand.New(rand.NewPCG(3, 4))
	keys := orderKeys(rng, 4000)
	model := map[string]int64{}
	for step := range 40_000 {
		k := keys[rng.IntN(len(keys))]
		g := int(k[0]) % 8
		b.SetCurrentKey(k, g)
		sk := string(appendStateKey(nil, g, 1, k))
		if rng.IntN(5) == 0 {
			s.Clear()
			delete(model, sk)
			continue
		}
		v, _ := s.Value()
		if v != model[sk] {
			t.Fatalf("step %d: key %x reads %d, want %d", step, k, v, model[sk])
		}
		s.Update(v + 1)
		model[sk] = v + 1
	}
	b.flush()
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: kgPrefix(0), UpperBound: kgPrefix(8)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := statebackend.Int64Codec.Decode(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		got[string(it.Key())] = v
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(model) {
		t.Fatalf("the database holds %d keys, the model %d", len(got), len(model))
	}
	for k, v := range model {
		if got[k] != v {
			t.Fatalf("key %x holds %d, want %d", k, got[k], v)
		}
	}
	if b.SizeBytes() <= 0 {
		t.Fatalf("SizeBytes %d", b.SizeBytes())
	}
}

// ScanKeys gives the keys Keys gives, for value and map tables, each once
// and key group by key group, and stops when fn returns false.
func TestScanKeysAgreesWithKeys(t *testing.T) {
	t.Parallel()
	kgs := stream.KeyGroupRange{Start: 10, End: 17}
	b := openTestBackend(t, kgs, 16<<10)
	vs := int64State(t, b, "value")
	ms, err := statebackend.GetMapState(b, "map", statebackend.StringCodec, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	other := int64State(t, b, "other")
	rng := rand.New(rand.NewPCG(5, 6))
	for i, k := range orderKeys(rng, 2000) {
		b.SetCurrentKey(k, 10+rng.IntN(8))
		switch i % 3 {
		case 0:
			vs.Update(int64(i))
		case 1:
			for j := range 1 + rng.IntN(3) {
				ms.Put(fmt.Sprint("u", j), int64(j))
			}
		default:
			other.Update(int64(i))
			if rng.IntN(2) == 0 {
				vs.Update(1)
				vs.Clear() // deleted: no longer a key of the table
			}
		}
	}
	for _, table := range []string{"value", "map", "other", "unknown"} {
		var want []string
		for g := kgs.Start; g <= kgs.End; g++ {
			var ks []string
			b.Keys(table, g, func(k []byte) bool { ks = append(ks, fmt.Sprintf("%d/%x", g, k)); return true })
			slices.Sort(ks)
			want = append(want, ks...)
		}
		var got []string
		lastGroup := kgs.Start
		b.ScanKeys(table, func(k []byte, g int) bool {
			if g < lastGroup {
				t.Fatalf("table %q: key group %d after %d", table, g, lastGroup)
			}
			lastGroup = g
			got = append(got, fmt.Sprintf("%d/%x", g, k))
			return true
		})
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("table %q: ScanKeys gives %d keys, Keys %d (or another order)", table, len(got), len(want))
		}
		if table != "unknown" && len(want) == 0 {
			t.Fatalf("table %q has no keys", table)
		}
		n := 0
		b.ScanKeys(table, func([]byte, int) bool { n++; return n < 5 })
		if want := min(5, len(want)); n != want {
			t.Fatalf("table %q: fn ran %d times after returning false at the fifth key, want %d", table, n, want)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}
