package lifetime

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// RunningAvgConfig is the JSON config of running_avg.
type RunningAvgConfig struct {
	// Field is the int64 or float64 field averaged. Required. Nulls are
	// skipped (no output row).
	Field string `json:"field"`
	// As names the average (float64). Default "avg_" + Field. The count
	// (int64) is called "count".
	As string `json:"as,omitempty"`
}

// avgTable is running_avg's keyed state: count and sum per key.
const avgTable = "running_avg"

type avgSpec struct {
	field   int
	isFloat bool
	keyCols []int
	out     *stream.Schema
}

func avgSpecFor(cfg RunningAvgConfig, in *stream.Schema, keys []string) (*avgSpec, error) {
	op := TypeRunningAvg
	if len(keys) == 0 {
		return nil, stream.ConfigErrorf("%s: needs a keyed input: put keyBy [fields] on the edge into it (its state is kept per key)", op)
	}
	cols, err := in.Lookup(keys...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: key: %v", op, err)
	}
	if cfg.Field == "" {
		return nil, stream.ConfigErrorf("%s: field: required; name the int64 or float64 field to average", op)
	}
	f := in.Index(cfg.Field)
	if f < 0 {
		return nil, stream.ConfigErrorf("%s: field: no field %q in the input (fields %s)", op, cfg.Field, in)
	}
	t := in.Fields[f].Type
	if t != stream.TypeInt64 && t != stream.TypeFloat64 {
		return nil, stream.ConfigErrorf("%s: field %q is %s; it must be int64 or float64", op, cfg.Field, t)
	}
	as := cfg.As
	if as == "" {
		as = "avg_" + cfg.Field
	}
	fields := make([]stream.Field, 0, len(cols)+2)
	for _, c := range cols {
		fields = append(fields, in.Fields[c])
	}
	fields = append(fields, stream.Field{Name: "count", Type: stream.TypeInt64}, stream.Field{Name: as, Type: stream.TypeFloat64})
	out, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: output schema: %v (rename the average with \"as\", or the key field called count)", op, err)
	}
	return &avgSpec{field: f, isFloat: t == stream.TypeFloat64, keyCols: cols, out: out}, nil
}

func parseRunningAvg(config []byte) (RunningAvgConfig, error) {
	var cfg RunningAvgConfig
	err := stream.DecodeOperatorConfig(TypeRunningAvg, config, &cfg)
	return cfg, err
}

func planRunningAvg(p *stream.PlanContext) (*stream.Schema, error) {
	cfg, err := parseRunningAvg(p.Config)
	if err != nil {
		return nil, err
	}
	if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
		return nil, stream.ConfigErrorf("%s: takes exactly one input, got %d", TypeRunningAvg, len(p.Inputs))
	}
	sp, err := avgSpecFor(cfg, p.Inputs[0].Schema, p.Inputs[0].KeyFields)
	if err != nil {
		return nil, err
	}
	p.DeclareState(stream.StateDecl{Name: avgTable, Kind: stream.StateValue, Type: statebackend.Untyped[avgAcc](avgCodec{}).ID()})
	return sp.out, nil
}

// avgAcc is the count and sum of one key.
type avgAcc struct {
	count int64
	sum   float64
}

// avgCodec: version 1 | varint count | 8 bytes sum (IEEE 754, little endian).
type avgCodec struct{}

func (avgCodec) ID() string { return "running_avg.acc.v1" }

func (avgCodec) Append(dst []byte, a avgAcc) []byte {
	dst = append(dst, 1)
	dst = binary.AppendVarint(dst, a.count)
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(a.sum))
}

func (avgCodec) Decode(src []byte) (avgAcc, error) {
	if len(src) < 2 || src[0] != 1 {
		return avgAcc{}, fmt.Errorf("running_avg: corrupt state: unknown version")
	}
	c, n := binary.Varint(src[1:])
	if n <= 0 || len(src) != 1+n+8 {
		return avgAcc{}, fmt.Errorf("running_avg: corrupt state: truncated or trailing bytes")
	}
	return avgAcc{count: c, sum: math.Float64frombits(binary.LittleEndian.Uint64(src[1+n:]))}, nil
}

