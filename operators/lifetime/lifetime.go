package lifetime

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Operator type names.
const (
	TypeLifetimeMax = "lifetime_max"
	TypeRunningAvg  = "running_avg"
)

// Register adds lifetime_max and running_avg to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:        TypeLifetimeMax,
		Kind:        stream.KindTransform,
		Inputs:      2,
		Plan:        planLifetimeMax,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewLifetimeMax(config) },
		Config:      LifetimeMaxConfig{},
		Doc: "keyed, two inputs (entities, events): when the watermark passes an entity's end, emits its key, carried fields and the largest event value within its lifetime, " +
			"and optionally fields of the winning event (largest value, then earliest time) " +
			"({\"start\": \"dateTime\", \"end\": \"expires\", \"carry\": [\"category\"], \"time\": \"dateTime\", \"value\": \"price\", \"as\": \"final\", \"winner\": [\"bidder\"]})",
	})
	r.Register(stream.OperatorType{
		Name:        TypeRunningAvg,
		Kind:        stream.KindTransform,
		Plan:        planRunningAvg,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewRunningAvg(config) },
		Config:      RunningAvgConfig{},
		Doc:         "keyed: emits the key, the count and the running average of a numeric field for every record ({\"field\": \"final\", \"as\": \"avg\"})",
	})
}

// LifetimeMaxConfig is the JSON config of lifetime_max. Input 0 carries
// the entities, input 1 the events; both are keyed by one field of the
// same type (the entity's id, the event's entity id). Every field named
// here is int64 or timestamp.
type LifetimeMaxConfig struct {
	// Start and End are the entity's fields holding its lifetime: an event
	// counts if Start ≤ its time ≤ End. The result is decided when the
	// watermark reaches End. Required.
	Start string `json:"start"`
	End   string `json:"end"`
	// Carry are entity fields copied into the result (in order, after the
	// key). Optional.
	Carry []string `json:"carry,omitempty"`
	// Time and Value are the event's fields: its time and the value whose
	// maximum is the result. Required.
	Time  string `json:"time"`
	Value string `json:"value"`
	// As names the result's value field. Default "max_" + Value.
	As string `json:"as,omitempty"`
	// Winner are event fields copied from the winning event into the
	// result (in order, after the value), under their own names. The
	// winner is the event with the largest value; of events with equal
	// values, the earliest (smallest time); of those, the one whose
	// Winner fields are smallest, compared in order. So the result does
	// not depend on the order in which events arrive. An event with a
	// null in one of these fields is ignored, as one with a null time or
	// value is. Optional; without it, equal values are not told apart
	// (the result is the same whichever won).
	Winner []string `json:"winner,omitempty"`
}

// maxCarry bounds Carry and Winner (each field is kept per entity).
const maxCarry = 16

type lifetimeSpec struct {
	cfg                     LifetimeMaxConfig
	key                     [2]int // key column of each input
	start, end, time, value int
	carry                   []int
	winner                  []int // event columns of Winner
	event                   []int // time, value, then winner
	out                     *stream.Schema
}

// intField checks that field name of s exists and is int64 or timestamp.
func intField(op, role, name string, s *stream.Schema) (int, error) {
	if name == "" {
		return 0, stream.ConfigErrorf("%s: %s: required; name an int64 or timestamp field", op, role)
	}
	i := s.Index(name)
	if i < 0 {
		return 0, stream.ConfigErrorf("%s: %s: no field %q in the input (fields %s)", op, role, name, s)
	}
	if t := s.Fields[i].Type; t != stream.TypeInt64 && t != stream.TypeTimestamp {
		return 0, stream.ConfigErrorf("%s: %s: field %q is %s; it must be int64 or timestamp", op, role, name, t)
	}
	return i, nil
}

