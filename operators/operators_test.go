package operators

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var bidSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "price", Type: stream.TypeInt64},
	stream.Field{Name: "channel", Type: stream.TypeString},
	stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
)

// testCollector keeps what an operator emits.
type testCollector struct {
	batches []*stream.Batch
	wms     []int64
}

func (c *testCollector) Collect(b *stream.Batch) { c.batches = append(c.batches, b) }
func (c *testCollector) EmitWatermark(wm int64)  { c.wms = append(c.wms, wm) }

// rows returns every collected row with its event time appended.
func (c *testCollector) rows(t *testing.T) [][]any {
	t.Helper()
	var out [][]any
	for _, b := range c.batches {
		if err := b.Validate(); err != nil {
			t.Fatalf("emitted batch: %v", err)
		}
		if b.Len() == 0 {
			t.Fatal("emitted an empty batch")
		}
		for i := range b.Len() {
			out = append(out, append(b.Row(i), b.Times[i]))
		}
	}
	return out
}

type row struct {
	auction, price any
	channel        any
	time           int64
}

// randomRows returns bids; about one value in ten is null.
func randomRows(r *rand.Rand, n int) []row {
	channels := []string{"apple", "google", "facebook", "baidu"}
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{auction: int64(1000 + r.IntN(500)), price: int64(r.IntN(300)), channel: channels[r.IntN(4)], time: int64(1000 + i)}
		if r.IntN(10) == 0 {
			rows[i].price = nil
		}
		if r.IntN(10) == 0 {
			rows[i].channel = nil
		}
	}
	return rows
}

// makeBatches splits rows into batches of the given sizes, with event times.
func makeBatches(rows []row, sizes ...int) []*stream.Batch {
	var out []*stream.Batch
	for _, n := range sizes {
		b := stream.NewBatch(bidSchema, n)
		for _, r := range rows[:n] {
			b.AppendRow(r.auction, r.price, r.channel, r.time*10)
			b.Times = append(b.Times, r.time)
		}
		rows = rows[n:]
		out = append(out, b)
	}
	return out
}

// run plans typ with config, opens an instance and feeds it batches.
func run(t *testing.T, typ, config string, in *stream.Schema, batches []*stream.Batch) (*stream.Schema, *testCollector) {
	t.Helper()
	reg := stream.NewRegistry()
	Register(reg)
	ot, ok := reg.Lookup(typ, false)
	if !ok {
		t.Fatalf("%s not registered", typ)
	}
	outSchema, err := ot.Plan(&stream.PlanContext{UID: "op", Config: []byte(config), Inputs: []stream.PlanInput{{Schema: in}}, Parallelism: 1})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	op, err := ot.NewOperator([]byte(config))
	if err != nil {
		t.Fatalf("NewOperator: %v", err)
	}
	octx := &stream.OperatorContext{OperatorUID: "op", Parallelism: 1, InputSchemas: []*stream.Schema{in}, OutputSchema: outSchema, Config: []byte(config)}
	if err := op.Open(t.Context(), octx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	c := &testCollector{}
	for _, b := range batches {
		if err := op.ProcessBatch(0, b, c); err != nil {
			t.Fatalf("ProcessBatch: %v", err)
		}
	}
	if err := op.ProcessWatermark(12345, c); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.wms, []int64{12345}) {
		t.Fatalf("watermarks forwarded: %v", c.wms)
	}
	if err := op.Finish(c); err != nil {
		t.Fatal(err)
	}
	if err := op.Close(); err != nil {
		t.Fatal(err)
	}
	for _, b := range c.batches {
		if !b.Schema.Equal(outSchema) {
			t.Fatalf("emitted schema %s, planned %s", b.Schema, outSchema)
		}
	}
	return outSchema, c
}

