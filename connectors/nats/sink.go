package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// SinkConfig configures the "nats" sink: it publishes each row as one
// message to JetStream.
type SinkConfig struct {
	ConnConfig
	// Subject is the subject every message is published to. Give Subject
	// or SubjectField.
	Subject string `json:"subject,omitempty"`
	// SubjectField names a string field of the input that holds each
	// row's subject; it needs Stream. A null, empty or invalid subject
	// fails the task.
	SubjectField string `json:"subjectField,omitempty"`
	// Stream, when set, is the stream the messages must land in: Open
	// checks that it exists (and, with Subject, that it captures the
	// subject), and every message asks the server to store it there only
	// (the Nats-Expected-Stream header). Without it Open finds the stream
	// that captures Subject.
	Stream string `json:"stream,omitempty"`
	// Format is "json" (default: each row as a JSON object, as the file
	// sink's jsonl writes it) or "raw" (the bytes of the string field
	// ValueField; null gives an empty message).
	Format string `json:"format,omitempty"`
	// ValueField is the payload field of format raw.
	ValueField string `json:"valueField,omitempty"`
	// MaxPending is how many messages may await the server's
	// acknowledgement at once (the asynchronous publish window); default
	// 4096, at most 1048576. Publishing waits when the window is full.
	MaxPending int `json:"maxPending,omitempty"`
	// MaxMessageBytes is the largest message payload, in bytes; default
	// 1 MiB, at most 64 MiB (and never more than the server's
	// max_payload). A larger row fails the task.
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
	// AckTimeout is how long, as a duration string, a message may wait
	// for its acknowledgement (and publishing for room in the window)
	// before the task fails; default "30s".
	AckTimeout string `json:"ackTimeout,omitempty"`
	// Deduplicate (default true) sets the Nats-Msg-Id header of every
	// message to an id derived from the row's place in the sink's input
	// (see Sink), so that the stream drops the rows a restore publishes
	// again. false publishes without ids: at least once, for inputs that
	// do not replay identically.
	Deduplicate *bool `json:"deduplicate,omitempty"`
}

const (
	sinkOp            = "nats sink"
	defaultMaxPending = 4096
	maxMaxPending     = 1 << 20
	defaultAckTimeout = 30 * time.Second
)

// sinkSpec is a checked SinkConfig.
type sinkSpec struct {
	conn       *connSpec
	raw        bool
	maxPending int
	maxBytes   int
	ackTimeout time.Duration
	dedupe     bool
}

func (cfg *SinkConfig) check(paths *stream.PathPolicy) (*sinkSpec, error) {
	conn, err := cfg.ConnConfig.check(sinkOp, paths)
	if err != nil {
		return nil, err
	}
	spec := &sinkSpec{conn: conn, maxPending: defaultMaxPending, maxBytes: defaultMaxMessageBytes, ackTimeout: defaultAckTimeout, dedupe: true}
	switch {
	case cfg.Subject != "" && cfg.SubjectField != "":
		return nil, stream.ConfigErrorf("%s: give subject or subjectField, not both", sinkOp)
	case cfg.Subject == "" && cfg.SubjectField == "":
		return nil, stream.ConfigErrorf("%s: missing subject; set subject to the subject to publish to, or subjectField to a string field holding each row's subject", sinkOp)
	case cfg.Subject != "":
		if why := checkSubject(cfg.Subject, false); why != "" {
			return nil, stream.ConfigErrorf("%s: subject %q: %s", sinkOp, cfg.Subject, why)
		}
	case cfg.Stream == "":
		return nil, stream.ConfigErrorf("%s: subjectField needs stream, the stream the subjects belong to, so that it can be checked at start and every message lands there", sinkOp)
	}
	if cfg.Stream != "" {
		if err := checkName(sinkOp, "stream", cfg.Stream); err != nil {
			return nil, err
		}
	}
	switch cfg.Format {
	case "", "json":
		if cfg.ValueField != "" {
			return nil, stream.ConfigErrorf("%s: valueField goes with format raw only (format json writes every field)", sinkOp)
		}
	case "raw":
		if cfg.ValueField == "" {
			return nil, stream.ConfigErrorf("%s: format raw needs valueField, the string field whose bytes are the message", sinkOp)
		}
		spec.raw = true
	default:
		return nil, stream.ConfigErrorf("%s: unknown format %q (want json or raw)", sinkOp, cfg.Format)
	}
	if cfg.MaxPending < 0 || cfg.MaxPending > maxMaxPending {
		return nil, stream.ConfigErrorf("%s: maxPending %d: must be between 1 and %d (0 or unset means %d)", sinkOp, cfg.MaxPending, maxMaxPending, defaultMaxPending)
	}
	if cfg.MaxPending > 0 {
		spec.maxPending = cfg.MaxPending
	}
	if cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > maxMaxMessageBytes {
		return nil, stream.ConfigErrorf("%s: maxMessageBytes %d: must be between 1 and %d (0 or unset means %d)", sinkOp, cfg.MaxMessageBytes, maxMaxMessageBytes, defaultMaxMessageBytes)
	}
	if cfg.MaxMessageBytes > 0 {
		spec.maxBytes = cfg.MaxMessageBytes
	}
	if cfg.AckTimeout != "" {
		d, err := time.ParseDuration(cfg.AckTimeout)
		if err != nil || d < time.Millisecond || d > time.Hour {
			return nil, stream.ConfigErrorf("%s: ackTimeout %q: want a duration between 1ms and 1h, such as \"30s\"", sinkOp, cfg.AckTimeout)
		}
		spec.ackTimeout = d
	}
	if cfg.Deduplicate != nil {
		spec.dedupe = *cfg.Deduplicate
	}
	return spec, nil
}

