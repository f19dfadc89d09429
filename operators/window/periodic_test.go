package window

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/weirstream/weir/stream"
)

// TestWatermarksPeriodic steps the watermarks operator with a manual clock:
// at most one watermark per 200 ms slot, the first advance of a slot at
// once, later ones at the next slot's start through the deadline, none
// while nothing advanced, and the end of input at once.
func TestWatermarksPeriodic(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "ts", Type: stream.TypeInt64})
	cfg := []byte(`{"timestampField": "ts", "maxOutOfOrderness": "1s", "autoWatermarkInterval": "200ms"}`)
	op, err := NewWatermarks(cfg)
	if err != nil {
		t.Fatal(err)
	}
	openOp(t, op, planWatermarks, cfg, schema, nil)
	var now int64
	op.clock = func() int64 { return now }
	rec := newRecorder(t)
	batch := func(at int64, ts ...int64) {
		t.Helper()
		now = at
		b := stream.NewBatch(schema, len(ts))
		for _, v := range ts {
			b.AppendRow(v)
		}
		if err := op.ProcessBatch(0, b, rec); err != nil {
			t.Fatal(err)
		}
	}
	fire := func(at int64) {
		t.Helper()
		if err := op.OnProcessingTime(at, rec); err != nil {
			t.Fatal(err)
		}
	}
	deadline := func(want int64, wantOK bool) {
		t.Helper()
		if got, ok := op.NextProcessingTime(); ok != wantOK || (ok && got != want) {
			t.Fatalf("NextProcessingTime = %d, %v; want %d, %v", got, ok, want, wantOK)
		}
	}
	wms := func(want ...int64) {
		t.Helper()
		if got := rec.watermarks(); !slices.Equal(got, want) {
			t.Fatalf("watermarks %v, want %v", got, want)
		}
	}

	batch(1010, 5000) // first advance: at once
	wms(3999)
	deadline(0, false)
	batch(1050, 6000) // same slot [1000, 1200): wait for its end
	wms(3999)
	deadline(1200, true)
	batch(1100, 7000, 6500) // still waiting; the deadline stays
	deadline(1200, true)
	fire(1150) // not due
	wms(3999)
	fire(1203) // due: the latest watermark
	wms(3999, 5999)
	deadline(0, false)
	batch(1250, 6999) // no advance: no deadline
	deadline(0, false)
	batch(1390, 9000) // advance in the slot it last emitted in
	deadline(1400, true)
	fire(1400)
	wms(3999, 5999, 7999)
	batch(2500, 9500) // a later slot: at once
	wms(3999, 5999, 7999, 8499)
	batch(2510, 9600)
	deadline(2600, true)
	if err := op.ProcessWatermark(stream.MaxWatermark, rec); err != nil { // end of input: at once
		t.Fatal(err)
	}
	wms(3999, 5999, 7999, 8499, stream.MaxWatermark)
	deadline(0, false)
	fire(2600)
	batch(2700, 20000) // nothing after the end
	wms(3999, 5999, 7999, 8499, stream.MaxWatermark)
}

