package pebblestate

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// The key filter never reports an added key absent, through several
// growths, rewrites do not count as keys, and it reports about
// filterBitsPerKey's share of absent keys present.
func TestKeyFilter(t *testing.T) {
	t.Parallel()
	var f keyFilter
	f.init(1000, 1<<30) // first part: filterMinKeys
	const n = 50_000    // > 4 parts: 4096, 8192, 16384, 32768
	key := func(i int) []byte {
		return appendStateKey(nil, i%128, 1, binary.BigEndian.AppendUint64(nil, uint64(i)))
	}
	for i := range n {
		f.add(key(i))
		f.add(key(i / 2)) // written again
	}
	if len(f.parts) < 4 {
		t.Fatalf("%d parts after %d keys: the filter did not grow", len(f.parts), n)
	}
	keys := 0
	for _, p := range f.parts {
		keys += p.keys
	}
	if keys > n {
		t.Fatalf("the parts count %d keys; %d distinct keys were added", keys, n)
	}
	for i := range n {
		if !f.mayHave(key(i)) {
			t.Fatalf("key %d was added and is reported absent", i)
		}
	}
	fp := 0
	const absent = 100_000
	for i := n; i < n+absent; i++ {
		if f.mayHave(key(i)) {
			fp++
		}
	}
	// Each part has its own false positives, up to one of each per
	// absent key: bounded by parts × the rate of one.
	if rate := float64(fp) / absent; rate > 0.02*float64(len(f.parts)) {
		t.Fatalf("%.2f %% of absent keys reported present with %d parts", 100*rate, len(f.parts))
	}
	t.Logf("%d parts, %d bytes, %.2f %% false positives", len(f.parts), f.bytes, 100*float64(fp)/absent)
}

// A filter that would outgrow its budget turns itself off and then
// reports every key present.
func TestKeyFilterBudget(t *testing.T) {
	t.Parallel()
	var f keyFilter
	f.init(filterMinKeys, filterMinKeys*filterBitsPerKey/8*2) // room for the first part only
	if !f.on {
		t.Fatal("filter off within its budget")
	}
	for i := range 2 * filterMinKeys {
		f.add(binary.BigEndian.AppendUint64([]byte{0, 1, 1, 8}, uint64(i)))
	}
	if f.on || f.parts != nil {
		t.Fatalf("filter on with %d parts beyond its budget", len(f.parts))
	}
	if !f.mayHave([]byte{0, 1, 1, 1, 'x'}) {
		t.Fatal("a filter that is off reports a key absent")
	}
	var none keyFilter
	none.init(1000, -1)
	if none.on || !none.mayHave([]byte{0, 1, 1, 1, 'x'}) {
		t.Fatal("a filter without budget is on")
	}
}

func TestIsStateKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		k    []byte
		want bool
	}{
		{"state", appendStateKey(nil, 3, 1, []byte("k")), true},
		{"table 128", appendStateKey(nil, 3, 128, []byte("k")), true},
		{"event timer", eventTimers.appendKey(nil, 3, 5, []byte("k")), false},
		{"processing timer", procTimers.appendKey(nil, 3, 5, []byte("k")), false},
		{"version", metaVersionKey, false},
		{"size", appendKG(append([]byte(nil), metaSizePfx...), 3), false},
	} {
		if got := isStateKey(c.k); got != c.want {
			t.Errorf("%s key %x: isStateKey %v, want %v", c.name, c.k, got, c.want)
		}
	}
}

// Through the backend: a key never written is answered without a Pebble
// lookup; keys written, evicted (the value cache holds a few entries),
// deleted, restored from a full snapshot and merged from a checkpoint all
// read back as a model says, on a filter that grows and on one too small
// that turns off; a backend opened from a checkpoint has no filter and
// reads its keys.
func TestKeyFilterBackend(t *testing.T) {
	t.Parallel()
	kgs := stream.KeyGroupRange{Start: 0, End: 15}
	for _, c := range []struct {
		name   string
		filter int64
	}{{"grows", 1 << 20}, {"turns off", 8 << 10}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := Options{Dir: filepath.Join(dir, "a"), ValueCacheBytes: 4 << 10, KeyFilterBytes: c.filter, DeleteOnClose: true}
			b, err := New(opts, kgs)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !b.filter.on {
				t.Fatal("a new backend has no key filter")
			}
			s, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			b.SetCurrentKey([]byte("never"), 1)
			if _, ok := s.Value(); ok || b.rd != nil {
				t.Fatalf("a key never written: found %v, Pebble iterator opened %v", ok, b.rd != nil)
			}
			rng := rand.New(rand.NewPCG(11, 12))
			model := map[int]int64{}
			key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15) }
			check := func(b *Backend, s statebackend.ValueState[int64], what string) {
				t.Helper()
				for i := range 6_000 {
					b.SetCurrentKey(key(i), i%16)
					got, ok := s.Value()
					want, wok := model[i]
					if ok != wok || got != want {
						t.Fatalf("%s: key %d reads %d, %v; want %d, %v", what, i, got, ok, want, wok)
					}
				}
			}
			for range 9_000 {
				i := rng.IntN(6_000)
				b.SetCurrentKey(key(i), i%16)
				if rng.IntN(5) == 0 {
					s.Clear()
					delete(model, i)
					continue
				}
				v, _ := s.Value()
				s.Update(v + 1)
				model[i] = v + 1
			}
			check(b, s, "written")
			if grew := len(b.filter.parts) > 1; b.filter.on != (c.filter >= 1<<20) || (b.filter.on && !grew) {
				t.Fatalf("filter on %v with %d parts (budget %d bytes)", b.filter.on, len(b.filter.parts), c.filter)
			}

			// A full snapshot restored into a new backend.
			snap := snapshotOf(t, b, kgs)
			r, err := New(Options{Dir: filepath.Join(dir, "r"), ValueCacheBytes: 4 << 10, KeyFilterBytes: c.filter, DeleteOnClose: true}, kgs)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			restoreInto(t, r, snap, kgs)
			rs, err := statebackend.GetValueState(r, "v", statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			check(r, rs, "restored from a full snapshot")

			// A checkpoint, merged into a new backend and opened.
			ck := filepath.Join(dir, "ck")
			if _, err := b.Checkpoint(ck); err != nil {
				t.Fatal(err)
			}
			m, err := New(Options{Dir: filepath.Join(dir, "m"), ValueCacheBytes: 4 << 10, KeyFilterBytes: c.filter, DeleteOnClose: true}, kgs)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := MergeInto(m, []string{ck}); err != nil {
				t.Fatal(err)
			}
			ms, err := statebackend.GetValueState(m, "v", statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			check(m, ms, "merged from a checkpoint")
			o, err := OpenFromCheckpoint(Options{Dir: filepath.Join(dir, "o"), ValueCacheBytes: 4 << 10, DeleteOnClose: true}, ck, kgs)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if o.filter.on {
				t.Fatal("a backend opened from a checkpoint has a key filter")
			}
			ostate, err := statebackend.GetValueState(o, "v", statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			check(o, ostate, "opened from a checkpoint")
		})
	}
}

// snapshotOf takes a full snapshot of b.
func snapshotOf(t *testing.T, b *Backend, kgs stream.KeyGroupRange) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: kgs}
	if err := b.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	return &c.State
}

// restoreInto restores snap into b.
func restoreInto(t *testing.T, b *Backend, snap *stream.OperatorSnapshot, kgs stream.KeyGroupRange) {
	t.Helper()
	if err := b.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: kgs, State: snap}); err != nil {
		t.Fatal(err)
	}
}
