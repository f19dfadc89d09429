package connectors

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// DatagenConfig configures the "datagen" source. Every value of every row is
// a pure function of the config and the row's global sequence number seq, so
// runs, restarts and different parallelisms produce the same rows.
//
// The rows are divided into splits: a job started with parallelism p (not
// from a checkpoint) has the p splits seq ≡ i (mod p), i < p, and subtask i
// generates split i: seq = i, i+p, i+2p, ... A restore with another
// parallelism hands the splits out anew (see Datagen), so the job produces
// the same rows, each once, however often it is rescaled. The splits stay
// those of the first parallelism: a restore with more subtasks than splits
// leaves the extra subtasks without rows.
type DatagenConfig struct {
	// Rows is the total number of rows over all subtasks (seq < Rows); 0
	// means unbounded.
	Rows int64 `json:"rows,omitempty"`
	// RatePerSecond limits the total rows per second over all subtasks; 0
	// means as fast as possible. Each split gets an equal share and a
	// subtask the sum of its unfinished splits' shares: 1/p of the rate
	// each before any rescaling, and the whole rate over all subtasks
	// after one, whichever subtasks the splits went to.
	RatePerSecond float64 `json:"ratePerSecond,omitempty"`
	// BatchDelay bounds how long a rate-limited subtask holds due rows
	// back to make a fuller batch (a duration such as "100ms", at most
	// 10s; "0s" emits as soon as one row is due). Default 100ms, the
	// buffer timeout stream processors commonly default to: a subtask
	// whose share of the rate is 78 rows/s then emits about 8 rows ten
	// times a second instead of one row 78 times a second, and a subtask
	// that fills a batch sooner emits it as soon as it is full.
	BatchDelay string `json:"batchDelay,omitempty"`
	// Seed varies the generated values.
	Seed int64 `json:"seed,omitempty"`
	// BatchSize is the rows per batch; 0 means stream.DefaultBatchSize.
	BatchSize int `json:"batchSize,omitempty"`
	// Preset names a fixed row shape instead of Fields: "bid" (see Bid and
	// BidAt).
	Preset string `json:"preset,omitempty"`
	// Fields describe the generated columns when there is no preset.
	Fields []DatagenField `json:"fields,omitempty"`
}

// DatagenField describes one generated column. Which options apply depends on
// Kind:
//
//	sequence   int64: Start (an integer, default 0) + seq, or with Modulo
//	           Start + seq%Modulo, or with Divide Start + seq/Divide. Modulo K
//	           and Divide K with Start 1 make a keyed sequence: key seq%K
//	           counts 1, 2, 3, ...; when K is a multiple of the number of
//	           splits (the parallelism the job was first started with)
//	           each key comes from one split, so from one subtask, in order.
//	key        "<Prefix><n>" or, with Type "int64", n; n uniform in [0, Cardinality)
//	random     Type int64 or timestamp (Min..Max inclusive, default 0..2^31-1),
//	           float64 ([Min, Max), default [0, 1)), bool, or string (Length
//	           letters, default 8, drawn from a fixed pool of 4096 strings)
//	timestamp  Start (RFC3339 or integer milliseconds, default
//	           2026-01-01T00:00:00Z) + seq*StepMillis (default 1) minus a
//	           deterministic jitter in [0, JitterMillis]
//	oneof      one of Values (strings), uniformly
type DatagenField struct {
	Name         string          `json:"name"`
	Kind         string          `json:"kind"`
	Type         string          `json:"type,omitempty"`
	Start        json.RawMessage `json:"start,omitempty"`
	Cardinality  int64           `json:"cardinality,omitempty"`
	Prefix       string          `json:"prefix,omitempty"`
	Min          json.Number     `json:"min,omitempty"`
	Max          json.Number     `json:"max,omitempty"`
	Length       int             `json:"length,omitempty"`
	StepMillis   int64           `json:"stepMillis,omitempty"`
	JitterMillis int64           `json:"jitterMillis,omitempty"`
	Values       []string        `json:"values,omitempty"`
	Modulo       int64           `json:"modulo,omitempty"`
	Divide       int64           `json:"divide,omitempty"`
}

