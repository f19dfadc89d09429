package jobspec

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// builtinLikeRegistry registers stand-ins for the built-in operator types
// with the same names and config shapes (unknown config keys are errors), so
// the example specs are checked here without importing the real operators.
// The lead also validates the examples against the real ones.
func builtinLikeRegistry() *stream.Registry {
	r := stream.NewRegistry()
	duration := func(what, s string, required bool) error {
		if s == "" && !required {
			return nil
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Errorf("config: %s: %v", what, err)
		}
		return nil
	}
	r.Register(stream.OperatorType{Name: "datagen", Kind: stream.KindSource, NewSource: noSource,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c struct {
				Rows          int64   `json:"rows"`
				RatePerSecond float64 `json:"ratePerSecond"`
				Seed          int64   `json:"seed"`
				BatchSize     int     `json:"batchSize"`
				Preset        string  `json:"preset"`
				Fields        []struct {
					Name, Kind, Type, Prefix string
					Cardinality, Length      int64
					Min, Max                 *float64
					Start                    any
					StepMillis, JitterMillis int64
					Values                   []string
				} `json:"fields"`
			}
			if err := stream.DecodeConfig(p.Config, &c); err != nil {
				return nil, err
			}
			if c.Preset == "bid" {
				return stream.NewSchema(
					stream.Field{Name: "auction", Type: stream.TypeInt64},
					stream.Field{Name: "bidder", Type: stream.TypeInt64},
					stream.Field{Name: "price", Type: stream.TypeInt64},
					stream.Field{Name: "channel", Type: stream.TypeString},
					stream.Field{Name: "url", Type: stream.TypeString},
					stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
					stream.Field{Name: "extra", Type: stream.TypeString},
				)
			}
			var fields []stream.Field
			for i, f := range c.Fields {
				t := stream.TypeString
				switch f.Kind {
				case "sequence":
					t = stream.TypeInt64
				case "timestamp":
					t = stream.TypeTimestamp
				case "key", "random", "oneof":
					if f.Type != "" {
						var err error
						if t, err = stream.ParseType(f.Type); err != nil {
							return nil, fmt.Errorf("config: fields[%d]: %v", i, err)
						}
					} else if f.Kind == "random" {
						t = stream.TypeInt64
					}
				default:
					return nil, fmt.Errorf("config: fields[%d]: unknown kind %q", i, f.Kind)
				}
				fields = append(fields, stream.Field{Name: f.Name, Type: t})
			}
			return stream.NewSchema(fields...)
		}})
	r.Register(stream.OperatorType{Name: "watermarks", Kind: stream.KindTransform, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c struct {
				TimestampField    string `json:"timestampField"`
				MaxOutOfOrderness string `json:"maxOutOfOrderness"`
			}
			if err := stream.DecodeConfig(p.Config, &c); err != nil {
				return nil, err
			}
			in := p.Inputs[0].Schema
			if i := in.Index(c.TimestampField); i < 0 || in.Fields[i].Type != stream.TypeTimestamp {
				return nil, fmt.Errorf("config: timestampField %q is not a timestamp field of %v", c.TimestampField, in)
			}
			return in, duration("maxOutOfOrderness", c.MaxOutOfOrderness, false)
		}})
	window := func(p *stream.PlanContext) (*stream.Schema, error) {
		var c struct {
			Size, Slide, Offset, AllowedLateness string
			Aggregates                           []struct{ Fn, Field, As string }
		}
		if err := stream.DecodeConfig(p.Config, &c); err != nil {
			return nil, err
		}
		for what, d := range map[string]string{"slide": c.Slide, "offset": c.Offset, "allowedLateness": c.AllowedLateness} {
			if err := duration(what, d, false); err != nil {
				return nil, err
			}
		}
		if err := duration("size", c.Size, true); err != nil {
			return nil, err
		}
		in := p.Inputs[0]
		if len(in.KeyFields) == 0 {
			return nil, errors.New("windows need a keyed input; set keyBy")
		}
		var fields []stream.Field
		for _, k := range in.KeyFields {
			fields = append(fields, in.Schema.Fields[in.Schema.Index(k)])
		}
		fields = append(fields, stream.Field{Name: "window_start", Type: stream.TypeTimestamp}, stream.Field{Name: "window_end", Type: stream.TypeTimestamp})
		for i, a := range c.Aggregates {
			t := stream.TypeInt64
			if a.Fn != "count" {
				j := in.Schema.Index(a.Field)
				if j < 0 {
					return nil, fmt.Errorf("config: aggregates[%d]: no field %q", i, a.Field)
				}
				t = in.Schema.Fields[j].Type
			}
			switch a.Fn {
			case "count", "sum", "min", "max":
			case "avg":
				t = stream.TypeFloat64
			default:
				return nil, fmt.Errorf("config: aggregates[%d]: unknown fn %q", i, a.Fn)
			}
			fields = append(fields, stream.Field{Name: a.As, Type: t})
		}
		return stream.NewSchema(fields...)
	}
	r.Register(stream.OperatorType{Name: "tumbling_window", Kind: stream.KindTransform, NewOperator: noOperator, Plan: window})
	r.Register(stream.OperatorType{Name: "sliding_window", Kind: stream.KindTransform, NewOperator: noOperator, Plan: window})
	r.Register(stream.OperatorType{Name: "map", Kind: stream.KindTransform, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c struct{ Set []struct{ Name, Expr string } }
			if err := stream.DecodeConfig(p.Config, &c); err != nil {
				return nil, err
			}
			fields := append([]stream.Field(nil), p.Inputs[0].Schema.Fields...)
			for _, s := range c.Set {
				if s.Name == "" || s.Expr == "" {
					return nil, errors.New("config: set: every entry needs name and expr")
				}
				fields = append(fields, stream.Field{Name: s.Name, Type: stream.TypeFloat64})
			}
			return stream.NewSchema(fields...)
		}})
	r.Register(stream.OperatorType{Name: "filter", Kind: stream.KindTransform, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c struct{ Where string }
			if err := stream.DecodeConfig(p.Config, &c); err != nil {
				return nil, err
			}
			if c.Where == "" {
				return nil, errors.New("config: where is required")
			}
			return p.Inputs[0].Schema, nil
		}})
	sink := func(name string, check func(cfg []byte) error) {
		r.Register(stream.OperatorType{Name: name, Kind: stream.KindSink, NewOperator: noOperator,
			Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return nil, check(p.Config) }})
	}
	sink("discard", func(cfg []byte) error { return stream.DecodeConfig(cfg, &struct{}{}) })
	sink("print", func(cfg []byte) error { return stream.DecodeConfig(cfg, &struct{ Format string }{}) })
	sink("file", func(cfg []byte) error {
		var c struct{ Path, Format string }
		if err := stream.DecodeConfig(cfg, &c); err != nil {
			return err
		}
		if c.Path == "" || (c.Format != "csv" && c.Format != "jsonl" && c.Format != "") {
			return errors.New("config: path is required and format is csv or jsonl")
		}
		return nil
	})
	return r
}

