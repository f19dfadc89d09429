package pebblestate_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// TestStateLargerThanCaches keeps state at least eight times the memory its
// caches may use (128 KiB block cache + 64 KiB value cache) and checks
// every key exactly against an independent map: after random updates and
// deletions, after a Pebble checkpoint and local recovery, and after a full
// snapshot restored into a new backend. Updates right before each
// checkpoint leave dirty entries in the value cache, which must reach the
// checkpoint. The memtable is as small, so that the state is written
// in over a dozen flushes and compacted. WEIR_LONG_TESTS=1 runs it eight
// times as large (1 MiB + 512 KiB of caches, 16,000 keys).
func TestStateLargerThanCaches(t *testing.T) {
	t.Parallel()
	const valSize = 1000
	var (
		n          = 2_000
		blockCache = int64(128 << 10)
		valueCache = int64(64 << 10)
	)
	if longTests() {
		n, blockCache, valueCache = 8*n, 8*blockCache, 8*valueCache
	}
	// The churn before each checkpoint writes about as many values as the
	// value cache holds.
	churnOps := n / 16
	opts := func(dir string) pebblestate.Options {
		return pebblestate.NoSync(pebblestate.Options{Dir: dir, CacheBytes: blockCache, ValueCacheBytes: valueCache, MemTableBytes: blockCache, DeleteOnClose: true})
	}
	root := t.TempDir()
	b, err := pebblestate.New(opts(filepath.Join(root, "db")), full)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()

	key := func(i int) ([]byte, int) {
		return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15), i % stream.DefaultMaxParallelism
	}
	value := func(i int, gen uint64) []byte {
		v := make([]byte, valSize)
		for j := 0; j+8 <= valSize; j += 8 {
			binary.LittleEndian.PutUint64(v[j:], (uint64(i)*31+uint64(j)+gen)*0x9e3779b97f4a7c15)
		}
		return v
	}
	model := make(map[int]string, n) // key index → value; absent: no value
	rng := rand.New(rand.NewPCG(5, 5))
	var s statebackend.ValueState[[]byte]
	bind := func() {
		if s, err = statebackend.GetValueState(b, "v", statebackend.BytesCodec); err != nil {
			t.Fatal(err)
		}
	}
	bind()
	set := func(i int, gen uint64) {
		k, kg := key(i)
		b.SetCurrentKey(k, kg)
		v := value(i, gen)
		s.Update(v)
		model[i] = string(v)
	}
	// churn updates, deletes and reads random keys, checking the reads.
	churn := func(ops int, gen uint64) {
		for range ops {
			i := rng.IntN(n)
			k, kg := key(i)
			b.SetCurrentKey(k, kg)
			switch op := rng.IntN(10); {
			case op < 5:
				set(i, gen)
			case op < 6:
				s.Clear()
				delete(model, i)
			default:
				got, ok := s.Value()
				want, wantOK := model[i]
				if ok != wantOK || string(got) != want {
					t.Fatalf("key %d: read (%d bytes, %v), model has (%d bytes, %v)", i, len(got), ok, len(want), wantOK)
				}
			}
		}
	}
	// verify checks every key and Keys against the model.
	verify := func(what string) {
		t.Helper()
		for i := range n {
			k, kg := key(i)
			b.SetCurrentKey(k, kg)
			got, ok := s.Value()
			want, wantOK := model[i]
			if ok != wantOK || string(got) != want {
				t.Fatalf("%s: key %d: got (%d bytes, %v), want (%d bytes, %v)", what, i, len(got), ok, len(want), wantOK)
			}
		}
		count := 0
		for kg := full.Start; kg <= full.End; kg++ {
			b.Keys("v", kg, func([]byte) bool { count++; return true })
		}
		if count != len(model) {
			t.Fatalf("%s: Keys found %d keys, the model has %d", what, count, len(model))
		}
	}

	for i := range n {
		set(i, 1)
	}
	churn(n/2, 2)
	caches := blockCache + valueCache
	if got := b.SizeBytes(); got < 8*caches {
		t.Fatalf("SizeBytes = %d, want ≥ %d (8× the caches)", got, 8*caches)
	}
	t.Logf("state %d bytes in %d keys; caches %d bytes (%.1f×)", b.SizeBytes(), len(model), caches, float64(b.SizeBytes())/float64(caches))
	verify("after updates")

	// Checkpoint with dirty cache entries, local recovery, check.
	churn(churnOps, 3)
	chk := filepath.Join(root, "chk-1")
	if _, err := b.Checkpoint(chk); err != nil {
		t.Fatal(err)
	}
	sizeBefore := b.SizeBytes()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err = pebblestate.OpenFromCheckpoint(opts(filepath.Join(root, "db-2")), chk, full); err != nil {
		t.Fatal(err)
	}
	bind()
	if got := b.SizeBytes(); got != sizeBefore {
		t.Errorf("SizeBytes after local recovery = %d, before checkpoint %d", got, sizeBefore)
	}
	verify("after checkpoint and local recovery")

	// Full snapshot with dirty cache entries, restore into a new backend.
	churn(churnOps, 4)
	c := &stream.SnapshotContext{CheckpointID: 2, KeyGroups: full}
	if err := b.Snapshot(c); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err = pebblestate.New(opts(filepath.Join(root, "db-3")), full); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(&stream.RestoreContext{CheckpointID: 2, KeyGroups: full, State: &c.State}); err != nil {
		t.Fatal(err)
	}
	bind()
	verify("after snapshot and restore")
	churn(churnOps, 5)
	verify("after more updates")
}

// TestValueCacheWriteBack checks the cache's effect at the boundaries where
// Pebble is read directly: a value changed in the cache is seen by Keys and
// by a checkpoint, and a map Clear removes cached user keys.
func TestValueCacheWriteBack(t *testing.T) {
	for _, cache := range testCacheSizes {
		t.Run(fmt.Sprint("valuecache=", cache), func(t *testing.T) {
			root := t.TempDir()
			b, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db"), ValueCacheBytes: cache, DeleteOnClose: true}, full)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			v, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			m, err := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			b.SetCurrentKey([]byte("a"), 1)
			v.Update(7)
			m.Put("x", 1)
			m.Put("y", 2)
			var keys []string
			b.Keys("v", 1, func(k []byte) bool { keys = append(keys, string(k)); return true })
			if len(keys) != 1 || keys[0] != "a" {
				t.Fatalf("Keys = %q, want [a]", keys)
			}
			m.Clear()
			if _, ok := m.Get("x"); ok || !m.IsEmpty() {
				t.Fatal("map state not empty after Clear")
			}
			v.Update(8)
			chk := filepath.Join(root, "chk")
			if _, err := b.Checkpoint(chk); err != nil {
				t.Fatal(err)
			}
			r, err := pebblestate.OpenFromCheckpoint(pebblestate.Options{Dir: filepath.Join(root, "r"), ValueCacheBytes: cache, DeleteOnClose: true}, chk, full)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			rv, err := statebackend.GetValueState(r, "v", statebackend.Int64Codec)
			if err != nil {
				t.Fatal(err)
			}
			r.SetCurrentKey([]byte("a"), 1)
			if got, ok := rv.Value(); !ok || got != 8 {
				t.Fatalf("restored value = %d, %v; want 8", got, ok)
			}
			if r.SizeBytes() != b.SizeBytes() {
				t.Errorf("restored SizeBytes %d, original %d", r.SizeBytes(), b.SizeBytes())
			}
		})
	}
}
