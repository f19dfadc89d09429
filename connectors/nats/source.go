package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/stream"
)

// SourceConfig configures the "nats" source: it reads one JetStream
// stream.
type SourceConfig struct {
	ConnConfig
	// Stream is the JetStream stream to read. Required.
	Stream string `json:"stream"`
	// Subjects, when set, read only the stream's messages whose subject
	// matches one of these filters (wildcards allowed; they must not
	// overlap, and several need nats-server 2.10 or later).
	Subjects []string `json:"subjects,omitempty"`
	// StartFrom is where a job that does not restore a checkpoint starts:
	// "first" (default: the stream's first message), "new" (messages
	// stored after the source opens), "sequence" (StartSequence) or
	// "time" (the first message stored at or after StartTime). A restore
	// always resumes at the checkpointed position.
	StartFrom string `json:"startFrom,omitempty"`
	// StartSequence is the stream sequence to start at, for startFrom
	// sequence (1 or more).
	StartSequence uint64 `json:"startSequence,omitempty"`
	// StartTime is an RFC 3339 time, for startFrom time.
	StartTime string `json:"startTime,omitempty"`
	// Format is "raw" (default: columns subject string, data string,
	// sequence int64, timestamp timestamp — the message's subject,
	// payload, stream sequence and the time the stream stored it) or
	// "json" (each payload a JSON object decoded into Fields).
	Format string `json:"format,omitempty"`
	// Fields are the JSON keys read by format json, as the file source's
	// jsonl format takes them: a missing key or JSON null gives null,
	// other keys are ignored, a timestamp is an RFC 3339 string or
	// integer milliseconds.
	Fields []connectors.FileField `json:"fields,omitempty"`
	// BatchSize is the most messages per batch (and per fetch); 0 means
	// stream.DefaultBatchSize.
	BatchSize int `json:"batchSize,omitempty"`
	// MaxMessageBytes is the largest payload accepted, in bytes; default
	// 1 MiB, at most 64 MiB. A larger message fails the task (or is
	// skipped with onDecodeError skip).
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
	// OnDecodeError is "fail" (default: a message that does not decode,
	// is too large or has a null event time fails the task, naming its
	// stream sequence) or "skip" (such messages are counted, logged by
	// sequence and dropped).
	OnDecodeError string `json:"onDecodeError,omitempty"`
	// StopAtEnd makes the source bounded: it reads up to the last message
	// (matching Subjects) that the stream holds when the job starts, then
	// emits the end-of-input watermark and ends. The bound is kept in
	// checkpoints, so a restore ends at the same message.
	StopAtEnd bool `json:"stopAtEnd,omitempty"`
	// Watermark, when set, makes the source assign event times and emit
	// watermarks itself (otherwise put a watermarks operator after it).
	Watermark *SourceWatermark `json:"watermark,omitempty"`
}

// SourceWatermark makes the source emit watermarks: each record's event
// time is its Field (a timestamp, or an int64 of milliseconds since the
// epoch), and after each batch the watermark is the largest event time
// seen minus MaxOutOfOrderness minus 1 ms, when that advanced. The
// watermark does not advance while the stream is idle.
type SourceWatermark struct {
	Field string `json:"field"`
	// MaxOutOfOrderness is how late, as a duration string, a record may
	// be behind the largest event time seen; default "0s".
	MaxOutOfOrderness string `json:"maxOutOfOrderness,omitempty"`
}

// Start positions of SourceConfig.StartFrom.
const (
	StartFirst    = "first"
	StartNew      = "new"
	StartSequence = "sequence"
	StartTime     = "time"
)

const (
	defaultMaxMessageBytes = 1 << 20
	maxMaxMessageBytes     = 64 << 20
	maxBatchSize           = 1 << 16
	maxSubjectFilters      = 256
)

// RawSchema is the source's schema for format raw.
var RawSchema = stream.MustSchema(
	stream.Field{Name: "subject", Type: stream.TypeString},
	stream.Field{Name: "data", Type: stream.TypeString},
	stream.Field{Name: "sequence", Type: stream.TypeInt64},
	stream.Field{Name: "timestamp", Type: stream.TypeTimestamp},
)

// sourceSpec is a checked SourceConfig.
type sourceSpec struct {
	conn      *connSpec
	schema    *stream.Schema
	json      bool
	batch     int
	maxBytes  int
	startTime time.Time
	skipBad   bool
	wmCol     int // the event-time column, -1 without watermarks
	ooo       int64
}