const (
	defaultTimestampStart = BidEpochMillis
	stringPoolSize        = 4096
	// keyPoolLimit is the largest cardinality whose key strings are built
	// once at Open; larger ones are formatted per batch into one buffer.
	keyPoolLimit = 1 << 18
	maxStringLen = 1 << 16
)

// columnGen fills one column with n values for seq, seq+stride, ...
type columnGen interface {
	fill(c *stream.Column, seq, stride int64, n int)
}

// datagenPlan is a validated, compiled config.
type datagenPlan struct {
	schema    *stream.Schema
	cols      []columnGen
	rows      int64
	rate      float64
	batchSize int
}

func planDatagen(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg DatagenConfig
	if err := stream.DecodeOperatorConfig("datagen", p.Config, &cfg); err != nil {
		return nil, err
	}
	schema, err := cfg.check()
	declareSplitState(p, datagenStateName, datagenMarkerState)
	return schema, err
}

// check validates cfg and returns its schema without building pools.
func (cfg *DatagenConfig) check() (*stream.Schema, error) {
	if cfg.Rows < 0 {
		return nil, stream.ConfigErrorf("datagen: rows %d: must be 0 (unbounded) or positive", cfg.Rows)
	}
	if cfg.RatePerSecond < 0 || math.IsNaN(cfg.RatePerSecond) || math.IsInf(cfg.RatePerSecond, 0) {
		return nil, stream.ConfigErrorf("datagen: ratePerSecond %v: must be 0 (unlimited) or a positive number", cfg.RatePerSecond)
	}
	if _, err := checkBatchSize("datagen", cfg.BatchSize); err != nil {
		return nil, err
	}
	if _, err := cfg.batchDelay(); err != nil {
		return nil, err
	}
	switch cfg.Preset {
	case "bid":
		if len(cfg.Fields) > 0 {
			return nil, stream.ConfigErrorf("datagen: preset %q fixes the fields; remove either preset or fields", cfg.Preset)
		}
		return BidSchema, nil
	case "":
	default:
		return nil, stream.ConfigErrorf("datagen: unknown preset %q (known presets: bid)", cfg.Preset)
	}
	if len(cfg.Fields) == 0 {
		return nil, stream.ConfigErrorf("datagen: no fields; set fields (a list of {name, kind, ...}) or preset \"bid\"")
	}
	fields := make([]stream.Field, len(cfg.Fields))
	for i := range cfg.Fields {
		t, err := cfg.Fields[i].check(i)
		if err != nil {
			return nil, err
		}
		fields[i] = stream.Field{Name: cfg.Fields[i].Name, Type: t}
	}
	schema, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("datagen: fields: %v; field names must be unique", err)
	}
	return schema, nil
}

// options lists which optional settings f has set, by JSON name.
func (f *DatagenField) options() []string {
	var set []string
	add := func(name string, on bool) {
		if on {
			set = append(set, name)
		}
	}
	add("type", f.Type != "")
	add("start", len(f.Start) > 0)
	add("cardinality", f.Cardinality != 0)
	add("prefix", f.Prefix != "")
	add("min", f.Min != "")
	add("max", f.Max != "")
	add("length", f.Length != 0)
	add("stepMillis", f.StepMillis != 0)
	add("jitterMillis", f.JitterMillis != 0)
	add("values", f.Values != nil)
	add("modulo", f.Modulo != 0)
	add("divide", f.Divide != 0)
	return set
}

var kindOptions = map[string][]string{
	"sequence":  {"type", "start", "modulo", "divide"},
	"key":       {"type", "cardinality", "prefix"},
	"random":    {"type", "min", "max", "length"},
	"timestamp": {"type", "start", "stepMillis", "jitterMillis"},
	"oneof":     {"type", "values"},
}

