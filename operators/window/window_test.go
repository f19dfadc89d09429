package window

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var genSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "name", Type: stream.TypeString},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
	stream.Field{Name: "value", Type: stream.TypeInt64},
	stream.Field{Name: "price", Type: stream.TypeFloat64},
)

// genRow is one generated record; a nil field is null.
type genRow struct {
	id    int64
	name  any // string or nil
	ts    int64
	value any // int64 or nil
	price any // float64 or nil
}

func (r genRow) values() []any { return []any{r.id, r.name, r.ts, r.value, r.price} }

// generate returns n records whose timestamps rise by about step per record
// from base, each up to jitter ms earlier than that, so they arrive out of
// order. Prices are multiples of 1/4 so that float sums are exact in any
// order.
func generate(seed uint64, n, keys int, base, step, jitter int64) []genRow {
	rng := rand.New(rand.NewPCG(seed, 7))
	names := []string{"ant", "bee", "cat", "dog", "eel", "fox", "gnu"}
	rows := make([]genRow, n)
	for i := range rows {
		r := genRow{id: rng.Int64N(int64(keys)), ts: base + int64(i)*step - rng.Int64N(jitter+1)}
		if rng.IntN(10) > 0 {
			r.name = names[rng.IntN(len(names))]
		}
		if rng.IntN(8) > 0 {
			r.value = rng.Int64N(2001) - 1000
		}
		if rng.IntN(6) > 0 {
			r.price = float64(rng.IntN(4000)) / 4
		}
		rows[i] = r
	}
	return rows
}

var allAggs = []AggregateConfig{
	{Fn: "count", As: "n"},
	{Fn: "count", Field: "value", As: "nv"},
	{Fn: "sum", Field: "value", As: "sv"},
	{Fn: "sum", Field: "price", As: "sp"},
	{Fn: "min", Field: "value"},
	{Fn: "max", Field: "value"},
	{Fn: "min", Field: "price"},
	{Fn: "MAX", Field: "price"},
	{Fn: "max", Field: "ts", As: "last"},
	{Fn: "avg", Field: "value"},
	{Fn: "avg", Field: "price"},
}

// bruteAggs computes allAggs over rows by scanning them.
func bruteAggs(rows []genRow) []any {
	var nv, sv int64
	var sp float64
	var minV, maxV, minP, maxP, last any
	var np int64
	for _, r := range rows {
		if r.value != nil {
			v := r.value.(int64)
			nv++
			sv += v
			if minV == nil || v < minV.(int64) {
				minV = v
			}
			if maxV == nil || v > maxV.(int64) {
				maxV = v
			}
		}
		if r.price != nil {
			p := r.price.(float64)
			np++
			sp += p
			if minP == nil || p < minP.(float64) {
				minP = p
			}
			if maxP == nil || p > maxP.(float64) {
				maxP = p
			}
		}
		if last == nil || r.ts > last.(int64) {
			last = r.ts
		}
	}
	var avgV, avgP any
	if nv > 0 {
		avgV = float64(sv) / float64(nv)
	}
	if np > 0 {
		avgP = sp / float64(np)
	}
	return []any{int64(len(rows)), nv, sv, sp, minV, maxV, minP, maxP, last, avgV, avgP}
}

// keyFns extract the key of a generated row for each key choice.
var keyFns = map[string]func(genRow) []any{
	"":        func(genRow) []any { return nil },
	"id":      func(r genRow) []any { return []any{r.id} },
	"name":    func(r genRow) []any { return []any{r.name} },
	"name,id": func(r genRow) []any { return []any{r.name, r.id} },
}

