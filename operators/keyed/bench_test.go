package keyed

import (
	"fmt"
	"testing"
	"time"

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

func benchBatches(n int) []*stream.Batch {
	var out []*stream.Batch
	for i := 0; i < n; i += 1024 {
		b := stream.NewBatch(benchSchema, 1024)
		for j := range 1024 {
			x := uint64(i+j) * 0x9e3779b97f4a7c15
			b.AppendRow(int64(x%10000), fmt.Sprintf("b%d", x%5000), int64(x%997))
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
			op, _ := NewRunningCount(nil)
			op.Open(b.Context(), &stream.OperatorContext{InputSchemas: []*stream.Schema{benchSchema}, InputKeys: [][]string{{key}}, MaxParallelism: 128})
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

// BenchmarkKeyedSnapshot measures a snapshot of 100000 int keys.
func BenchmarkKeyedSnapshot(b *testing.B) {
	s := newKeyState(benchSchema, []int{0}, 128)
	in := stream.NewBatch(benchSchema, 100000)
	for i := range 100000 {
		in.AppendRow(int64(i), "", int64(0))
	}
	s.lookup(in)
	for b.Loop() {
		c := &stream.SnapshotContext{KeyGroups: stream.KeyGroupRange{Start: 0, End: 127}}
		if err := s.snapshot(c, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(100000)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkRunningCountHeapVsPebble measures running_count (10000 int keys)
// on the heap and on the Pebble state backend, and reports
// pebble_vs_heap = Pebble throughput ÷ heap throughput.
func BenchmarkRunningCountHeapVsPebble(b *testing.B) {
	data := benchBatches(64 << 10)
	rate := func(backend string, rows int) float64 {
		op, err := NewRunningCount(nil)
		if err != nil {
			b.Fatal(err)
		}
		octx := &stream.OperatorContext{InputSchemas: []*stream.Schema{benchSchema}, InputKeys: [][]string{{"auction"}},
			MaxParallelism: 128, StateBackend: backend, LocalStateDir: b.TempDir()}
		if err := op.Open(b.Context(), octx); err != nil {
			b.Fatal(err)
		}
		defer op.Close()
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
	var heapRate, pebbleRate float64
	for b.Loop() {
		heapRate = rate(stream.StateBackendHeap, 1<<20)
		pebbleRate = rate(stream.StateBackendPebble, 1<<20)
	}
	b.ReportMetric(heapRate, "heap_records/s")
	b.ReportMetric(pebbleRate, "pebble_records/s")
	b.ReportMetric(pebbleRate/heapRate, "pebble_vs_heap")
	fmt.Printf("pebble_vs_heap=%.3f (heap %.0f records/s, pebble %.0f records/s)\n", pebbleRate/heapRate, heapRate, pebbleRate)
}