// specFor checks cfg against the inputs (schema and key fields of each).
func specFor(cfg LifetimeMaxConfig, schemas [2]*stream.Schema, keys [2][]string) (*lifetimeSpec, error) {
	op := TypeLifetimeMax
	sp := &lifetimeSpec{cfg: cfg}
	for i, role := range []string{"input 0 (entities)", "input 1 (events)"} {
		if len(keys[i]) != 1 {
			return nil, stream.ConfigErrorf("%s: %s: needs keyBy with exactly one field (the entity id), got %d", op, role, len(keys[i]))
		}
		k, err := intField(op, role+" key", keys[i][0], schemas[i])
		if err != nil {
			return nil, err
		}
		sp.key[i] = k
	}
	if a, b := schemas[0].Fields[sp.key[0]].Type, schemas[1].Fields[sp.key[1]].Type; a != b {
		return nil, stream.ConfigErrorf("%s: the keys differ in type (%s on input 0, %s on input 1); key both inputs by fields of one type", op, a, b)
	}
	var err error
	if sp.start, err = intField(op, "start", cfg.Start, schemas[0]); err != nil {
		return nil, err
	}
	if sp.end, err = intField(op, "end", cfg.End, schemas[0]); err != nil {
		return nil, err
	}
	if sp.time, err = intField(op, "time", cfg.Time, schemas[1]); err != nil {
		return nil, err
	}
	if sp.value, err = intField(op, "value", cfg.Value, schemas[1]); err != nil {
		return nil, err
	}
	if len(cfg.Carry) > maxCarry {
		return nil, stream.ConfigErrorf("%s: carry: %d fields, at most %d", op, len(cfg.Carry), maxCarry)
	}
	fields := []stream.Field{schemas[0].Fields[sp.key[0]]}
	for _, c := range cfg.Carry {
		i, err := intField(op, "carry", c, schemas[0])
		if err != nil {
			return nil, err
		}
		sp.carry = append(sp.carry, i)
		fields = append(fields, schemas[0].Fields[i])
	}
	as := cfg.As
	if as == "" {
		as = "max_" + cfg.Value
	}
	fields = append(fields, stream.Field{Name: as, Type: schemas[1].Fields[sp.value].Type})
	if len(cfg.Winner) > maxCarry {
		return nil, stream.ConfigErrorf("%s: winner: %d fields, at most %d", op, len(cfg.Winner), maxCarry)
	}
	for _, w := range cfg.Winner {
		i, err := intField(op, "winner", w, schemas[1])
		if err != nil {
			return nil, err
		}
		sp.winner = append(sp.winner, i)
		fields = append(fields, schemas[1].Fields[i])
	}
	if sp.out, err = stream.NewSchema(fields...); err != nil {
		return nil, stream.ConfigErrorf("%s: output schema: %v (rename the result with \"as\", or rename an event field upstream with a project)", op, err)
	}
	sp.event = append([]int{sp.time, sp.value}, sp.winner...)
	return sp, nil
}

func parseLifetimeMax(config []byte) (LifetimeMaxConfig, error) {
	var cfg LifetimeMaxConfig
	err := stream.DecodeOperatorConfig(TypeLifetimeMax, config, &cfg)
	return cfg, err
}

// stateTable is lifetime_max's keyed state: one entry per entity id.
const stateTable = "lifetime"

func planLifetimeMax(p *stream.PlanContext) (*stream.Schema, error) {
	cfg, err := parseLifetimeMax(p.Config)
	if err != nil {
		return nil, err
	}
	if len(p.Inputs) != 2 || p.Inputs[0].Schema == nil || p.Inputs[1].Schema == nil {
		return nil, stream.ConfigErrorf("%s: takes exactly two inputs (entities, then events), got %d", TypeLifetimeMax, len(p.Inputs))
	}
	sp, err := specFor(cfg, [2]*stream.Schema{p.Inputs[0].Schema, p.Inputs[1].Schema},
		[2][]string{p.Inputs[0].KeyFields, p.Inputs[1].KeyFields})
	if err != nil {
		return nil, err
	}
	codec := entryCodec{winner: len(cfg.Winner)}
	p.DeclareState(stream.StateDecl{Name: stateTable, Kind: stream.StateValue, Type: statebackend.Untyped[entry](codec).ID()})
	return sp.out, nil
}