// TestWatermarksPeriodicRestore: an advance the checkpoint saw but had not
// emitted is due at once after a restore.
func TestWatermarksPeriodicRestore(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "ts", Type: stream.TypeInt64})
	cfg := []byte(`{"timestampField": "ts", "autoWatermarkInterval": "200ms"}`)
	op, err := NewWatermarks(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, h := openOpFull(t, op, planWatermarks, cfg, schema, nil, stream.StateBackendHeap, false, 0, nil)
	now := int64(1000)
	op.clock = func() int64 { return now }
	rec := newRecorder(t)
	for _, ts := range []int64{100, 200} {
		b := stream.NewBatch(schema, 1)
		b.AppendRow(ts)
		if err := op.ProcessBatch(0, b, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := op.NextProcessingTime(); !ok {
		t.Fatal("no deadline for the second advance")
	}
	snap, err := h.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	h.Close(false)

	op2, err := NewWatermarks(cfg)
	if err != nil {
		t.Fatal(err)
	}
	openOpOn(t, op2, planWatermarks, cfg, schema, nil, stream.StateBackendHeap, 1, snap)
	due, ok := op2.NextProcessingTime()
	if !ok || due > now {
		t.Fatalf("after restore NextProcessingTime = %d, %v; want due at once", due, ok)
	}
	rec2 := newRecorder(t)
	if err := op2.OnProcessingTime(now, rec2); err != nil {
		t.Fatal(err)
	}
	if got := rec2.watermarks(); !slices.Equal(got, []int64{199}) {
		t.Fatalf("watermarks after restore %v, want [199]", got)
	}
}

// TestPeriodicWatermarksMatchPerBatch is a differential test: windows fed
// by a watermarks operator with an auto-watermark interval fire exactly the
// results, in the same order, that they fire with a watermark after every
// batch. The data are bounded out of order by no more than
// maxOutOfOrderness, so no record is late under either (periodic
// watermarks are never ahead of per-batch ones). The processing-time
// clock moves by random steps between batches, and the deadline fires as
// the task runtime would fire it, between two batches once it is due.
func TestPeriodicWatermarksMatchPerBatch(t *testing.T) {
	cases := []struct {
		name             string
		keys             int
		step, jitter     int64
		size, slide, ooo int64
	}{
		{name: "in order", keys: 5, step: 7, jitter: 0, size: 1000, slide: 1000, ooo: 0},
		{name: "bounded out of order", keys: 7, step: 5, jitter: 300, size: 1000, slide: 1000, ooo: 300},
		{name: "sliding", keys: 3, step: 11, jitter: 120, size: 2000, slide: 500, ooo: 150},
	}
	for _, tc := range cases {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", tc.name, seed), func(t *testing.T) {
				rows := generate(seed, 3000, tc.keys, 1_000_000, tc.step, tc.jitter)
				wcfg, _ := json.Marshal(WindowConfig{Size: dur(tc.size), Slide: dur(tc.slide), Aggregates: allAggs})
				run := func(interval string) (*recorder, int) {
					mcfg, _ := json.Marshal(WatermarksConfig{TimestampField: "ts", MaxOutOfOrderness: dur(tc.ooo), AutoWatermarkInterval: interval})
					wmOp, err := NewWatermarks(mcfg)
					if err != nil {
						t.Fatal(err)
					}
					win, err := NewSlidingWindow(wcfg)
					if err != nil {
						t.Fatal(err)
					}
					openOp(t, wmOp, planWatermarks, mcfg, genSchema, nil)
					plan := func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeSlidingWindow, pc) }
					openOp(t, win, plan, wcfg, genSchema, []string{"id"})
					now := int64(5_000_000)
					wmOp.clock = func() int64 { return now }
					rec := newRecorder(t)
					ch := newChain(t, win, rec)
					rng := rand.New(rand.NewPCG(seed, 3))
					for i := 0; i < len(rows); {
						now += rng.Int64N(120)
						if due, ok := wmOp.NextProcessingTime(); ok && due <= now {
							if err := wmOp.OnProcessingTime(now, ch); err != nil {
								t.Fatal(err)
							}
						}
						n := min(len(rows)-i, 1+rng.IntN(40))
						b := stream.NewBatch(genSchema, n)
						for _, r := range rows[i : i+n] {
							b.AppendRow(r.values()...)
						}
						if err := wmOp.ProcessBatch(0, b, ch); err != nil {
							t.Fatal(err)
						}
						i += n
					}
					if err := wmOp.ProcessWatermark(stream.MaxWatermark, ch); err != nil {
						t.Fatal(err)
					}
					if err := win.Finish(rec); err != nil {
						t.Fatal(err)
					}
					if d := win.LateRecordsDropped(); d != 0 {
						t.Fatalf("interval %s: %d records dropped as late; the test data must have none", interval, d)
					}
					return rec, len(rec.watermarks())
				}
				perBatch, nb := run("0s")
				periodic, np := run("200ms")
				want, got := perBatch.rows(), periodic.rows()
				if len(want) == 0 {
					t.Fatal("no window fired")
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("periodic watermarks: %d rows, per-batch: %d\n%s", len(got), len(want), diffRows(got, want))
				}
				if np >= nb || np < 3 {
					t.Fatalf("%d periodic watermarks against %d per-batch ones; want fewer, and more than a few", np, nb)
				}
			})
		}
	}
}
