package heap_test

import (
	"encoding/binary"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/stream"
)

var benchRange = stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1}

// benchKeys returns n 8-byte keys and their key groups.
func benchKeys(n int) ([][]byte, []int) {
	keys := make([][]byte, n)
	kgs := make([]int, n)
	for i := range keys {
		keys[i] = binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15)
		kgs[i] = i % stream.DefaultMaxParallelism
	}
	return keys, kgs
}

// BenchmarkValueStateGetUpdate is a keyed count: per op, select a key, read
// its value and write it back incremented, over 100k keys.
func BenchmarkValueStateGetUpdate(b *testing.B) {
	const n = 100_000
	keys, kgs := benchKeys(n)
	be := heap.New(benchRange)
	s, err := statebackend.GetValueState(be, "count", statebackend.Int64Codec)
	if err != nil {
		b.Fatal(err)
	}
	for i := range keys {
		be.SetCurrentKey(keys[i], kgs[i])
		s.Update(1 << 20) // boxing small ints is free; real counts are not small
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % n
		be.SetCurrentKey(keys[k], kgs[k])
		v, _ := s.Value()
		s.Update(v + 1)
	}
}

// BenchmarkSnapshot snapshots 1M entries (8-byte keys, int64 values) in 128
// key groups; MB/s is of chunk bytes written.
func BenchmarkSnapshot(b *testing.B) {
	const n = 1_000_000
	keys, kgs := benchKeys(n)
	be := heap.New(benchRange)
	s, err := statebackend.GetValueState(be, "count", statebackend.Int64Codec)
	if err != nil {
		b.Fatal(err)
	}
	for i := range keys {
		be.SetCurrentKey(keys[i], kgs[i])
		s.Update(int64(i))
	}
	var size int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := &stream.SnapshotContext{KeyGroups: benchRange}
		if err := be.Snapshot(c); err != nil {
			b.Fatal(err)
		}
		if size == 0 {
			for _, cs := range c.State.Keyed {
				for _, ch := range cs {
					size += int64(len(ch))
				}
			}
			b.SetBytes(size)
		}
	}
	b.ReportMetric(float64(size)/n, "B/entry")
}

// BenchmarkRestore restores the snapshot of BenchmarkSnapshot and asks for
// the table (which decodes the values).
func BenchmarkRestore(b *testing.B) {
	const n = 1_000_000
	keys, kgs := benchKeys(n)
	be := heap.New(benchRange)
	s, _ := statebackend.GetValueState(be, "count", statebackend.Int64Codec)
	for i := range keys {
		be.SetCurrentKey(keys[i], kgs[i])
		s.Update(int64(i))
	}
	c := &stream.SnapshotContext{KeyGroups: benchRange}
	if err := be.Snapshot(c); err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, cs := range c.State.Keyed {
		for _, ch := range cs {
			size += int64(len(ch))
		}
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := heap.New(benchRange)
		if err := r.Restore(&stream.RestoreContext{KeyGroups: benchRange, State: &c.State}); err != nil {
			b.Fatal(err)
		}
		if _, err := statebackend.GetValueState(r, "count", statebackend.Int64Codec); err != nil {
			b.Fatal(err)
		}
	}
}
