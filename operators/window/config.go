package window

import (
	"fmt"
	"strings"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Operator type names, as used in job specs and JobGraph vertices.
const (
	TypeWatermarks     = "watermarks"
	TypeTumblingWindow = "tumbling_window"
	TypeSlidingWindow  = "sliding_window"
	TypeSessionWindow  = "session_window"
)

// Names of the window bounds in a window operator's output.
const (
	FieldWindowStart = "window_start"
	FieldWindowEnd   = "window_end"
)

// Register adds the watermarks, tumbling_window, sliding_window and
// session_window operator types to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name: TypeWatermarks,
		Kind: stream.KindTransform,
		Plan: planWatermarks,
		NewOperator: func(config []byte) (stream.Operator, error) {
			return NewWatermarks(config)
		},
		AutoWatermarkInterval: true,
		Config:                WatermarksConfig{},
		Doc:                   "assigns event time from a timestamp field and emits bounded-out-of-orderness watermarks periodically",
	})
	r.Register(stream.OperatorType{
		Name: TypeTumblingWindow,
		Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeTumblingWindow, p) },
		NewOperator: func(config []byte) (stream.Operator, error) {
			return NewTumblingWindow(config)
		},
		Config: WindowConfig{},
		Doc:    "keyed tumbling windows of event time (default) or processing time (time: processing) with count/sum/min/max/avg aggregates",
	})
	r.Register(stream.OperatorType{
		Name: TypeSlidingWindow,
		Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return planWindow(TypeSlidingWindow, p) },
		NewOperator: func(config []byte) (stream.Operator, error) {
			return NewSlidingWindow(config)
		},
		Config: WindowConfig{},
		Doc:    "keyed event-time sliding windows with count/sum/min/max/avg aggregates",
	})
	r.Register(stream.OperatorType{
		Name: TypeSessionWindow,
		Kind: stream.KindTransform,
		Plan: planSessionWindow,
		NewOperator: func(config []byte) (stream.Operator, error) {
			return NewSessionWindow(config)
		},
		Config: SessionWindowConfig{},
		Doc:    "keyed event-time session windows (merging on a gap of inactivity) with count/sum/min/max/avg aggregates",
	})
}

// WatermarksConfig is the JSON config of the watermarks operator.
type WatermarksConfig struct {
	// TimestampField names the field holding each record's event time: a
	// timestamp or an int64 field, in milliseconds since the Unix epoch.
	// Required. A record whose timestamp is null fails the task.
	TimestampField string `json:"timestampField"`
	// MaxOutOfOrderness is how far behind the largest timestamp seen a record
	// may still arrive, as a Go duration ("2s", "500ms") with millisecond
	// precision. Default "0s" (timestamps ascend).
	MaxOutOfOrderness string `json:"maxOutOfOrderness,omitempty"`
	// AutoWatermarkInterval is the least processing time between two
	// watermarks the operator emits, as a Go duration with millisecond
	// precision: an advance of the watermark waits until that long after
	// the previous emission (Flink's auto-watermark interval). "0s" emits
	// after every batch that advanced the watermark. Empty takes the job
	// spec's job-level autoWatermarkInterval, else
	// DefaultAutoWatermarkInterval.
	AutoWatermarkInterval string `json:"autoWatermarkInterval,omitempty"`
}

// DefaultAutoWatermarkInterval is the watermarks operator's interval when
// neither its config nor the job sets one: Flink's default.
const DefaultAutoWatermarkInterval = 200 * time.Millisecond