// checkInput checks the fields the config names against the input schema
// and returns their columns (-1 when not used).
func (cfg *SinkConfig) checkInput(in *stream.Schema) (subjectCol, valueCol int, err error) {
	find := func(key, name string) (int, error) {
		if name == "" {
			return -1, nil
		}
		i := in.Index(name)
		if i < 0 {
			return -1, stream.ConfigErrorf("%s: %s %q is not in the input (it has %v)", sinkOp, key, name, in.Names())
		}
		if t := in.Fields[i].Type; t != stream.TypeString {
			return -1, stream.ConfigErrorf("%s: %s %q is %v; it must be a string field", sinkOp, key, name, t)
		}
		return i, nil
	}
	if subjectCol, err = find("subjectField", cfg.SubjectField); err != nil {
		return
	}
	valueCol, err = find("valueField", cfg.ValueField)
	return
}

func planSink(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg SinkConfig
	if err := stream.DecodeOperatorConfig(sinkOp, p.Config, &cfg); err != nil {
		return nil, err
	}
	p.DeclareState(stream.StateDecl{Name: sinkIDsState, Kind: stream.StateOperatorList})
	if _, err := cfg.check(p.Paths); err != nil {
		return nil, err
	}
	if len(p.Inputs) != 1 {
		return nil, stream.ConfigErrorf("%s: want 1 input, got %d", sinkOp, len(p.Inputs))
	}
	if _, _, err := cfg.checkInput(p.Inputs[0].Schema); err != nil {
		return nil, err
	}
	return nil, nil
}