// check validates field number i and returns its type.
func (f *DatagenField) check(i int) (stream.Type, error) {
	where := fmt.Sprintf("datagen: fields[%d]", i)
	if f.Name == "" {
		return 0, stream.ConfigErrorf("%s: missing name; every field needs a \"name\"", where)
	}
	where = fmt.Sprintf("datagen: field %q", f.Name)
	allowed, ok := kindOptions[f.Kind]
	if !ok {
		if f.Kind == "" {
			return 0, stream.ConfigErrorf("%s: missing kind (want sequence, key, random, timestamp or oneof)", where)
		}
		return 0, stream.ConfigErrorf("%s: unknown kind %q (want sequence, key, random, timestamp or oneof)", where, f.Kind)
	}
	for _, o := range f.options() {
		found := false
		for _, a := range allowed {
			found = found || a == o
		}
		if !found {
			return 0, stream.ConfigErrorf("%s: option %q does not apply to kind %s (it takes %s)", where, o, f.Kind, strings.Join(allowed, ", "))
		}
	}
	typ := stream.TypeInvalid
	if f.Type != "" {
		t, err := stream.ParseType(f.Type)
		if err != nil {
			return 0, stream.ConfigErrorf("%s: %v", where, err)
		}
		typ = t
	}
	want := func(def stream.Type, ok ...stream.Type) (stream.Type, error) {
		if typ == stream.TypeInvalid {
			return def, nil
		}
		names := make([]string, len(ok))
		for k, t := range ok {
			if t == typ {
				return typ, nil
			}
			names[k] = t.String()
		}
		return 0, stream.ConfigErrorf("%s: type %s is not supported by kind %s (want %s)", where, typ, f.Kind, strings.Join(names, " or "))
	}
	switch f.Kind {
	case "sequence":
		if _, err := f.intStart(where); err != nil {
			return 0, err
		}
		if f.Modulo < 0 || f.Divide < 0 || (f.Modulo > 0 && f.Divide > 0) {
			return 0, stream.ConfigErrorf("%s: modulo %d, divide %d: set at most one of them, to a positive number", where, f.Modulo, f.Divide)
		}
		return want(stream.TypeInt64, stream.TypeInt64)
	case "key":
		if f.Cardinality <= 0 {
			return 0, stream.ConfigErrorf("%s: cardinality %d: a key needs a positive cardinality (the number of distinct keys)", where, f.Cardinality)
		}
		t, err := want(stream.TypeString, stream.TypeString, stream.TypeInt64)
		if err == nil && t == stream.TypeInt64 && f.Prefix != "" {
			return 0, stream.ConfigErrorf("%s: prefix applies only to string keys; remove it or drop \"type\": \"int64\"", where)
		}
		return t, err
	case "random":
		t, err := want(stream.TypeInt64, stream.TypeInt64, stream.TypeFloat64, stream.TypeBool, stream.TypeString, stream.TypeTimestamp)
		if err != nil {
			return 0, err
		}
		if t != stream.TypeString && f.Length != 0 {
			return 0, stream.ConfigErrorf("%s: length applies only to random strings (type string)", where)
		}
		switch t {
		case stream.TypeInt64, stream.TypeTimestamp:
			_, _, err = f.intRange(where)
		case stream.TypeFloat64:
			_, _, err = f.floatRange(where)
		default:
			if f.Min != "" || f.Max != "" {
				return 0, stream.ConfigErrorf("%s: min and max apply only to int64, float64 and timestamp values, not %s", where, t)
			}
			if t == stream.TypeString && (f.Length < 0 || f.Length > maxStringLen) {
				return 0, stream.ConfigErrorf("%s: length %d: must be between 1 and %d (0 or unset means 8)", where, f.Length, maxStringLen)
			}
		}
		return t, err
	case "timestamp":
		if _, err := f.timeStart(where); err != nil {
			return 0, err
		}
		if f.StepMillis < 0 {
			return 0, stream.ConfigErrorf("%s: stepMillis %d: must not be negative", where, f.StepMillis)
		}
		if f.JitterMillis < 0 {
			return 0, stream.ConfigErrorf("%s: jitterMillis %d: must not be negative", where, f.JitterMillis)
		}
		return want(stream.TypeTimestamp, stream.TypeTimestamp)
	default: // oneof
		if len(f.Values) == 0 {
			return 0, stream.ConfigErrorf("%s: kind oneof needs a non-empty \"values\" list", where)
		}
		return want(stream.TypeString, stream.TypeString)
	}
}

