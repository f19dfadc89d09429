package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/statebackend"
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

// BenchmarkSlidingCheckpointBytes measures what incremental checkpoints of
// a sliding window on Pebble upload against how much of its state changed.
// A keyed 10s/2s sliding window (count and sum) gets WEIR_WINDOW_CK_KEYS
// keys (default 100,000) at 20 rows per millisecond of event time, a
// watermark after every batch, and a checkpoint every second of event time,
// for 60 s. A twin window on the heap gets the same input; after each
// checkpoint its state (per key the slot list, encoded as in a checkpoint)
// is compared with the previous one: the changed bytes are the key and
// value bytes of every key whose value changed or is new, and the key
// bytes of every key that went. The uploaded bytes are those of the Pebble
// window's snapshot as the runtime would upload them (chunks, operator
// state, and every file not uploaded before: a shared file once).
//
//	window_checkpoint_changed_bytes_per_checkpoint   mean changed bytes
//	window_checkpoint_uploaded_bytes_per_checkpoint  mean uploaded bytes
//	window_checkpoint_bytes_per_changed_byte         Σ uploaded ÷ Σ changed
func BenchmarkSlidingCheckpointBytes(b *testing.B) {
	keys := int64(100_000)
	if v := os.Getenv("WEIR_WINDOW_CK_KEYS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("WEIR_WINDOW_CK_KEYS=%q: want a positive number", v)
		}
		keys = n
	}
	schema := stream.MustSchema(
		stream.Field{Name: "key", Type: stream.TypeInt64},
		stream.Field{Name: "value", Type: stream.TypeInt64},
	)
	const (
		rowsPerMs    = 20
		batchRows    = stream.DefaultBatchSize
		checkpointMs = 1000
		durationMs   = 60_000
		batchesPerCk = checkpointMs * rowsPerMs / batchRows
		totalBatches = durationMs * rowsPerMs / batchRows
	)
	cfg := []byte(`{"size": "10s", "slide": "2s", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "value", "as": "total"}]}`)
	plan := func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeSlidingWindow, pc) }
	var changed, uploaded, checkpoints int64
	for b.Loop() {
		pw, err := NewSlidingWindow(cfg)
		if err != nil {
			b.Fatal(err)
		}
		hw, err := NewSlidingWindow(cfg)
		if err != nil {
			b.Fatal(err)
		}
		_, ph := openOpOn(b, pw, plan, cfg, schema, []string{"key"}, stream.StateBackendPebble, 0, nil)
		openOpOn(b, hw, plan, cfg, schema, []string{"key"}, stream.StateBackendHeap, 0, nil)
		seen := map[string]bool{} // shared files uploaded
		prev := map[string]string{}
		var out discard
		for i := range totalBatches {
			for _, w := range []*Window{pw, hw} {
				bt := stream.NewBatch(schema, batchRows)
				r := rand.New(rand.NewPCG(uint64(i), 5)) // the same rows for both
				for j := range batchRows {
					bt.Cols[0].Ints = append(bt.Cols[0].Ints, r.Int64N(keys))
					bt.Cols[1].Ints = append(bt.Cols[1].Ints, r.Int64N(1000))
					bt.Times = append(bt.Times, int64(i*batchRows+j)/rowsPerMs)
				}
				bt.SetLen(batchRows)
				if err := w.ProcessBatch(0, bt, out); err != nil {
					b.Fatal(err)
				}
				if err := w.ProcessWatermark(int64((i+1)*batchRows)/rowsPerMs-1, out); err != nil {
					b.Fatal(err)
				}
			}
			if (i+1)%batchesPerCk != 0 {
				continue
			}
			checkpoints++
			snap, err := ph.Snapshot(checkpoints)
			if err != nil {
				b.Fatal(err)
			}
			n, err := dataflowtest.ReadForUpload(snap, seen)
			if err != nil {
				b.Fatal(err)
			}
			uploaded += n
			cur := slotValues(hw)
			for k, v := range cur {
				if prev[k] != v {
					changed += int64(len(k) + len(v))
				}
			}
			for k := range prev {
				if _, ok := cur[k]; !ok {
					changed += int64(len(k))
				}
			}
			prev = cur
		}
	}
	if changed == 0 {
		b.Fatal("no state changed")
	}
	fmt.Printf("window_checkpoint_changed_bytes_per_checkpoint=%d\n", changed/checkpoints)
	fmt.Printf("window_checkpoint_uploaded_bytes_per_checkpoint=%d\n", uploaded/checkpoints)
	fmt.Printf("window_checkpoint_bytes_per_changed_byte=%.2f\n", float64(uploaded)/float64(changed))
	b.ReportMetric(float64(uploaded)/float64(changed), "uploaded/changed")
}