// Sink is one subtask of the "nats" sink. It publishes every row as one
// message, asynchronously with at most MaxPending awaiting their
// acknowledgement, and waits for every acknowledgement at each checkpoint
// (SnapshotState) and at Finish: a checkpoint completes only when all
// rows before it are stored in the stream, so none is lost. A failed or
// missing acknowledgement fails the task.
//
// # Message ids and exactly once
//
// With Deduplicate (the default) every message carries the header
// Nats-Msg-Id, and the stream drops a message whose id it stored within
// its duplicate window (the stream's Duplicates setting, 2 minutes by
// default). The id of a row is
//
//	weir.<job>.<uid>.<subtask>-<parallelism>.<checkpoint>.<row>
//
// (job and uid as twophase.Token shortens them): the segment the row
// belongs to, named by the job and checkpoint it started from (checkpoint
// 0: a fresh start), this subtask and the job's parallelism, and the
// row's index in the segment's input. The row counter is checkpointed; a
// restore from checkpoint n continues it where n left it, so the rows
// replayed after n get the ids they had before the failure and the
// stream drops the ones it stored already. A segment starts afresh at a
// restore that changes the sink's parallelism, or that has no counter for
// this subtask: then the ids are new, and rows published after the
// checkpoint before the failure are stored again (at least once, never
// lost).
//
// Exactly once therefore holds when (1) the sink's input replays
// identically after a restore: the same rows in the same order on every
// subtask, which holds for a deterministic pipeline whose every exchange
// before the sink has one input channel (forward edges from a replayable
// source such as the nats, file or datagen sources), but not after a
// keyBy, rebalance or union of several upstream subtasks, whose
// interleaving differs between runs; and (2) recovery (from the failure
// to the replay of the last row published before it) takes less than
// the stream's duplicate window. Beyond the window delivery is at least
// once. Where (1) does not hold, set Deduplicate false: rows may be
// written twice but are never taken for each other, as differently
// ordered replays with ids could be (and so dropped as duplicates).
// Rows another job submitted from the same checkpoint publishes count as
// duplicates of this job's too: both carry on the same output.
type Sink struct {
	stream.BaseOperator
	cfg  SinkConfig
	spec *sinkSpec

	octx       *stream.OperatorContext
	log        *slog.Logger
	conn       *connection
	subjectCol int
	valueCol   int
	json       *connectors.JSONRowEncoder
	maxBytes   int // the smaller of maxMessageBytes and the server's max_payload
	pubOpts    []jetstream.PublishOpt

	// The id segment and the number of rows published in it.
	segJob string
	segChk int64
	row    int64
	idBase []byte // the ids' prefix, up to the row number

	// mu guards the first failed publish, which the client reports on
	// its own goroutines.
	mu struct {
		sync.Mutex
		publishErr error
	}
	published  atomic.Int64
	duplicates atomic.Int64
}

var (
	_ stream.Operator     = (*Sink)(nil)
	_ stream.Checkpointed = (*Sink)(nil)
)

// NewSink returns a sink for cfg, or a config error.
func NewSink(cfg SinkConfig) (*Sink, error) {
	spec, err := cfg.check(nil)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, spec: spec}, nil
}

func newSink(config []byte) (stream.Operator, error) {
	var cfg SinkConfig
	if err := stream.DecodeOperatorConfig(sinkOp, config, &cfg); err != nil {
		return nil, err
	}
	return NewSink(cfg)
}

// Open connects, checks the stream and starts a fresh id segment (a
// restore replaces it).
func (s *Sink) Open(ctx context.Context, octx *stream.OperatorContext) (err error) {
	s.octx, s.log = octx, loggerOf(octx)
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("%s: want 1 input schema, got %d", sinkOp, len(octx.InputSchemas))
	}
	if _, err := s.cfg.ConnConfig.check(sinkOp, octx.Paths); err != nil {
		return err
	}
	in := octx.InputSchemas[0]
	if s.subjectCol, s.valueCol, err = s.cfg.checkInput(in); err != nil {
		return err
	}
	if !s.spec.raw {
		s.json = connectors.NewJSONRowEncoder(in)
	}
	conn, err := dial(sinkOp, &s.cfg.ConnConfig, s.spec.conn, octx, s.log,
		jetstream.WithPublishAsyncMaxPending(s.spec.maxPending),
		jetstream.WithPublishAsyncTimeout(s.spec.ackTimeout),
		jetstream.WithPublishAsyncErrHandler(s.onPublishError),
		jetstream.WithPublishAsyncAckHandler(s.onPublishAck))
	if err != nil {
		return err
	}
	s.conn = conn
	defer func() {
		if err != nil {
			conn.close()
		}
	}()
	s.maxBytes = int(min(int64(s.spec.maxBytes), conn.nc.MaxPayload()))
	if err := s.checkStream(ctx); err != nil {
		return err
	}
	s.pubOpts = []jetstream.PublishOpt{jetstream.WithStallWait(s.spec.ackTimeout)}
	if s.cfg.Stream != "" {
		s.pubOpts = append(s.pubOpts, jetstream.WithExpectStream(s.cfg.Stream))
	}
	s.startSegment(octx.JobID, 0)
	return nil
}

