package lifetime_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/operators/lifetime"
	"github.com/weirstream/weir/stream"
)

var (
	entitySchema = stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "category", Type: stream.TypeInt64},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
		stream.Field{Name: "expires", Type: stream.TypeTimestamp},
	)
	eventSchema = stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "price", Type: stream.TypeInt64},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
	)
	q4Config = `{"start": "dateTime", "end": "expires", "carry": ["category"], "time": "dateTime", "value": "price", "as": "final"}`
)

// collector gathers rendered rows (with their event time) and watermarks.
type collector struct {
	rows []string
	wms  []int64
}

func (c *collector) Collect(b *stream.Batch) {
	for i := range b.Len() {
		r := fmt.Sprint(b.Row(i)...)
		if len(b.Times) == b.Len() {
			r += fmt.Sprintf("@%d", b.Times[i])
		}
		c.rows = append(c.rows, r)
	}
	b.Release()
}
func (c *collector) EmitWatermark(wm int64) { c.wms = append(c.wms, wm) }

// input is one step of a scripted run: a batch for an input, or a
// watermark (input -1).
type input struct {
	input int
	rows  [][]any
	wm    int64
}

func openMax(t *testing.T, backend string, id int64, snap *stream.OperatorSnapshot) *dataflowtest.Harness {
	t.Helper()
	return openWith(t, q4Config, eventSchema, backend, id, snap)
}