func (f *DatagenField) intStart(where string) (int64, error) {
	if len(f.Start) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(f.Start), 10, 64)
	if err != nil {
		return 0, stream.ConfigErrorf("%s: start %s: want an integer", where, f.Start)
	}
	return v, nil
}

func (f *DatagenField) timeStart(where string) (int64, error) {
	if len(f.Start) == 0 {
		return defaultTimestampStart, nil
	}
	if v, err := strconv.ParseInt(string(f.Start), 10, 64); err == nil {
		return v, nil
	}
	var s string
	if err := json.Unmarshal(f.Start, &s); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, stream.ConfigErrorf("%s: start %s: want an RFC3339 time such as \"2026-01-01T00:00:00Z\" or integer milliseconds since the epoch", where, f.Start)
}

func (f *DatagenField) intRange(where string) (lo, hi int64, err error) {
	lo, hi = 0, math.MaxInt32
	if f.Min != "" {
		if lo, err = f.Min.Int64(); err != nil {
			return 0, 0, stream.ConfigErrorf("%s: min %s: want an integer", where, f.Min)
		}
	}
	if f.Max != "" {
		if hi, err = f.Max.Int64(); err != nil {
			return 0, 0, stream.ConfigErrorf("%s: max %s: want an integer", where, f.Max)
		}
	}
	if lo > hi {
		return 0, 0, stream.ConfigErrorf("%s: min %d is greater than max %d; set min <= max", where, lo, hi)
	}
	return lo, hi, nil
}

func (f *DatagenField) floatRange(where string) (lo, hi float64, err error) {
	lo, hi = 0, 1
	if f.Min != "" {
		if lo, err = f.Min.Float64(); err != nil || math.IsInf(lo, 0) {
			return 0, 0, stream.ConfigErrorf("%s: min %s: want a finite number", where, f.Min)
		}
	}
	if f.Max != "" {
		if hi, err = f.Max.Float64(); err != nil || math.IsInf(hi, 0) {
			return 0, 0, stream.ConfigErrorf("%s: max %s: want a finite number", where, f.Max)
		}
	}
	if lo > hi {
		return 0, 0, stream.ConfigErrorf("%s: min %v is greater than max %v; set min <= max", where, lo, hi)
	}
	return lo, hi, nil
}

