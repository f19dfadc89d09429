package join_test

import (
	"fmt"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/operators/join"
	"github.com/weirstream/weir/stream"
)

// Nexmark-like inputs for the benchmarks.
var (
	benchPersons = stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "name", Type: stream.TypeString},
		stream.Field{Name: "city", Type: stream.TypeString},
		stream.Field{Name: "state", Type: stream.TypeString})
	benchAuctions = stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "seller", Type: stream.TypeInt64},
		stream.Field{Name: "category", Type: stream.TypeInt64},
		stream.Field{Name: "itemName", Type: stream.TypeString},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp})
	benchAuctionTimes = stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "category", Type: stream.TypeInt64},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp})
	benchBids = stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "price", Type: stream.TypeInt64},
		stream.Field{Name: "bidTime", Type: stream.TypeTimestamp})
)

type discard struct{}

func (discard) Collect(b *stream.Batch) { b.Release() }
func (discard) EmitWatermark(int64)     {}

// benchStep is one batch (on input) or, with b nil, a watermark.
type benchStep struct {
	input int
	b     *stream.Batch
	wm    int64
}

func cloneBatch(b *stream.Batch) *stream.Batch {
	c := stream.NewBatch(b.Schema, b.Len())
	for i := range b.Len() {
		c.AppendRow(b.Row(i)...)
	}
	c.Times = append(c.Times, b.Times...)
	return c
}

func scramble(i int) uint64 { return uint64(i) * 0x9e3779b97f4a7c15 >> 16 }

// streamJoinSteps is Nexmark q3's join: 10,240 persons (unique ids) and
// 51,200 auctions whose sellers are spread over 12,000 ids, in 1024-row
// batches, five auction batches after each person batch.
func streamJoinSteps() (steps []benchStep, rows int) {
	const batch = 1024
	p, a := 0, 0
	for range 10 {
		b := stream.NewBatch(benchPersons, batch)
		for range batch {
			b.AppendRow(int64(p), fmt.Sprintf("person %d", p), "Portland", "OR")
			b.Times = append(b.Times, int64(p))
			p++
		}
		steps = append(steps, benchStep{input: 0, b: b})
		for range 5 {
			b := stream.NewBatch(benchAuctions, batch)
			for range batch {
				b.AppendRow(int64(a), int64(scramble(a)%12000), int64(10), fmt.Sprintf("item %d", a), int64(a))
				b.Times = append(b.Times, int64(a))
				a++
			}
			steps = append(steps, benchStep{input: 1, b: b})
		}
	}
	return steps, p + a
}

// windowJoinSteps is Nexmark q4's join: 16,384 auctions, one every 5 ms,
// and ten bids per auction on recent auctions, in 1024-row batches, with a
// watermark 1 s behind after every ten bid batches; 10 s windows.
func windowJoinSteps() (steps []benchStep, rows int) {
	const batch = 1024
	for k := range 16 {
		a := stream.NewBatch(benchAuctionTimes, batch)
		for j := range batch {
			id := k*batch + j
			a.AppendRow(int64(id), int64(id%10), int64(id*5))
			a.Times = append(a.Times, int64(id*5))
		}
		steps = append(steps, benchStep{input: 0, b: a})
		for m := range 10 {
			b := stream.NewBatch(benchBids, batch)
			for j := range batch {
				n := (k*10+m)*batch + j
				id := max(0, n/10-int(scramble(n)%50))
				ts := int64(n/10*5 + int(scramble(n)%5))
				b.AppendRow(int64(id), int64(scramble(n)%1000), ts)
				b.Times = append(b.Times, ts)
			}
			steps = append(steps, benchStep{input: 1, b: b})
		}
		steps = append(steps, benchStep{b: nil, wm: int64((k+1)*batch*5 - 1000)})
		rows += 11 * batch
	}
	return append(steps, benchStep{wm: stream.MaxWatermark}), rows
}

// benchJoin opens a fresh operator per iteration on backend and feeds it
// steps (setup not timed), reporting records per second.
func benchJoin(b *testing.B, backend string, newOp func() (stream.Operator, error), in [2]*stream.Schema, keys [2][]string, steps []benchStep, rows int) {
	b.ReportAllocs()
	var fed int
	for b.Loop() {
		b.StopTimer()
		op, err := newOp()
		if err != nil {
			b.Fatal(err)
		}
		octx := &stream.OperatorContext{OperatorUID: "join", Parallelism: 1, MaxParallelism: 128,
			KeyGroups: stream.KeyGroupRange{Start: 0, End: 127}, InputSchemas: in[:], InputKeys: keys[:],
			StateBackend: backend, LocalStateDir: b.TempDir()}
		h, err := dataflowtest.Open(b.Context(), op, octx, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		batches := make([]*stream.Batch, len(steps))
		for i, s := range steps {
			if s.b != nil {
				batches[i] = cloneBatch(s.b)
			}
		}
		b.StartTimer()
		for i, s := range steps {
			if s.b == nil {
				err = h.Op.ProcessWatermark(s.wm, discard{})
			} else {
				err = h.Op.ProcessBatch(s.input, batches[i], discard{})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		h.Close(true)
		b.StartTimer()
		fed += rows
	}
	b.ReportMetric(float64(fed)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkStreamJoin measures stream_join on Nexmark q3's join (see
// streamJoinSteps) on each state backend.
func BenchmarkStreamJoin(b *testing.B) {
	steps, rows := streamJoinSteps()
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		b.Run(backend, func(b *testing.B) {
			benchJoin(b, backend, func() (stream.Operator, error) { return join.NewStreamJoin(nil) },
				[2]*stream.Schema{benchPersons, benchAuctions}, [2][]string{{"id"}, {"seller"}}, steps, rows)
		})
	}
}

// BenchmarkWindowJoin measures window_join on Nexmark q4's join (see
// windowJoinSteps) on each state backend.
func BenchmarkWindowJoin(b *testing.B) {
	steps, rows := windowJoinSteps()
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		b.Run(backend, func(b *testing.B) {
			benchJoin(b, backend, func() (stream.Operator, error) { return join.NewWindowJoin([]byte(`{"size": "10s"}`)) },
				[2]*stream.Schema{benchAuctionTimes, benchBids}, [2][]string{{"id"}, {"auction"}}, steps, rows)
		})
	}
}