// entry is the state of one entity id: the entity once it arrived, the
// winning event so far among the events within its lifetime (its value,
// and with Winner fields its time and those fields), and the events that
// arrived before it, as (time, value, Winner fields...) tuples.
type entry struct {
	has        bool
	key        int64
	start, end int64
	carry      []int64
	hasMax     bool
	max        int64
	maxTime    int64   // with Winner fields only
	win        []int64 // the winner's Winner fields
	pending    []int64
}

// entryCodec encodes an entry of an operator with winner Winner fields.
// Without them: version 1 | flags (1 has, 2 hasMax) | varints key, start,
// end, len(carry), carry..., max, len(pending), pending... (pairs). With
// them, version 2: the same with maxTime, len(win), win... after max, and
// pending in tuples of 2+winner.
type entryCodec struct{ winner int }

func (c entryCodec) ID() string {
	if c.winner == 0 {
		return "lifetime.entry.v1"
	}
	return "lifetime.entry.v2"
}

func (c entryCodec) version() byte {
	if c.winner == 0 {
		return 1
	}
	return 2
}

func (c entryCodec) Append(dst []byte, e entry) []byte {
	var flags byte
	if e.has {
		flags |= 1
	}
	if e.hasMax {
		flags |= 2
	}
	dst = append(dst, c.version(), flags)
	dst = binary.AppendVarint(dst, e.key)
	dst = binary.AppendVarint(dst, e.start)
	dst = binary.AppendVarint(dst, e.end)
	dst = binary.AppendUvarint(dst, uint64(len(e.carry)))
	for _, c := range e.carry {
		dst = binary.AppendVarint(dst, c)
	}
	dst = binary.AppendVarint(dst, e.max)
	if c.winner > 0 {
		dst = binary.AppendVarint(dst, e.maxTime)
		dst = binary.AppendUvarint(dst, uint64(len(e.win)))
		for _, w := range e.win {
			dst = binary.AppendVarint(dst, w)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.pending)))
	for _, p := range e.pending {
		dst = binary.AppendVarint(dst, p)
	}
	return dst
}

var errCorrupt = errors.New("lifetime: corrupt state entry")

func (c entryCodec) Decode(src []byte) (entry, error) {
	var e entry
	if len(src) < 2 || src[0] != c.version() {
		return e, fmt.Errorf("%w: unknown version", errCorrupt)
	}
	flags := src[1]
	src = src[2:]
	bad := false
	next := func() int64 {
		v, n := binary.Varint(src)
		if n <= 0 {
			bad = true
			return 0
		}
		src = src[n:]
		return v
	}
	count := func() int {
		v, n := binary.Uvarint(src)
		if n <= 0 || v > uint64(len(src)) {
			bad = true
			return 0
		}
		src = src[n:]
		return int(v)
	}
	e.has, e.hasMax = flags&1 != 0, flags&2 != 0
	e.key, e.start, e.end = next(), next(), next()
	if n := count(); n > 0 {
		e.carry = make([]int64, n)
		for i := range e.carry {
			e.carry[i] = next()
		}
	}
	e.max = next()
	if c.winner > 0 {
		e.maxTime = next()
		if n := count(); n > 0 {
			e.win = make([]int64, n)
			for i := range e.win {
				e.win[i] = next()
			}
		}
	}
	if n := count(); n > 0 {
		e.pending = make([]int64, n)
		for i := range e.pending {
			e.pending[i] = next()
		}
	}
	if bad || len(src) != 0 || len(e.pending)%(2+c.winner) != 0 || e.hasMax && len(e.win) != c.winner {
		return entry{}, fmt.Errorf("%w: truncated or trailing bytes", errCorrupt)
	}
	return e, nil
}

// LifetimeMax is one subtask of lifetime_max.
type LifetimeMax struct {
	stream.BaseOperator
	cfg     LifetimeMaxConfig
	name    string
	spec    *lifetimeSpec
	backend statebackend.Backend
	timers  statebackend.TimerService
	state   statebackend.ValueState[entry]
	keys    [2]rowenc.Keys

	// The results decided by the current watermark, emitted together.
	outKey, outMax, outTime []int64
	outCarry, outWin        [][]int64

	ev []int64 // scratch: the current event's (time, value, Winner fields...)
}