// compile validates cfg and builds its column generators and pools.
func (cfg *DatagenConfig) compile() (*datagenPlan, error) {
	schema, err := cfg.check()
	if err != nil {
		return nil, err
	}
	bs, _ := checkBatchSize("datagen", cfg.BatchSize)
	p := &datagenPlan{schema: schema, rows: cfg.Rows, rate: cfg.RatePerSecond, batchSize: bs}
	if cfg.Preset == "bid" {
		p.cols = bidColumns(cfg.Seed)
		return p, nil
	}
	for i := range cfg.Fields {
		f := &cfg.Fields[i]
		fs := fieldSeed(cfg.Seed, i)
		typ := schema.Fields[i].Type
		var g columnGen
		switch f.Kind {
		case "sequence":
			start, _ := f.intStart("")
			g = &sequenceGen{start: start, mod: f.Modulo, div: f.Divide}
		case "key":
			card := uint64(f.Cardinality)
			switch {
			case typ == stream.TypeInt64:
				g = &intKeyGen{fs: fs, card: card}
			case card <= keyPoolLimit:
				pool := make([]string, card)
				for n := range pool {
					pool[n] = f.Prefix + strconv.FormatUint(uint64(n), 10)
				}
				g = newPoolGen(fs, pool)
			default:
				g = &formatKeyGen{fs: fs, card: card, prefix: f.Prefix}
			}
		case "random":
			switch typ {
			case stream.TypeInt64, stream.TypeTimestamp:
				lo, hi, _ := f.intRange("")
				g = &randIntGen{fs: fs, lo: lo, span: uint64(hi-lo) + 1}
			case stream.TypeFloat64:
				lo, hi, _ := f.floatRange("")
				g = &randFloatGen{fs: fs, lo: lo, width: hi - lo}
			case stream.TypeBool:
				g = &randBoolGen{fs: fs}
			default:
				n := f.Length
				if n == 0 {
					n = 8
				}
				pool := make([]string, stringPoolSize)
				for k := range pool {
					pool[k] = randomWord(mix64(fs^uint64(k)), n)
				}
				g = newPoolGen(fs, pool)
			}
		case "timestamp":
			start, _ := f.timeStart("")
			step := f.StepMillis
			if step == 0 {
				step = 1
			}
			g = &timestampGen{fs: fs, start: start, step: step, jitter: uint64(f.JitterMillis)}
		case "oneof":
			g = newPoolGen(fs, append([]string(nil), f.Values...))
		}
		p.cols = append(p.cols, g)
	}
	return p, nil
}

// fillBatch returns a batch of n rows for seq, seq+stride, ...
func (p *datagenPlan) fillBatch(seq, stride int64, n int) *stream.Batch {
	b := stream.NewBatch(p.schema, n)
	for i, g := range p.cols {
		g.fill(&b.Cols[i], seq, stride, n)
	}
	b.SetLen(n)
	return b
}

// GenerateRow returns row seq of cfg as values (int64, float64, string, bool;
// timestamps as int64 milliseconds). It is the slow path for tests and uses
// the same code as the source; it panics if cfg is invalid.
func GenerateRow(cfg DatagenConfig, seq int64) []any {
	p, err := cfg.compile()
	if err != nil {
		panic(err)
	}
	b := p.fillBatch(seq, 1, 1)
	defer b.Release()
	return b.Row(0)
}

// GenerateRows calls fn with rows start, start+1, …, start+n-1 of cfg, as
// GenerateRow would return them, compiling cfg once. It is for tests that
// recompute a source's output; it panics if cfg is invalid.
func GenerateRows(cfg DatagenConfig, start, n int64, fn func(seq int64, row []any)) {
	p, err := cfg.compile()
	if err != nil {
		panic(err)
	}
	const chunk = 4096
	for off := int64(0); off < n; off += chunk {
		m := min(chunk, n-off)
		b := p.fillBatch(start+off, 1, int(m))
		for i := range int(m) {
			fn(start+off+int64(i), b.Row(i))
		}
		b.Release()
	}
}

func intsOf(c *stream.Column, n int) []int64 {
	if cap(c.Ints) < n {
		c.Ints = make([]int64, n)
	}
	c.Ints = c.Ints[:n]
	return c.Ints
}

func floatsOf(c *stream.Column, n int) []float64 {
	if cap(c.Floats) < n {
		c.Floats = make([]float64, n)
	}
	c.Floats = c.Floats[:n]
	return c.Floats
}

func strsOf(c *stream.Column, n int) []string {
	if cap(c.Strs) < n {
		c.Strs = make([]string, n)
	}
	c.Strs = c.Strs[:n]
	return c.Strs
}

func boolsOf(c *stream.Column, n int) []bool {
	if cap(c.Bools) < n {
		c.Bools = make([]bool, n)
	}
	c.Bools = c.Bools[:n]
	return c.Bools
}

