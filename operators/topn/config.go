package topn

import (
	"strings"
	"time"

	"github.com/weirstream/weir/stream"
)

// Operator type names.
const (
	TypeTopN = "window_topn"
	TypeMax  = "window_max"
)

// Names of the window bounds in the output.
const (
	FieldWindowStart = "window_start"
	FieldWindowEnd   = "window_end"
)

// Config is the JSON config of window_topn and window_max. Durations are Go
// durations with millisecond precision.
type Config struct {
	// Size is the window length. Required.
	Size string `json:"size"`
	// Slide makes the windows sliding: they start every slide, which must
	// divide size. Default: size (tumbling windows).
	Slide string `json:"slide,omitempty"`
	// Offset shifts window starts to offset + k*slide; |offset| < slide.
	Offset string `json:"offset,omitempty"`
	// Field is the int64, float64 or timestamp field ranked. Required.
	Field string `json:"field"`
	// N is how many rows to keep per key and window (window_topn; default
	// 1). window_max keeps the top 1.
	N int `json:"n,omitempty"`
	// Order is "desc" (largest first, the default) or "asc".
	Order string `json:"order,omitempty"`
	// WithTies keeps every row whose value equals the n-th best. Default
	// false for window_topn, true for window_max.
	WithTies *bool `json:"withTies,omitempty"`
	// WindowBounds appends window_start and window_end. Default true.
	WindowBounds *bool `json:"windowBounds,omitempty"`
	// RankAs, when set, names an int64 output field with each row's rank
	// (1 = best; tied rows share a rank).
	RankAs string `json:"rankAs,omitempty"`
}

// Register adds window_topn and window_max to r.
func Register(r *stream.Registry) {
	for _, op := range []string{TypeTopN, TypeMax} {
		r.Register(stream.OperatorType{
			Name: op,
			Kind: stream.KindTransform,
			Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
				s, err := parse(op, p.Config)
				if err != nil {
					return nil, err
				}
				r, err := s.resolve(p.Inputs[0].Schema, p.Inputs[0].KeyFields)
				if err != nil {
					return nil, err
				}
				if len(r.keyCols) > 0 {
					p.DeclareState(stream.StateDecl{Name: panesTable, Kind: stream.StateValue})
				} else {
					p.DeclareState(stream.StateDecl{Name: globalState, Kind: stream.StateOperatorList})
				}
				p.DeclareState(stream.StateDecl{Name: signatureState, Kind: stream.StateUnion})
				p.DeclareState(stream.StateDecl{Name: watermarkState, Kind: stream.StateUnion})
				return r.out, nil
			},
			NewOperator: func(config []byte) (stream.Operator, error) { return New(op, config) },
			Config:      Config{},
			Doc:         docOf(op),
		})
	}
}

func docOf(op string) string {
	if op == TypeMax {
		return "per key and event-time window, the rows with the largest value of a field, ties kept ({size, slide, field})"
	}
	return "per key and event-time window, the n rows with the largest (or smallest) value of a field ({size, slide, field, n, order, withTies, rankAs})"
}

type spec struct {
	op                  string
	size, slide, offset int64
	field               string
	n                   int
	asc, ties, bounds   bool
	rankAs              string
}

func millis(op, name, v string) (int64, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, stream.ConfigErrorf("%s: %s %q is not a duration; write a Go duration such as \"10s\" or \"500ms\"", op, name, v)
	}
	if d%time.Millisecond != 0 {
		return 0, stream.ConfigErrorf("%s: %s %q is not a whole number of milliseconds; event time has millisecond precision", op, name, v)
	}
	return d.Milliseconds(), nil
}

func parse(op string, raw []byte) (*spec, error) {
	var c Config
	if err := stream.DecodeConfig(raw, &c); err != nil {
		return nil, stream.ConfigErrorf("%s: %v", op, err)
	}
	s := &spec{op: op, field: c.Field, n: 1, ties: op == TypeMax, bounds: true, rankAs: c.RankAs}
	var err error
	if c.Size == "" {
		return nil, stream.ConfigErrorf("%s: size is required (the window length, e.g. \"10s\")", op)
	}
	if s.size, err = millis(op, "size", c.Size); err != nil {
		return nil, err
	}
	if s.size <= 0 {
		return nil, stream.ConfigErrorf("%s: size %q must be positive", op, c.Size)
	}
	s.slide = s.size
	if c.Slide != "" {
		if s.slide, err = millis(op, "slide", c.Slide); err != nil {
			return nil, err
		}
		if s.slide <= 0 || s.slide > s.size || s.size%s.slide != 0 {
			return nil, stream.ConfigErrorf("%s: slide %q must be positive and divide size %q (e.g. size \"10s\", slide \"2s\")", op, c.Slide, c.Size)
		}
	}
	if c.Offset != "" {
		if s.offset, err = millis(op, "offset", c.Offset); err != nil {
			return nil, err
		}
	}
	if s.offset <= -s.slide || s.offset >= s.slide {
		return nil, stream.ConfigErrorf("%s: offset %q must be shorter than the slide (%dms) in either direction", op, c.Offset, s.slide)
	}
	if c.Field == "" {
		return nil, stream.ConfigErrorf("%s: field is required: name the int64, float64 or timestamp field to rank by", op)
	}
	switch {
	case op == TypeMax && c.N != 0:
		return nil, stream.ConfigErrorf("%s: n is not an option of window_max (it keeps the top 1); use window_topn for n rows", op)
	case c.N < 0:
		return nil, stream.ConfigErrorf("%s: n %d must be positive (default 1)", op, c.N)
	case c.N > 0:
		s.n = c.N
	}
	switch strings.ToLower(c.Order) {
	case "", "desc":
	case "asc":
		s.asc = true
	default:
		return nil, stream.ConfigErrorf("%s: order %q: want desc (largest first, the default) or asc", op, c.Order)
	}
	if c.WithTies != nil {
		s.ties = *c.WithTies
	}
	if c.WindowBounds != nil {
		s.bounds = *c.WindowBounds
	}
	return s, nil
}

type resolved struct {
	keyCols []int
	col     int
	out     *stream.Schema
}

func (s *spec) resolve(in *stream.Schema, keys []string) (*resolved, error) {
	r := &resolved{col: in.Index(s.field)}
	if r.col < 0 {
		return nil, stream.ConfigErrorf("%s: field %q is not in the input (the input has %s)", s.op, s.field, strings.Join(in.Names(), ", "))
	}
	if t := in.Fields[r.col].Type; !t.IsNumeric() {
		return nil, stream.ConfigErrorf("%s: field %q is %v; rank by an int64, float64 or timestamp field", s.op, s.field, t)
	}
	if len(keys) > 0 {
		cols, err := in.Lookup(keys...)
		if err != nil {
			return nil, stream.ConfigErrorf("%s: key: %v", s.op, err)
		}
		r.keyCols = cols
	}
	fields := append([]stream.Field(nil), in.Fields...)
	if s.bounds {
		fields = append(fields, stream.Field{Name: FieldWindowStart, Type: stream.TypeTimestamp}, stream.Field{Name: FieldWindowEnd, Type: stream.TypeTimestamp})
	}
	if s.rankAs != "" {
		fields = append(fields, stream.Field{Name: s.rankAs, Type: stream.TypeInt64})
	}
	out, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: output schema: %v; the input already has that field: set windowBounds: false (when the input carries the window bounds already) or choose another rankAs", s.op, err)
	}
	r.out = out
	return r, nil
}