const sourceOp = "nats source"

func (cfg *SourceConfig) check(paths *stream.PathPolicy) (*sourceSpec, error) {
	conn, err := cfg.ConnConfig.check(sourceOp, paths)
	if err != nil {
		return nil, err
	}
	spec := &sourceSpec{conn: conn, wmCol: -1, batch: stream.DefaultBatchSize, maxBytes: defaultMaxMessageBytes}
	if err := checkName(sourceOp, "stream", cfg.Stream); err != nil {
		return nil, err
	}
	if len(cfg.Subjects) > maxSubjectFilters {
		return nil, stream.ConfigErrorf("%s: %d subjects; at most %d filters are allowed", sourceOp, len(cfg.Subjects), maxSubjectFilters)
	}
	for i, s := range cfg.Subjects {
		if why := checkSubject(s, true); why != "" {
			return nil, stream.ConfigErrorf("%s: subjects[%d] %q is not a subject filter: %s", sourceOp, i, s, why)
		}
		for _, o := range cfg.Subjects[:i] {
			if o == s {
				return nil, stream.ConfigErrorf("%s: subjects: %q is given twice", sourceOp, s)
			}
		}
	}
	switch cfg.StartFrom {
	case "", StartFirst, StartNew:
		if cfg.StartSequence != 0 || cfg.StartTime != "" {
			return nil, stream.ConfigErrorf("%s: startSequence and startTime go with startFrom sequence and time only", sourceOp)
		}
	case StartSequence:
		if cfg.StartSequence == 0 || cfg.StartTime != "" {
			return nil, stream.ConfigErrorf("%s: startFrom sequence needs startSequence, a stream sequence of 1 or more (and no startTime)", sourceOp)
		}
	case StartTime:
		if cfg.StartSequence != 0 {
			return nil, stream.ConfigErrorf("%s: startFrom time takes startTime, not startSequence", sourceOp)
		}
		t, err := time.Parse(time.RFC3339Nano, cfg.StartTime)
		if err != nil {
			return nil, stream.ConfigErrorf("%s: startTime %q: want an RFC 3339 time such as 2024-05-01T12:00:00Z", sourceOp, cfg.StartTime)
		}
		spec.startTime = t
	default:
		return nil, stream.ConfigErrorf("%s: unknown startFrom %q (want first, new, sequence or time)", sourceOp, cfg.StartFrom)
	}
	if cfg.BatchSize < 0 || cfg.BatchSize > maxBatchSize {
		return nil, stream.ConfigErrorf("%s: batchSize %d: must be between 1 and %d (0 or unset means %d)", sourceOp, cfg.BatchSize, maxBatchSize, stream.DefaultBatchSize)
	}
	if cfg.BatchSize > 0 {
		spec.batch = cfg.BatchSize
	}
	if cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > maxMaxMessageBytes {
		return nil, stream.ConfigErrorf("%s: maxMessageBytes %d: must be between 1 and %d (0 or unset means %d)", sourceOp, cfg.MaxMessageBytes, maxMaxMessageBytes, defaultMaxMessageBytes)
	}
	if cfg.MaxMessageBytes > 0 {
		spec.maxBytes = cfg.MaxMessageBytes
	}
	switch cfg.OnDecodeError {
	case "", "fail":
	case "skip":
		spec.skipBad = true
	default:
		return nil, stream.ConfigErrorf("%s: unknown onDecodeError %q (want fail or skip)", sourceOp, cfg.OnDecodeError)
	}
	switch cfg.Format {
	case "", "raw":
		if len(cfg.Fields) > 0 {
			return nil, stream.ConfigErrorf("%s: fields are not allowed with format raw (it yields subject, data, sequence and timestamp); use format json to decode fields", sourceOp)
		}
		spec.schema = RawSchema
	case "json":
		if spec.schema, err = jsonSchema(cfg.Fields); err != nil {
			return nil, err
		}
		spec.json = true
	default:
		return nil, stream.ConfigErrorf("%s: unknown format %q (want raw or json)", sourceOp, cfg.Format)
	}
	if w := cfg.Watermark; w != nil {
		col := spec.schema.Index(w.Field)
		switch {
		case w.Field == "":
			return nil, stream.ConfigErrorf("%s: watermark: missing field; name the timestamp field that holds each record's event time", sourceOp)
		case col < 0:
			return nil, stream.ConfigErrorf("%s: watermark: field %q is not in the output (it has %v)", sourceOp, w.Field, spec.schema.Names())
		case spec.schema.Fields[col].Type != stream.TypeTimestamp && spec.schema.Fields[col].Type != stream.TypeInt64:
			return nil, stream.ConfigErrorf("%s: watermark: field %q is %v; it must be a timestamp or an int64 of milliseconds since the epoch", sourceOp, w.Field, spec.schema.Fields[col].Type)
		}
		spec.wmCol = col
		if w.MaxOutOfOrderness != "" {
			d, err := time.ParseDuration(w.MaxOutOfOrderness)
			if err != nil || d < 0 {
				return nil, stream.ConfigErrorf("%s: watermark: maxOutOfOrderness %q: want a duration of 0 or more, such as \"2s\"", sourceOp, w.MaxOutOfOrderness)
			}
			spec.ooo = d.Milliseconds()
		}
	}
	return spec, nil
}