type sequenceGen struct{ start, mod, div int64 }

func (g *sequenceGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := intsOf(c, n)
	switch {
	case g.mod > 0:
		for j := range out {
			out[j] = g.start + (seq+int64(j)*stride)%g.mod
		}
	case g.div > 0:
		for j := range out {
			out[j] = g.start + (seq+int64(j)*stride)/g.div
		}
	default:
		v := g.start + seq
		for j := range out {
			out[j] = v
			v += stride
		}
	}
}

type intKeyGen struct{ fs, card uint64 }

func (g *intKeyGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := intsOf(c, n)
	for j := range out {
		out[j] = int64(below(seqHash(g.fs, seq), g.card))
		seq += stride
	}
}

// poolGen picks uniformly from strings built once, kept in a
// stream.StringDict that its columns name, so an exchange encodes them by
// code.
type poolGen struct {
	fs   uint64
	dict *stream.StringDict
}

func newPoolGen(fs uint64, pool []string) *poolGen {
	return &poolGen{fs: fs, dict: stream.NewStringDict(pool)}
}

func (g *poolGen) fill(c *stream.Column, seq, stride int64, n int) {
	fillFromDict(c, g.dict, g.fs, seq, stride, n)
}

// fillFromDict fills c with n values of d, the one for seq chosen by the
// field seed fs, and names d as the column's dictionary.
func fillFromDict(c *stream.Column, d *stream.StringDict, fs uint64, seq, stride int64, n int) {
	out := strsOf(c, n)
	vals := d.Values
	for j := range out {
		out[j] = pick(vals, seqHash(fs, seq))
		seq += stride
	}
	c.Dict = d
}

// pick returns the value of vals that hash h picks, uniformly.
func pick(vals []string, h uint64) string { return vals[below(h, uint64(len(vals)))] }

// formatKeyGen formats keys of a large key space into one buffer per batch:
// one allocation per batch, not per row. The buffer is never reused, so the
// strings stay valid for as long as anyone holds them.
type formatKeyGen struct {
	fs, card uint64
	prefix   string
}

func (g *formatKeyGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := strsOf(c, n)
	buf := make([]byte, 0, n*(len(g.prefix)+20))
	for j := range out {
		start := len(buf)
		buf = append(buf, g.prefix...)
		buf = strconv.AppendUint(buf, below(seqHash(g.fs, seq), g.card), 10)
		out[j] = unsafe.String(&buf[start], len(buf)-start)
		seq += stride
	}
}

type randIntGen struct {
	fs   uint64
	lo   int64
	span uint64 // hi-lo+1; 0 means the whole int64 range
}

func (g *randIntGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := intsOf(c, n)
	if g.span == 0 {
		for j := range out {
			out[j] = int64(seqHash(g.fs, seq))
			seq += stride
		}
		return
	}
	for j := range out {
		out[j] = g.lo + int64(below(seqHash(g.fs, seq), g.span))
		seq += stride
	}
}

type randFloatGen struct {
	fs        uint64
	lo, width float64
}

func (g *randFloatGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := floatsOf(c, n)
	for j := range out {
		out[j] = g.lo + float64(seqHash(g.fs, seq)>>11)*(1.0/(1<<53))*g.width
		seq += stride
	}
}

type randBoolGen struct{ fs uint64 }

func (g *randBoolGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := boolsOf(c, n)
	for j := range out {
		out[j] = seqHash(g.fs, seq)>>63 == 1
		seq += stride
	}
}

type timestampGen struct {
	fs          uint64
	start, step int64
	jitter      uint64
}

func (g *timestampGen) fill(c *stream.Column, seq, stride int64, n int) {
	out := intsOf(c, n)
	if g.jitter == 0 {
		for j := range out {
			out[j] = g.start + seq*g.step
			seq += stride
		}
		return
	}
	for j := range out {
		out[j] = g.start + seq*g.step - int64(below(seqHash(g.fs, seq), g.jitter+1))
		seq += stride
	}
}