// openWith opens a lifetime_max with config over entitySchema and events.
func openWith(t *testing.T, config string, events *stream.Schema, backend string, id int64, snap *stream.OperatorSnapshot) *dataflowtest.Harness {
	t.Helper()
	op, err := lifetime.NewLifetimeMax([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	octx := &stream.OperatorContext{
		OperatorUID: "winning-bids", Parallelism: 1, MaxParallelism: 128,
		KeyGroups:    stream.KeyGroupRange{Start: 0, End: 127},
		InputSchemas: []*stream.Schema{entitySchema, events},
		InputKeys:    [][]string{{"id"}, {"auction"}},
		StateBackend: backend, LocalStateDir: t.TempDir(),
	}
	h, err := dataflowtest.Open(t.Context(), op, octx, id, snap)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func run(t *testing.T, h *dataflowtest.Harness, steps []input, c *collector) {
	t.Helper()
	runWith(t, h, steps, c, eventSchema)
}

// runWith feeds steps to h, the events in schema events.
func runWith(t *testing.T, h *dataflowtest.Harness, steps []input, c *collector, events *stream.Schema) {
	t.Helper()
	for _, s := range steps {
		if s.input < 0 {
			if err := h.Op.ProcessWatermark(s.wm, c); err != nil {
				t.Fatal(err)
			}
			continue
		}
		schema := entitySchema
		if s.input == 1 {
			schema = events
		}
		b := stream.NewBatch(schema, len(s.rows))
		for _, r := range s.rows {
			b.AppendRow(r...)
		}
		if s.input == 0 {
			b.Times = make([]int64, 0, len(s.rows))
			for _, r := range s.rows {
				b.Times = append(b.Times, r[2].(int64))
			}
		}
		if err := h.Op.ProcessBatch(s.input, b, c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLifetimeMaxScenario: the rules one by one. Auction 1 lives [100, 200]:
// bids at 99 and 201 do not count, the bid at 150 arriving before the
// auction does; it closes when the watermark reaches 200, not before.
// Auction 2 gets no bid in its lifetime and emits nothing. A bid for an
// auction that never comes is dropped once the watermark passes it.
func TestLifetimeMaxScenario(t *testing.T) {
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		t.Run(backend, func(t *testing.T) {
			h := openMax(t, backend, 0, nil)
			defer h.Close(true)
			c := &collector{}
			run(t, h, []input{
				{input: 1, rows: [][]any{{int64(1), int64(70), int64(150)}, {int64(9), int64(5), int64(120)}}},
				{input: 0, rows: [][]any{{int64(1), int64(10), int64(100), int64(200)}, {int64(2), int64(11), int64(100), int64(300)}}},
				{input: 1, rows: [][]any{{int64(1), int64(500), int64(99)}, {int64(1), int64(60), int64(180)}, {int64(1), int64(900), int64(201)}, {int64(2), int64(1), int64(301)}}},
				{input: -1, wm: 199},
			}, c)
			if len(c.rows) != 0 {
				t.Fatalf("results before the watermark reached the end: %v", c.rows)
			}
			run(t, h, []input{{input: -1, wm: 200}, {input: -1, wm: stream.MaxWatermark}}, c)
			want := []string{"1 10 70@200"}
			if !slices.Equal(c.rows, want) {
				t.Fatalf("rows %v, want %v", c.rows, want)
			}
			if !slices.Equal(c.wms, []int64{199, 200, stream.MaxWatermark}) {
				t.Fatalf("watermarks %v: want every one forwarded", c.wms)
			}
			snap, err := h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			if n := keyedBytes(snap); n != 0 {
				t.Fatalf("%d bytes of keyed state after every entity closed and every waiting event expired; want none", n)
			}
		})
	}
}

func keyedBytes(s *stream.OperatorSnapshot) int {
	n := 0
	for _, chunks := range s.Keyed {
		for _, c := range chunks {
			n += len(c)
		}
	}
	return n
}

// randomSteps is a seeded stream of n auctions and bids, in batches, with
// watermarks that lag the largest time by 60; bids are up to 50 out of
// order and may come before their auction.
func randomSteps(seed uint64, n int) []input {
	r := rand.New(rand.NewPCG(seed, 1))
	var steps []input
	var ents, evs [][]any
	maxT := int64(0)
	next := int64(0) // the next auction id
	for i := range n {
		ts := int64(i * 3)
		maxT = ts
		if r.IntN(10) == 0 {
			ents = append(ents, []any{next, int64(10 + r.IntN(5)), ts, ts + int64(r.IntN(400))})
			next++
		} else {
			// Mostly one of the last 20 auctions, sometimes one not yet
			// created (it waits in state).
			id := max(0, next-20) + int64(r.IntN(22))
			evs = append(evs, []any{id, int64(r.IntN(1000)), ts - int64(r.IntN(50))})
		}
		if i%37 == 36 {
			steps = append(steps, input{input: 0, rows: ents}, input{input: 1, rows: evs}, input{input: -1, wm: maxT - 60})
			ents, evs = nil, nil
		}
	}
	steps = append(steps, input{input: 0, rows: ents}, input{input: 1, rows: evs}, input{input: -1, wm: stream.MaxWatermark})
	return steps
}

// oracle computes lifetime_max over steps independently, by brute force:
// every auction (ids are unique) gets the max price of the bids of its id
// within [start, end], if any.
func oracle(steps []input) []string {
	type auction struct{ id, cat, start, end int64 }
	var auctions []auction
	var bids [][3]int64
	for _, s := range steps {
		for _, r := range s.rows {
			if s.input == 0 {
				auctions = append(auctions, auction{r[0].(int64), r[1].(int64), r[2].(int64), r[3].(int64)})
			} else {
				bids = append(bids, [3]int64{r[0].(int64), r[1].(int64), r[2].(int64)})
			}
		}
	}
	var out []string
	for _, a := range auctions {
		best, ok := int64(0), false
		for _, b := range bids {
			if b[0] == a.id && b[2] >= a.start && b[2] <= a.end && (!ok || b[1] > best) {
				best, ok = b[1], true
			}
		}
		if ok {
			out = append(out, fmt.Sprintf("%d %d %d@%d", a.id, a.cat, best, a.end))
		}
	}
	slices.Sort(out)
	return out
}

// TestLifetimeMaxRestore: a run that is snapshotted halfway, closed and
// restored into a new instance emits exactly what an uninterrupted run
// does (no result lost or doubled, timers included), and both agree with
// an independent computation; on both backends.
func TestLifetimeMaxRestore(t *testing.T) {
	steps := randomSteps(7, 8000)
	want := oracle(steps)
	if len(want) < 100 {
		t.Fatalf("the oracle produced %d rows; the test would prove little", len(want))
	}
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		t.Run(backend, func(t *testing.T) {
			whole := &collector{}
			h := openMax(t, backend, 0, nil)
			run(t, h, steps, whole)
			h.Close(true)

			half := len(steps) / 2
			split := &collector{}
			h = openMax(t, backend, 0, nil)
			run(t, h, steps[:half], split)
			snap, err := h.Snapshot(5)
			if err != nil {
				t.Fatal(err)
			}
			// Work done after the snapshot is lost with the instance.
			run(t, h, steps[half:half+3], &collector{})
			h.Close(false)
			h = openMax(t, backend, 5, snap)
			defer h.Close(true)
			run(t, h, steps[half:], split)

			for name, c := range map[string]*collector{"uninterrupted": whole, "restored": split} {
				got := slices.Clone(c.rows)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s run: %d rows, want %d; first difference %s", name, len(got), len(want), firstDiff(got, want))
				}
			}
			t.Logf("%s: %d results agree with the oracle, uninterrupted and restored", backend, len(want))
		})
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %s vs %s", i, a[i], b[i])
		}
	}
	return "in length"
}

func TestLifetimeMaxPlanErrors(t *testing.T) {
	r := stream.NewRegistry()
	lifetime.Register(r)
	typ, _ := r.Lookup(lifetime.TypeLifetimeMax, false)
	for _, tc := range []struct{ config, want string }{
		{`{"end": "expires", "time": "dateTime", "value": "price"}`, "start: required"},
		{`{"start": "nope", "end": "expires", "time": "dateTime", "value": "price"}`, `no field "nope"`},
		{`{"start": "dateTime", "end": "expires", "time": "dateTime", "value": "price", "carry": ["id", "id"]}`, "output schema"},
		{`{"start": "dateTime", "end": "expires", "time": "dateTime", "value": "price", "winner": ["bidder"]}`, `winner: no field "bidder"`},
		{`{"start": "dateTime", "end": "expires", "time": "dateTime", "value": "price", "carry": ["dateTime"], "winner": ["dateTime"]}`, "rename an event field upstream"},
	} {
		p := &stream.PlanContext{Config: []byte(tc.config), Inputs: []stream.PlanInput{
			{Schema: entitySchema, KeyFields: []string{"id"}}, {Schema: eventSchema, KeyFields: []string{"auction"}},
		}}
		_, err := typ.Plan(p)
		if err == nil || !errors.Is(err, stream.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %s: error %v, want a config error containing %q", tc.config, err, tc.want)
		}
	}
}

// TestRunningAvg: per key, every record yields the count and average so
// far, and a restored instance continues the counts.
func TestRunningAvg(t *testing.T) {
	in := stream.MustSchema(stream.Field{Name: "category", Type: stream.TypeInt64}, stream.Field{Name: "final", Type: stream.TypeInt64})
	open := func(id int64, snap *stream.OperatorSnapshot) *dataflowtest.Harness {
		op, err := lifetime.NewRunningAvg([]byte(`{"field": "final", "as": "avg"}`))
		if err != nil {
			t.Fatal(err)
		}
		h, err := dataflowtest.Open(t.Context(), op, &stream.OperatorContext{
			Parallelism: 1, MaxParallelism: 128, KeyGroups: stream.KeyGroupRange{Start: 0, End: 127},
			InputSchemas: []*stream.Schema{in}, InputKeys: [][]string{{"category"}}, LocalStateDir: t.TempDir(),
		}, id, snap)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	feed := func(h *dataflowtest.Harness, c *collector, rows ...[2]int64) {
		b := stream.NewBatch(in, len(rows))
		for _, r := range rows {
			b.AppendRow(r[0], r[1])
		}
		if err := h.Op.ProcessBatch(0, b, c); err != nil {
			t.Fatal(err)
		}
	}
	c := &collector{}
	h := open(0, nil)
	feed(h, c, [2]int64{10, 4}, [2]int64{11, 1}, [2]int64{10, 8})
	snap, err := h.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	h.Close(false)
	h = open(1, snap)
	defer h.Close(true)
	feed(h, c, [2]int64{10, 3}, [2]int64{11, 2})
	want := []string{"10 1 4", "11 1 1", "10 2 6", "10 3 5", "11 2 1.5"}
	if !slices.Equal(c.rows, want) {
		t.Fatalf("rows %v, want %v", c.rows, want)
	}
}

// Winner fields: the events carry a bidder, and the result the winning
// event's bidder and time.
var (
	bidSchema = stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "bidder", Type: stream.TypeInt64},
		stream.Field{Name: "price", Type: stream.TypeInt64},
		stream.Field{Name: "bid_dateTime", Type: stream.TypeTimestamp},
	)
	q9Config = `{"start": "dateTime", "end": "expires", "carry": ["category"], "time": "bid_dateTime", "value": "price", "as": "price", "winner": ["bidder", "bid_dateTime"]}`
)

// TestLifetimeMaxWinnerScenario: the winner is the highest price, then
// the earliest bid, then the smallest bidder, whatever the arrival order,
// also for bids that wait for their auction; bids outside the lifetime do
// not count however high.
func TestLifetimeMaxWinnerScenario(t *testing.T) {
	auctions := [][]any{{int64(1), int64(10), int64(100), int64(200)}, {int64(2), int64(11), int64(100), int64(300)}}
	bids := [][]any{
		{int64(1), int64(7), int64(50), int64(150)},
		{int64(1), int64(5), int64(50), int64(160)}, // same price, later: loses to bidder 7
		{int64(1), int64(8), int64(50), int64(150)}, // same price and time, larger bidder: loses
		{int64(1), int64(4), int64(40), int64(120)},
		{int64(1), int64(3), int64(99), int64(99)}, // before the auction started
		{int64(2), int64(9), int64(30), int64(250)},
		{int64(2), int64(6), int64(30), int64(250)}, // ties on price and time: bidder 6 wins
		{int64(2), int64(2), int64(31), int64(301)}, // after it expired
	}
	want := []string{"1 10 50 7 150@200", "2 11 30 6 250@300"}
	r := rand.New(rand.NewPCG(3, 4))
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		for round := range 6 {
			t.Run(fmt.Sprintf("%s/order%d", backend, round), func(t *testing.T) {
				bs := slices.Clone(bids)
				r.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
				// Half of the bids before their auction, half after.
				steps := []input{{input: 1, rows: bs[:4]}, {input: 0, rows: auctions}, {input: 1, rows: bs[4:]}}
				if round == 0 {
					steps = []input{{input: 1, rows: bs}, {input: 0, rows: auctions}} // all waiting
				}
				h := openWith(t, q9Config, bidSchema, backend, 0, nil)
				defer h.Close(true)
				c := &collector{}
				runWith(t, h, append(steps, input{input: -1, wm: stream.MaxWatermark}), c, bidSchema)
				if !slices.Equal(c.rows, want) {
					t.Fatalf("bids in order %v: rows %v, want %v", bs, c.rows, want)
				}
			})
		}
	}
}