// WindowConfig is the JSON config of the tumbling_window and sliding_window
// operators. Durations are Go durations ("10s", "500ms") with millisecond
// precision.
type WindowConfig struct {
	// Size is the window length. Required, positive.
	Size string `json:"size"`
	// Slide is how far apart consecutive windows start; sliding_window only,
	// where it is required and must divide Size.
	Slide string `json:"slide,omitempty"`
	// Offset shifts window starts: windows start at offset + k*slide (k*size
	// for tumbling windows). It may be negative (e.g. "-8h" for days in
	// UTC+8) but its magnitude must be less than the slide. Default "0s".
	Offset string `json:"offset,omitempty"`
	// AllowedLateness keeps a fired window's state this long (in event time)
	// so that late records re-fire it with an updated result. Default "0s".
	// Event time only.
	AllowedLateness string `json:"allowedLateness,omitempty"`
	// Time is the time the windows are of: "event" (default) or
	// "processing".
	//
	// Event-time windows take each record's time from Batch.Times (a
	// watermarks operator upstream) and fire when the watermark passes
	// their end.
	//
	// Processing-time windows (tumbling_window only) put each record in the
	// window of the task's clock when the record arrives and fire a window
	// when the clock reaches its end, on a processing-time timer kept,
	// with the panes, in keyed state: pending windows and their timers are
	// checkpointed and restored, and a restored window whose end has
	// passed fires at once. Watermarks are forwarded but fire nothing,
	// nothing is ever late (AllowedLateness must be "0s", and the side
	// output "late" does not exist), and the results carry no event time
	// (Batch.Times is empty): a watermarks operator on window_end gives
	// them one. At the end of bounded input every window still pending
	// fires, in Finish, so that every record is counted. Results depend on
	// when records arrive, so a replay after recovery may split them into
	// windows differently; each record is still counted once. If the
	// clock steps back, a window that has fired may fire again with the
	// records that arrived since.
	Time string `json:"time,omitempty"`
	// Aggregates are the output columns computed per key and window, in
	// order. At least one is required.
	Aggregates []AggregateConfig `json:"aggregates"`
}

// Values of WindowConfig.Time.
const (
	TimeEvent      = "event"
	TimeProcessing = "processing"
)

// SessionWindowConfig is the JSON config of the session_window operator.
// Durations are Go durations ("30s", "500ms") with millisecond precision.
type SessionWindowConfig struct {
	// Gap is the inactivity that ends a session: a record at event time ts
	// opens the window [ts, ts+gap), and the windows of one key that
	// overlap or touch merge into one session. Two records of a key more
	// than Gap apart, with none between them, are therefore in different
	// sessions. Required, positive.
	Gap string `json:"gap"`
	// AllowedLateness keeps a fired session's state this long (in event
	// time) so that late records merge into it and re-fire it with an
	// updated result. Default "0s".
	AllowedLateness string `json:"allowedLateness,omitempty"`
	// Time must be "event" (the default): sessions are of event time only.
	Time string `json:"time,omitempty"`
	// Aggregates are the output columns computed per key and session, in
	// order, as for the other windows. At least one is required.
	Aggregates []AggregateConfig `json:"aggregates"`
}

// AggregateConfig is one aggregate of a window.
type AggregateConfig struct {
	// Fn is count, sum, min, max or avg.
	//
	// count without Field counts rows; with Field it counts non-null values
	// (int64 result). sum takes an int64 or float64 field and returns its
	// type (0 when every value is null); min and max take an int64, float64
	// or timestamp field and return its type; avg takes an int64 or float64
	// field and returns float64. min, max and avg of no non-null values are
	// null. Nulls are skipped by every aggregate except count without Field.
	Fn string `json:"fn"`
	// Field is the input field aggregated; required except for count.
	Field string `json:"field,omitempty"`
	// As names the output field. Default: "count" for count, else fn_field
	// (e.g. "sum_value").
	As string `json:"as,omitempty"`
}

// parseMillis parses the duration option name of operator op into
// milliseconds. An empty value yields def. Sub-millisecond durations are
// rejected because event time has millisecond precision.
func parseMillis(op, name, value string, def int64) (int64, error) {
	if value == "" {
		return def, nil
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, stream.ConfigErrorf("%s: %s %q is not a duration; write a Go duration such as \"10s\", \"500ms\" or \"1m30s\"", op, name, value)
	}
	if d%time.Millisecond != 0 {
		return 0, stream.ConfigErrorf("%s: %s %q is not a whole number of milliseconds; event time has millisecond precision", op, name, value)
	}
	return d.Milliseconds(), nil
}

