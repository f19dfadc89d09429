package join

import (
	"strings"
	"time"

	"github.com/weirstream/weir/stream"
)

// Operator type names.
const (
	TypeWindowJoin = "window_join"
	TypeStreamJoin = "stream_join"
)

// Names of the window bounds in window_join's output.
const (
	FieldWindowStart = "window_start"
	FieldWindowEnd   = "window_end"
)

// DefaultRightPrefix renames clashing fields of input 1.
const DefaultRightPrefix = "right_"

// Config is the JSON config of window_join and stream_join.
type Config struct {
	// Size is the tumbling window length of window_join, a Go duration
	// ("10s") with millisecond precision. Required for window_join; not an
	// option of stream_join.
	Size string `json:"size,omitempty"`
	// Offset shifts window starts to offset + k*size (window_join). Its
	// magnitude must be below size. Default "0s".
	Offset string `json:"offset,omitempty"`
	// RightPrefix is prepended to the name of each field of input 1 that
	// input 0 also has. Default "right_".
	RightPrefix string `json:"rightPrefix,omitempty"`
	// WindowBounds says whether window_join appends window_start and
	// window_end to its output. Default true.
	WindowBounds *bool `json:"windowBounds,omitempty"`
	// TTL is stream_join's idle-state retention, a Go duration ("10m") of
	// whole milliseconds, at least 1ms. A stored row expires TTL after it
	// was stored, in processing time (the task's clock, not event time):
	// from then on it joins no arriving row, as if it had been removed. So
	// two rows with equal keys join only if the later one arrives less than
	// TTL after the earlier one. Each row expires on its own (rows are
	// written once, so "since last write" is "since stored"); a key whose
	// rows have all expired holds no state. Expired rows are removed when
	// their key is next accessed and by incremental cleanup, which checks a
	// few keys of the subtask at every access (statebackend.TTLConfig with
	// DefaultCleanupPerAccess), so that state stays bounded on a stream of
	// ever new keys; checkpoints of the heap backend leave expired rows
	// out. Expiry survives restores: rows keep the time they were stored.
	// Switching TTL on or off for a job restored from a checkpoint fails:
	// start such a job without the checkpoint. Default: none, every row is
	// kept forever. Not an option of window_join, whose state ends with
	// its windows.
	TTL string `json:"ttl,omitempty"`
}

// Register adds window_join and stream_join to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:   TypeWindowJoin,
		Kind:   stream.KindTransform,
		Inputs: 2,
		Plan:   func(p *stream.PlanContext) (*stream.Schema, error) { return plan(TypeWindowJoin, p) },
		NewOperator: func(config []byte) (stream.Operator, error) {
			return NewWindowJoin(config)
		},
		Config: Config{},
		Doc:    "keyed event-time tumbling window join of two inputs ({size, rightPrefix, windowBounds}), emitted when the watermark passes the window end",
	})
	r.Register(stream.OperatorType{
		Name:   TypeStreamJoin,
		Kind:   stream.KindTransform,
		Inputs: 2,
		Plan:   func(p *stream.PlanContext) (*stream.Schema, error) { return plan(TypeStreamJoin, p) },
		NewOperator: func(config []byte) (stream.Operator, error) {
			return NewStreamJoin(config)
		},
		Config: Config{},
		Doc:    "keyed streaming inner join of two inputs, both kept in state, rows expiring ttl after they are stored when set ({rightPrefix, ttl})",
	})
}

// spec is a parsed config.
type spec struct {
	op           string
	size, offset int64 // ms; window_join only
	prefix       string
	bounds       bool
	ttl          int64 // ms; stream_join only; 0 = none
}