// jsonSchema builds the schema of format json from the declared fields.
func jsonSchema(decl []connectors.FileField) (*stream.Schema, error) {
	if len(decl) == 0 {
		return nil, stream.ConfigErrorf("%s: format json needs fields, a list of {name, type} naming the JSON keys to read", sourceOp)
	}
	fields := make([]stream.Field, len(decl))
	for i, f := range decl {
		if f.Name == "" {
			return nil, stream.ConfigErrorf("%s: fields[%d]: missing name", sourceOp, i)
		}
		if f.Type == "" {
			return nil, stream.ConfigErrorf("%s: field %q: missing type (want int64, float64, string, bool or timestamp)", sourceOp, f.Name)
		}
		t, err := stream.ParseType(f.Type)
		if err != nil {
			return nil, stream.ConfigErrorf("%s: field %q: %v", sourceOp, f.Name, err)
		}
		fields[i] = stream.Field{Name: f.Name, Type: t}
	}
	schema, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: fields: %v; field names must be unique", sourceOp, err)
	}
	return schema, nil
}

func planSource(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg SourceConfig
	if err := stream.DecodeOperatorConfig(sourceOp, p.Config, &cfg); err != nil {
		return nil, err
	}
	p.DeclareState(stream.StateDecl{Name: sourcePositionState, Kind: stream.StateOperatorList})
	p.DeclareState(stream.StateDecl{Name: sourceSplitsMarker, Kind: stream.StateUnion})
	spec, err := cfg.check(p.Paths)
	if err != nil {
		return nil, err
	}
	return spec.schema, nil
}

// Source is one subtask of the "nats" source.
//
// The stream is one split, read in stream-sequence order. On a fresh
// start subtask 0 owns it and every other subtask ends at once (emitting
// the end-of-input watermark, so it holds no watermark back); after a
// restore the subtask that received the split's state owns it, whatever
// the parallelism. Parallelism above 1 therefore buys nothing: messages
// of one stream are read by one subtask.
//
// The owner reads through an ephemeral pull consumer of its own, created
// with AckNone and DeliverByStartSequence at the next sequence to emit;
// nothing depends on acknowledgements or on state kept by the server. A
// goroutine pulls messages into a bounded buffer (a few batches and
// megabytes) and Poll emits from it, never blocking on the network. When the
// client sees a gap in the consumer's delivery sequence (messages lost on
// a reconnect), or the consumer disappears, it creates a new consumer at
// the sequence after the last message it received, so that every message
// arrives once and in order.
//
// Exactly once: SnapshotState records the stream sequence after the last
// message emitted (fetched but unemitted messages are not counted), and
// RestoreState resumes exactly there. Messages that the stream's
// retention removed before they were read cannot be replayed: a restore
// to a position below the stream's first sequence logs a warning and
// continues at the first message still there.
type Source struct {
	cfg  SourceConfig
	spec *sourceSpec

	octx *stream.OperatorContext
	log  *slog.Logger
	conn *connection

	owns  bool   // this subtask reads the stream
	pos   uint64 // the stream sequence after the last message emitted
	limit uint64 // stopAtEnd: the first sequence not to read; 0: unbounded

	fetch   *fetcher
	cur     []record // fetched, not yet emitted
	ended   bool
	wm      int64 // the last watermark emitted
	skipped int64 // messages dropped by onDecodeError skip
	err     error // sticky: the task has failed

	json      *connectors.JSONRowDecoder
	fetchWait time.Duration // the fetcher's wait for a message (tests shorten it)
}

