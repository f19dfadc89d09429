package jobspec

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/stream"
)

// Small fake operator types, so these tests depend on no other package's
// operators. Only their Plan functions matter here.

func noSource([]byte) (stream.Source, error)     { return nil, errors.New("fake") }
func noOperator([]byte) (stream.Operator, error) { return nil, errors.New("fake") }

// genSchema is the fixed output of the "gen" source.
var genSchema = stream.MustSchema(
	stream.Field{Name: "key", Type: stream.TypeString},
	stream.Field{Name: "value", Type: stream.TypeInt64},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
)

var lineSchema = stream.MustSchema(stream.Field{Name: "line", Type: stream.TypeString})

func testRegistry() *stream.Registry {
	r := stream.NewRegistry()
	r.Register(stream.OperatorType{
		Name: "gen", Kind: stream.KindSource, NewSource: noSource,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c struct {
				Rows int `json:"rows"`
			}
			if err := stream.DecodeConfig(p.Config, &c); err != nil {
				return nil, err
			}
			if c.Rows < 0 {
				return nil, fmt.Errorf("config: rows must be at least 0, got %d", c.Rows)
			}
			return genSchema, nil
		},
	})
	r.Register(stream.OperatorType{
		Name: "file", Kind: stream.KindSource, NewSource: noSource,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return lineSchema, nil },
	})
	r.Register(stream.OperatorType{
		Name: "file", Kind: stream.KindSink, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return nil, nil },
	})
	r.Register(stream.OperatorType{
		Name: "sink", Kind: stream.KindSink, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return nil, nil },
	})
	// mapx adds typed fields: config {set: [{name, type}]}.
	r.Register(stream.OperatorType{
		Name: "mapx", Kind: stream.KindTransform, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			var c struct {
				Set []struct {
					Name string `json:"name"`
					Type string `json:"type"`
				} `json:"set"`
			}
			if err := stream.DecodeConfig(p.Config, &c); err != nil {
				return nil, err
			}
			fields := append([]stream.Field(nil), p.Inputs[0].Schema.Fields...)
			for i, s := range c.Set {
				if s.Name == "" {
					return nil, markedConfigError(fmt.Sprintf("mapx: set[%d]: missing name", i))
				}
				t, err := stream.ParseType(s.Type)
				if err != nil {
					return nil, fmt.Errorf("config: set[%d]: %v", i, err)
				}
				fields = append(fields, stream.Field{Name: s.Name, Type: t})
			}
			return stream.NewSchema(fields...)
		},
	})
	// agg counts per key; it needs a keyed input.
	r.Register(stream.OperatorType{
		Name: "agg", Kind: stream.KindTransform, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			if err := stream.DecodeConfig(p.Config, &struct{}{}); err != nil {
				return nil, err
			}
			in := p.Inputs[0]
			if len(in.KeyFields) == 0 {
				return nil, errors.New("agg needs a keyed input; set keyBy")
			}
			var fields []stream.Field
			for _, k := range in.KeyFields {
				fields = append(fields, in.Schema.Fields[in.Schema.Index(k)])
			}
			fields = append(fields, stream.Field{Name: "n", Type: stream.TypeInt64})
			return stream.NewSchema(fields...)
		},
	})
	// join has two inputs and outputs input 0's schema.
	r.Register(stream.OperatorType{
		Name: "join", Kind: stream.KindTransform, Inputs: 2, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil },
	})
	return r
}

// markedConfigError is a config error whose text does not start with
// "config" but which wraps stream.ErrConfig, like the connectors' errors.
type markedConfigError string

func (e markedConfigError) Error() string { return string(e) }
func (e markedConfigError) Unwrap() error { return stream.ErrConfig }