// randomBidSteps is randomSteps with a bidder per bid and few distinct
// prices and times (rounded down to 10, which keeps every bid within the
// watermark's lag of 60: none arrives after its auction closed), so that
// many auctions are won on a tie.
func randomBidSteps(seed uint64, n int) []input {
	r := rand.New(rand.NewPCG(seed, 2))
	var steps []input
	for _, s := range randomSteps(seed, n) {
		if s.input == 1 {
			for i, row := range s.rows {
				ts := row[2].(int64)
				s.rows[i] = []any{row[0], int64(r.IntN(6)), int64(r.IntN(2)), ts - ts%10}
			}
			// Arrival order must not matter.
			r.Shuffle(len(s.rows), func(i, j int) { s.rows[i], s.rows[j] = s.rows[j], s.rows[i] })
		}
		steps = append(steps, s)
	}
	return steps
}

// winnerOracle picks each auction's winning bid by brute force: every bid
// of its id within [start, end], sorted by price descending, then time,
// then bidder.
func winnerOracle(steps []input) (rows []string, ties, timeTies int) {
	type auction struct{ id, cat, start, end int64 }
	type bid struct{ auction, bidder, price, t int64 }
	var auctions []auction
	var bids []bid
	for _, s := range steps {
		for _, r := range s.rows {
			if s.input == 0 {
				auctions = append(auctions, auction{r[0].(int64), r[1].(int64), r[2].(int64), r[3].(int64)})
			} else {
				bids = append(bids, bid{r[0].(int64), r[1].(int64), r[2].(int64), r[3].(int64)})
			}
		}
	}
	for _, a := range auctions {
		var in []bid
		for _, b := range bids {
			if b.auction == a.id && b.t >= a.start && b.t <= a.end {
				in = append(in, b)
			}
		}
		if len(in) == 0 {
			continue
		}
		slices.SortFunc(in, func(x, y bid) int {
			return cmp.Or(cmp.Compare(y.price, x.price), cmp.Compare(x.t, y.t), cmp.Compare(x.bidder, y.bidder))
		})
		if len(in) > 1 && in[1].price == in[0].price {
			ties++
			if in[1].t == in[0].t {
				timeTies++
			}
		}
		w := in[0]
		rows = append(rows, fmt.Sprintf("%d %d %d %d %d@%d", a.id, a.cat, w.price, w.bidder, w.t, a.end))
	}
	slices.Sort(rows)
	return rows, ties, timeTies
}

