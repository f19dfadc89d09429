package pebblestate

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
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

// TestSharedCacheLifecycle opens three backends on one block cache
// (Options.Cache): two new ones and one opened from the first one's
// checkpoint, into which MergeInto adds the second one's (it opens that
// checkpoint on the shared cache too). Each writes and reads back state,
// from sstables, through the cache. The caller keeps its reference until
// all are closed and then releases it. The cache's reference count must
// be one per open backend plus the caller's throughout: a backend that
// released a reference it did not take would have the cache freed under
// the others (or the last Unref panic), one that kept a reference would
// leak the cache's memory.
func TestSharedCacheLifecycle(t *testing.T) {
	c := pebble.NewCache(8 << 20)
	root := t.TempDir()
	opts := func(name string) Options {
		return Options{Dir: filepath.Join(root, name), Cache: c, ValueCacheBytes: 1, DeleteOnClose: true}
	}
	full := stream.KeyGroupRange{Start: 0, End: 15}
	const n = 1000
	key := func(j int) ([]byte, int) { return binary.BigEndian.AppendUint64(nil, uint64(j)), j % 16 }
	// write gives backend i the values i*n+j of keys [lo, hi).
	write := func(b *Backend, i, lo, hi int) {
		t.Helper()
		s, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
		if err != nil {
			t.Fatal(err)
		}
		for j := lo; j < hi; j++ {
			b.SetCurrentKey(key(j))
			s.Update(int64(i*n + j))
		}
	}
	// check reads keys [0, 2n) of b; want returns a key's value (ok false:
	// none).
	check := func(what string, b *Backend, want func(j int) (int64, bool)) {
		t.Helper()
		s, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 2 * n {
			b.SetCurrentKey(key(j))
			v, ok := s.Value()
			if w, wok := want(j); v != w || ok != wok {
				t.Fatalf("%s, key %d: %d, %v; want %d, %v", what, j, v, ok, w, wok)
			}
		}
	}
	b0, err := New(opts("b0"), full)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := New(opts("b1"), full)
	if err != nil {
		t.Fatal(err)
	}
	write(b0, 0, 0, n)
	write(b1, 1, n, 2*n)
	// Checkpoints commit and flush: the reads below come from sstables.
	for i, b := range []*Backend{b0, b1} {
		if _, err := b.Checkpoint(filepath.Join(root, fmt.Sprint("chk-", i))); err != nil {
			t.Fatal(err)
		}
	}
	b2, err := OpenFromCheckpoint(opts("b2"), filepath.Join(root, "chk-0"), full)
	if err != nil {
		t.Fatal(err)
	}
	if err := MergeInto(b2, []string{filepath.Join(root, "chk-1")}); err != nil {
		t.Fatal(err)
	}
	wantRefs(t, c, 4, "three open backends")
	write(b0, 2, 0, n/2) // b0 changes after its checkpoint; b2 does not see it
	check("b0", b0, func(j int) (int64, bool) {
		switch {
		case j < n/2:
			return int64(2*n + j), true
		case j < n:
			return int64(j), true
		}
		return 0, false
	})
	check("b1", b1, func(j int) (int64, bool) {
		if j < n {
			return 0, false
		}
		return int64(n + j), true
	})
	check("b2 (b0's checkpoint merged with b1's)", b2, func(j int) (int64, bool) {
		if j < n {
			return int64(j), true
		}
		return int64(n + j), true
	})
	if m := c.Metrics(); m.Hits+m.Misses == 0 || m.Size == 0 {
		t.Fatalf("shared cache metrics %+v: the backends did not use it", m)
	}
	wantRefs(t, c, 4, "three open backends after reads")
	for i, b := range []*Backend{b0, b1, b2} {
		if err := b.Close(); err != nil {
			t.Fatalf("closing backend %d: %v", i, err)
		}
		wantRefs(t, c, int64(3-i), fmt.Sprintf("%d backends closed", i+1))
	}
	c.Unref() // frees the cache; panics if the count went below zero
	wantRefs(t, c, 0, "the caller's reference released")
}

// wantRefs checks the reference count of a Pebble cache. Pebble does not
// export it: it is read with reflection from the field refs (an
// atomic.Int64) of pebble/internal/cache.Cache.
func wantRefs(t *testing.T, c *pebble.Cache, want int64, when string) {
	t.Helper()
	f := reflect.ValueOf(c).Elem().FieldByName("refs")
	if !f.IsValid() || !f.FieldByName("v").IsValid() {
		t.Fatalf("pebble's cache has no reference count field refs.v; update wantRefs for this Pebble version")
	}
	if got := f.FieldByName("v").Int(); got != want {
		t.Fatalf("%s: the shared cache has %d references, want %d", when, got, want)
	}
}