// planWatermarks checks a watermarks config against its input; the output
// schema is the input schema.
func planWatermarks(p *stream.PlanContext) (*stream.Schema, error) {
	spec, err := parseWatermarksConfig(p.Config)
	if err != nil {
		return nil, err
	}
	in := p.Inputs[0].Schema
	if _, err := spec.resolve(in); err != nil {
		return nil, err
	}
	p.DeclareState(stream.StateDecl{Name: maxTimestampState, Kind: stream.StateOperatorList})
	return in, nil
}

type watermarksSpec struct {
	field    string
	ooo      int64 // max out-of-orderness, ms
	interval int64 // auto-watermark interval, ms; 0 emits per batch
}

func parseWatermarksConfig(raw []byte) (*watermarksSpec, error) {
	var c WatermarksConfig
	if err := stream.DecodeConfig(raw, &c); err != nil {
		return nil, stream.ConfigErrorf("%s: %v (want {\"timestampField\": \"ts\", \"maxOutOfOrderness\": \"2s\"})", TypeWatermarks, err)
	}
	if c.TimestampField == "" {
		return nil, stream.ConfigErrorf("%s: timestampField is required: name the int64 or timestamp field that holds each record's event time in milliseconds", TypeWatermarks)
	}
	ooo, err := parseMillis(TypeWatermarks, "maxOutOfOrderness", c.MaxOutOfOrderness, 0)
	if err != nil {
		return nil, err
	}
	if ooo < 0 {
		return nil, stream.ConfigErrorf("%s: maxOutOfOrderness %q is negative; use \"0s\" for ascending timestamps or a positive bound such as \"2s\"", TypeWatermarks, c.MaxOutOfOrderness)
	}
	interval, err := parseMillis(TypeWatermarks, "autoWatermarkInterval", c.AutoWatermarkInterval, DefaultAutoWatermarkInterval.Milliseconds())
	if err != nil {
		return nil, err
	}
	if interval < 0 {
		return nil, stream.ConfigErrorf("%s: autoWatermarkInterval %q is negative; use \"0s\" to emit after every batch or a positive interval such as \"200ms\"", TypeWatermarks, c.AutoWatermarkInterval)
	}
	return &watermarksSpec{field: c.TimestampField, ooo: ooo, interval: interval}, nil
}

// resolve returns the index of the timestamp field in in.
func (s *watermarksSpec) resolve(in *stream.Schema) (int, error) {
	i := in.Index(s.field)
	if i < 0 {
		return 0, stream.ConfigErrorf("%s: timestampField %q is not in the input (the input has %s)", TypeWatermarks, s.field, strings.Join(in.Names(), ", "))
	}
	if t := in.Fields[i].Type; t != stream.TypeTimestamp && t != stream.TypeInt64 {
		return 0, stream.ConfigErrorf("%s: timestampField %q is %v; it must be a timestamp or an int64 of milliseconds since the epoch", TypeWatermarks, s.field, t)
	}
	return i, nil
}

// planWindow checks a window config against its input and returns the output
// schema: the key fields, window_start, window_end, then the aggregates.
func planWindow(op string, p *stream.PlanContext) (*stream.Schema, error) {
	spec, err := parseWindowConfig(op, p.Config)
	if err != nil {
		return nil, err
	}
	r, err := spec.resolve(p.Inputs[0].Schema, p.Inputs[0].KeyFields)
	if err != nil {
		return nil, err
	}
	if !spec.processing {
		p.DeclareSideOutput(LateOutput, p.Inputs[0].Schema)
	}
	p.DeclareState(stream.StateDecl{Name: panesTable, Kind: stream.StateValue, Type: statebackend.SlotListCodec(newLayout(r.aggs).width).ID()})
	for _, name := range []string{signatureState, watermarkState, firingState} {
		p.DeclareState(stream.StateDecl{Name: name, Kind: stream.StateUnion})
	}
	return r.out, nil
}