// TestLifetimeMaxWinnerRestore: with Winner fields, a run snapshotted
// halfway and restored emits what an uninterrupted run does, and both
// agree with the brute-force winners, a third or more decided on a tie; a
// rule that kept the first arrival instead would not agree.
func TestLifetimeMaxWinnerRestore(t *testing.T) {
	steps := randomBidSteps(11, 8000)
	want, ties, timeTies := winnerOracle(steps)
	if len(want) < 100 || ties < len(want)/3 || timeTies < 20 {
		t.Fatalf("the oracle produced %d rows, %d won on a tie of prices, %d of prices and times; the test would prove little", len(want), ties, timeTies)
	}
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		t.Run(backend, func(t *testing.T) {
			whole := &collector{}
			h := openWith(t, q9Config, bidSchema, backend, 0, nil)
			runWith(t, h, steps, whole, bidSchema)
			h.Close(true)

			half := len(steps) / 2
			split := &collector{}
			h = openWith(t, q9Config, bidSchema, backend, 0, nil)
			runWith(t, h, steps[:half], split, bidSchema)
			snap, err := h.Snapshot(5)
			if err != nil {
				t.Fatal(err)
			}
			runWith(t, h, steps[half:half+3], &collector{}, bidSchema)
			h.Close(false)
			h = openWith(t, q9Config, bidSchema, backend, 5, snap)
			defer h.Close(true)
			runWith(t, h, steps[half:], split, bidSchema)

			for name, c := range map[string]*collector{"uninterrupted": whole, "restored": split} {
				got := slices.Clone(c.rows)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s run: %d rows, want %d; first difference %s", name, len(got), len(want), firstDiff(got, want))
				}
			}
			t.Logf("%s: %d winners (%d on a tie of prices, %d of prices and times) agree with the oracle, uninterrupted and restored", backend, len(want), ties, timeTies)
		})
	}
}

