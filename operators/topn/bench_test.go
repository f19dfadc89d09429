package topn_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/operators/topn"
	"github.com/weirstream/weir/stream"
)

var benchSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "bidder", Type: stream.TypeString},
	stream.Field{Name: "price", Type: stream.TypeInt64},
	stream.Field{Name: "wend", Type: stream.TypeTimestamp},
)

type discard struct{}

func (discard) Collect(b *stream.Batch) { b.Release() }
func (discard) EmitWatermark(int64)     {}

// benchStep is a batch, or (batch nil) a watermark.
type benchStep struct {
	b  *stream.Batch
	wm int64
}

// bidSteps returns rows rows in 1024-row batches, like Nexmark bids: event
// time 10 rows per ms, auction one of keys (scrambled), price 0-9999; a
// watermark 1 s behind follows every batch.
func bidSteps(rows, keys int) []benchStep {
	var out []benchStep
	for i := 0; i < rows; i += 1024 {
		b := stream.NewBatch(benchSchema, 1024)
		for j := range 1024 {
			x := uint64(i+j) * 0x9e3779b97f4a7c15
			b.AppendRow(int64(x%uint64(keys)), fmt.Sprintf("b%d", x%5000), int64(x>>20%10000), int64(0))
			b.Times = append(b.Times, int64(i+j)/10)
		}
		out = append(out, benchStep{b: b}, benchStep{wm: int64(i+1024)/10 - 1000})
	}
	return out
}

// q5Steps returns what q5's window_max (keyed by window_end) receives from
// the sliding window counts: per 2 s window end, the bid count of each of
// auctions auctions (the price column holds the count), all with event
// time window_end - 1, in 1024-row batches, then a watermark at
// window_end - 1.
func q5Steps(rows, auctions int) []benchStep {
	var out []benchStep
	for i, end := 0, int64(2000); i < rows; end += 2000 {
		for a := 0; a < auctions && i < rows; {
			b := stream.NewBatch(benchSchema, 1024)
			for ; b.Len() < 1024 && a < auctions && i < rows; a, i = a+1, i+1 {
				x := uint64(i) * 0x9e3779b97f4a7c15
				b.AppendRow(int64(a), "", int64(1+x>>40%50), end)
				b.Times = append(b.Times, end-1)
			}
			out = append(out, benchStep{b: b})
		}
		out = append(out, benchStep{wm: end - 1})
	}
	return out
}

type benchCase struct {
	name   string
	op     string
	config string
	keys   []string
	steps  func() []benchStep
}

var benchCases = []benchCase{
	// q5's second stage: few keys, one pane per key, many ties.
	{"q5_max", topn.TypeMax, `{"size": "2s", "field": "price", "windowBounds": false}`, []string{"wend"},
		func() []benchStep { return q5Steps(256<<10, 5000) }},
	// Top 3 bids per auction in tumbling 10 s windows: every row needs its
	// key's state.
	{"top3_10k_keys", topn.TypeTopN, `{"size": "10s", "field": "price", "n": 3}`, []string{"auction"},
		func() []benchStep { return bidSteps(256<<10, 10000) }},
	// The same in sliding windows (10 s every 2 s).
	{"top3_sliding", topn.TypeTopN, `{"size": "10s", "slide": "2s", "field": "price", "n": 3}`, []string{"auction"},
		func() []benchStep { return bidSteps(256<<10, 10000) }},
	// q7's first stage: the highest bids of the subtask, no key.
	{"max_nokey", topn.TypeMax, `{"size": "10s", "field": "price"}`, nil,
		func() []benchStep { return bidSteps(256<<10, 10000) }},
}

// cloneBatch copies b, which the operator will own. (The columns of the
// benchmark batches have no nulls.)
func cloneBatch(b *stream.Batch) *stream.Batch {
	c := stream.NewBatch(b.Schema, b.Len())
	for j := range b.Cols {
		src, dst := &b.Cols[j], &c.Cols[j]
		dst.Ints = append(dst.Ints, src.Ints...)
		dst.Floats = append(dst.Floats, src.Floats...)
		dst.Strs = append(dst.Strs, src.Strs...)
		dst.Bools = append(dst.Bools, src.Bools...)
	}
	c.Times = append(c.Times, b.Times...)
	c.SetLen(b.Len())
	return c
}

// runBench opens the operator of bc on backend and runs steps through it,
// returning the rows processed, the time taken and the CPU seconds this
// process used meanwhile (batch copies excluded).
func runBench(b *testing.B, bc benchCase, backend string, steps []benchStep, copies []*stream.Batch) (int, time.Duration, float64) {
	op, err := topn.New(bc.op, []byte(bc.config))
	if err != nil {
		b.Fatal(err)
	}
	var keys [][]string
	if bc.keys != nil {
		keys = [][]string{bc.keys}
	}
	octx := &stream.OperatorContext{OperatorUID: "bench", InputSchemas: []*stream.Schema{benchSchema}, InputKeys: keys,
		MaxParallelism: 128, StateBackend: backend, LocalStateDir: b.TempDir()}
	h, err := dataflowtest.Open(b.Context(), op, octx, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(true)
	rows := 0
	start, cpu := time.Now(), cpuSeconds()
	for i, s := range steps {
		if s.b == nil {
			if err := h.Op.ProcessWatermark(s.wm, discard{}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		rows += s.b.Len()
		if err := h.Op.ProcessBatch(0, copies[i], discard{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.Op.ProcessWatermark(stream.MaxWatermark, discard{}); err != nil {
		b.Fatal(err)
	}
	return rows, time.Since(start), cpuSeconds() - cpu
}

func copiesOf(steps []benchStep) []*stream.Batch {
	out := make([]*stream.Batch, len(steps))
	for i, s := range steps {
		if s.b != nil {
			out[i] = cloneBatch(s.b)
		}
	}
	return out
}

// BenchmarkTopN measures records per second (and per CPU second of the
// process, which a busy machine disturbs less) through window_topn and
// window_max on the heap state backend: q5's window_max stage, top 3 per
// key in tumbling and in sliding windows, and a window_max without key.
// Each iteration runs the whole input and the final watermark.
func BenchmarkTopN(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			steps := bc.steps()
			var rows int
			var el time.Duration
			var cpu float64
			for b.Loop() {
				b.StopTimer()
				copies := copiesOf(steps)
				b.StartTimer()
				n, d, c := runBench(b, bc, stream.StateBackendHeap, steps, copies)
				rows += n
				el += d
				cpu += c
			}
			b.ReportMetric(float64(rows)/el.Seconds(), "records/s")
			b.ReportMetric(float64(rows)/cpu, "records/cpu-s")
		})
	}
}

// BenchmarkTopNHeapVsPebble runs the keyed cases of BenchmarkTopN on the
// heap and on the Pebble state backend (default caches) and reports
// pebble_vs_heap = Pebble throughput ÷ heap throughput, per CPU second.
func BenchmarkTopNHeapVsPebble(b *testing.B) {
	for _, bc := range benchCases {
		if bc.keys == nil {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			steps := bc.steps()
			var heap, pebble float64
			for b.Loop() {
				for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
					b.StopTimer()
					copies := copiesOf(steps)
					b.StartTimer()
					n, _, c := runBench(b, bc, backend, steps, copies)
					r := float64(n) / c
					if backend == stream.StateBackendHeap {
						heap = r
					} else {
						pebble = r
					}
				}
			}
			b.ReportMetric(heap, "heap_records/cpu-s")
			b.ReportMetric(pebble, "pebble_records/cpu-s")
			b.ReportMetric(pebble/heap, "pebble_vs_heap")
		})
	}
}