func TestMap(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(1, 1)), 400)
	config := `{"set": [
		{"name": "price_eur", "expr": "price * 0.908"},
		{"name": "price", "expr": "price * 2"},
		{"name": "channel", "expr": "len(channel)"},
		{"name": "p2", "expr": "price"},
		{"name": "hot", "expr": "auction % 7 == 0 || channel == 'apple'"}
	]}`
	schema, c := run(t, "map", config, bidSchema, makeBatches(rows, 100, 1, 0, 299))
	want := stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "price", Type: stream.TypeInt64},
		stream.Field{Name: "channel", Type: stream.TypeInt64},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
		stream.Field{Name: "price_eur", Type: stream.TypeFloat64},
		stream.Field{Name: "p2", Type: stream.TypeInt64},
		stream.Field{Name: "hot", Type: stream.TypeBool},
	)
	if !schema.Equal(want) {
		t.Fatalf("schema %s, want %s", schema, want)
	}
	var wantRows [][]any
	for _, r := range rows {
		var eur, price2, p2, chLen, hot any
		if p, ok := r.price.(int64); ok {
			eur, price2, p2 = float64(p)*0.908, p*2, p
		}
		if ch, ok := r.channel.(string); ok {
			chLen = int64(len(ch))
			hot = r.auction.(int64)%7 == 0 || ch == "apple"
		} else if r.auction.(int64)%7 == 0 {
			hot = true // true || null is true
		}
		wantRows = append(wantRows, []any{r.auction, price2, chLen, r.time * 10, eur, p2, hot, r.time})
	}
	if got := c.rows(t); !reflect.DeepEqual(got, wantRows) {
		t.Fatalf("rows differ; first got %v, want %v", first(got), first(wantRows))
	}
}

func TestFilter(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(2, 2)), 700)
	config := `{"where": "price > 100 && channel != 'apple'"}`
	// The third batch matches nothing: it must not be forwarded.
	none := []row{{auction: int64(1), price: int64(5), channel: "x", time: 1}, {auction: int64(2), price: nil, channel: "y", time: 2}}
	batches := append(makeBatches(rows, 300, 400), makeBatches(none, 2)...)
	schema, c := run(t, "filter", config, bidSchema, batches)
	if !schema.Equal(bidSchema) {
		t.Fatalf("schema %s", schema)
	}
	var want [][]any
	for _, r := range rows {
		p, ok1 := r.price.(int64)
		ch, ok2 := r.channel.(string)
		if ok1 && ok2 && p > 100 && ch != "apple" {
			want = append(want, []any{r.auction, r.price, r.channel, r.time * 10, r.time})
		}
	}
	if len(c.batches) != 2 {
		t.Fatalf("forwarded %d batches, want 2 (the empty result is released)", len(c.batches))
	}
	if got := c.rows(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %d rows, want %d; first got %v, want %v", len(got), len(want), first(got), first(want))
	}
}

func TestProject(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(3, 3)), 200)
	config := `{"fields": [
		{"name": "channel"},
		{"name": "eur", "expr": "price * 0.908"},
		{"name": "auction"},
		{"name": "tag", "expr": "upper(channel) + '-' + string(auction)"}
	]}`
	schema, c := run(t, "project", config, bidSchema, makeBatches(rows, 64, 0, 136))
	want := stream.MustSchema(
		stream.Field{Name: "channel", Type: stream.TypeString},
		stream.Field{Name: "eur", Type: stream.TypeFloat64},
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "tag", Type: stream.TypeString},
	)
	if !schema.Equal(want) {
		t.Fatalf("schema %s, want %s", schema, want)
	}
	var wantRows [][]any
	for _, r := range rows {
		var eur, tag any
		if p, ok := r.price.(int64); ok {
			eur = float64(p) * 0.908
		}
		if ch, ok := r.channel.(string); ok {
			tag = fmt.Sprintf("%s-%d", strings.ToUpper(ch), r.auction)
		}
		wantRows = append(wantRows, []any{r.channel, eur, r.auction, tag, r.time})
	}
	if got := c.rows(t); !reflect.DeepEqual(got, wantRows) {
		t.Fatalf("rows differ; first got %v, want %v", first(got), first(wantRows))
	}
}