var (
	_ stream.Source       = (*Source)(nil)
	_ stream.Checkpointed = (*Source)(nil)
)

// NewSource returns a source for cfg, or a config error.
func NewSource(cfg SourceConfig) (*Source, error) {
	spec, err := cfg.check(nil)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, spec: spec, wm: stream.MinWatermark, fetchWait: defaultFetchWait}
	if spec.json {
		s.json = connectors.NewJSONRowDecoder(spec.schema)
	}
	return s, nil
}

func newSource(config []byte) (stream.Source, error) {
	var cfg SourceConfig
	if err := stream.DecodeOperatorConfig(sourceOp, config, &cfg); err != nil {
		return nil, err
	}
	return NewSource(cfg)
}

// Schema returns the schema of the rows the source emits.
func (s *Source) Schema() *stream.Schema { return s.spec.schema }

// Position returns the stream sequence after the last message emitted
// (0 before it is known) and whether this subtask reads the stream.
func (s *Source) Position() (next uint64, owner bool) { return s.pos, s.owns }

// Open connects, checks that the stream exists and, in subtask 0, finds
// where a fresh start begins (and, with stopAtEnd, where it ends); a
// restore replaces both.
func (s *Source) Open(ctx context.Context, octx *stream.OperatorContext) (err error) {
	s.octx, s.log = octx, loggerOf(octx)
	if _, err := s.cfg.ConnConfig.check(sourceOp, octx.Paths); err != nil {
		return err
	}
	conn, err := dial(sourceOp, &s.cfg.ConnConfig, s.spec.conn, octx, s.log)
	if err != nil {
		return err
	}
	s.conn = conn
	defer func() {
		if err != nil {
			conn.close()
		}
	}()
	info, err := conn.streamInfo(ctx, sourceOp, s.cfg.Stream)
	if err != nil {
		return err
	}
	if err := s.checkFilters(info.Config.Subjects); err != nil || octx.Subtask != 0 {
		return err
	}
	s.owns = true
	if s.pos, err = s.startPosition(ctx, info); err != nil {
		return err
	}
	if s.cfg.StopAtEnd {
		s.limit, err = s.endLimit(ctx)
	}
	return err
}

// checkFilters checks that every subject filter can match messages of a
// stream on subjects: a filter that cannot would leave the source
// waiting forever. A stream without subjects (a mirror, or one that only
// sources others) keeps its messages' own subjects and is not checked.
func (s *Source) checkFilters(subjects []string) error {
	if len(subjects) == 0 {
		return nil
	}
	for i, f := range s.cfg.Subjects {
		if !slices.ContainsFunc(subjects, func(sub string) bool { return subjectsCollide(f, sub) }) {
			return fmt.Errorf("%s: subjects[%d] %q matches none of the subjects of stream %q (%s); fix subjects", sourceOp, i, f, s.cfg.Stream, strings.Join(subjects, ", "))
		}
	}
	return nil
}

// subjectsCollide reports whether some subject matches both a and b,
// subjects or filters with wildcards.
func subjectsCollide(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) || i == len(bt):
			return len(at) == len(bt)
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}

// startPosition resolves StartFrom to a stream sequence, so that a
// checkpoint taken before the first message holds a concrete position.
func (s *Source) startPosition(ctx context.Context, info *jetstream.StreamInfo) (uint64, error) {
	switch s.cfg.StartFrom {
	case StartSequence:
		return s.cfg.StartSequence, nil
	case StartNew:
		return info.State.LastSeq + 1, nil
	case StartTime:
		// The server finds the first sequence at or after the time when
		// it creates a consumer; ask it with one that is deleted again.
		cfg := s.consumerConfig(0)
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &s.spec.startTime
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		c, err := s.conn.js.CreateConsumer(ctx, s.cfg.Stream, cfg)
		if err != nil {
			return 0, s.conn.explain(sourceOp, fmt.Sprintf("create a consumer on stream %q", s.cfg.Stream), err)
		}
		info := c.CachedInfo()
		_ = s.conn.js.DeleteConsumer(ctx, s.cfg.Stream, info.Name)
		return info.Delivered.Stream + 1, nil
	}
	return max(1, info.State.FirstSeq), nil // 0: the stream never held a message
}