// compareValues orders key values as the operator documents: null first.
func compareValues(a, b []any) int {
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			return -1
		case y == nil:
			return 1
		}
		var c int
		switch x := x.(type) {
		case int64:
			c = cmp.Compare(x, y.(int64))
		case string:
			c = strings.Compare(x, y.(string))
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

type bruteParams struct {
	size, slide, offset, lateness, ooo int64
	key                                string
}

// bruteForce computes, for every key and every window, the final result of
// the window from scratch, given the watermark each row arrived under: a row
// counts in window W if W had not passed its allowed lateness when the row
// arrived. It also counts the rows that no window accepted. The results are
// sorted by window end and then key, the order the operator emits them in.
func bruteForce(rows []genRow, arrival []int64, p bruteParams) (want [][]any, dropped []string) {
	keyFn := keyFns[p.key]
	minTs, maxTs := rows[0].ts, rows[0].ts
	keys := map[string][]any{}
	for _, r := range rows {
		minTs, maxTs = min(minTs, r.ts), max(maxTs, r.ts)
		k := keyFn(r)
		keys[fmt.Sprint(k)] = k
	}
	// The first aligned window start whose window cannot hold minTs.
	s := p.offset
	if s+p.size <= minTs { // jump close, then step
		s += (minTs - s - p.size) / p.slide * p.slide
	}
	for s > minTs {
		s -= p.slide
	}
	for s+p.size > minTs {
		s -= p.slide
	}
	type win struct{ start, end int64 }
	var wins []win
	for ; s <= maxTs; s += p.slide {
		wins = append(wins, win{s, s + p.size})
	}
	open := func(w win, arrivalWM int64) bool {
		return arrivalWM == stream.MinWatermark || w.end-1+p.lateness > arrivalWM
	}
	for _, w := range wins {
		for _, k := range keys {
			var in []genRow
			for i, r := range rows {
				if r.ts >= w.start && r.ts < w.end && open(w, arrival[i]) && reflect.DeepEqual(keyFn(r), k) {
					in = append(in, r)
				}
			}
			if len(in) == 0 {
				continue
			}
			row := append(append(append([]any(nil), k...), w.start, w.end), bruteAggs(in)...)
			want = append(want, row)
		}
	}
	nk := len(keyFn(rows[0]))
	slices.SortStableFunc(want, func(a, b []any) int {
		if c := cmp.Compare(a[nk+1].(int64), b[nk+1].(int64)); c != 0 {
			return c
		}
		return compareValues(a[:nk], b[:nk])
	})
	for i, r := range rows {
		accepted := false
		for _, w := range wins {
			if r.ts >= w.start && r.ts < w.end && open(w, arrival[i]) {
				accepted = true
			}
		}
		if !accepted {
			dropped = append(dropped, fmt.Sprint(r.values()...))
		}
	}
	slices.Sort(dropped)
	return want, dropped
}

func dur(ms int64) string { return fmt.Sprintf("%dms", ms) }

func TestWindowMatchesBruteForce(t *testing.T) {
	tests := []struct {
		name    string
		sliding bool
		p       bruteParams
		n, keys int
		base    int64
		step    int64
		jitter  int64
	}{
		{name: "tumbling by id", p: bruteParams{size: 10000, ooo: 2000, key: "id"}, n: 4000, keys: 17, base: 1_700_000_000_000, step: 15, jitter: 3000},
		{name: "tumbling offset by name, negative times", p: bruteParams{size: 10000, offset: 3000, ooo: 500, key: "name"}, n: 4000, keys: 5, base: -40_000, step: 20, jitter: 1500},
		{name: "tumbling negative offset, composite key", p: bruteParams{size: 5000, offset: -1500, ooo: 1000, key: "name,id"}, n: 3000, keys: 4, base: -10_000, step: 13, jitter: 2500},
		{name: "tumbling 1ms", p: bruteParams{size: 1, ooo: 3, key: "id"}, n: 1500, keys: 3, base: 0, step: 1, jitter: 5},
		{name: "sliding by id", sliding: true, p: bruteParams{size: 10000, slide: 2000, ooo: 1000, key: "id"}, n: 4000, keys: 13, base: 5_000, step: 12, jitter: 14000},
		{name: "sliding offset, composite key", sliding: true, p: bruteParams{size: 6000, slide: 2000, offset: -1000, ooo: 700, key: "name,id"}, n: 3000, keys: 3, base: -20_000, step: 11, jitter: 9000},
		{name: "sliding global", sliding: true, p: bruteParams{size: 4000, slide: 1000, ooo: 300, key: ""}, n: 3000, keys: 1, base: 123, step: 9, jitter: 6000},
		{name: "sliding slide equals size", sliding: true, p: bruteParams{size: 3000, slide: 3000, ooo: 100, key: "id"}, n: 2000, keys: 7, base: 0, step: 10, jitter: 1500},
		{name: "tumbling allowed lateness", p: bruteParams{size: 10000, lateness: 3000, ooo: 1000, key: "id"}, n: 4000, keys: 11, base: 0, step: 14, jitter: 6000},
		{name: "sliding allowed lateness", sliding: true, p: bruteParams{size: 8000, slide: 2000, lateness: 2500, ooo: 500, key: "name"}, n: 4000, keys: 5, base: 1000, step: 10, jitter: 5000},
	}
	for seed, tt := range tests {
		for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble, pebbleSpill} {
			t.Run(tt.name+"/"+backend, func(t *testing.T) {
				p := tt.p
				if !tt.sliding {
					p.slide = p.size
				}
				rows := generate(uint64(seed), tt.n, tt.keys, tt.base, tt.step, tt.jitter)
				cfg := WindowConfig{Size: dur(p.size), Offset: dur(p.offset), AllowedLateness: dur(p.lateness), Aggregates: allAggs}
				op, newOp := TypeTumblingWindow, NewTumblingWindow
				if tt.sliding {
					op, newOp, cfg.Slide = TypeSlidingWindow, NewSlidingWindow, dur(p.slide)
				}
				var keys []string
				if p.key != "" {
					keys = strings.Split(p.key, ",")
				}
				wcfg, _ := json.Marshal(cfg)
				// The model (arrival) has a watermark after every batch.
				mcfg, _ := json.Marshal(WatermarksConfig{TimestampField: "ts", MaxOutOfOrderness: dur(p.ooo), AutoWatermarkInterval: "0s"})

				newOps := func() (*Watermarks, *Window) {
					wmOp, err := NewWatermarks(mcfg)
					if err != nil {
						t.Fatal(err)
					}
					win, err := newOp(wcfg)
					if err != nil {
						t.Fatal(err)
					}
					return wmOp, win
				}
				plan := func(pc *stream.PlanContext) (*stream.Schema, error) { return planWindow(op, pc) }
				wmOp, win := newOps()
				// Every other case takes full snapshots and restores them onto
				// the other backend: the state has one form on both.
				cross := seed%2 == 1
				_, hw := openOpFull(t, wmOp, planWatermarks, mcfg, genSchema, nil, backend, cross, 0, nil)
				out, hwin := openOpFull(t, win, plan, wcfg, genSchema, keys, backend, cross, 0, nil)
				rec := newRecorder(t)
				ch := newChain(t, win, rec)

				// Feed batches of random sizes, noting the watermark each row
				// arrives under. Half way, snapshot both operators and go on
				// with new ones restored from the snapshot, as after a failure.
				rng := rand.New(rand.NewPCG(uint64(seed), 99))
				arrival := make([]int64, len(rows))
				wm, maxTs := stream.MinWatermark, int64(-1<<63)
				var droppedBefore int64
				restored := false
				var spilled int64 // keys the windows spilled
				for i := 0; i < len(rows); {
					if !restored && i >= len(rows)/2 {
						restored = true
						sw, err := hw.Snapshot(1)
						if err != nil {
							t.Fatal(err)
						}
						swin, err := hwin.Snapshot(1)
						if err != nil {
							t.Fatal(err)
						}
						droppedBefore = win.LateRecordsDropped()
						spilled += win.spilled
						hw.Close(false)
						hwin.Close(false)
						wmOp, win = newOps()
						after := backend
						if cross {
							after = map[string]string{stream.StateBackendHeap: stream.StateBackendPebble, stream.StateBackendPebble: stream.StateBackendHeap, pebbleSpill: stream.StateBackendHeap}[backend]
						}
						openOpOn(t, wmOp, planWatermarks, mcfg, genSchema, nil, after, 1, sw)
						openOpOn(t, win, plan, wcfg, genSchema, keys, after, 1, swin)
						ch.next = win
					}
					n := min(len(rows)-i, 1+rng.IntN(200))
					b := stream.NewBatch(genSchema, n)
					for j := i; j < i+n; j++ {
						b.AppendRow(rows[j].values()...)
						arrival[j] = wm
						maxTs = max(maxTs, rows[j].ts)
					}
					if err := wmOp.ProcessBatch(0, b, ch); err != nil {
						t.Fatal(err)
					}
					wm = max(wm, maxTs-p.ooo-1)
					i += n
				}
				if err := wmOp.ProcessWatermark(stream.MaxWatermark, ch); err != nil {
					t.Fatal(err)
				}
				if err := wmOp.Finish(ch); err != nil {
					t.Fatal(err)
				}
				if err := win.Finish(rec); err != nil {
					t.Fatal(err)
				}

				want, wantDropped := bruteForce(rows, arrival, p)
				if len(want) == 0 {
					t.Fatal("test data produced no windows")
				}
				if got := droppedBefore + win.LateRecordsDropped(); got != int64(len(wantDropped)) {
					t.Errorf("LateRecordsDropped = %d, want %d", got, len(wantDropped))
				}
				// Each late record reached the late side output once.
				side := slices.Sorted(slices.Values(rec.side))
				if !slices.Equal(side, wantDropped) {
					t.Errorf("late side output: got %d rows, want %d\ngot  %.300v\nwant %.300v", len(side), len(wantDropped), side, wantDropped)
				}
				if p.lateness == 0 && tt.jitter > p.ooo && len(wantDropped) == 0 {
					t.Errorf("test data has no late records (%d windows); raise the jitter", len(want))
				}
				nk := len(keys)
				if !out.Equal(win.out) || out.Len() != nk+2+len(allAggs) {
					t.Fatalf("output schema %s, planned %s", win.out, out)
				}

				got := rec.rows()
				if p.lateness == 0 {
					// Each window fires exactly once, in (end, key) order.
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("got %d rows, want %d\n%s", len(got), len(want), diffRows(got, want))
					}
				} else {
					// Late records re-fire windows: the last result of each
					// window is its final content.
					last := map[string][]any{}
					var order []string
					for _, r := range got {
						id := fmt.Sprint(r[:nk+2])
						if _, ok := last[id]; !ok {
							order = append(order, id)
						}
						last[id] = r
					}
					var final [][]any
					for _, id := range order {
						final = append(final, last[id])
					}
					sortRows(final, nk)
					if !reflect.DeepEqual(final, want) {
						t.Fatalf("final results: got %d rows, want %d\n%s", len(final), len(want), diffRows(final, want))
					}
					if len(got) == len(final) {
						t.Errorf("no window re-fired; the test data should contain records within the allowed lateness")
					}
				}
				checkTiming(t, rec, nk, p.lateness)

				if n := keysWithState(win); n != 0 {
					t.Errorf("state left after the end of input: %d keys have panes", n)
				}
				if spilled += win.spilled; backend == pebbleSpill && tt.keys > 4 && spilled == 0 {
					t.Errorf("no key was spilled with %d bytes of state cache", spillCacheBytes)
				}
			})
		}
	}
}

