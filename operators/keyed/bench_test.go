package keyed

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

var benchSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "bidder", Type: stream.TypeString},
	stream.Field{Name: "price", Type: stream.TypeInt64},
)

type discard struct{}

func (discard) Collect(b *stream.Batch) { b.Release() }
func (discard) EmitWatermark(int64)     {}

func benchBatches(n int) []*stream.Batch { return benchBatchesKeys(n, 10000) }

// benchBatchesKeys returns n rows whose auction keys take keys distinct
// values, in a scrambled order.
func benchBatchesKeys(n, keys int) []*stream.Batch {
	var out []*stream.Batch
	for i := 0; i < n; i += 1024 {
		b := stream.NewBatch(benchSchema, 1024)
		for j := range 1024 {
			x := uint64(i+j) * 0x9e3779b97f4a7c15
			b.AppendRow(int64(x%uint64(keys)), fmt.Sprintf("b%d", x%5000), int64(x%997))
		}
		out = append(out, b)
	}
	return out
}

// BenchmarkRunningCount measures records per second through running_count
// (10000 int keys or 5000 string keys, 1024-row batches).
func BenchmarkRunningCount(b *testing.B) {
	for _, key := range []string{"auction", "bidder"} {
		b.Run(key, func(b *testing.B) {
			data := benchBatches(64 << 10)
			h := openBench(b, &stream.OperatorContext{InputSchemas: []*stream.Schema{benchSchema}, InputKeys: [][]string{{key}}, MaxParallelism: 128})
			op := h.Op
			b.ResetTimer()
			rows := 0
			for i := 0; b.Loop(); i++ {
				src := data[i%len(data)]
				in := stream.NewBatch(benchSchema, src.Len())
				for j := range src.Cols {
					copyColumn(&in.Cols[j], &src.Cols[j], src.Len())
				}
				in.SetLen(src.Len())
				if err := op.ProcessBatch(0, in, discard{}); err != nil {
					b.Fatal(err)
				}
				rows += src.Len()
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// openBench opens running_count for octx on the task runtime's keyed state.
func openBench(b *testing.B, octx *stream.OperatorContext) *dataflowtest.Harness {
	op, err := NewRunningCount(nil)
	if err != nil {
		b.Fatal(err)
	}
	h, err := dataflowtest.Open(b.Context(), op, octx, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(true) })
	return h
}

// BenchmarkKeyedSnapshot measures a full snapshot of running_count's state
// with 100000 int keys on the heap backend.
func BenchmarkKeyedSnapshot(b *testing.B) {
	h := openBench(b, &stream.OperatorContext{InputSchemas: []*stream.Schema{benchSchema}, InputKeys: [][]string{{"auction"}}, MaxParallelism: 128})
	in := stream.NewBatch(benchSchema, 100000)
	for i := range 100000 {
		in.AppendRow(int64(i), "", int64(0))
	}
	if err := h.Op.ProcessBatch(0, in, discard{}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := h.Snapshot(1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(100000)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkRunningCountHeapVsPebble measures running_count on the heap and
// on the Pebble state backend (default caches: 64 MiB block cache, 64 MiB
// write-back value cache) and reports pebble_vs_heap = Pebble throughput ÷
// heap throughput, with 10,000 int keys and, as pebble_vs_heap_1m_keys,
// with 1,000,000 keys (2 million rows). The value cache holds 1 M such
// keys, so neither reads Pebble but for the write-backs of eviction;
// pebble_vs_heap_1m_keys_small_cache gives the Pebble backend 16 MiB of
// value cache and 16 MiB of block cache (--state-cache-bytes 32 MiB), so
// that most second updates of a key miss the value cache and read Pebble.
func BenchmarkRunningCountHeapVsPebble(b *testing.B) {
	rate := func(data []*stream.Batch, backend string, rows int, cacheBytes int64) float64 {
		octx := &stream.OperatorContext{InputSchemas: []*stream.Schema{benchSchema}, InputKeys: [][]string{{"auction"}},
			MaxParallelism: 128, StateBackend: backend, LocalStateDir: b.TempDir(), StateCacheBytes: cacheBytes}
		h := openBench(b, octx)
		defer h.Close(true)
		op := h.Op
		start := time.Now()
		for done, i := 0, 0; done < rows; i++ {
			src := data[i%len(data)]
			in := stream.NewBatch(benchSchema, src.Len())
			for j := range src.Cols {
				copyColumn(&in.Cols[j], &src.Cols[j], src.Len())
			}
			in.SetLen(src.Len())
			if err := op.ProcessBatch(0, in, discard{}); err != nil {
				b.Fatal(err)
			}
			done += src.Len()
		}
		return float64(rows) / time.Since(start).Seconds()
	}
	small, large := benchBatches(64<<10), benchBatchesKeys(2<<20, 1_000_000)
	var heapRate, pebbleRate, heapLarge, pebbleLarge, pebbleSmallCache float64
	for b.Loop() {
		heapRate = rate(small, stream.StateBackendHeap, 1<<20, 0)
		pebbleRate = rate(small, stream.StateBackendPebble, 1<<20, 0)
		heapLarge = rate(large, stream.StateBackendHeap, 2<<20, 0)
		pebbleLarge = rate(large, stream.StateBackendPebble, 2<<20, 0)
		pebbleSmallCache = rate(large, stream.StateBackendPebble, 2<<20, 32<<20)
	}
	b.ReportMetric(heapRate, "heap_records/s")
	b.ReportMetric(pebbleRate, "pebble_records/s")
	b.ReportMetric(pebbleRate/heapRate, "pebble_vs_heap")
	b.ReportMetric(pebbleLarge/heapLarge, "pebble_vs_heap_1m_keys")
	fmt.Printf("pebble_vs_heap=%.3f\n", pebbleRate/heapRate)
	fmt.Printf("pebble_vs_heap_heap_records_per_sec=%.0f\npebble_vs_heap_pebble_records_per_sec=%.0f\n", heapRate, pebbleRate)
	fmt.Printf("pebble_vs_heap_1m_keys=%.3f\n", pebbleLarge/heapLarge)
	fmt.Printf("pebble_vs_heap_1m_keys_heap_records_per_sec=%.0f\npebble_vs_heap_1m_keys_pebble_records_per_sec=%.0f\n", heapLarge, pebbleLarge)
	fmt.Printf("pebble_vs_heap_1m_keys_small_cache=%.3f\n", pebbleSmallCache/heapLarge)
}