func first(rows [][]any) []any {
	if len(rows) == 0 {
		return nil
	}
	return rows[0]
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		typ, config, wantErr string
	}{
		{"filter", `{"where": "price > 'x'"}`, `filter: where: expression "price > 'x'": invalid operation: > (mismatched types int and string)`},
		{"filter", `{"where": "price * 2"}`, `filter: where: expression "price * 2" has type int64, but a filter needs a bool`},
		{"filter", `{}`, `filter: where: expression is empty`},
		{"filter", `{"wher": "true"}`, `filter: config: unknown field "wher"`},
		{"filter", `{"where": "rat > 1"}`, `filter: where: expression "rat > 1": unknown field "rat" (fields: auction, price, channel, dateTime)`},
		{"map", `{"set": []}`, `map: set: no fields`},
		{"map", `{"set": [{"expr": "1"}]}`, `map: set[0]: name is empty`},
		{"map", `{"set": [{"name": "a", "expr": "1"}, {"name": "a", "expr": "2"}]}`, `map: set[1] (a): set[0] already sets "a"`},
		{"map", `{"set": [{"name": "eur", "expr": "price * rat"}]}`, `map: set[0] (eur): expression "price * rat": unknown field "rat" (fields: auction, price, channel, dateTime)`},
		{"map", `{"set": [{"name": "eur"}]}`, `map: set[0] (eur): expression is empty`},
		{"map", `{"set": [{"name": "x", "expr": "\"name\" + 1"}]}`, `mismatched types string and int`},
		{"project", `{"fields": []}`, `project: fields: none listed`},
		{"project", `{"fields": [{"name": "nope"}]}`, `project: fields[0]: no input field "nope" (the input has auction, price, channel, dateTime)`},
		{"project", `{"fields": [{"name": "price"}, {"name": "price", "expr": "1"}]}`, `project: fields[1]: name "price" is also used by fields[0]`},
		{"project", `{"fields": [{"name": "x", "expr": "price +"}]}`, `project: fields[0] (x): expression "price +": unexpected token EOF`},
		{"project", `{"fields": [{"name": ""}]}`, `project: fields[0]: name is empty`},
	}
	reg := stream.NewRegistry()
	Register(reg)
	for _, tt := range tests {
		t.Run(tt.typ+" "+tt.config, func(t *testing.T) {
			ot, _ := reg.Lookup(tt.typ, false)
			_, err := ot.Plan(&stream.PlanContext{UID: "op", Config: []byte(tt.config), Inputs: []stream.PlanInput{{Schema: bidSchema}}, Parallelism: 1})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, stream.ErrConfig) {
				t.Fatalf("error %v does not wrap stream.ErrConfig", err)
			}
		})
	}
}

// TestRuntimeError checks that an evaluation error names the operator option
// and the expression, and that the batch is not leaked to the collector.
func TestRuntimeError(t *testing.T) {
	config := []byte(`{"set": [{"name": "r", "expr": "auction % price"}]}`)
	op, err := NewMap(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Open(t.Context(), &stream.OperatorContext{InputSchemas: []*stream.Schema{bidSchema}, Config: config}); err != nil {
		t.Fatal(err)
	}
	b := stream.NewBatch(bidSchema, 1)
	b.AppendRow(int64(5), int64(0), "x", int64(0))
	c := &testCollector{}
	err = op.ProcessBatch(0, b, c)
	want := `map: set[0] (r): expression "auction % price": row 0: auction % price: integer division by zero`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if len(c.batches) != 0 {
		t.Fatal("a failed batch was forwarded")
	}
}

// TestOpenChecksPlannedSchema: an instance opened against an input other
// than the planned one fails instead of emitting batches of the wrong shape.
func TestOpenChecksPlannedSchema(t *testing.T) {
	config := []byte(`{"set": [{"name": "eur", "expr": "price * 0.9"}]}`)
	op, err := NewMap(config)
	if err != nil {
		t.Fatal(err)
	}
	err = op.Open(t.Context(), &stream.OperatorContext{InputSchemas: []*stream.Schema{bidSchema}, OutputSchema: bidSchema})
	if err == nil || !strings.Contains(err.Error(), "differs from the planned") {
		t.Fatalf("got %v", err)
	}
	if _, err := NewFilter([]byte(`{"bogus": 1}`)); err == nil {
		t.Fatal("NewFilter accepted an unknown option")
	}
}