func TestExamples(t *testing.T) {
	tests := []struct {
		file     string
		vertices []string
		edges    []string
		schemas  map[string]string
	}{
		{
			file:     "window-counts.yaml",
			vertices: []string{"events:Events:datagen:p2", "stamped:stamped:watermarks:p2", "counts:Counts per key and second:tumbling_window:p4", "out:out:file:p4"},
			edges:    []string{"events->stamped#0 forward", "stamped->counts#0 hash[key]", "counts->out#0 forward"},
			schemas: map[string]string{
				"events": "(key string, value int64, ts timestamp)",
				"counts": "(key string, window_start timestamp, window_end timestamp, n int64, total int64, max_value int64)",
			},
		},
		{
			file:     "nexmark-q1.yaml",
			vertices: []string{"bids:bids:datagen:p1", "convert:convert:map:p1", "expensive:expensive:filter:p1", "sink:sink:discard:p1"},
			edges:    []string{"bids->convert#0 forward", "convert->expensive#0 forward", "expensive->sink#0 forward"},
			schemas: map[string]string{
				"expensive": "(auction int64, bidder int64, price int64, channel string, url string, dateTime timestamp, extra string, price_eur float64)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			g, err := Load(filepath.Join("..", "examples", tc.file), builtinLikeRegistry())
			if err != nil {
				t.Fatal(err)
			}
			vs, es, _ := describeGraph(g)
			if got, want := strings.Join(vs, "\n"), strings.Join(tc.vertices, "\n"); got != want {
				t.Errorf("vertices:\n%s\nwant:\n%s", got, want)
			}
			if got, want := strings.Join(es, "\n"), strings.Join(tc.edges, "\n"); got != want {
				t.Errorf("edges:\n%s\nwant:\n%s", got, want)
			}
			for _, v := range g.Vertices {
				if want, ok := tc.schemas[v.UID]; ok && v.OutSchema.String() != want {
					t.Errorf("schema of %s = %v, want %s", v.UID, v.OutSchema, want)
				}
			}
		})
	}
}
