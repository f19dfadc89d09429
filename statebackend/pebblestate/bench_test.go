package pebblestate_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// benchKeys returns n 8-byte keys and their key groups (as the heap
// backend's benchmark does).
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
// its value and write it back incremented, visiting the keys in a scrambled
// order.
func BenchmarkValueStateGetUpdate(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, backend := range []string{"heap", "pebble"} {
			b.Run(fmt.Sprintf("keys=%d/%s", n, backend), func(b *testing.B) {
				keys, kgs := benchKeys(n)
				var be statebackend.Backend
				if backend == "heap" {
					be = heap.New(full)
				} else {
					p, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(b.TempDir(), "db"), DeleteOnClose: true}, full)
					if err != nil {
						b.Fatal(err)
					}
					be = p
				}
				defer be.Close()
				s, err := statebackend.GetValueState(be, "count", statebackend.Int64Codec)
				if err != nil {
					b.Fatal(err)
				}
				for i := range keys {
					be.SetCurrentKey(keys[i], kgs[i])
					s.Update(1 << 20)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k := (i * 7919) % n
					be.SetCurrentKey(keys[k], kgs[k])
					v, _ := s.Value()
					s.Update(v + 1)
				}
			})
		}
	}
}