// checkStream checks that the messages have a stream to land in and logs
// its duplicate window.
func (s *Sink) checkStream(ctx context.Context) error {
	name := s.cfg.Stream
	if s.cfg.Subject != "" {
		lctx, cancel := context.WithTimeout(ctx, requestTimeout)
		got, err := s.conn.js.StreamNameBySubject(lctx, s.cfg.Subject)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return fmt.Errorf("%s: no JetStream stream on %s captures subject %q: %w; create one whose subjects include it (for example `nats stream add --subjects %q`) or fix subject",
				sinkOp, s.conn.where, s.cfg.Subject, ErrNoStream, s.cfg.Subject)
		case err != nil:
			return s.conn.explain(sinkOp, fmt.Sprintf("find the stream of subject %q", s.cfg.Subject), err)
		case name != "" && got != name:
			return fmt.Errorf("%s: subject %q is captured by stream %q, not by stream %q; fix subject or stream", sinkOp, s.cfg.Subject, got, name)
		}
		name = got
	}
	info, err := s.conn.streamInfo(ctx, sinkOp, name)
	if err != nil {
		return err
	}
	if s.spec.dedupe {
		s.log.Info(sinkOp+": publishing with message ids; exactly once for recoveries shorter than the stream's duplicate window",
			"stream", name, "duplicateWindow", info.Config.Duplicates)
	}
	return nil
}

// startSegment starts numbering rows from 0 in the segment of job and
// checkpoint.
func (s *Sink) startSegment(job string, checkpoint int64) {
	s.segJob, s.segChk, s.row = job, checkpoint, 0
	s.rebuildIDBase()
}

func (s *Sink) rebuildIDBase() {
	b := []byte(twophase.Prefix(s.segJob, s.octx.OperatorUID))
	b = strconv.AppendInt(b, int64(s.octx.Subtask), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(max(1, s.octx.Parallelism)), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, s.segChk, 10)
	s.idBase = append(b, '.')
}

// MessageID returns the Nats-Msg-Id the sink gives its next row.
func (s *Sink) MessageID() string {
	return string(strconv.AppendInt(s.idBase, s.row, 10))
}

func (s *Sink) onPublishError(_ jetstream.JetStream, _ *natsgo.Msg, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.publishErr == nil {
		s.mu.publishErr = err
	}
}

func (s *Sink) onPublishAck(_ jetstream.JetStream, _ *natsgo.Msg, ack *jetstream.PubAck) {
	if ack.Duplicate {
		s.duplicates.Add(1)
	}
}

// failed returns the first failed publish, explained.
func (s *Sink) failed() error {
	s.mu.Lock()
	err := s.mu.publishErr
	s.mu.Unlock()
	if err == nil {
		return nil
	}
	return s.explainPublish(err)
}

func (s *Sink) explainPublish(err error) error {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		return fmt.Errorf("%s: a message got no answer from JetStream on %s (%v): no stream captures its subject, or the stream is unavailable; create a stream for the subjects the sink publishes to",
			sinkOp, s.conn.where, err)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return fmt.Errorf("%s: NATS at %s did not acknowledge messages within ackTimeout %v (%v); check the server, or raise ackTimeout", sinkOp, s.conn.where, s.spec.ackTimeout, err)
	case errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrConnectionReconnecting):
		return fmt.Errorf("%s: lost the connection to NATS at %s with messages unacknowledged (%v); the task restarts and publishes them again", sinkOp, s.conn.where, err)
	}
	return fmt.Errorf("%s: publish to NATS at %s: %w", sinkOp, s.conn.where, err)
}

// ProcessBatch publishes every row of b, asynchronously, and releases b.
func (s *Sink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	if err := s.failed(); err != nil {
		return err
	}
	n := b.Len()
	if n == 0 {
		return nil
	}
	// One buffer holds the batch's payloads; the client keeps each
	// message until it is acknowledged, so it is not reused.
	var buf []byte
	ends := make([]int, n)
	for i := range n {
		start := len(buf)
		if s.spec.raw {
			if c := &b.Cols[s.valueCol]; !c.IsNull(i) {
				buf = append(buf, c.Strs[i]...)
			}
		} else {
			buf = s.json.AppendRow(buf, b, i)
		}
		if size := len(buf) - start; size > s.maxBytes {
			return fmt.Errorf("%s: row %d of a batch is %d bytes as a message, more than the limit of %d (maxMessageBytes %d, the server's max_payload %d); raise maxMessageBytes, or make the rows smaller",
				sinkOp, i, size, s.maxBytes, s.spec.maxBytes, s.conn.nc.MaxPayload())
		}
		ends[i] = len(buf)
	}
	start := 0
	for i := range n {
		subject := s.cfg.Subject
		if s.subjectCol >= 0 {
			c := &b.Cols[s.subjectCol]
			if c.IsNull(i) || checkSubject(c.Strs[i], false) != "" {
				why := "null"
				if !c.IsNull(i) {
					why = checkSubject(c.Strs[i], false)
				}
				return fmt.Errorf("%s: row %d of a batch: subjectField %q does not hold a subject to publish to: %s", sinkOp, i, s.cfg.SubjectField, why)
			}
			subject = c.Strs[i]
		}
		m := &natsgo.Msg{Subject: subject, Data: buf[start:ends[i]:ends[i]]}
		start = ends[i]
		if s.spec.dedupe {
			m.Header = natsgo.Header{jetstream.MsgIDHeader: []string{s.MessageID()}}
		}
		if _, err := s.conn.js.PublishMsgAsync(m, s.pubOpts...); err != nil {
			return s.explainPublish(err)
		}
		s.row++
		s.published.Add(1)
	}
	return nil
}