// RunningAvg is one subtask of running_avg. Sums are float64: exact for
// int64 values while the sum stays below 2^53.
type RunningAvg struct {
	stream.BaseOperator
	cfg     RunningAvgConfig
	name    string
	spec    *avgSpec
	backend statebackend.Backend
	state   statebackend.ValueState[avgAcc]
	keys    rowenc.Keys
	rows    []int32
}

var (
	_ stream.Operator      = (*RunningAvg)(nil)
	_ stream.KeyedStateful = (*RunningAvg)(nil)
)

// NewRunningAvg returns a running_avg operator for a JSON RunningAvgConfig.
func NewRunningAvg(config []byte) (*RunningAvg, error) {
	cfg, err := parseRunningAvg(config)
	if err != nil {
		return nil, err
	}
	return &RunningAvg{cfg: cfg, name: TypeRunningAvg}, nil
}

// UsesKeyedState says the runtime holds the accumulators.
func (o *RunningAvg) UsesKeyedState() bool { return true }

// Open binds the operator to its keyed input and its state.
func (o *RunningAvg) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.name = instanceName(TypeRunningAvg, octx)
	if len(octx.InputSchemas) != 1 || len(octx.InputKeys) != 1 {
		return fmt.Errorf("%s: opened with %d inputs, want one keyed input", o.name, len(octx.InputSchemas))
	}
	sp, err := avgSpecFor(o.cfg, octx.InputSchemas[0], octx.InputKeys[0])
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if octx.OutputSchema != nil && !octx.OutputSchema.Equal(sp.out) {
		return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", o.name, octx.OutputSchema, sp.out)
	}
	o.spec = sp
	o.keys = rowenc.Keys{Cols: sp.keyCols, MaxParallelism: octx.MaxParallelism}
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if o.state, err = statebackend.GetValueState[avgAcc](o.backend, avgTable, avgCodec{}); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// ProcessBatch adds each record to its key's count and sum and emits a row
// of the key, the count and the average, with the record's event time.
func (o *RunningAvg) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	sp := o.spec
	o.keys.Encode(b)
	owned := o.backend.KeyGroups()
	col := &b.Cols[sp.field]
	res := stream.NewBatch(sp.out, n)
	nk := len(sp.keyCols)
	counts, avgs := res.Cols[nk].Ints[:0], res.Cols[nk+1].Floats[:0]
	o.rows = o.rows[:0]
	for i := range n {
		if rowenc.IsNull(col, i) {
			continue
		}
		key, kg := o.keys.Key(i)
		if !owned.Contains(kg) {
			res.Release()
			return fmt.Errorf("%s: a record of key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", o.name, kg, owned)
		}
		o.backend.SetCurrentKey(key, kg)
		a, _ := o.state.Value()
		a.count++
		if sp.isFloat {
			a.sum += col.Floats[i]
		} else {
			a.sum += float64(col.Ints[i])
		}
		o.state.Update(a)
		counts = append(counts, a.count)
		avgs = append(avgs, a.sum/float64(a.count))
		o.rows = append(o.rows, int32(i))
	}
	m := len(o.rows)
	if m == 0 {
		res.Release()
		return nil
	}
	for j, kc := range sp.keyCols {
		rowenc.Gather(&res.Cols[j], &b.Cols[kc], o.rows)
	}
	res.Cols[nk].Ints, res.Cols[nk+1].Floats = counts, avgs
	if len(b.Times) == n {
		for _, i := range o.rows {
			res.Times = append(res.Times, b.Times[i])
		}
	}
	res.SetLen(m)
	out.Collect(res)
	return nil
}

// Close lets go of the backend; the runtime closes it.
func (o *RunningAvg) Close() error {
	o.backend, o.state = nil, nil
	return nil
}