// endLimit returns the first sequence after the last message the stream
// holds now that the source reads (1 when there is none).
func (s *Source) endLimit(ctx context.Context) (uint64, error) {
	if len(s.cfg.Subjects) == 0 {
		info, err := s.conn.streamInfo(ctx, sourceOp, s.cfg.Stream)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq + 1, nil
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	st, err := s.conn.js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return 0, s.conn.explain(sourceOp, fmt.Sprintf("stream %q", s.cfg.Stream), err)
	}
	var last uint64
	for _, f := range s.cfg.Subjects {
		m, err := st.GetLastMsgForSubject(ctx, f)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, s.conn.explain(sourceOp, fmt.Sprintf("last message of %q in stream %q", f, s.cfg.Stream), err)
		default:
			last = max(last, m.Sequence)
		}
	}
	return last + 1, nil
}

// consumerConfig is the config of the source's consumers, starting at
// stream sequence next.
func (s *Source) consumerConfig(next uint64) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Description:       fmt.Sprintf("weir %s: job %s operator %s subtask %d", sourceOp, s.octx.JobID, s.octx.OperatorUID, s.octx.Subtask),
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       next,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: consumerInactiveThreshold,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if len(s.cfg.Subjects) == 1 {
		cfg.FilterSubject = s.cfg.Subjects[0]
	} else {
		cfg.FilterSubjects = s.cfg.Subjects
	}
	return cfg
}

// Poll emits up to one batch of fetched messages, PollIdle when none is
// buffered, and, in bounded mode or when this subtask reads nothing,
// the end-of-input watermark and PollEnd.
func (s *Source) Poll(ctx context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.err != nil {
		return 0, s.err
	}
	if !s.owns || s.ended || (s.limit > 0 && s.pos >= s.limit) {
		return s.end(out), nil
	}
	if s.fetch == nil {
		if err := s.startFetching(ctx); err != nil {
			s.err = err
			return 0, err
		}
		if s.fetch == nil { // the bound found now is behind us
			return s.end(out), nil
		}
	}
	if len(s.cur) == 0 {
		select {
		case c := <-s.fetch.out:
			if c.err != nil {
				s.err = c.err
				return 0, c.err
			}
			if c.drained {
				// Nothing below the limit is left: it was removed
				// from the stream before it was read.
				s.pos = max(s.pos, s.limit)
				return s.end(out), nil
			}
			s.cur = c.recs
		default:
			return stream.PollIdle, nil
		}
	}
	return s.emit(out)
}

// startFetching starts the goroutine that fetches from s.pos.
func (s *Source) startFetching(ctx context.Context) error {
	if s.pos == 0 {
		s.pos = 1
	}
	if s.cfg.StopAtEnd && s.limit == 0 {
		// Restored from a checkpoint of an unbounded run.
		limit, err := s.endLimit(ctx)
		if err != nil {
			return err
		}
		s.limit = limit
		if s.pos >= s.limit {
			return nil
		}
	}
	info, err := s.conn.streamInfo(ctx, sourceOp, s.cfg.Stream)
	if err != nil {
		return err
	}
	if first := info.State.FirstSeq; s.pos < first {
		s.log.Warn(sourceOp+": messages were removed from the stream before they were read (by its retention limits, a purge or deletes); continuing at the first message still there",
			"stream", s.cfg.Stream, "next", s.pos, "first", first)
	}
	s.fetch = newFetcher(s.conn, s.cfg.Stream, s.consumerConfig, s.spec.batch, s.limit, s.fetchWait, s.log)
	s.fetch.start(s.pos)
	return nil
}