// flush waits until the server acknowledged every message published.
func (s *Sink) flush() error {
	if s.conn == nil {
		return nil
	}
	t := time.NewTimer(s.spec.ackTimeout + 5*time.Second)
	defer t.Stop()
	select {
	case <-s.conn.js.PublishAsyncComplete():
	case <-t.C:
		return fmt.Errorf("%s: %d messages still unacknowledged by NATS at %s after %v; check the server, or raise ackTimeout",
			sinkOp, s.conn.js.PublishAsyncPending(), s.conn.where, s.spec.ackTimeout+5*time.Second)
	}
	return s.failed()
}

// SnapshotState waits for every acknowledgement, then records the id
// segment and its row counter.
func (s *Sink) SnapshotState(c *stream.SnapshotContext) error {
	if err := s.flush(); err != nil {
		return err
	}
	item := []byte{stateVersion}
	item = statecodec.AppendString(item, s.segJob)
	item = statecodec.AppendVarint(item, s.segChk)
	item = statecodec.AppendVarint(item, int64(max(1, s.octx.Parallelism)))
	item = statecodec.AppendVarint(item, int64(s.octx.Subtask))
	item = statecodec.AppendVarint(item, s.row)
	c.AddListState(sinkIDsState, item)
	return nil
}

// RestoreState continues the id segment this subtask checkpointed, or
// starts a new one named by the restored checkpoint when the parallelism
// changed or the checkpoint has no counter of this subtask.
func (s *Sink) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	job := c.JobID
	if job == "" {
		job = s.octx.JobID
	}
	par := int64(max(1, s.octx.Parallelism))
	found := false
	for _, item := range c.State.List[sinkIDsState] {
		r := statecodec.NewReader(item)
		r.Version(stateVersion)
		segJob, segChk, p, sub, row := r.String(statecodec.MaxString), r.Varint(), r.Varint(), r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s subtask %d: checkpoint %d: corrupt %s state: %w", sinkOp, s.octx.Subtask, c.CheckpointID, sinkIDsState, err)
		}
		if segJob == "" || segChk < 0 || row < 0 {
			return fmt.Errorf("%s subtask %d: checkpoint %d: corrupt %s state", sinkOp, s.octx.Subtask, c.CheckpointID, sinkIDsState)
		}
		if p != par || sub != int64(s.octx.Subtask) {
			continue // another subtask's, before a rescale
		}
		if found {
			return fmt.Errorf("%s subtask %d: checkpoint %d: got its message-id counter twice: %w", sinkOp, s.octx.Subtask, c.CheckpointID, errMisrouted)
		}
		found = true
		s.segJob, s.segChk, s.row = segJob, segChk, row
		s.rebuildIDBase()
	}
	if !found {
		s.startSegment(job, c.CheckpointID)
	}
	return nil
}

// Finish waits until every message is acknowledged.
func (s *Sink) Finish(stream.Collector) error {
	return s.flush()
}

// Close closes the connection; messages not yet acknowledged may or may
// not be stored (a restore publishes them again).
func (s *Sink) Close() error {
	s.conn.close()
	return nil
}

// Published returns how many messages this instance published, and how
// many of them the stream reported as duplicates of messages it had.
func (s *Sink) Published() (published, duplicates int64) {
	return s.published.Load(), s.duplicates.Load()
}