// Datagen is one subtask of the "datagen" source. It generates the rows of
// the splits it owns: its own split after a fresh start, and after a restore
// exactly the splits the checkpoint gave it, possibly none (then it ends at
// once, bounded or not) or several (then each Poll emits one batch of the
// split whose next row has the lowest seq, so that the subtask's rows come
// roughly in seq order; within a split they come strictly in order).
type Datagen struct {
	cfg  DatagenConfig
	plan *datagenPlan

	subtask, parallelism int64
	// splits are the splits this subtask owns, by start; nil before Open.
	splits []datagenSplit
	// nsplits is the number of splits of the job (the stride of every
	// split): the parallelism the job was first started with.
	nsplits int64
	// pos is the position SetPosition gave before Open.
	pos int64

	rate float64 // rows per second for this subtask; 0 = unlimited
	// batchDelay is DatagenConfig.BatchDelay.
	batchDelay time.Duration
	now        func() time.Time
	rateStart  time.Time
	rateRows   int64 // rows emitted since rateStart
	// idleFor is how long the rate limit holds the next row back, set when
	// Poll returns PollIdle.
	idleFor time.Duration
}

// datagenSplit is a unit of datagen's work: the rows seq = start + k*stride
// for k = 0, 1, ... below end, of which rows k < next have been emitted.
type datagenSplit struct {
	start, stride int64
	next          int64 // the position: the index k of the next row
	end           int64 // the number of rows of the split; -1 when unbounded
}

// seq is the seq of the split's next row.
func (sp *datagenSplit) seq() int64 { return sp.start + sp.next*sp.stride }

func (sp *datagenSplit) exhausted() bool { return sp.end >= 0 && sp.next >= sp.end }

// newSplit returns split start of stride splits at position next, with its
// end under cfg.Rows.
func (d *Datagen) newSplit(start, stride, next int64) datagenSplit {
	sp := datagenSplit{start: start, stride: stride, next: next, end: -1}
	if d.cfg.Rows > 0 {
		sp.end = 0
		if start < d.cfg.Rows {
			sp.end = (d.cfg.Rows - start + stride - 1) / stride
		}
	}
	return sp
}

var _ stream.Source = (*Datagen)(nil)

// NewDatagen returns a datagen source for cfg, or a config error.
func NewDatagen(cfg DatagenConfig) (*Datagen, error) {
	if _, err := cfg.check(); err != nil {
		return nil, err
	}
	return &Datagen{cfg: cfg, now: time.Now}, nil
}

func newDatagenSource(config []byte) (stream.Source, error) {
	var cfg DatagenConfig
	if err := stream.DecodeOperatorConfig("datagen", config, &cfg); err != nil {
		return nil, err
	}
	return NewDatagen(cfg)
}

// Position returns the sum of the positions of the splits this subtask
// owns. Unless a restore rescaled the job, it owns one split and this is
// the index of its next row: the number of rows it has emitted since
// position 0.
func (d *Datagen) Position() int64 {
	if d.splits == nil {
		return d.pos
	}
	var n int64
	for _, sp := range d.splits {
		n += sp.next
	}
	return n
}

// SetPosition makes this subtask own just its own split (rows subtask,
// subtask+parallelism, ...) and the next Poll emit its row index pos, as
// after a restore at unchanged parallelism. It may be called before or
// after Open.
func (d *Datagen) SetPosition(pos int64) {
	d.pos = pos
	if d.splits != nil {
		d.nsplits = d.parallelism
		d.splits = []datagenSplit{d.newSplit(d.subtask, d.parallelism, pos)}
		d.resetRate()
	}
}