// windowSpec is a parsed window config; all durations in milliseconds. A
// tumbling window has slide == size.
type windowSpec struct {
	op       string
	size     int64
	slide    int64
	offset   int64
	lateness int64
	aggs     []AggregateConfig
	// processing: windows of the task's processing time (Time
	// "processing"), not of event time.
	processing bool
}

func parseWindowConfig(op string, raw []byte) (*windowSpec, error) {
	sliding := op == TypeSlidingWindow
	var c WindowConfig
	if err := stream.DecodeConfig(raw, &c); err != nil {
		return nil, stream.ConfigErrorf("%s: %v", op, err)
	}
	s := &windowSpec{op: op}
	var err error
	if c.Size == "" {
		return nil, stream.ConfigErrorf("%s: size is required (a duration such as \"10s\")", op)
	}
	if s.size, err = parseMillis(op, "size", c.Size, 0); err != nil {
		return nil, err
	}
	if s.size <= 0 {
		return nil, stream.ConfigErrorf("%s: size %q must be positive", op, c.Size)
	}
	switch {
	case sliding && c.Slide == "":
		return nil, stream.ConfigErrorf("%s: slide is required (a duration that divides size %q, such as \"1s\"); for non-overlapping windows use %s", op, c.Size, TypeTumblingWindow)
	case !sliding && c.Slide != "":
		return nil, stream.ConfigErrorf("%s: slide is not an option of tumbling windows; remove it, or use %s for overlapping windows", op, TypeSlidingWindow)
	case sliding:
		if s.slide, err = parseMillis(op, "slide", c.Slide, 0); err != nil {
			return nil, err
		}
		if s.slide <= 0 {
			return nil, stream.ConfigErrorf("%s: slide %q must be positive", op, c.Slide)
		}
		if s.slide > s.size || s.size%s.slide != 0 {
			return nil, stream.ConfigErrorf("%s: size %q is not a multiple of slide %q; choose a slide that divides the size (e.g. size \"10s\", slide \"2s\")", op, c.Size, c.Slide)
		}
	default:
		s.slide = s.size
	}
	if s.offset, err = parseMillis(op, "offset", c.Offset, 0); err != nil {
		return nil, err
	}
	if s.offset <= -s.slide || s.offset >= s.slide {
		what := "slide"
		if !sliding {
			what = "size"
		}
		return nil, stream.ConfigErrorf("%s: offset %q must be shorter than the %s (%dms), in either direction", op, c.Offset, what, s.slide)
	}
	if s.lateness, err = parseMillis(op, "allowedLateness", c.AllowedLateness, 0); err != nil {
		return nil, err
	}
	if s.lateness < 0 {
		return nil, stream.ConfigErrorf("%s: allowedLateness %q is negative; use \"0s\" to drop every record that arrives after its window fired", op, c.AllowedLateness)
	}
	switch c.Time {
	case "", TimeEvent:
	case TimeProcessing:
		if sliding {
			return nil, stream.ConfigErrorf("%s: time %q: processing-time windows are tumbling only; use %s with time %q, or event time (a %s operator upstream) for sliding windows", op, c.Time, TypeTumblingWindow, TimeProcessing, TypeWatermarks)
		}
		if s.lateness != 0 {
			return nil, stream.ConfigErrorf("%s: allowedLateness %q with time %q: nothing is late in processing time, so lateness does not apply; remove allowedLateness, or use event time", op, c.AllowedLateness, TimeProcessing)
		}
		s.processing = true
	default:
		return nil, stream.ConfigErrorf("%s: time %q is not a time domain; write %q (the default: windows of event time, fired by watermarks) or %q (windows of the task's clock)", op, c.Time, TimeEvent, TimeProcessing)
	}
	if len(c.Aggregates) == 0 {
		return nil, stream.ConfigErrorf("%s: aggregates is empty; list at least one, e.g. [{\"fn\": \"count\", \"as\": \"n\"}]", op)
	}
	s.aggs = c.Aggregates
	return s, nil
}

