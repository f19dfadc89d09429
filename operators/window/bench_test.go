package window

import (
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/stream"
)

// discard is a Collector that drops everything.
type discard struct{}

func (discard) Collect(b *stream.Batch) { b.Release() }
func (discard) EmitWatermark(int64)     {}

// BenchmarkTumblingCountSum feeds a keyed 10s tumbling window computing
// count and sum 1024-row batches over 10,000 keys, about 10 rows per key and
// window, with a watermark after every batch. Copying each batch out of the
// pre-generated data is included (about 1ns/row).
func BenchmarkTumblingCountSum(b *testing.B) {
	schema := stream.MustSchema(
		stream.Field{Name: "key", Type: stream.TypeInt64},
		stream.Field{Name: "value", Type: stream.TypeInt64},
	)
	const (
		batchRows = stream.DefaultBatchSize
		keys      = 10_000
		nBatches  = 256
		msPerRow  = 0.1 // 10 rows per millisecond
	)
	rng := rand.New(rand.NewPCG(1, 2))
	keyCol := make([]int64, batchRows*nBatches)
	valCol := make([]int64, batchRows*nBatches)
	for i := range keyCol {
		keyCol[i] = rng.Int64N(keys)
		valCol[i] = rng.Int64N(1000)
	}
	cfg := []byte(`{"size": "10s", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "value", "as": "total"}]}`)
	w, err := NewTumblingWindow(cfg)
	if err != nil {
		b.Fatal(err)
	}
	openOp(b, w, func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, pc) }, cfg, schema, []string{"key"})
	var out discard
	row := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := (i % nBatches) * batchRows
		bt := stream.NewBatch(schema, batchRows)
		bt.Cols[0].Ints = append(bt.Cols[0].Ints, keyCol[off:off+batchRows]...)
		bt.Cols[1].Ints = append(bt.Cols[1].Ints, valCol[off:off+batchRows]...)
		for j := 0; j < batchRows; j++ {
			bt.Times = append(bt.Times, int64(float64(row+int64(j))*msPerRow))
		}
		bt.SetLen(batchRows)
		row += batchRows
		if err := w.ProcessBatch(0, bt, out); err != nil {
			b.Fatal(err)
		}
		if err := w.ProcessWatermark(int64(float64(row)*msPerRow)-1, out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchRows), "ns/row")
}