// Open builds the generators and string pools and gives the subtask its
// own split.
func (d *Datagen) Open(_ context.Context, octx *stream.OperatorContext) error {
	plan, err := d.cfg.compile()
	if err != nil {
		return err
	}
	d.plan = plan
	if d.batchDelay, err = d.cfg.batchDelay(); err != nil {
		return err
	}
	d.subtask, d.parallelism = int64(octx.Subtask), int64(max(1, octx.Parallelism))
	d.nsplits = d.parallelism
	d.splits = []datagenSplit{d.newSplit(d.subtask, d.parallelism, d.pos)}
	d.resetRate()
	return nil
}

// resetRate sets this subtask's share of the rate from the splits it has
// left and restarts the rate limit.
func (d *Datagen) resetRate() {
	var share float64
	for i := range d.splits {
		if !d.splits[i].exhausted() {
			share += 1 / float64(d.splits[i].stride)
		}
	}
	d.rate = d.cfg.RatePerSecond * share
	d.rateStart, d.rateRows = time.Time{}, 0
}

// current returns the unfinished split whose next row has the lowest seq,
// or nil when every split is finished.
func (d *Datagen) current() *datagenSplit {
	var cur *datagenSplit
	for i := range d.splits {
		sp := &d.splits[i]
		if !sp.exhausted() && (cur == nil || sp.seq() < cur.seq()) {
			cur = sp
		}
	}
	return cur
}

// Poll emits the next batch, PollIdle while the rate limit holds it back, or
// PollEnd when every split of the subtask is finished (at once if it owns
// none).
func (d *Datagen) Poll(ctx context.Context, out stream.Collector) (stream.PollStatus, error) {
	sp := d.current()
	if sp == nil {
		return stream.PollEnd, nil
	}
	n := int64(d.plan.batchSize)
	if sp.end >= 0 {
		n = min(n, sp.end-sp.next)
	}
	if d.rate > 0 {
		now := d.now()
		if d.rateStart.IsZero() {
			d.rateStart = now
		}
		allowed := int64(now.Sub(d.rateStart).Seconds()*d.rate) + 1 - d.rateRows
		if allowed <= 0 {
			// The runtime waits IdleFor before it polls again: until the
			// rows of the batch delay (at least one, at most a batch) are
			// due, so that a slow rate makes a few rows a batch rather
			// than a batch a row.
			want := min(n, max(1, int64(d.rate*d.batchDelay.Seconds())))
			d.idleFor = time.Duration(float64(want-allowed) / d.rate * float64(time.Second))
			return stream.PollIdle, nil
		}
		n = min(n, allowed)
		d.rateRows += n
	}
	out.Collect(d.plan.fillBatch(sp.seq(), sp.stride, int(n)))
	sp.next += n
	if sp.exhausted() && len(d.splits) > 1 {
		d.resetRate() // the finished split's share of the rate goes
	}
	return stream.PollEmitted, nil
}

// defaultBatchDelay is DatagenConfig.BatchDelay's default and
// maxBatchDelay its largest value.
const (
	defaultBatchDelay = 100 * time.Millisecond
	maxBatchDelay     = 10 * time.Second
)

// batchDelay returns cfg.BatchDelay as a duration, or its default.
func (cfg *DatagenConfig) batchDelay() (time.Duration, error) {
	if cfg.BatchDelay == "" {
		return defaultBatchDelay, nil
	}
	d, err := time.ParseDuration(cfg.BatchDelay)
	if err != nil || d < 0 || d > maxBatchDelay {
		return 0, stream.ConfigErrorf("datagen: batchDelay %q: must be a duration from 0s to %v, such as \"100ms\"", cfg.BatchDelay, maxBatchDelay)
	}
	return d, nil
}

// IdleFor says how long the rate limit holds the next row back, after
// Poll returned PollIdle (stream.IdleHinter).
func (d *Datagen) IdleFor() time.Duration { return d.idleFor }

var _ stream.IdleHinter = (*Datagen)(nil)

// Close does nothing; Datagen holds no resources.
func (d *Datagen) Close() error { return nil }