// sessionSpec is a parsed session window config; durations in
// milliseconds. win carries the operator name and aggregates, for resolve.
type sessionSpec struct {
	gap      int64
	lateness int64
	win      windowSpec
}

// planSessionWindow checks a session window config against its input and
// returns the output schema, laid out as planWindow's.
func planSessionWindow(p *stream.PlanContext) (*stream.Schema, error) {
	spec, err := parseSessionConfig(p.Config)
	if err != nil {
		return nil, err
	}
	r, err := spec.win.resolve(p.Inputs[0].Schema, p.Inputs[0].KeyFields)
	if err != nil {
		return nil, err
	}
	p.DeclareSideOutput(LateOutput, p.Inputs[0].Schema)
	p.DeclareState(stream.StateDecl{Name: sessionsTable, Kind: stream.StateValue})
	p.DeclareState(stream.StateDecl{Name: sessionSignatureState, Kind: stream.StateUnion})
	p.DeclareState(stream.StateDecl{Name: sessionWatermarkState, Kind: stream.StateUnion})
	return r.out, nil
}

func parseSessionConfig(raw []byte) (*sessionSpec, error) {
	const op = TypeSessionWindow
	var c SessionWindowConfig
	if err := stream.DecodeConfig(raw, &c); err != nil {
		return nil, stream.ConfigErrorf("%s: %v (want {\"gap\": \"30s\", \"aggregates\": [{\"fn\": \"count\"}]})", op, err)
	}
	s := &sessionSpec{win: windowSpec{op: op}}
	var err error
	if c.Gap == "" {
		return nil, stream.ConfigErrorf("%s: gap is required: set it to the event-time inactivity that ends a session, a duration such as \"30s\"", op)
	}
	if s.gap, err = parseMillis(op, "gap", c.Gap, 0); err != nil {
		return nil, err
	}
	if s.gap <= 0 {
		return nil, stream.ConfigErrorf("%s: gap %q must be positive: it is the event-time inactivity that ends a session; write a duration such as \"30s\"", op, c.Gap)
	}
	if s.lateness, err = parseMillis(op, "allowedLateness", c.AllowedLateness, 0); err != nil {
		return nil, err
	}
	if s.lateness < 0 {
		return nil, stream.ConfigErrorf("%s: allowedLateness %q is negative; use \"0s\" to drop every record that arrives after its session fired", op, c.AllowedLateness)
	}
	switch c.Time {
	case "", TimeEvent:
	case TimeProcessing:
		return nil, stream.ConfigErrorf("%s: time %q: sessions are of event time only; remove time and assign event time with a %s operator upstream, or use %s with time %q", op, c.Time, TypeWatermarks, TypeTumblingWindow, TimeProcessing)
	default:
		return nil, stream.ConfigErrorf("%s: time %q is not supported; sessions are of event time only: remove time, or write %q", op, c.Time, TimeEvent)
	}
	if len(c.Aggregates) == 0 {
		return nil, stream.ConfigErrorf("%s: aggregates is empty; list at least one, e.g. [{\"fn\": \"count\", \"as\": \"n\"}]", op)
	}
	s.win.aggs = c.Aggregates
	return s, nil
}

// resolved is a window spec bound to an input schema and key.
type resolved struct {
	keyCols []int // key field indexes in the input
	aggs    []aggSpec
	out     *stream.Schema
}

