package window

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

// manualClock is a task clock that a test moves by hand.
type manualClock struct{ now int64 }

func (c *manualClock) read() int64 { return c.now }

// openProc opens processing-time window w (config cfg, input schema in,
// keyed by keys) with the task clock c on the named backend (or
// pebbleSpill), restoring snap (checkpoint id) if it is not nil. Pebble
// snapshots are full when full is set, so that they restore on the heap.
func openProc(t testing.TB, w *Window, cfg []byte, in *stream.Schema, keys []string, c *manualClock, backend string, full bool, id int64, snap *stream.OperatorSnapshot) *dataflowtest.Harness {
	t.Helper()
	plan := func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, pc) }
	_, h := openOpClock(t, w, plan, cfg, in, keys, backend, full, c.read, id, snap)
	return h
}

func kv(rows ...[]any) *stream.Batch { return batchOf(kvSchema, rows...) }

// TestProcessingTimeTumbling: rows go to the window of the clock when
// they arrive, whatever their event time (they have none); a window fires
// once the clock reaches its end, not at end-1; watermarks fire nothing
// and are forwarded; the rows carry no event time; Finish fires the
// windows still pending whatever the clock; no state is left.
func TestProcessingTimeTumbling(t *testing.T) {
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		t.Run(backend, func(t *testing.T) {
			cfg := []byte(`{"size": "10s", "time": "processing", "aggregates": [{"fn": "count", "as": "n"}, {"fn": "sum", "field": "v", "as": "s"}]}`)
			w, err := NewTumblingWindow(cfg)
			if err != nil {
				t.Fatal(err)
			}
			clock := &manualClock{now: 1_000}
			openProc(t, w, cfg, kvSchema, []string{"k"}, clock, backend, false, 0, nil)
			steps := []struct {
				now   int64
				batch *stream.Batch
				wm    int64 // a watermark instead, if not 0
				fire  bool  // OnProcessingTime(now) instead
				want  [][]any
			}{
				{now: 1_000, batch: kv([]any{"b", 1}, []any{"a", 2}, []any{"b", 3})},
				{now: 9_999, batch: kv([]any{"c", 4})},
				{now: 9_999, fire: true},                  // end-1: not yet
				{now: 9_999, wm: stream.MaxWatermark - 1}, // watermarks fire nothing
				{now: 10_000, batch: kv([]any{"a", 5})},   // the next window
				{now: 10_000, fire: true, want: [][]any{
					{"a", int64(0), int64(10_000), int64(1), int64(2)},
					{"b", int64(0), int64(10_000), int64(2), int64(4)},
					{"c", int64(0), int64(10_000), int64(1), int64(4)},
				}},
				{now: 10_000, fire: true}, // fired once only
				{now: 35_000, batch: kv([]any{"a", 6}, []any{"d", 7})},
				{now: 35_001, fire: true, want: [][]any{
					{"a", int64(10_000), int64(20_000), int64(1), int64(5)},
				}},
			}
			for i, s := range steps {
				clock.now = s.now
				rec := newRecorder(t)
				switch {
				case s.batch != nil:
					err = w.ProcessBatch(0, s.batch, rec)
				case s.wm != 0:
					err = w.ProcessWatermark(s.wm, rec)
					if got := rec.watermarks(); !slices.Equal(got, []int64{s.wm}) {
						t.Fatalf("step %d: watermarks %v, want %d forwarded", i, got, s.wm)
					}
				default:
					err = w.OnProcessingTime(s.now, rec)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := rec.rows(); !reflect.DeepEqual(got, s.want) {
					t.Fatalf("step %d (clock %d): got rows\n%swant\n%s", i, s.now, fmtRows(got), fmtRows(s.want))
				}
				for _, e := range rec.events {
					if len(e.times) != 0 {
						t.Fatalf("step %d: results carry event times %v; processing-time results have none", i, e.times)
					}
				}
			}
			// [30 s, 40 s) is pending: Finish fires it with the clock short
			// of its end.
			rec := newRecorder(t)
			if err := w.Finish(rec); err != nil {
				t.Fatal(err)
			}
			want := [][]any{
				{"a", int64(30_000), int64(40_000), int64(1), int64(6)},
				{"d", int64(30_000), int64(40_000), int64(1), int64(7)},
			}
			if got := rec.rows(); !reflect.DeepEqual(got, want) {
				t.Fatalf("Finish: got rows\n%swant\n%s", fmtRows(got), fmtRows(want))
			}
			if n := keysWithState(w); n != 0 {
				t.Fatalf("%d keys keep panes after every window fired", n)
			}
			if ts, ok := w.b.Timers().NextProcessingTime(); ok {
				t.Fatalf("a processing-time timer at %d is left after every window fired", ts)
			}
		})
	}
}