// emit emits the buffered messages, up to a batch.
func (s *Source) emit(out stream.Collector) (stream.PollStatus, error) {
	n := min(len(s.cur), s.spec.batch)
	b := stream.NewBatch(s.spec.schema, n)
	rows := 0
	maxTs := int64(math.MinInt64)
	i := 0
	for ; i < n; i++ {
		r := &s.cur[i]
		if s.limit > 0 && r.seq >= s.limit {
			s.pos = s.limit
			s.ended = true
			break
		}
		ok, err := s.appendRow(b, rows, r)
		if err != nil {
			b.Release()
			s.cur = s.cur[i:]
			s.err = err
			return 0, err
		}
		s.pos = r.seq + 1
		if !ok {
			continue
		}
		if s.spec.wmCol >= 0 {
			ts := b.Cols[s.spec.wmCol].Ints[rows]
			b.Times = append(b.Times, ts)
			maxTs = max(maxTs, ts)
		}
		rows++
	}
	clear(s.cur[:i]) // drop the payloads
	s.cur = s.cur[i:]
	if s.ended {
		s.cur = nil
	}
	if rows == 0 {
		b.Release()
	} else {
		b.SetLen(rows)
		out.Collect(b)
	}
	if maxTs != math.MinInt64 {
		if wm := maxTs - s.spec.ooo - 1; wm > s.wm {
			s.wm = wm
			out.EmitWatermark(wm)
		}
	}
	if s.ended {
		return s.end(out), nil
	}
	return stream.PollEmitted, nil
}

// appendRow appends the row of message r as row number row of b. It
// returns false when r was skipped (onDecodeError skip), an error when it
// fails the task.
func (s *Source) appendRow(b *stream.Batch, row int, r *record) (bool, error) {
	bad := func(format string, args ...any) (bool, error) {
		err := fmt.Errorf("%s: stream %q message at sequence %d: %s", sourceOp, s.cfg.Stream, r.seq, fmt.Sprintf(format, args...))
		if !s.spec.skipBad {
			return false, err
		}
		s.skipped++
		if s.skipped <= maxSkipLogs {
			s.log.Warn(sourceOp+": skipped a message (onDecodeError skip)", "error", err, "skipped", s.skipped)
		}
		return false, nil
	}
	if len(r.data) > s.spec.maxBytes {
		return bad("its payload is %d bytes, more than maxMessageBytes %d; raise maxMessageBytes (at most %d)", len(r.data), s.spec.maxBytes, maxMaxMessageBytes)
	}
	if !s.spec.json {
		c := b.Cols
		c[0].Strs = append(c[0].Strs, r.subject)
		c[1].Strs = append(c[1].Strs, string(r.data))
		c[2].Ints = append(c[2].Ints, int64(r.seq))
		c[3].Ints = append(c[3].Ints, r.ts)
		return true, nil
	}
	if err := s.json.Decode(r.data, b, row); err != nil {
		return bad("%v", err)
	}
	if s.spec.wmCol >= 0 && b.Cols[s.spec.wmCol].IsNull(row) {
		dropRow(b, row)
		return bad("its event-time field %q is null; the source's watermark needs every record's event time", s.cfg.Watermark.Field)
	}
	return true, nil
}

// maxSkipLogs is how many skipped messages a subtask logs one by one.
const maxSkipLogs = 100

// dropRow removes row number row, the last one appended to b's columns.
func dropRow(b *stream.Batch, row int) {
	for i := range b.Cols {
		c := &b.Cols[i]
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			c.Ints = c.Ints[:row]
		case stream.TypeFloat64:
			c.Floats = c.Floats[:row]
		case stream.TypeString:
			c.Strs = c.Strs[:row]
		case stream.TypeBool:
			c.Bools = c.Bools[:row]
		}
		if w := row >> 6; w < len(c.Nulls) {
			c.Nulls[w] &^= 1 << (uint(row) & 63)
		}
	}
}

// end emits the end-of-input watermark once and reports PollEnd.
func (s *Source) end(out stream.Collector) stream.PollStatus {
	if s.wm != stream.MaxWatermark {
		s.wm = stream.MaxWatermark
		out.EmitWatermark(stream.MaxWatermark)
	}
	s.ended = true
	s.stopFetching()
	return stream.PollEnd
}

// Skipped returns how many messages onDecodeError skip dropped.
func (s *Source) Skipped() int64 { return s.skipped }

func (s *Source) stopFetching() {
	if s.fetch != nil {
		s.fetch.stop()
		s.fetch = nil
	}
}

// Close stops fetching, deletes the consumer and closes the connection.
func (s *Source) Close() error {
	s.stopFetching()
	s.conn.close()
	s.cur = nil
	return nil
}

func loggerOf(octx *stream.OperatorContext) *slog.Logger {
	if octx.Logger != nil {
		return octx.Logger
	}
	return slog.New(slog.DiscardHandler)
}