// slotValues returns the state of a window on the heap as a checkpoint
// holds it: per key group and key, its slots encoded as one value.
func slotValues(w *Window) map[string]string {
	byKey := map[string][]statebackend.SlotRecord{}
	w.slots.Each(func(s int32) {
		key, g, ns := w.slots.SlotKey(s)
		k := string(binary.AppendUvarint(nil, uint64(g))) + string(key)
		byKey[k] = append(byKey[k], statebackend.SlotRecord{NS: ns, Words: w.slots.Words(s)})
	})
	codec := statebackend.SlotListCodec(w.lay.width)
	vals := make(map[string]string, len(byKey))
	for k, recs := range byKey {
		slices.SortFunc(recs, func(a, b statebackend.SlotRecord) int { return cmp.Compare(a.NS, b.NS) })
		v, err := codec.AppendValue(nil, recs)
		if err != nil {
			panic(err)
		}
		vals[k] = string(v)
	}
	return vals
}

// countRows is a Collector that sums column col (a window's count) over
// the rows it receives.
type countRows struct {
	col  int
	sum  int64
	rows int64
}

func (c *countRows) Collect(b *stream.Batch) {
	for _, v := range b.Cols[c.col].Ints[:b.Len()] {
		c.sum += v
	}
	c.rows += int64(b.Len())
	b.Release()
}
func (c *countRows) EmitWatermark(int64) {}

// BenchmarkTumblingProcessingVsEventTime feeds the same 1024-row batches
// over 10,000 keys (10 rows per millisecond) to a keyed 10 s tumbling
// count and sum of event time (a watermark after every batch) and to one
// of processing time (a manual clock moving with the rows, the timers
// called after every batch), on the heap, then finishes both. Each
// window's counts must add up to the rows fed, or it fails. It prints
//
//	window_event_time_ns_per_row       event-time window, per row fed
//	window_processing_time_ns_per_row  processing-time window, per row fed
//	window_processing_vs_event_time    the ratio of the two
func BenchmarkTumblingProcessingVsEventTime(b *testing.B) {
	schema := stream.MustSchema(
		stream.Field{Name: "key", Type: stream.TypeInt64},
		stream.Field{Name: "value", Type: stream.TypeInt64},
	)
	const (
		batchRows = stream.DefaultBatchSize
		keys      = 10_000
		nBatches  = 256
		msPerRow  = 0.1
	)
	rng := rand.New(rand.NewPCG(1, 2))
	keyCol := make([]int64, batchRows*nBatches)
	valCol := make([]int64, batchRows*nBatches)
	for i := range keyCol {
		keyCol[i] = rng.Int64N(keys)
		valCol[i] = rng.Int64N(1000)
	}
	plan := func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, pc) }
	run := func(processing bool) float64 {
		cfg := []byte(`{"size": "10s", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "value", "as": "total"}]}`)
		if processing {
			cfg = []byte(`{"size": "10s", "time": "processing", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "value", "as": "total"}]}`)
		}
		w, err := NewTumblingWindow(cfg)
		if err != nil {
			b.Fatal(err)
		}
		clock := &manualClock{}
		if processing {
			openProc(b, w, cfg, schema, []string{"key"}, clock, stream.StateBackendHeap, false, 0, nil)
		} else {
			openOp(b, w, plan, cfg, schema, []string{"key"})
		}
		out := &countRows{col: 3}
		row := int64(0)
		start := time.Now()
		for i := 0; i < b.N; i++ {
			off := (i % nBatches) * batchRows
			bt := stream.NewBatch(schema, batchRows)
			bt.Cols[0].Ints = append(bt.Cols[0].Ints, keyCol[off:off+batchRows]...)
			bt.Cols[1].Ints = append(bt.Cols[1].Ints, valCol[off:off+batchRows]...)
			if !processing {
				for j := 0; j < batchRows; j++ {
					bt.Times = append(bt.Times, int64(float64(row+int64(j))*msPerRow))
				}
			}
			bt.SetLen(batchRows)
			clock.now = int64(float64(row) * msPerRow)
			row += batchRows
			if err := w.ProcessBatch(0, bt, out); err != nil {
				b.Fatal(err)
			}
			if processing {
				err = w.OnProcessingTime(int64(float64(row)*msPerRow)-1, out)
			} else {
				err = w.ProcessWatermark(int64(float64(row)*msPerRow)-1, out)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Finish(out); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		if out.sum != row {
			b.Fatalf("processing time %v: the windows counted %d rows, %d were fed", processing, out.sum, row)
		}
		return float64(elapsed.Nanoseconds()) / float64(row)
	}
	b.ResetTimer()
	ev := run(false)
	pt := run(true)
	b.StopTimer()
	if b.N < nBatches {
		return // the framework's first, one-batch probe: not a measurement
	}
	fmt.Printf("window_event_time_ns_per_row=%.1f\n", ev)
	fmt.Printf("window_processing_time_ns_per_row=%.1f\n", pt)
	fmt.Printf("window_processing_vs_event_time=%.2f\n", pt/ev)
}
