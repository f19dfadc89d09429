package pebblestate

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

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
		if limit := 2*b.cache.live + 64 + 1; len(b.cache.dirty) > limit {
			t.Fatalf("after %d keys %d entries wait for the flush, %d cached: the list grows with the evicted ones", i+1, len(b.cache.dirty), b.cache.live)
		}
	}
	for i := range b.cache.slots {
		if e := b.cache.at(i); e.flags&entLive == 0 && (e.p != nil || b.cache.vals[i/cachePageEntries] != nil && b.cache.decoded(i) != nil) {
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

// The value cache's accounting covers what its entries really take on the
// Go heap: filled with n entries of a running count's shape (16-byte state
// keys, int64 values of 8 encoded bytes, not held decoded), the
// cache's used bytes grow by as much as the heap (less 2 %: the race
// detector's runtime allocates a little more while the test runs) and by
// at most 15 % more. The cache never evicts here (its budget is far above), so
// nothing reaches Pebble and the heap's growth is the cache's.
func TestValueCacheAccountsItsMemory(t *testing.T) {
	// Not parallel: the heap's growth must be this test's alone.
	for _, n := range []int{60_000, 150_000} {
		measured, accounted := cacheBytesPerEntry(t, n)
		t.Logf("%d entries: %.1f bytes per entry on the heap, %.1f accounted", n, measured, accounted)
		if accounted < 0.98*measured || accounted > 1.15*measured {
			t.Errorf("%d entries: the cache accounts %.1f bytes per entry, the heap grew by %.1f: want between 0.98 and 1.15 times the growth",
				n, accounted, measured)
		}
	}
}

// cacheBytesPerEntry fills a new backend's value cache with n int64
// values and returns the heap's growth and the cache's accounted growth,
// per entry.
func cacheBytesPerEntry(t *testing.T, n int) (measured, accounted float64) {
	kgs := stream.KeyGroupRange{Start: 0, End: 127}
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: 1 << 30, KeyFilterBytes: -1, DeleteOnClose: true}, kgs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := statebackend.GetValueState(b, "count", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	// 12-byte keys: with key group, table id and length, 16-byte state keys.
	keys := make([]byte, 12*n)
	for i := range n {
		binary.BigEndian.PutUint64(keys[12*i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	used := b.cache.used
	for i := range n {
		b.SetCurrentKey(keys[12*i:12*i+12], i%128)
		s.Update(1<<50 + int64(i)) // 8 bytes as a varint
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := b.tables["count"]; got == nil {
		t.Fatal("no table")
	}
	for i := 0; i < n; i += 101 { // the values are all there
		b.SetCurrentKey(keys[12*i:12*i+12], i%128)
		if v, ok := s.Value(); !ok || v != 1<<50+int64(i) {
			t.Fatalf("key %d reads %d, %v", i, v, ok)
		}
	}
	measured = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	return measured, float64(b.cache.used-used) / float64(n)
}

// A page of entries and a page of decoded values each fit their size
// class with the allocator's header.
func TestCachePagesFitTheirSizeClass(t *testing.T) {
	if n := int64(cachePageEntries)*int64(unsafe.Sizeof(cacheEntry{})) + 8; n > 12288 {
		t.Errorf("a page of entries takes %d bytes with its header, more than its 12288-byte size class", n)
	}
	if n := int64(cachePageEntries)*int64(unsafe.Sizeof(any(nil))) + 8; n > cacheValsBytes {
		t.Errorf("a page of decoded values takes %d bytes with its header, more than its %d-byte size class", n, cacheValsBytes)
	}
}

// Keys and allocations of 64 KiB or more, too large for an entry's 16-bit
// fields, are held apart (bigKV): they read back, grow, survive a
// write-back and count their size.
func TestValueCacheBigEntries(t *testing.T) {
	t.Parallel()
	kgs := stream.KeyGroupRange{Start: 0, End: 127}
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), DeleteOnClose: true}, kgs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v, err := statebackend.GetValueState(b, "v", statebackend.BytesCodec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	bigKey := string(fill(70_000, 'k'))
	check := func(when string, want []byte) {
		t.Helper()
		if got, ok := v.Value(); !ok || !bytes.Equal(got, want) {
			t.Fatalf("%s: value state reads %d bytes (%v), want %d", when, len(got), ok, len(want))
		}
		if got, ok := m.Get(bigKey); !ok || got != int64(len(want)) {
			t.Fatalf("%s: map state under a 70,000-byte user key reads %d (%v), want %d", when, got, ok, len(want))
		}
	}
	b.SetCurrentKey([]byte("a"), 1)
	for i, n := range []int{10, 100_000, 200_000, 30} { // small, big, bigger, big again
		want := fill(n, byte('a'+i))
		v.Update(want)
		m.Put(bigKey, int64(n))
		check("cached", want)
		if e := b.cache.lookup(b.tables["v"].key(nil)); e == nil {
			t.Fatalf("a %d-byte value is not cached", n)
		} else if n >= 100_000 && (e.size != 0 || e.bytes() < int64(n)) {
			t.Fatalf("a %d-byte value is held in %+v, counting %d bytes", n, e, e.bytes())
		}
		b.dropCache()
		check("read back from Pebble", want)
	}
}