// resolve binds s to the input schema and key fields (nil for a global
// window) and builds the output schema.
func (s *windowSpec) resolve(in *stream.Schema, keys []string) (*resolved, error) {
	r := &resolved{}
	fields := make([]stream.Field, 0, len(keys)+2+len(s.aggs))
	for _, k := range keys {
		i := in.Index(k)
		if i < 0 {
			return nil, stream.ConfigErrorf("%s: key field %q is not in the input (the input has %s); keyBy fields of the input that exist", s.op, k, strings.Join(in.Names(), ", "))
		}
		r.keyCols = append(r.keyCols, i)
		fields = append(fields, in.Fields[i])
	}
	fields = append(fields,
		stream.Field{Name: FieldWindowStart, Type: stream.TypeTimestamp},
		stream.Field{Name: FieldWindowEnd, Type: stream.TypeTimestamp})
	for n, a := range s.aggs {
		sp, err := resolveAgg(s.op, n, a, in)
		if err != nil {
			return nil, err
		}
		r.aggs = append(r.aggs, sp)
		fields = append(fields, stream.Field{Name: sp.name, Type: sp.outType})
	}
	seen := make(map[string]string, len(fields))
	for i, f := range fields {
		what := "an aggregate"
		switch {
		case i < len(keys):
			what = "a key field"
		case i < len(keys)+2:
			what = "a window bound"
		}
		if prev, dup := seen[f.Name]; dup {
			if prev == what {
				return nil, stream.ConfigErrorf("%s: output field %q is produced by two aggregates; name one of them with \"as\"", s.op, f.Name)
			}
			return nil, stream.ConfigErrorf("%s: output field %q is both %s and %s; give the aggregate another name with \"as\"", s.op, f.Name, prev, what)
		}
		seen[f.Name] = what
	}
	out, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: output schema: %v", s.op, err)
	}
	r.out = out
	return r, nil
}

// resolveAgg checks aggregate number n against the input schema.
func resolveAgg(op string, n int, a AggregateConfig, in *stream.Schema) (aggSpec, error) {
	fn := strings.ToLower(a.Fn)
	sp := aggSpec{col: -1, name: a.As}
	where := fmt.Sprintf("%s: aggregates[%d]", op, n)
	if a.Field != "" {
		sp.col = in.Index(a.Field)
		if sp.col < 0 {
			return sp, stream.ConfigErrorf("%s (%s): field %q is not in the input (the input has %s)", where, fn, a.Field, strings.Join(in.Names(), ", "))
		}
	}
	var ft stream.Type
	if sp.col >= 0 {
		ft = in.Fields[sp.col].Type
	}
	needField := func() error {
		if sp.col < 0 {
			return stream.ConfigErrorf("%s (%s): field is required: name the input field to aggregate", where, fn)
		}
		return nil
	}
	switch fn {
	case "count":
		sp.kind, sp.outType = aggCount, stream.TypeInt64
		if sp.col >= 0 {
			sp.kind = aggCountField
		}
	case "sum", "avg":
		if err := needField(); err != nil {
			return sp, err
		}
		switch ft {
		case stream.TypeInt64:
			sp.kind, sp.outType = aggSumInt, stream.TypeInt64
		case stream.TypeFloat64:
			sp.kind, sp.outType = aggSumFloat, stream.TypeFloat64
		default:
			return sp, stream.ConfigErrorf("%s (%s): field %q is %v; %s needs an int64 or float64 field", where, fn, a.Field, ft, fn)
		}
		if fn == "avg" {
			sp.kind += aggAvgInt - aggSumInt
			sp.outType = stream.TypeFloat64
		}
	case "min", "max":
		if err := needField(); err != nil {
			return sp, err
		}
		switch ft {
		case stream.TypeInt64, stream.TypeTimestamp:
			sp.kind = aggMinInt
		case stream.TypeFloat64:
			sp.kind = aggMinFloat
		default:
			return sp, stream.ConfigErrorf("%s (%s): field %q is %v; %s needs an int64, float64 or timestamp field", where, fn, a.Field, ft, fn)
		}
		if fn == "max" {
			sp.kind += aggMaxInt - aggMinInt
		}
		sp.outType = ft
	case "":
		return sp, stream.ConfigErrorf("%s: fn is required (count, sum, min, max or avg)", where)
	default:
		return sp, stream.ConfigErrorf("%s: unknown aggregate fn %q (want count, sum, min, max or avg)", where, a.Fn)
	}
	if sp.name == "" {
		sp.name = fn
		if sp.col >= 0 {
			sp.name = fn + "_" + a.Field
		}
	}
	return sp, nil
}