var (
	_ stream.Operator      = (*LifetimeMax)(nil)
	_ stream.KeyedStateful = (*LifetimeMax)(nil)
)

// NewLifetimeMax returns a lifetime_max operator for a JSON
// LifetimeMaxConfig.
func NewLifetimeMax(config []byte) (*LifetimeMax, error) {
	cfg, err := parseLifetimeMax(config)
	if err != nil {
		return nil, err
	}
	return &LifetimeMax{cfg: cfg, name: TypeLifetimeMax}, nil
}

// UsesKeyedState says the runtime holds the entries and timers.
func (o *LifetimeMax) UsesKeyedState() bool { return true }

func instanceName(op string, octx *stream.OperatorContext) string {
	if octx.OperatorUID == "" {
		return op
	}
	return fmt.Sprintf("%s %q", op, octx.OperatorUID)
}

// Open binds the operator to its two keyed inputs and its state.
func (o *LifetimeMax) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.name = instanceName(TypeLifetimeMax, octx)
	if len(octx.InputSchemas) != 2 || len(octx.InputKeys) != 2 {
		return fmt.Errorf("%s: opened with %d inputs, want 2 keyed inputs (entities, events)", o.name, len(octx.InputSchemas))
	}
	sp, err := specFor(o.cfg, [2]*stream.Schema{octx.InputSchemas[0], octx.InputSchemas[1]},
		[2][]string{octx.InputKeys[0], octx.InputKeys[1]})
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if octx.OutputSchema != nil && !octx.OutputSchema.Equal(sp.out) {
		return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", o.name, octx.OutputSchema, sp.out)
	}
	o.spec = sp
	for i := range o.keys {
		o.keys[i] = rowenc.Keys{Cols: []int{sp.key[i]}, MaxParallelism: octx.MaxParallelism}
	}
	if o.backend, err = statebackend.KeyedBackend(octx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.timers = o.backend.Timers()
	if o.state, err = statebackend.GetValueState[entry](o.backend, stateTable, entryCodec{winner: len(sp.winner)}); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.outCarry = make([][]int64, len(sp.carry))
	o.outWin = make([][]int64, len(sp.winner))
	return nil
}

// ProcessBatch stores entities, folds events into their entity's maximum
// (or keeps them until their entity arrives) and registers the timers.
func (o *LifetimeMax) ProcessBatch(input int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	n := b.Len()
	if n == 0 {
		return nil
	}
	ks := &o.keys[input]
	ks.Encode(b)
	owned := o.backend.KeyGroups()
	sp := o.spec
	keyCol := &b.Cols[sp.key[input]]
	for i := range n {
		if rowenc.IsNull(keyCol, i) {
			continue // a null id matches nothing
		}
		key, kg := ks.Key(i)
		if !owned.Contains(kg) {
			return fmt.Errorf("%s: a record of key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (are both inputs keyed by the entity id?)", o.name, kg, owned)
		}
		o.backend.SetCurrentKey(key, kg)
		e, _ := o.state.Value()
		if input == 0 {
			if rowenc.IsNull(&b.Cols[sp.start], i) || rowenc.IsNull(&b.Cols[sp.end], i) {
				continue // no lifetime: no result
			}
			e.has, e.key = true, keyCol.Ints[i]
			e.start, e.end = b.Cols[sp.start].Ints[i], b.Cols[sp.end].Ints[i]
			e.carry = e.carry[:0]
			for _, c := range sp.carry {
				e.carry = append(e.carry, b.Cols[c].Ints[i])
			}
			stride := 2 + len(sp.winner)
			for j := 0; j < len(e.pending); j += stride {
				e.fold(e.pending[j : j+stride])
			}
			e.pending = nil
			o.timers.RegisterEventTimeTimer(e.end)
			o.state.Update(e)
			continue
		}
		if !o.event(b, i) {
			continue
		}
		if e.has {
			if e.fold(o.ev) {
				o.state.Update(e)
			}
			continue
		}
		// The entity has not arrived (or has closed): keep the event until
		// the watermark passes its time, when an entity that it could
		// belong to must have arrived.
		e.pending = append(e.pending, o.ev...)
		o.timers.RegisterEventTimeTimer(o.ev[0])
		o.state.Update(e)
	}
	return nil
}

