package window

import (
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var kvSchema = stream.MustSchema(
	stream.Field{Name: "k", Type: stream.TypeString},
	stream.Field{Name: "v", Type: stream.TypeInt64},
)

// timed builds a batch of (k, v) rows with event times, as a watermarks
// operator would.
func timed(rows ...[]any) *stream.Batch {
	b := stream.NewBatch(kvSchema, len(rows))
	for _, r := range rows {
		b.AppendRow(r[0], r[1])
		b.Times = append(b.Times, r[2].(int64))
	}
	return b
}

// step is one input to a window operator and the rows it must produce.
type step struct {
	batch *stream.Batch
	wm    int64 // when batch is nil
	want  [][]any
	// wantWM is the watermark expected after the step, or 0 for none.
	wantWM int64
}

func runSteps(t *testing.T, op string, config string, steps []step) *Window {
	t.Helper()
	newOp := NewTumblingWindow
	if op == TypeSlidingWindow {
		newOp = NewSlidingWindow
	}
	w, err := newOp([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	openOp(t, w, func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(op, pc) }, []byte(config), kvSchema, []string{"k"})
	for i, s := range steps {
		rec := newRecorder(t)
		if s.batch != nil {
			if err := w.ProcessBatch(0, s.batch, rec); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		} else if err := w.ProcessWatermark(s.wm, rec); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := rec.rows(); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: got rows\n%swant\n%s", i, fmtRows(got), fmtRows(s.want))
		}
		var wantWMs []int64
		if s.wantWM != 0 {
			wantWMs = []int64{s.wantWM}
		}
		if got := rec.watermarks(); !reflect.DeepEqual(got, wantWMs) {
			t.Fatalf("step %d: got watermarks %v, want %v", i, got, wantWMs)
		}
		if n := len(rec.events); n > 0 && s.wantWM != 0 && !rec.events[n-1].isWM {
			t.Fatalf("step %d: results emitted after the watermark", i)
		}
	}
	return w
}

func TestTumblingFiringAndLateness(t *testing.T) {
	const cfg = `{"size": "10s", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "v", "as": "s"}]}`
	w := runSteps(t, TypeTumblingWindow, cfg, []step{
		{batch: timed([]any{"b", 1, int64(1000)}, []any{"a", 2, int64(9999)}, []any{"b", 3, int64(10000)}, []any{"a", 4, int64(5)})},
		{wm: 9998, wantWM: 9998}, // window [0, 10000) has max timestamp 9999: not yet
		{wm: 9999, wantWM: 9999, want: [][]any{
			{"a", int64(0), int64(10000), int64(2), int64(6)},
			{"b", int64(0), int64(10000), int64(1), int64(1)},
		}},
		// Late for [0, 10000): dropped. 12000 is on time.
		{batch: timed([]any{"a", 100, int64(9999)}, []any{"c", 5, int64(12000)}, []any{"a", 200, int64(3)})},
		{wm: 15000, wantWM: 15000},
		{wm: stream.MaxWatermark, wantWM: stream.MaxWatermark, want: [][]any{
			{"b", int64(10000), int64(20000), int64(1), int64(3)},
			{"c", int64(10000), int64(20000), int64(1), int64(5)},
		}},
	})
	if got := w.LateRecordsDropped(); got != 2 {
		t.Errorf("LateRecordsDropped = %d, want 2", got)
	}
}

func TestAllowedLatenessRefires(t *testing.T) {
	const cfg = `{"size": "10s", "allowedLateness": "5s", "aggregates": [{"fn": "count", "as": "n"}]}`
	w := runSteps(t, TypeTumblingWindow, cfg, []step{
		{batch: timed([]any{"a", 1, int64(1000)}, []any{"b", 1, int64(2000)})},
		{wm: 10500, wantWM: 10500, want: [][]any{
			{"a", int64(0), int64(10000), int64(1)},
			{"b", int64(0), int64(10000), int64(1)},
		}},
		// Within the lateness: the window fires again with the new count,
		// for the keys that changed only.
		{batch: timed([]any{"b", 1, int64(3000)}, []any{"b", 1, int64(4000)}, []any{"c", 1, int64(9000)}), want: [][]any{
			{"b", int64(0), int64(10000), int64(3)},
			{"c", int64(0), int64(10000), int64(1)},
		}},
		{wm: 14998, wantWM: 14998},
		// end-1+lateness = 14999: the state goes, and later records drop.
		{wm: 14999, wantWM: 14999},
		{batch: timed([]any{"a", 1, int64(5000)})},
	})
	if got := w.LateRecordsDropped(); got != 1 {
		t.Errorf("LateRecordsDropped = %d, want 1", got)
	}
	if n := keysWithState(w); n != 0 {
		t.Errorf("state not cleaned: %d keys have panes", n)
	}
}

func TestSlidingFiringOrder(t *testing.T) {
	const cfg = `{"size": "3s", "slide": "1s", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "max", "field": "v"}]}`
	runSteps(t, TypeSlidingWindow, cfg, []step{
		{batch: timed([]any{"z", 7, int64(500)}, []any{"a", 1, int64(1500)}, []any{"z", 9, int64(2500)})},
		// One watermark fires three windows, by end then key.
		{wm: 2999, wantWM: 2999, want: [][]any{
			{"z", int64(-2000), int64(1000), int64(1), int64(7)},
			{"a", int64(-1000), int64(2000), int64(1), int64(1)},
			{"z", int64(-1000), int64(2000), int64(1), int64(7)},
			{"a", int64(0), int64(3000), int64(1), int64(1)},
			{"z", int64(0), int64(3000), int64(2), int64(9)},
		}},
		{wm: 3998, wantWM: 3998},
		{wm: 3999, wantWM: 3999, want: [][]any{
			{"a", int64(1000), int64(4000), int64(1), int64(1)},
			{"z", int64(1000), int64(4000), int64(1), int64(9)},
		}},
		{wm: stream.MaxWatermark, wantWM: stream.MaxWatermark, want: [][]any{
			{"z", int64(2000), int64(5000), int64(1), int64(9)},
		}},
	})
}

func TestWindowNullKeyAndValues(t *testing.T) {
	const cfg = `{"size": "1s", "aggregates": [{"fn": "count"}, {"fn": "count", "field": "v"}, {"fn": "sum", "field": "v"}, {"fn": "min", "field": "v"}, {"fn": "avg", "field": "v"}]}`
	runSteps(t, TypeTumblingWindow, cfg, []step{
		{batch: timed([]any{nil, nil, int64(1)}, []any{"a", nil, int64(2)}, []any{nil, 4, int64(3)})},
		{wm: stream.MaxWatermark, wantWM: stream.MaxWatermark, want: [][]any{
			{nil, int64(0), int64(1000), int64(2), int64(1), int64(4), int64(4), 4.0},
			{"a", int64(0), int64(1000), int64(1), int64(0), int64(0), nil, nil},
		}},
	})
}

func TestWindowNeedsEventTime(t *testing.T) {
	cfg := []byte(`{"size": "1s", "aggregates": [{"fn": "count"}]}`)
	w, err := NewTumblingWindow(cfg)
	if err != nil {
		t.Fatal(err)
	}
	openOp(t, w, func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, pc) }, cfg, kvSchema, []string{"k"})
	err = w.ProcessBatch(0, batchOf(kvSchema, []any{"a", 1}), newRecorder(t))
	if err == nil || !strings.Contains(err.Error(), `"watermarks" operator upstream`) {
		t.Fatalf("ProcessBatch without Times: got %v, want an error asking for a watermarks operator", err)
	}
}