// pwKey is a key and window of the processing-time model.
type pwKey struct {
	id    any // int64, or nil for the global window
	start int64
}

type pwAcc struct{ n, sum, nv int64 }

// TestProcessingTimeMatchesModel feeds random batches under a moving
// clock, with random timer calls and watermarks, to a processing-time
// window, and checks it against a model computed from the clock at each
// batch: every (key, window) comes out exactly once, with the model's
// count and sum, at the first timer call at or after its end (never
// before), in (end, key) order within a call; half way the window is
// snapshotted and restored (on the same backend, or with full snapshots
// on the other) while the clock moves past some pending windows, which
// then fire at the first call, as the runtime makes after a restore; and
// Finish fires the rest. A lost or doubled row, or one in the wrong
// window, fails it.
func TestProcessingTimeMatchesModel(t *testing.T) {
	tests := []struct {
		name    string
		size    int64
		offset  int64
		keys    int
		keyed   bool
		backend string
		cross   bool
		steps   int
	}{
		{"heap", 1000, 0, 40, true, stream.StateBackendHeap, false, 1500},
		{"pebble", 1000, 0, 40, true, stream.StateBackendPebble, false, 1500},
		{"pebble spilling", 700, 300, 80, true, pebbleSpill, false, 300},
		{"heap to pebble, offset", 1000, -250, 25, true, stream.StateBackendHeap, true, 1500},
		{"pebble to heap", 500, 0, 25, true, stream.StateBackendPebble, true, 1500},
		{"global heap", 1000, 0, 5, false, stream.StateBackendHeap, false, 1500},
		{"global pebble", 1000, 0, 5, false, stream.StateBackendPebble, false, 1500},
	}
	for seed, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := json.Marshal(WindowConfig{Size: dur(tt.size), Offset: dur(tt.offset), Time: TimeProcessing,
				Aggregates: []AggregateConfig{{Fn: "count", As: "n"}, {Fn: "sum", Field: "value", As: "sv"}, {Fn: "count", Field: "value", As: "nv"}}})
			var keys []string
			if tt.keyed {
				keys = []string{"id"}
			}
			newWin := func() *Window {
				w, err := NewTumblingWindow(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			start := func(now int64) int64 {
				r := (now - tt.offset) % tt.size
				if r < 0 {
					r += tt.size
				}
				return now - r
			}
			clock := &manualClock{now: 1_700_000_000_123}
			w := newWin()
			h := openProc(t, w, cfg, genSchema, keys, clock, tt.backend, tt.cross, 0, nil)
			rng := rand.New(rand.NewPCG(uint64(seed), 12))
			model := map[pwKey]*pwAcc{}
			emitted := map[pwKey]bool{}
			rowsIn, rowsOut := int64(0), int64(0)
			var spilled int64
			wm := int64(0)

			// check takes the rows of one call at clock now (finish: of
			// Finish) and compares them with the model.
			check := func(rec *recorder, now int64, finish bool) {
				t.Helper()
				rows := rec.rows()
				for i, r := range rows {
					var id any
					if tt.keyed {
						id = r[0]
						r = r[1:]
					}
					k := pwKey{id, r[0].(int64)}
					end := r[1].(int64)
					if end != k.start+tt.size || start(k.start) != k.start {
						t.Fatalf("clock %d: row %v is not of an aligned window of %d ms", now, rows[i], tt.size)
					}
					if !finish && end > now {
						t.Fatalf("clock %d: window %v fired before its end %d", now, k, end)
					}
					if emitted[k] {
						t.Fatalf("clock %d: window %v fired twice", now, k)
					}
					emitted[k] = true
					m := model[k]
					if m == nil {
						t.Fatalf("clock %d: window %v fired but has no rows in the model", now, k)
					}
					if got := [3]int64{r[2].(int64), r[3].(int64), r[4].(int64)}; got != [3]int64{m.n, m.sum, m.nv} {
						t.Fatalf("clock %d: window %v: (count, sum, count of values) %v, want %v", now, k, got, [3]int64{m.n, m.sum, m.nv})
					}
					rowsOut += m.n
					if i > 0 {
						p := rows[i-1]
						if c := cmp.Compare(p[len(p)-4].(int64), end); c > 0 || c == 0 && tt.keyed && p[0].(int64) >= rows[i][0].(int64) {
							t.Fatalf("clock %d: row %v after %v: not in (end, key) order", now, rows[i], p)
						}
					}
				}
				for _, e := range rec.events {
					if !e.isWM && len(e.times) != 0 {
						t.Fatalf("clock %d: results carry event times", now)
					}
				}
				if finish {
					return
				}
				for k := range model {
					if k.start+tt.size <= now && !emitted[k] {
						t.Fatalf("clock %d: window %v ended at %d but did not fire", now, k, k.start+tt.size)
					}
				}
			}
			fire := func() {
				t.Helper()
				rec := newRecorder(t)
				if err := w.OnProcessingTime(clock.now, rec); err != nil {
					t.Fatal(err)
				}
				check(rec, clock.now, false)
			}

			restored := false
			steps := tt.steps
			for step := range steps {
				switch x := rng.IntN(10); {
				case x < 5: // a batch
					n := 1 + rng.IntN(60)
					b := stream.NewBatch(genSchema, n)
					p := start(clock.now)
					for range n {
						r := genRow{id: rng.Int64N(int64(tt.keys)), ts: rng.Int64(), name: "x"}
						if rng.IntN(5) > 0 {
							r.value = rng.Int64N(1000) - 500
						}
						b.AppendRow(r.values()...)
						var id any
						if tt.keyed {
							id = r.id
						}
						k := pwKey{id, p}
						m := model[k]
						if m == nil {
							m = &pwAcc{}
							model[k] = m
						}
						m.n++
						if r.value != nil {
							m.sum += r.value.(int64)
							m.nv++
						}
					}
					rowsIn += int64(n)
					rec := newRecorder(t)
					if err := w.ProcessBatch(0, b, rec); err != nil {
						t.Fatal(err)
					}
					if len(rec.events) != 0 {
						t.Fatalf("ProcessBatch emitted %d events; processing-time windows emit on timers only", len(rec.events))
					}
				case x < 8: // the clock moves
					clock.now += rng.Int64N(tt.size * 2 / 3)
				case x < 9:
					fire()
				default:
					wm += rng.Int64N(1_000_000)
					rec := newRecorder(t)
					if err := w.ProcessWatermark(wm, rec); err != nil {
						t.Fatal(err)
					}
					if len(rec.rows()) != 0 || !slices.Equal(rec.watermarks(), []int64{wm}) {
						t.Fatalf("watermark %d: got rows %v and watermarks %v, want no rows and the watermark forwarded", wm, rec.rows(), rec.watermarks())
					}
				}
				if !restored && step >= steps/2 {
					restored = true
					snap, err := h.Snapshot(1)
					if err != nil {
						t.Fatal(err)
					}
					spilled += w.spilled
					h.Close(false)
					// The clock moves on while the job recovers, past the
					// end of at least one pending window.
					pending := int64(-1)
					for k := range model {
						if !emitted[k] && (pending < 0 || k.start < pending) {
							pending = k.start
						}
					}
					if pending < 0 {
						t.Fatal("no window pending at the snapshot; the restore would prove nothing")
					}
					clock.now = max(clock.now, pending+tt.size) + rng.Int64N(tt.size)
					after := tt.backend
					if tt.cross {
						after = map[string]string{stream.StateBackendHeap: stream.StateBackendPebble, stream.StateBackendPebble: stream.StateBackendHeap}[tt.backend]
					}
					w = newWin()
					h = openProc(t, w, cfg, genSchema, keys, clock, after, false, 1, snap)
					// The runtime fires restored timers that are due at once:
					// it finds them as the backend's earliest timer.
					if ts, ok := w.b.Timers().NextProcessingTime(); !ok || ts > clock.now {
						t.Fatalf("after the restore the earliest timer is %d (%v); the window ending at %d is due at %d", ts, ok, pending+tt.size, clock.now)
					}
					fire()
				}
			}
			rec := newRecorder(t)
			if err := w.Finish(rec); err != nil {
				t.Fatal(err)
			}
			check(rec, clock.now, true)
			spilled += w.spilled
			missing := 0
			for k := range model {
				if !emitted[k] {
					missing++
				}
			}
			if missing > 0 || rowsOut != rowsIn {
				t.Fatalf("%d windows never fired; %d rows in, %d counted out", missing, rowsIn, rowsOut)
			}
			if n := keysWithState(w); n != 0 {
				t.Fatalf("%d keys keep panes after Finish", n)
			}
			if tt.backend == pebbleSpill && spilled == 0 {
				t.Fatal("no key was spilled; the test does not reach the spilled path")
			}
			t.Logf("%d rows in %d (key, window)s, each counted once; %d keys spilled", rowsIn, len(model), spilled)
		})
	}
}

