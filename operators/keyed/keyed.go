package keyed

import (
	"fmt"
	"strings"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Operator type names.
const (
	TypeRunningCount  = "running_count"
	TypeSequenceCheck = "sequence_check"
	TypeFail          = "fail"
)

// Register adds running_count, sequence_check and fail to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:        TypeRunningCount,
		Kind:        stream.KindTransform,
		Plan:        planRunningCount,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewRunningCount(config) },
		Config:      RunningCountConfig{},
		Doc:         "keyed: emits the key fields and the key's running record count for every record ({\"emit\": \"every\", \"as\": \"count\"})",
	})
	r.Register(stream.OperatorType{
		Name:        TypeSequenceCheck,
		Kind:        stream.KindTransform,
		Plan:        planSequenceCheck,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewSequenceCheck(config) },
		Config:      SequenceCheckConfig{},
		Doc:         "keyed: fails the task unless an int64 field arrives as 1, 2, 3, ... per key ({\"field\": \"seq\"}); passes records through",
	})
}

// RegisterFailureInjection registers the "fail" operator type, which fails
// tasks on purpose. It is for test binaries only (test/testbin): the
// built-in registry, and so the shipped binaries, do not offer it.
func RegisterFailureInjection(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:        TypeFail,
		Kind:        stream.KindTransform,
		Plan:        planFail,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewFail(config) },
		Config:      FailConfig{},
		Doc:         "test operator: passes records through and fails at configured points of configured attempts ({\"failures\": [{\"attempt\": 1, \"at\": \"records\", \"after\": 5000}]})",
	})
}

// keyedInput checks that a plan has one keyed input and returns its schema
// and key column indexes.
func keyedInput(op string, p *stream.PlanContext) (*stream.Schema, []int, error) {
	if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
		return nil, nil, stream.ConfigErrorf("%s: takes exactly one input, got %d", op, len(p.Inputs))
	}
	in := p.Inputs[0]
	if len(in.KeyFields) == 0 {
		return nil, nil, stream.ConfigErrorf("%s: needs a keyed input: put keyBy [fields] on the edge into it (its state is kept per key)", op)
	}
	cols, err := in.Schema.Lookup(in.KeyFields...)
	if err != nil {
		return nil, nil, stream.ConfigErrorf("%s: key: %v", op, err)
	}
	return in.Schema, cols, nil
}

// keyedOpen is keyedInput for an operator instance.
func keyedOpen(name string, octx *stream.OperatorContext) (*stream.Schema, []int, error) {
	if len(octx.InputSchemas) != 1 || octx.InputSchemas[0] == nil {
		return nil, nil, fmt.Errorf("%s: opened with %d input schemas, want 1", name, len(octx.InputSchemas))
	}
	in := octx.InputSchemas[0]
	if len(octx.InputKeys) != 1 || len(octx.InputKeys[0]) == 0 {
		return nil, nil, fmt.Errorf("%s: opened without a keyed input; put keyBy [fields] on the edge into it", name)
	}
	cols, err := in.Lookup(octx.InputKeys[0]...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: key: %w", name, err)
	}
	return in, cols, nil
}

// instanceName is how an operator names itself in errors.
func instanceName(op string, octx *stream.OperatorContext) string {
	if octx.OperatorUID == "" {
		return op
	}
	return fmt.Sprintf("%s %q", op, octx.OperatorUID)
}

// runningCountSchema returns the output of running_count: the key fields,
// then as (int64).
func runningCountSchema(in *stream.Schema, keyCols []int, as string) (*stream.Schema, error) {
	fields := make([]stream.Field, 0, len(keyCols)+1)
	for _, c := range keyCols {
		if in.Fields[c].Name == as {
			return nil, stream.ConfigErrorf("%s: the count field %q is also a key field; name it otherwise with \"as\"", TypeRunningCount, as)
		}
		fields = append(fields, in.Fields[c])
	}
	fields = append(fields, stream.Field{Name: as, Type: stream.TypeInt64})
	s, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: output schema: %v", TypeRunningCount, err)
	}
	return s, nil
}

// RunningCountConfig is the JSON config of running_count.
type RunningCountConfig struct {
	// Emit says when rows are emitted: "every" (the default and only mode)
	// emits one row per input record, carrying the key's count including
	// that record, so a key's rows count 1, 2, ..., N.
	Emit string `json:"emit,omitempty"`
	// As names the count field. Default "count".
	As string `json:"as,omitempty"`
}

func parseRunningCount(raw []byte) (RunningCountConfig, error) {
	var c RunningCountConfig
	if err := stream.DecodeOperatorConfig(TypeRunningCount, raw, &c); err != nil {
		return c, err
	}
	switch c.Emit {
	case "", "every":
		c.Emit = "every"
	default:
		return c, stream.ConfigErrorf("%s: unknown emit %q (want \"every\": one row per record)", TypeRunningCount, c.Emit)
	}
	if c.As == "" {
		c.As = "count"
	}
	return c, nil
}

func planRunningCount(p *stream.PlanContext) (*stream.Schema, error) {
	cfg, err := parseRunningCount(p.Config)
	if err != nil {
		return nil, err
	}
	in, cols, err := keyedInput(TypeRunningCount, p)
	if err != nil {
		return nil, err
	}
	p.DeclareState(stream.StateDecl{Name: countTable, Kind: stream.StateValue, Type: statebackend.Untyped(statebackend.Int64Codec).ID()})
	p.DeclareState(stream.StateDecl{Name: keyTypesState, Kind: stream.StateUnion})
	return runningCountSchema(in, cols, cfg.As)
}

// SequenceCheckConfig is the JSON config of sequence_check.
type SequenceCheckConfig struct {
	// Field names the int64 field that must be 1, 2, 3, ... per key.
	// Required.
	Field string `json:"field"`
}

func parseSequenceCheck(raw []byte) (SequenceCheckConfig, error) {
	var c SequenceCheckConfig
	if err := stream.DecodeOperatorConfig(TypeSequenceCheck, raw, &c); err != nil {
		return c, err
	}
	if c.Field == "" {
		return c, stream.ConfigErrorf("%s: field is required: name the int64 field that counts 1, 2, 3, ... per key", TypeSequenceCheck)
	}
	return c, nil
}

func planSequenceCheck(p *stream.PlanContext) (*stream.Schema, error) {
	cfg, err := parseSequenceCheck(p.Config)
	if err != nil {
		return nil, err
	}
	in, _, err := keyedInput(TypeSequenceCheck, p)
	if err != nil {
		return nil, err
	}
	if _, err := seqColumn(in, cfg.Field); err != nil {
		return nil, err
	}
	p.DeclareState(stream.StateDecl{Name: lastTable, Kind: stream.StateValue, Type: statebackend.Untyped(statebackend.Int64Codec).ID()})
	return in, nil
}

func seqColumn(in *stream.Schema, field string) (int, error) {
	i := in.Index(field)
	if i < 0 {
		return 0, stream.ConfigErrorf("%s: field %q is not in the input (the input has %s)", TypeSequenceCheck, field, strings.Join(in.Names(), ", "))
	}
	if t := in.Fields[i].Type; t != stream.TypeInt64 {
		return 0, stream.ConfigErrorf("%s: field %q is %v; it must be int64", TypeSequenceCheck, field, t)
	}
	return i, nil
}
