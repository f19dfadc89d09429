package window

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

func TestPlanErrors(t *testing.T) {
	in := genSchema
	tests := []struct {
		name    string
		op      string
		config  string
		keys    []string
		wantErr string // "" means the plan must succeed
	}{
		{"ok tumbling", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "count"}]}`, []string{"id"}, ""},
		{"ok sliding global", TypeSlidingWindow, `{"size": "10s", "slide": "2s", "offset": "-1s", "aggregates": [{"fn": "avg", "field": "price"}]}`, nil, ""},
		{"ok watermarks", TypeWatermarks, `{"timestampField": "ts", "maxOutOfOrderness": "2s"}`, nil, ""},
		{"unknown fn", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "median", "field": "value"}]}`, nil, `unknown aggregate fn "median"`},
		{"no fn", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"field": "value"}]}`, nil, "fn is required"},
		{"missing field", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "sum", "field": "nope"}]}`, nil, `field "nope" is not in the input`},
		{"sum needs field", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "sum"}]}`, nil, "field is required"},
		{"sum of string", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "sum", "field": "name"}]}`, nil, `field "name" is string; sum needs an int64 or float64 field`},
		{"avg of timestamp", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "avg", "field": "ts"}]}`, nil, "avg needs an int64 or float64"},
		{"min of string", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "min", "field": "name"}]}`, nil, "min needs an int64, float64 or timestamp"},
		{"no aggregates", TypeTumblingWindow, `{"size": "10s"}`, nil, "aggregates is empty"},
		{"no size", TypeTumblingWindow, `{"aggregates": [{"fn": "count"}]}`, nil, "size is required"},
		{"bad size", TypeTumblingWindow, `{"size": "ten", "aggregates": [{"fn": "count"}]}`, nil, `size "ten" is not a duration`},
		{"zero size", TypeTumblingWindow, `{"size": "0s", "aggregates": [{"fn": "count"}]}`, nil, "must be positive"},
		{"negative size", TypeTumblingWindow, `{"size": "-1s", "aggregates": [{"fn": "count"}]}`, nil, "must be positive"},
		{"sub-millisecond", TypeTumblingWindow, `{"size": "1500us", "aggregates": [{"fn": "count"}]}`, nil, "whole number of milliseconds"},
		{"slide on tumbling", TypeTumblingWindow, `{"size": "10s", "slide": "1s", "aggregates": [{"fn": "count"}]}`, nil, "slide is not an option"},
		{"sliding without slide", TypeSlidingWindow, `{"size": "10s", "aggregates": [{"fn": "count"}]}`, nil, "slide is required"},
		{"slide does not divide size", TypeSlidingWindow, `{"size": "10s", "slide": "3s", "aggregates": [{"fn": "count"}]}`, nil, "not a multiple of slide"},
		{"slide larger than size", TypeSlidingWindow, `{"size": "1s", "slide": "2s", "aggregates": [{"fn": "count"}]}`, nil, "not a multiple of slide"},
		{"zero slide", TypeSlidingWindow, `{"size": "10s", "slide": "0s", "aggregates": [{"fn": "count"}]}`, nil, "slide \"0s\" must be positive"},
		{"offset too large", TypeTumblingWindow, `{"size": "10s", "offset": "10s", "aggregates": [{"fn": "count"}]}`, nil, "offset \"10s\" must be shorter than the size"},
		{"negative lateness", TypeTumblingWindow, `{"size": "10s", "allowedLateness": "-1s", "aggregates": [{"fn": "count"}]}`, nil, "allowedLateness \"-1s\" is negative"},
		{"unknown option", TypeTumblingWindow, `{"size": "10s", "sise": "1s", "aggregates": [{"fn": "count"}]}`, nil, `unknown field "sise"`},
		{"missing key field", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "count"}]}`, []string{"user"}, `key field "user" is not in the input`},
		{"name clash with key", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "count", "as": "id"}]}`, []string{"id"}, `output field "id" is both a key field and an aggregate`},
		{"name clash with bound", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "count", "as": "window_end"}]}`, nil, `"window_end" is both a window bound`},
		{"duplicate default names", TypeTumblingWindow, `{"size": "10s", "aggregates": [{"fn": "count"}, {"fn": "count"}]}`, nil, `output field "count" is produced by two aggregates`},
		{"watermarks without field", TypeWatermarks, `{"maxOutOfOrderness": "2s"}`, nil, "timestampField is required"},
		{"watermarks missing field", TypeWatermarks, `{"timestampField": "time"}`, nil, `timestampField "time" is not in the input`},
		{"watermarks float field", TypeWatermarks, `{"timestampField": "price"}`, nil, `timestampField "price" is float64`},
		{"watermarks negative bound", TypeWatermarks, `{"timestampField": "ts", "maxOutOfOrderness": "-2s"}`, nil, "is negative"},
	}
	reg := stream.NewRegistry()
	Register(reg)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ, ok := reg.Lookup(tt.op, false)
			if !ok {
				t.Fatalf("%s is not registered", tt.op)
			}
			out, err := typ.Plan(&stream.PlanContext{UID: "w", Config: []byte(tt.config), Inputs: []stream.PlanInput{{Schema: in, KeyFields: tt.keys}}, Parallelism: 1})
			if tt.wantErr == "" {
				if err != nil || out == nil {
					t.Fatalf("Plan: %v", err)
				}
				if _, err := typ.NewOperator([]byte(tt.config)); err != nil {
					t.Fatalf("NewOperator: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Plan succeeded with %s, want error containing %q", out, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Plan error %q, want it to contain %q", err, tt.wantErr)
			}
			if !errors.Is(err, stream.ErrConfig) {
				t.Errorf("Plan error %v is not stream.ErrConfig", err)
			}
		})
	}
}

func TestPlanOutputSchema(t *testing.T) {
	out, err := planWindow(TypeSlidingWindow, &stream.PlanContext{
		Config: []byte(`{"size": "10s", "slide": "5s", "aggregates": [{"fn": "count"}, {"fn": "count", "field": "value"}, {"fn": "sum", "field": "value", "as": "total"}, {"fn": "sum", "field": "price"}, {"fn": "min", "field": "ts"}, {"fn": "max", "field": "price"}, {"fn": "avg", "field": "value"}]}`),
		Inputs: []stream.PlanInput{{Schema: genSchema, KeyFields: []string{"name", "id"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "(name string, id int64, window_start timestamp, window_end timestamp, count int64, count_value int64, total int64, sum_price float64, min_ts timestamp, max_price float64, avg_value float64)"
	if out.String() != want {
		t.Fatalf("output schema\n %s\nwant\n %s", out, want)
	}
}

// TestRegisterInJob plans a whole job through the registry, as submission
// does.
func TestRegisterInJob(t *testing.T) {
	reg := stream.NewRegistry()
	Register(reg)
	reg.Register(stream.OperatorType{
		Name: "gen", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
		NewSource: func([]byte) (stream.Source, error) { return nil, errors.New("not for running") },
	})
	b := stream.NewBuilder("job")
	b.Source("src", "gen", nil).
		Then("stamp", TypeWatermarks, WatermarksConfig{TimestampField: "ts", MaxOutOfOrderness: "1s"}).
		KeyBy("id").
		Then("win", TypeTumblingWindow, WindowConfig{Size: "1m", Aggregates: []AggregateConfig{{Fn: "count", As: "n"}}})
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	if got, want := g.Vertices[2].OutSchema.String(), "(id int64, window_start timestamp, window_end timestamp, n int64)"; got != want {
		t.Fatalf("window output %s, want %s", got, want)
	}
}