func parse(op string, raw []byte) (*spec, error) {
	var c Config
	if err := stream.DecodeConfig(raw, &c); err != nil {
		return nil, stream.ConfigErrorf("%s: %v", op, err)
	}
	s := &spec{op: op, prefix: c.RightPrefix, bounds: op == TypeWindowJoin}
	if s.prefix == "" {
		s.prefix = DefaultRightPrefix
	}
	if op == TypeStreamJoin {
		if c.Size != "" || c.Offset != "" || c.WindowBounds != nil {
			return nil, stream.ConfigErrorf("%s: size, offset and windowBounds are options of %s only; a stream join has no windows", op, TypeWindowJoin)
		}
		if c.TTL != "" {
			var err error
			if s.ttl, err = millis(op, "ttl", c.TTL); err != nil {
				return nil, err
			}
			if s.ttl <= 0 {
				return nil, stream.ConfigErrorf("%s: ttl %q must be at least 1ms; leave it out to keep rows forever", op, c.TTL)
			}
		}
		return s, nil
	}
	if c.TTL != "" {
		return nil, stream.ConfigErrorf("%s: ttl is an option of %s only; a window join drops its rows when their window fires", op, TypeStreamJoin)
	}
	if c.WindowBounds != nil {
		s.bounds = *c.WindowBounds
	}
	var err error
	if c.Size == "" {
		return nil, stream.ConfigErrorf("%s: size is required (the tumbling window length, e.g. \"10s\")", op)
	}
	if s.size, err = millis(op, "size", c.Size); err != nil {
		return nil, err
	}
	if s.size <= 0 {
		return nil, stream.ConfigErrorf("%s: size %q must be positive", op, c.Size)
	}
	if c.Offset != "" {
		if s.offset, err = millis(op, "offset", c.Offset); err != nil {
			return nil, err
		}
	}
	if s.offset <= -s.size || s.offset >= s.size {
		return nil, stream.ConfigErrorf("%s: offset %q must be shorter than size %q in either direction", op, c.Offset, c.Size)
	}
	return s, nil
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

// resolved binds a spec to the two inputs.
type resolved struct {
	keyCols [2][]int
	out     *stream.Schema
}

func plan(op string, p *stream.PlanContext) (*stream.Schema, error) {
	s, err := parse(op, p.Config)
	if err != nil {
		return nil, err
	}
	if len(p.Inputs) != 2 {
		return nil, stream.ConfigErrorf("%s: takes 2 inputs, got %d; write inputs: [left, right]", op, len(p.Inputs))
	}
	r, err := s.resolve([2]*stream.Schema{p.Inputs[0].Schema, p.Inputs[1].Schema},
		[2][]string{p.Inputs[0].KeyFields, p.Inputs[1].KeyFields})
	if err != nil {
		return nil, err
	}
	if s.ttl == 0 {
		p.DeclareState(stream.StateDecl{Name: rowsTable, Kind: stream.StateValue})
	} else {
		p.DeclareState(stream.StateDecl{Name: leftTable, Kind: stream.StateList})
		p.DeclareState(stream.StateDecl{Name: rightTable, Kind: stream.StateList})
	}
	p.DeclareState(stream.StateDecl{Name: signatureState, Kind: stream.StateUnion})
	if op == TypeWindowJoin {
		p.DeclareState(stream.StateDecl{Name: watermarkState, Kind: stream.StateUnion})
	}
	return r.out, nil
}

func (s *spec) resolve(in [2]*stream.Schema, keys [2][]string) (*resolved, error) {
	r := &resolved{}
	for i := range 2 {
		if len(keys[i]) == 0 {
			return nil, stream.ConfigErrorf("%s: input %d is not keyed; key both inputs by the join fields, e.g. inputs: [{from: persons, keyBy: [id]}, {from: auctions, keyBy: [seller]}]", s.op, i)
		}
		cols, err := in[i].Lookup(keys[i]...)
		if err != nil {
			return nil, stream.ConfigErrorf("%s: input %d key: %v", s.op, i, err)
		}
		r.keyCols[i] = cols
	}
	if len(keys[0]) != len(keys[1]) {
		return nil, stream.ConfigErrorf("%s: input 0 is keyed by %d fields (%s), input 1 by %d (%s); key both by the same number of fields", s.op,
			len(keys[0]), strings.Join(keys[0], ", "), len(keys[1]), strings.Join(keys[1], ", "))
	}
	for j := range keys[0] {
		a, b := in[0].Fields[r.keyCols[0][j]], in[1].Fields[r.keyCols[1][j]]
		if !sameKind(a.Type, b.Type) {
			return nil, stream.ConfigErrorf("%s: key field %d is %s %v in input 0 but %s %v in input 1; join keys must have the same type", s.op, j, a.Name, a.Type, b.Name, b.Type)
		}
	}
	fields := append([]stream.Field(nil), in[0].Fields...)
	for _, f := range in[1].Fields {
		if in[0].Index(f.Name) >= 0 {
			f.Name = s.prefix + f.Name
		}
		fields = append(fields, f)
	}
	if s.bounds {
		fields = append(fields, stream.Field{Name: FieldWindowStart, Type: stream.TypeTimestamp},
			stream.Field{Name: FieldWindowEnd, Type: stream.TypeTimestamp})
	}
	out, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: output schema: %v; choose another rightPrefix, or set windowBounds: false if the inputs already carry window bounds", s.op, err)
	}
	r.out = out
	return r, nil
}

func sameKind(a, b stream.Type) bool {
	isInt := func(t stream.Type) bool { return t == stream.TypeInt64 || t == stream.TypeTimestamp }
	return a == b || isInt(a) && isInt(b)
}