func TestWatermarks(t *testing.T) {
	schema := stream.MustSchema(
		stream.Field{Name: "ts", Type: stream.TypeTimestamp},
		stream.Field{Name: "ms", Type: stream.TypeInt64},
		stream.Field{Name: "x", Type: stream.TypeString},
	)
	// An action is a batch of ts values (a nil entry is a null) or an
	// upstream watermark.
	type action struct {
		ts []any
		wm int64
	}
	tests := []struct {
		name    string
		config  string
		actions []action
		wantWMs []int64
		wantErr string
	}{
		{
			name:   "bounded out of orderness",
			config: `{"timestampField": "ts", "maxOutOfOrderness": "2s", "autoWatermarkInterval": "0s"}`,
			actions: []action{
				{ts: []any{int64(5000), int64(3000)}},
				{ts: []any{int64(4000)}},           // max unchanged: no watermark
				{wm: 100_000},                      // upstream: swallowed
				{ts: []any{int64(9000), int64(1)}}, // advances
				{ts: []any{}},                      // empty batch
				{wm: stream.MaxWatermark},          // end of input: forwarded
				{wm: stream.MaxWatermark},          // once
			},
			wantWMs: []int64{2999, 6999, stream.MaxWatermark},
		},
		{
			name:    "int64 field, default bound",
			config:  `{"timestampField": "ms", "autoWatermarkInterval": "0s"}`,
			actions: []action{{ts: []any{int64(10), int64(20)}}, {ts: []any{int64(20)}}, {ts: []any{int64(21)}}},
			wantWMs: []int64{19, 20},
		},
		{
			name:    "null timestamp fails",
			config:  `{"timestampField": "ts", "maxOutOfOrderness": "1s"}`,
			actions: []action{{ts: []any{int64(1), nil}}},
			wantErr: `null "ts"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, err := NewWatermarks([]byte(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			openOp(t, op, planWatermarks, []byte(tt.config), schema, nil)
			rec := newRecorder(t)
			field := op.spec.field
			for _, a := range tt.actions {
				if a.ts == nil {
					if err := op.ProcessWatermark(a.wm, rec); err != nil {
						t.Fatal(err)
					}
					continue
				}
				b := stream.NewBatch(schema, len(a.ts))
				for _, v := range a.ts {
					b.AppendRow(v, v, "x")
				}
				err := op.ProcessBatch(0, b, rec)
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(a.ts) == 0 {
					continue
				}
				// The batch is forwarded with Times copied from the field,
				// before any watermark it causes.
				var e *event
				for i := len(rec.events) - 1; i >= 0; i-- {
					if !rec.events[i].isWM {
						e = &rec.events[i]
						break
					}
				}
				col := schema.Index(field)
				for i, r := range e.rows {
					if e.times[i] != r[col].(int64) {
						t.Fatalf("row %v has event time %d", r, e.times[i])
					}
				}
			}
			if tt.wantErr != "" {
				t.Fatal("no error")
			}
			if got := rec.watermarks(); !reflect.DeepEqual(got, tt.wantWMs) {
				t.Fatalf("watermarks %v, want %v", got, tt.wantWMs)
			}
		})
	}
}