// TestProcessingTimeConfigErrors: the options that do not go with
// processing time are refused at planning with one error that names the
// operator, the option, the reason and the fix.
func TestProcessingTimeConfigErrors(t *testing.T) {
	reg := stream.NewRegistry()
	Register(reg)
	reg.Register(stream.OperatorType{
		Name: "gen", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return nil, errors.New("not for running") },
	})
	tests := []struct {
		name, op, config string
		want             []string // "" config is accepted
	}{
		{"tumbling", TypeTumblingWindow, `{"size": "10s", "time": "processing", "aggregates": [{"fn": "count"}]}`, nil},
		{"explicit event", TypeTumblingWindow, `{"size": "10s", "time": "event", "aggregates": [{"fn": "count"}]}`, nil},
		{"zero lateness", TypeTumblingWindow, `{"size": "10s", "time": "processing", "allowedLateness": "0s", "aggregates": [{"fn": "count"}]}`, nil},
		{"sliding", TypeSlidingWindow, `{"size": "10s", "slide": "5s", "time": "processing", "aggregates": [{"fn": "count"}]}`,
			[]string{`operator "counts"`, "sliding_window", `time "processing"`, "tumbling only", "use tumbling_window"}},
		{"lateness", TypeTumblingWindow, `{"size": "10s", "time": "processing", "allowedLateness": "5s", "aggregates": [{"fn": "count"}]}`,
			[]string{`operator "counts"`, `allowedLateness "5s"`, "does not apply", "remove allowedLateness"}},
		{"session", TypeSessionWindow, `{"gap": "10s", "time": "processing", "aggregates": [{"fn": "count"}]}`,
			[]string{`operator "counts"`, "session_window", `time "processing"`, "event time only", "remove time"}},
		{"unknown time", TypeTumblingWindow, `{"size": "10s", "time": "wall", "aggregates": [{"fn": "count"}]}`,
			[]string{`operator "counts"`, `time "wall"`, "not a time domain", `"event"`, `"processing"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := stream.NewBuilder("job")
			b.Source("src", "gen", nil).KeyBy("id").Then("counts", tt.op, json.RawMessage(tt.config))
			g, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			err = stream.Plan(g, reg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Plan: %v", err)
				}
				typ, _ := reg.Lookup(tt.op, false)
				if _, err := typ.NewOperator([]byte(tt.config)); err != nil {
					t.Fatalf("NewOperator: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Plan accepted the config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Plan error %q does not contain %q", err, w)
				}
			}
			if !errors.Is(err, stream.ErrConfig) {
				t.Errorf("Plan error %v is not stream.ErrConfig", err)
			}
		})
	}
}

// TestProcessingTimeRestoreRefusesEventTimeState: an event-time window's
// checkpoint does not restore into a processing-time window (its panes are
// of event time and have no processing-time timers), and the error says
// so.
func TestProcessingTimeRestoreRefusesEventTimeState(t *testing.T) {
	ev := []byte(`{"size": "10s", "aggregates": [{"fn": "count"}]}`)
	w, err := NewTumblingWindow(ev)
	if err != nil {
		t.Fatal(err)
	}
	_, h := openOpOn(t, w, func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, pc) }, ev, kvSchema, []string{"k"}, stream.StateBackendHeap, 0, nil)
	if err := w.ProcessBatch(0, timed([]any{"a", 1, int64(5)}), newRecorder(t)); err != nil {
		t.Fatal(err)
	}
	snap, err := h.Snapshot(3)
	if err != nil {
		t.Fatal(err)
	}
	pt := []byte(`{"size": "10s", "time": "processing", "aggregates": [{"fn": "count"}]}`)
	p, _ := NewTumblingWindow(pt)
	out, _ := planWindow(TypeTumblingWindow, &stream.PlanContext{Config: pt, Inputs: []stream.PlanInput{{Schema: kvSchema, KeyFields: []string{"k"}}}})
	octx := &stream.OperatorContext{JobID: "job", OperatorUID: "op", Parallelism: 1, MaxParallelism: stream.DefaultMaxParallelism,
		KeyGroups:    stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1},
		InputSchemas: []*stream.Schema{kvSchema}, InputKeys: [][]string{{"k"}}, OutputSchema: out, Config: pt,
		StateBackend: stream.StateBackendHeap, LocalStateDir: t.TempDir()}
	ph, err := dataflowtest.Open(context.Background(), p, octx, 3, snap)
	if err == nil {
		ph.Close(true)
		t.Fatal("a processing-time window restored an event-time window's state")
	}
	if !strings.Contains(err.Error(), "processing time") {
		t.Fatalf("restore error %q does not say the state is of another time domain", err)
	}
}