// checkTiming checks that every on-time result was emitted while the window
// processed the first watermark at or past its end-1, before forwarding that
// watermark, with event time end-1; and that late re-firings (only with
// allowed lateness) are for windows the watermark had passed.
func checkTiming(t *testing.T, rec *recorder, nk int, lateness int64) {
	t.Helper()
	lastWM := stream.MinWatermark
	for i, e := range rec.events {
		if e.isWM {
			lastWM = e.wm
			continue
		}
		if e.onWM {
			// The watermark that fired these rows comes next.
			next := int64(0)
			for _, f := range rec.events[i+1:] {
				if f.isWM {
					next = f.wm
					break
				}
			}
			if next != e.inWM || lastWM != e.prevWM {
				t.Fatalf("results fired by watermark %d were not emitted between watermarks %d and %d (got between %d and %d)", e.inWM, e.prevWM, e.inWM, lastWM, next)
			}
		} else if lateness == 0 {
			t.Fatalf("results emitted while processing a batch without allowed lateness: %v", e.rows)
		}
		for j, r := range e.rows {
			end := r[nk+1].(int64)
			if e.times[j] != end-1 {
				t.Fatalf("row %v has event time %d, want end-1 = %d", r, e.times[j], end-1)
			}
			if end-1 > e.inWM {
				t.Fatalf("window ending %d fired at watermark %d, before the watermark reached end-1", end, e.inWM)
			}
			if e.onWM && end-1 <= e.prevWM {
				t.Fatalf("window ending %d fired at watermark %d although watermark %d had already passed it", end, e.inWM, e.prevWM)
			}
		}
	}
	if lastWM != stream.MaxWatermark {
		t.Fatalf("last watermark forwarded is %d, want MaxWatermark", lastWM)
	}
}

func sortRows(rows [][]any, nk int) {
	slices.SortStableFunc(rows, func(a, b []any) int {
		if c := cmp.Compare(a[nk+1].(int64), b[nk+1].(int64)); c != 0 {
			return c
		}
		return compareValues(a[:nk], b[:nk])
	})
}

func diffRows(got, want [][]any) string {
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(got), len(want)) && shown < 10; i++ {
		var g, w []any
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "row %d:\n  got  %v\n  want %v\n", i, g, w)
			shown++
		}
	}
	return b.String()
}
