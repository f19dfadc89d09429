package pebblestate_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

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

// BenchmarkIncrementalCheckpoint builds ~100 MB of keyed state (1M keys,
// 100-byte values), takes a checkpoint, then repeatedly updates 1% of the
// keys and checkpoints again. It reports the checkpoint duration (p50, p99)
// and new_sst_bytes: the bytes of sstables in a checkpoint that the previous
// one did not hold, which is what an incremental upload sends, and its
// ratio to the bytes of state changed (keys and values).
func BenchmarkIncrementalCheckpoint(b *testing.B) {
	const (
		n       = 1_000_000
		valSize = 100
		rounds  = 30
	)
	root := b.TempDir()
	keys, kgs := benchKeys(n)
	be, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db"), DeleteOnClose: true}, full)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	s, err := statebackend.GetValueState(be, "v", statebackend.BytesCodec)
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, valSize)
	put := func(i int, gen uint64) {
		for j := 0; j+8 <= valSize; j += 8 {
			binary.LittleEndian.PutUint64(val[j:], (uint64(i)*31+uint64(j))*gen*0x9e3779b97f4a7c15)
		}
		be.SetCurrentKey(keys[i], kgs[i])
		s.Update(val)
	}
	for i := range n {
		put(i, 1)
	}
	ckpt := 0
	take := func() ([]pebblestate.SSTFile, time.Duration) {
		ckpt++
		start := time.Now()
		files, err := be.Checkpoint(filepath.Join(root, fmt.Sprint("chk-", ckpt)))
		if err != nil {
			b.Fatal(err)
		}
		return files, time.Since(start)
	}
	prev, full := take()
	var total int64
	for _, f := range prev {
		total += f.Size
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var durs []time.Duration
		var newBytes, changedBytes int64
		for r := range rounds {
			for i := r; i < n; i += 100 {
				put(i, uint64(2+ckpt))
				changedBytes += int64(len(keys[i]) + valSize)
			}
			files, d := take()
			durs = append(durs, d)
			have := make(map[string]bool)
			for _, f := range prev {
				have[f.Name+f.SHA256] = true
			}
			for _, f := range files {
				if !have[f.Name+f.SHA256] {
					newBytes += f.Size // new sstables and the per-checkpoint files
				}
			}
			prev = files
		}
		slices.Sort(durs)
		b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(durs[len(durs)-1].Microseconds())/1000, "p99_ms")
		b.ReportMetric(float64(newBytes)/rounds, "new_bytes/ckpt")
		b.ReportMetric(float64(newBytes)/float64(changedBytes), "incremental_upload_ratio")
	}
	b.ReportMetric(float64(total)/1e6, "state_MB")
	b.ReportMetric(float64(full.Milliseconds()), "first_ckpt_ms")
}
