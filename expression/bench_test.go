package expression

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/stream"
)

var bidSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "bidder", Type: stream.TypeInt64},
	stream.Field{Name: "price", Type: stream.TypeInt64},
	stream.Field{Name: "channel", Type: stream.TypeString},
	stream.Field{Name: "url", Type: stream.TypeString},
	stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
	stream.Field{Name: "extra", Type: stream.TypeString},
)

// bidBatch returns n Nexmark-like bids.
func bidBatch(n int) *stream.Batch {
	r := rand.New(rand.NewPCG(7, 8))
	channels := []string{"apple", "google", "facebook", "baidu"}
	b := stream.NewBatch(bidSchema, n)
	for i := range n {
		b.AppendRow(
			int64(1000+r.IntN(10000)), int64(2000+r.IntN(100000)), int64(r.IntN(10000)),
			channels[r.IntN(len(channels))], "https://www.nexmark.com/item.htm?query=1",
			int64(1_700_000_000_000+i), "",
		)
	}
	return b
}

const (
	benchMap    = "price * 0.908"
	benchFilter = "auction % 123 == 0 || price > 5000"
)

// BenchmarkFilterMap measures a q1-like currency conversion plus a filter
// over 1024-row batches: the vectorized kernels, the same expressions run
// row by row by expr-lang (the fallback path), and a hand-written Go loop
// as the baseline.
func BenchmarkFilterMap(b *testing.B) {
	const rows = stream.DefaultBatchSize
	batch := bidBatch(rows)
	for _, mode := range []string{"vectorized", "fallback"} {
		b.Run(mode, func(b *testing.B) {
			m, err := compile(benchMap, bidSchema, mode == "fallback")
			if err != nil {
				b.Fatal(err)
			}
			f, err := compile(benchFilter, bidSchema, mode == "fallback")
			if err != nil {
				b.Fatal(err)
			}
			var out stream.Column
			var sel []int
			kept := 0
			for b.Loop() {
				if err := m.Eval(batch, &out); err != nil {
					b.Fatal(err)
				}
				if sel, err = f.Select(batch, sel); err != nil {
					b.Fatal(err)
				}
				kept += len(sel)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
			_ = kept
		})
	}
	b.Run("baseline", func(b *testing.B) {
		auction, price := batch.Cols[0].Ints, batch.Cols[2].Ints
		out := make([]float64, rows)
		sel := make([]int, 0, rows)
		for b.Loop() {
			sel = sel[:0]
			for i := range rows {
				out[i] = float64(price[i]) * 0.908
				if auction[i]%123 == 0 || price[i] > 5000 {
					sel = append(sel, i)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
}

// BenchmarkKernels measures single expressions, to see where time goes.
func BenchmarkKernels(b *testing.B) {
	batch := bidBatch(stream.DefaultBatchSize)
	for _, src := range []string{"price * 0.908", "auction % 123 == 0", "price > 5000", benchFilter, "channel == 'apple'", "channel in ['apple', 'google']", "upper(channel)", "channel + '/' + url"} {
		b.Run(src, func(b *testing.B) {
			e, err := Compile(src, bidSchema)
			if err != nil {
				b.Fatal(err)
			}
			var out stream.Column
			for b.Loop() {
				if err := e.Eval(batch, &out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch.Len()), "ns/row")
		})
	}
}

func ExampleCompile() {
	e, err := Compile("price > 5000 ? 'high' : 'low'", bidSchema)
	if err != nil {
		panic(err)
	}
	b := stream.NewBatch(bidSchema, 2)
	b.AppendRow(int64(1), int64(2), int64(7000), "apple", "", int64(0), "")
	b.AppendRow(int64(1), int64(2), int64(10), "apple", "", int64(0), "")
	var out stream.Column
	if err := e.Eval(b, &out); err != nil {
		panic(err)
	}
	fmt.Println(e.Type(), out.Strs)
	// Output: string [high low]
}