// event reads event row i of b into o.ev as (time, value, Winner
// fields...), or reports false if one of them is null.
func (o *LifetimeMax) event(b *stream.Batch, i int) bool {
	o.ev = o.ev[:0]
	for _, c := range o.spec.event {
		if rowenc.IsNull(&b.Cols[c], i) {
			return false
		}
		o.ev = append(o.ev, b.Cols[c].Ints[i])
	}
	return true
}

// fold counts the event ev = (time, value, Winner fields...) if it lies
// within the entity's lifetime and beats the winner so far, and reports
// whether the entry changed. Without Winner fields only the value counts.
func (e *entry) fold(ev []int64) bool {
	t, v, w := ev[0], ev[1], ev[2:]
	if t < e.start || t > e.end {
		return false
	}
	if e.hasMax {
		if len(w) == 0 && v <= e.max {
			return false
		}
		// Larger value, then earlier time, then smaller Winner fields.
		if c := cmp.Or(cmp.Compare(e.max, v), cmp.Compare(t, e.maxTime), slices.Compare(w, e.win)); c >= 0 {
			return false
		}
	}
	e.hasMax, e.max = true, v
	if len(w) > 0 {
		e.maxTime, e.win = t, append(e.win[:0], w...)
	}
	return true
}

// ProcessWatermark closes the entities whose end the watermark reached,
// emits their results (with event time end) and forwards wm.
func (o *LifetimeMax) ProcessWatermark(wm int64, out stream.Collector) error {
	err := o.timers.AdvanceWatermark(wm, func(_ []byte, _ int, ts int64) error {
		e, ok := o.state.Value()
		if !ok {
			return nil
		}
		if e.has {
			if ts != e.end {
				return nil // an early event's timer: the entity took it over
			}
			if e.hasMax {
				o.outKey = append(o.outKey, e.key)
				for j, c := range e.carry {
					o.outCarry[j] = append(o.outCarry[j], c)
				}
				for j, w := range e.win {
					o.outWin[j] = append(o.outWin[j], w)
				}
				o.outMax = append(o.outMax, e.max)
				o.outTime = append(o.outTime, e.end)
			}
			o.state.Clear()
			return nil
		}
		// No entity: drop the waiting events at or before ts.
		kept := e.pending[:0]
		stride := 2 + len(o.spec.winner)
		for j := 0; j < len(e.pending); j += stride {
			if e.pending[j] > ts {
				kept = append(kept, e.pending[j:j+stride]...)
			}
		}
		if len(kept) == 0 {
			o.state.Clear()
		} else {
			e.pending = kept
			o.state.Update(e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.flush(out)
	out.EmitWatermark(wm)
	return nil
}

// flush emits the results gathered by ProcessWatermark.
func (o *LifetimeMax) flush(out stream.Collector) {
	m := len(o.outKey)
	if m == 0 {
		return
	}
	b := stream.NewBatch(o.spec.out, m)
	b.Cols[0].Ints = append(b.Cols[0].Ints[:0], o.outKey...)
	for j := range o.outCarry {
		b.Cols[1+j].Ints = append(b.Cols[1+j].Ints[:0], o.outCarry[j]...)
		o.outCarry[j] = o.outCarry[j][:0]
	}
	value := 1 + len(o.outCarry)
	b.Cols[value].Ints = append(b.Cols[value].Ints[:0], o.outMax...)
	for j := range o.outWin {
		b.Cols[value+1+j].Ints = append(b.Cols[value+1+j].Ints[:0], o.outWin[j]...)
		o.outWin[j] = o.outWin[j][:0]
	}
	b.Times = append(b.Times[:0], o.outTime...)
	b.SetLen(m)
	o.outKey, o.outMax, o.outTime = o.outKey[:0], o.outMax[:0], o.outTime[:0]
	out.Collect(b)
}

// Close lets go of the backend; the runtime closes it.
func (o *LifetimeMax) Close() error {
	o.backend, o.state, o.timers = nil, nil, nil
	return nil
}