// TestLifetimeMaxWinnerStateVersions: an operator with Winner fields does
// not take the state of one without: the entries' formats differ and are
// told apart (at the restore or at the first read), not misread.
func TestLifetimeMaxWinnerStateVersions(t *testing.T) {
	for _, backend := range []string{stream.StateBackendHeap, stream.StateBackendPebble} {
		t.Run(backend, func(t *testing.T) {
			h := openMax(t, backend, 0, nil)
			run(t, h, []input{{input: 0, rows: [][]any{{int64(1), int64(10), int64(100), int64(200)}}}}, &collector{})
			snap, err := h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			h.Close(false)
			op, err := lifetime.NewLifetimeMax([]byte(q9Config))
			if err != nil {
				t.Fatal(err)
			}
			h, err = dataflowtest.Open(t.Context(), op, &stream.OperatorContext{
				OperatorUID: "winning-bids", Parallelism: 1, MaxParallelism: 128,
				KeyGroups:    stream.KeyGroupRange{Start: 0, End: 127},
				InputSchemas: []*stream.Schema{entitySchema, bidSchema},
				InputKeys:    [][]string{{"id"}, {"auction"}},
				StateBackend: backend, LocalStateDir: t.TempDir(),
			}, 1, snap)
			if err == nil {
				defer h.Close(true)
				b := stream.NewBatch(bidSchema, 1)
				b.AppendRow(int64(1), int64(5), int64(7), int64(150))
				err = h.Op.ProcessBatch(1, b, &collector{})
				if err == nil {
					err = h.Op.ProcessWatermark(stream.MaxWatermark, &collector{})
				}
			}
			if err == nil {
				t.Fatal("an operator with winner fields read the state of one without; want an error")
			}
			t.Logf("restoring across formats: %v", err)
		})
	}
}
