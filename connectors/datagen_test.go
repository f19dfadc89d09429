package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

const testDatagenJSON = `{
  "rows": 5000, "seed": 7, "batchSize": 300,
  "fields": [
    {"name": "id", "kind": "sequence", "start": 100},
    {"name": "key", "kind": "key", "cardinality": 50, "prefix": "k"},
    {"name": "ikey", "kind": "key", "cardinality": 1000000, "type": "int64"},
    {"name": "bigkey", "kind": "key", "cardinality": 10000000, "prefix": "u"},
    {"name": "value", "kind": "random", "type": "int64", "min": -5, "max": 5},
    {"name": "f", "kind": "random", "type": "float64", "min": 1.5, "max": 2.5},
    {"name": "b", "kind": "random", "type": "bool"},
    {"name": "s", "kind": "random", "type": "string", "length": 12},
    {"name": "ts", "kind": "timestamp", "start": "2026-01-01T00:00:00Z", "stepMillis": 10, "jitterMillis": 25},
    {"name": "tag", "kind": "oneof", "values": ["a", "b", "c"]}
  ]}`

func testDatagenConfig(t *testing.T) DatagenConfig {
	t.Helper()
	var cfg DatagenConfig
	if err := stream.DecodeConfig([]byte(testDatagenJSON), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func runDatagen(t *testing.T, cfg DatagenConfig, subtask, parallelism int, pos int64) [][]any {
	t.Helper()
	d, err := NewDatagen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.SetPosition(pos)
	if err := d.Open(t.Context(), octxFor(subtask, parallelism)); err != nil {
		t.Fatal(err)
	}
	rows, err := drain(t, d, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkRowProperties checks row seq against the config by independent
// reasoning (ranges, formulas), not by calling the generator.
func checkRowProperties(t *testing.T, seq int64, row []any) {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	if row[0] != 100+seq {
		t.Fatalf("seq %d: id = %v, want %d", seq, row[0], 100+seq)
	}
	if k := row[1].(string); !strings.HasPrefix(k, "k") || len(k) < 2 || len(k) > 3 {
		t.Fatalf("seq %d: key %q not in k0..k49", seq, k)
	}
	if v := row[2].(int64); v < 0 || v >= 1000000 {
		t.Fatalf("seq %d: ikey %d out of range", seq, v)
	}
	if k := row[3].(string); !strings.HasPrefix(k, "u") {
		t.Fatalf("seq %d: bigkey %q", seq, k)
	}
	if v := row[4].(int64); v < -5 || v > 5 {
		t.Fatalf("seq %d: value %d out of [-5, 5]", seq, v)
	}
	if v := row[5].(float64); v < 1.5 || v >= 2.5 {
		t.Fatalf("seq %d: f %v out of [1.5, 2.5)", seq, v)
	}
	if s := row[7].(string); len(s) != 12 {
		t.Fatalf("seq %d: s %q has length %d, want 12", seq, s, len(s))
	}
	if ts, base := row[8].(int64), start+seq*10; ts > base || ts < base-25 {
		t.Fatalf("seq %d: ts %d not in [%d, %d]", seq, ts, base-25, base)
	}
	if tag := row[9].(string); tag != "a" && tag != "b" && tag != "c" {
		t.Fatalf("seq %d: tag %q", seq, tag)
	}
}

func TestDatagenDeterministicAndPartitioned(t *testing.T) {
	cfg := testDatagenConfig(t)
	one := runDatagen(t, cfg, 0, 1, 0)
	if len(one) != 5000 {
		t.Fatalf("got %d rows, want 5000", len(one))
	}
	if again := runDatagen(t, cfg, 0, 1, 0); !reflect.DeepEqual(one, again) {
		t.Fatal("two runs of the same config differ")
	}
	for seq, row := range one {
		checkRowProperties(t, int64(seq), row)
	}
	for _, seq := range []int64{0, 1, 2999, 4999} {
		if got := GenerateRow(cfg, seq); !reflect.DeepEqual(got, one[seq]) {
			t.Fatalf("GenerateRow(%d) = %v, source emitted %v", seq, got, one[seq])
		}
	}
	// Distinct values: the generators are not constant.
	keys, bools := map[any]bool{}, map[any]bool{}
	for _, row := range one {
		keys[row[1]] = true
		bools[row[6]] = true
	}
	if len(keys) != 50 || len(bools) != 2 {
		t.Fatalf("saw %d keys (want 50) and %d bools (want 2)", len(keys), len(bools))
	}

	for _, p := range []int{2, 3, 7} {
		seen := make([]int, 5000)
		for i := range p {
			for k, row := range runDatagen(t, cfg, i, p, 0) {
				seq := row[0].(int64) - 100
				if want := int64(i + k*p); seq != want {
					t.Fatalf("p=%d subtask %d row %d has seq %d, want %d", p, i, k, seq, want)
				}
				if !reflect.DeepEqual(row, one[seq]) {
					t.Fatalf("p=%d: seq %d = %v, with p=1 %v", p, seq, row, one[seq])
				}
				seen[seq]++
			}
		}
		for seq, n := range seen {
			if n != 1 {
				t.Fatalf("p=%d: seq %d emitted %d times", p, seq, n)
			}
		}
	}
}

func TestDatagenSetPositionResumes(t *testing.T) {
	cfg := testDatagenConfig(t)
	full := runDatagen(t, cfg, 1, 3, 0)
	for _, pos := range []int64{0, 1, 299, 300, 1000, int64(len(full))} {
		tail := runDatagen(t, cfg, 1, 3, pos)
		if !reflect.DeepEqual(tail, full[pos:]) && !(len(tail) == 0 && int(pos) == len(full)) {
			t.Fatalf("resume at %d: %d rows differ from the tail of %d", pos, len(tail), len(full)-int(pos))
		}
	}

	// Position tracks emitted rows.
	d, _ := NewDatagen(cfg)
	if err := d.Open(t.Context(), octxFor(0, 2)); err != nil {
		t.Fatal(err)
	}
	var c collector
	d.Poll(t.Context(), &c)
	d.Poll(t.Context(), &c)
	if d.Position() != 600 {
		t.Fatalf("Position after two batches of 300 = %d, want 600", d.Position())
	}
}

func TestDatagenUnboundedAndSmall(t *testing.T) {
	d, err := NewDatagen(DatagenConfig{Preset: "bid"})
	if err != nil {
		t.Fatal(err)
	}
	d.Open(t.Context(), octxFor(0, 1))
	var c collector
	for range 10 {
		if st, err := d.Poll(t.Context(), &c); st != stream.PollEmitted || err != nil {
			t.Fatalf("unbounded Poll = %v, %v", st, err)
		}
	}
	if n := len(c.rows()); n != 10*stream.DefaultBatchSize {
		t.Fatalf("10 polls gave %d rows, want %d", n, 10*stream.DefaultBatchSize)
	}
	// More subtasks than rows: the extra subtasks end at once.
	cfg := testDatagenConfig(t)
	cfg.Rows = 2
	if rows := runDatagen(t, cfg, 4, 5, 0); len(rows) != 0 {
		t.Fatalf("subtask 4 of 5 with 2 rows emitted %d", len(rows))
	}
}

// fakeClock is advanced by the test.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time { return f.t }

func TestDatagenRateLimitFakeClock(t *testing.T) {
	d, _ := NewDatagen(DatagenConfig{Preset: "bid", RatePerSecond: 10000, BatchSize: 500})
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d.now = clk.now
	d.Open(t.Context(), octxFor(0, 2)) // 5000 rows/s for this subtask
	var c collector
	emitted := 0
	for step := range 100 { // 100 steps of 10ms = 1s
		for {
			st, err := d.Poll(t.Context(), &c)
			if err != nil {
				t.Fatal(err)
			}
			if st == stream.PollIdle {
				break
			}
		}
		emitted = len(c.rows())
		if want := 5000 * step / 100; emitted < want || emitted > want+2 {
			t.Fatalf("after %dms: %d rows, want about %d", step*10, emitted, want)
		}
		clk.t = clk.t.Add(10 * time.Millisecond)
	}
	for _, b := range c.batches {
		if b.Len() > 500 {
			t.Fatalf("batch of %d rows exceeds batchSize 500", b.Len())
		}
	}
}

func TestDatagenRateLimitRealClock(t *testing.T) {
	const rate, want = 4000.0, 400
	d, _ := NewDatagen(DatagenConfig{Preset: "bid", RatePerSecond: rate})
	d.Open(t.Context(), octxFor(0, 1))
	var c collector
	start := time.Now()
	n := 0
	for polls := 0; n < want; polls++ {
		if polls > 100000 {
			t.Fatalf("only %d rows after %d polls", n, polls)
		}
		if _, err := d.Poll(t.Context(), &c); err != nil {
			t.Fatal(err)
		}
		n = len(c.rows())
	}
	elapsed := time.Since(start)
	minimum := time.Duration(float64(n-1) / rate * float64(time.Second))
	if elapsed < minimum*9/10 || elapsed > 5*time.Second {
		t.Fatalf("%d rows at %v rows/s took %v, want about %v", n, rate, elapsed, minimum)
	}
}

func TestBidPresetMatchesBidAt(t *testing.T) {
	cfg := DatagenConfig{Preset: "bid", Rows: 3000, Seed: 99, BatchSize: 256}
	gen := NewBidGenerator(99)
	var bytes int
	auctions := map[int64]bool{}
	for i := range 2 {
		for k, row := range runDatagen(t, cfg, i, 2, 0) {
			seq := int64(i + 2*k)
			b := BidAt(99, seq)
			want := []any{b.Auction, b.Bidder, b.Price, b.Channel, b.URL, b.DateTime, b.Extra}
			if !reflect.DeepEqual(row, want) {
				t.Fatalf("seq %d: source %v, BidAt %v", seq, row, want)
			}
			if gen.At(seq) != b {
				t.Fatalf("seq %d: BidGenerator %v, BidAt %v", seq, gen.At(seq), b)
			}
			if b.DateTime != BidEpochMillis+seq || b.Price < BidMinPrice || b.Price > BidMaxPrice ||
				b.Auction < BidFirstAuction || b.Auction >= BidFirstAuction+BidAuctions {
				t.Fatalf("seq %d: bid out of shape: %+v", seq, b)
			}
			auctions[b.Auction] = true
			bytes += 32 + len(b.Channel) + len(b.URL) + len(b.Extra)
		}
	}
	if avg := bytes / 3000; avg < 80 || avg > 130 {
		t.Fatalf("average bid is %d bytes, want about 100", avg)
	}
	if len(auctions) < 500 {
		t.Fatalf("only %d distinct auctions in 3000 bids", len(auctions))
	}
	if BidAt(1, 5) == BidAt(2, 5) {
		t.Fatal("seed does not change bids")
	}
}

func TestDatagenPlanErrors(t *testing.T) {
	tests := []struct {
		name, config string
		want         []string
	}{
		{"unknown kind", `{"fields":[{"name":"x","kind":"zipf"}]}`, []string{`field "x"`, `unknown kind "zipf"`, "sequence, key, random"}},
		{"missing kind", `{"fields":[{"name":"x"}]}`, []string{`field "x"`, "missing kind"}},
		{"missing name", `{"fields":[{"kind":"sequence"}]}`, []string{"fields[0]", "missing name"}},
		{"min>max", `{"fields":[{"name":"v","kind":"random","min":10,"max":5}]}`, []string{`field "v"`, "min 10 is greater than max 5"}},
		{"float min>max", `{"fields":[{"name":"v","kind":"random","type":"float64","min":1.5,"max":0.5}]}`, []string{"min 1.5 is greater than max 0.5"}},
		{"no fields", `{"rows":10}`, []string{"no fields", "preset"}},
		{"unknown preset", `{"preset":"auction"}`, []string{`unknown preset "auction"`, "bid"}},
		{"preset and fields", `{"preset":"bid","fields":[{"name":"a","kind":"sequence"}]}`, []string{"remove either preset or fields"}},
		{"negative rows", `{"rows":-1,"preset":"bid"}`, []string{"rows -1"}},
		{"negative rate", `{"ratePerSecond":-1,"preset":"bid"}`, []string{"ratePerSecond -1"}},
		{"batch size", `{"batchSize":-3,"preset":"bid"}`, []string{"batchSize -3", "between 1 and"}},
		{"misspelt option", `{"preset":"bid","row":5}`, []string{"datagen", `unknown field "row"`}},
		{"option of other kind", `{"fields":[{"name":"id","kind":"sequence","cardinality":5}]}`, []string{`option "cardinality" does not apply to kind sequence`}},
		{"key without cardinality", `{"fields":[{"name":"k","kind":"key"}]}`, []string{"cardinality 0", "positive"}},
		{"bad type", `{"fields":[{"name":"k","kind":"key","cardinality":3,"type":"bool"}]}`, []string{"type bool is not supported by kind key", "string or int64"}},
		{"empty oneof", `{"fields":[{"name":"t","kind":"oneof"}]}`, []string{"non-empty \"values\""}},
		{"bad start", `{"fields":[{"name":"ts","kind":"timestamp","start":"yesterday"}]}`, []string{"start \"yesterday\"", "RFC3339"}},
		{"duplicate names", `{"fields":[{"name":"a","kind":"sequence"},{"name":"a","kind":"sequence"}]}`, []string{`"a" appears twice`}},
		{"min on bool", `{"fields":[{"name":"b","kind":"random","type":"bool","min":1}]}`, []string{"min and max apply only"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := planSource("datagen", tc.config)
			if err == nil {
				t.Fatal("Plan accepted a bad config")
			}
			if !errors.Is(err, stream.ErrConfig) {
				t.Errorf("error %q is not a stream.ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	s, err := planSource("datagen", testDatagenJSON)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.String(); got != "(id int64, key string, ikey int64, bigkey string, value int64, f float64, b bool, s string, ts timestamp, tag string)" {
		t.Fatalf("schema %s", got)
	}
	if s, err := planSource("datagen", `{"preset":"bid"}`); err != nil || !s.Equal(BidSchema) {
		t.Fatalf("bid preset plan = %v, %v", s, err)
	}
}

func TestDatagenThroughJobGraphPlan(t *testing.T) {
	r := stream.NewRegistry()
	Register(r)
	b := stream.NewBuilder("j")
	b.Source("gen", "datagen", json.RawMessage(`{"preset":"bid","rows":10}`)).Then("out", "discard", nil)
	g, _ := b.Build()
	if err := stream.Plan(g, r); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkDatagenBid(b *testing.B) {
	d, _ := NewDatagen(DatagenConfig{Preset: "bid"})
	d.Open(context.Background(), octxFor(0, 1))
	var rows int64
	out := releaser{rows: &rows}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.Poll(context.Background(), out)
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkBidAtBaseline(b *testing.B) {
	g := NewBidGenerator(0)
	var sum int64
	var seq int64
	for b.Loop() {
		bid := g.At(seq)
		sum += bid.Price + int64(len(bid.URL))
		seq++
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "rows/s")
	_ = sum
}

// releaser counts and releases batches, like the discard sink.
type releaser struct{ rows *int64 }

func (r releaser) Collect(b *stream.Batch) { *r.rows += int64(b.Len()); b.Release() }
func (r releaser) EmitWatermark(int64)     {}

func TestDatagenKeyedSequence(t *testing.T) {
	// key = seq % 6 and n = 1 + seq / 6: every key counts 1, 2, 3, ... and,
	// with 6 a multiple of the parallelism 3, comes from one subtask in order.
	cfg := DatagenConfig{Rows: 600, BatchSize: 7, Fields: []DatagenField{
		{Name: "key", Kind: "sequence", Modulo: 6},
		{Name: "n", Kind: "sequence", Divide: 6, Start: json.RawMessage("1")},
	}}
	for seq := int64(0); seq < cfg.Rows; seq++ {
		row := GenerateRow(cfg, seq)
		if row[0].(int64) != seq%6 || row[1].(int64) != 1+seq/6 {
			t.Fatalf("seq %d: got %v", seq, row)
		}
	}
	bad := cfg
	bad.Fields = []DatagenField{{Name: "x", Kind: "sequence", Modulo: 3, Divide: 2}}
	if _, err := bad.check(); !errors.Is(err, stream.ErrConfig) || !strings.Contains(err.Error(), "modulo 3, divide 2") {
		t.Fatalf("modulo and divide together: %v, want a config error naming both", err)
	}
}

// TestDatagenBatchDelay checks that a slow rate-limited subtask asks to be
// polled again once the rows of its batch delay are due, so that it emits
// a few rows a batch, and that batchDelay is validated.
func TestDatagenBatchDelay(t *testing.T) {
	for _, c := range []struct {
		delay    string
		wantIdle time.Duration // after the first row
		wantRows int           // in the batch emitted then
	}{
		{"", 100 * time.Millisecond, 8}, // default: 8 rows at 80 rows/s
		{"50ms", 50 * time.Millisecond, 4},
		{"0s", 12500 * time.Microsecond, 1},
	} {
		d, err := NewDatagen(DatagenConfig{Preset: "bid", RatePerSecond: 80, BatchDelay: c.delay})
		if err != nil {
			t.Fatal(err)
		}
		clk := &fakeClock{t: time.Unix(1000, 0)}
		d.now = clk.now
		if err := d.Open(t.Context(), octxFor(0, 1)); err != nil {
			t.Fatal(err)
		}
		var col collector
		if st, err := d.Poll(t.Context(), &col); st != stream.PollEmitted || err != nil || len(col.rows()) != 1 {
			t.Fatalf("batchDelay %q: first Poll = %v, %v, %d rows; want one row", c.delay, st, err, len(col.rows()))
		}
		if st, err := d.Poll(t.Context(), &col); st != stream.PollIdle || err != nil {
			t.Fatalf("batchDelay %q: second Poll = %v, %v; want PollIdle", c.delay, st, err)
		}
		if got := d.IdleFor(); got < c.wantIdle-time.Millisecond || got > c.wantIdle+time.Millisecond {
			t.Fatalf("batchDelay %q: IdleFor %v, want %v", c.delay, got, c.wantIdle)
		}
		clk.t = clk.t.Add(d.IdleFor())
		if st, err := d.Poll(t.Context(), &col); st != stream.PollEmitted || err != nil {
			t.Fatalf("batchDelay %q: Poll after the hint = %v, %v", c.delay, st, err)
		}
		if n := col.batches[len(col.batches)-1].Len(); n != c.wantRows {
			t.Fatalf("batchDelay %q: batch of %d rows after the hint, want %d", c.delay, n, c.wantRows)
		}
	}
	for _, bad := range []string{"-1s", "11s", "soon"} {
		_, err := NewDatagen(DatagenConfig{Preset: "bid", RatePerSecond: 80, BatchDelay: bad})
		if err == nil || !strings.Contains(err.Error(), "batchDelay") {
			t.Errorf("batchDelay %q: error %v, want one naming batchDelay", bad, err)
		}
	}
}

// TestDatagenDictionaryHints checks that every string column datagen fills
// from a pool names the pool's dictionary (stream.Column.Dict) and holds
// its values as the dictionary stores them, so that every row has a code,
// for the bid preset and the configurable kinds: key with a small
// cardinality, random strings and oneof. Columns formatted per row (key
// with a large cardinality) name none.
func TestDatagenDictionaryHints(t *testing.T) {
	for _, tc := range []struct {
		cfg    DatagenConfig
		hinted []string
	}{
		{DatagenConfig{Preset: "bid", Rows: 3000, Seed: 5, BatchSize: 256}, []string{"channel", "url", "extra"}},
		{testDatagenConfig(t), []string{"key", "s", "tag"}},
	} {
		d, err := NewDatagen(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Open(t.Context(), octxFor(0, 1)); err != nil {
			t.Fatal(err)
		}
		var c collector
		for range 1000 {
			st, err := d.Poll(context.Background(), &c)
			if err != nil {
				t.Fatal(err)
			}
			if st == stream.PollEnd {
				break
			}
		}
		if len(c.batches) < 2 {
			t.Fatalf("%s: %d batches", tc.cfg.Preset, len(c.batches))
		}
		for _, b := range c.batches {
			var hinted []string
			for j := range b.Cols {
				col := &b.Cols[j]
				if col.Dict == nil {
					continue
				}
				hinted = append(hinted, b.Schema.Fields[j].Name)
				for i, s := range col.Strs {
					if x := col.Dict.Code(s); x < 0 || col.Dict.Values[x] != s {
						t.Fatalf("column %s row %d: %q has no code (%d) in the column's dictionary", b.Schema.Fields[j].Name, i, s, x)
					}
				}
			}
			if !reflect.DeepEqual(hinted, tc.hinted) {
				t.Fatalf("columns with a dictionary: %v, want %v", hinted, tc.hinted)
			}
		}
	}
}
