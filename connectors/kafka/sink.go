package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// Sink is one subtask of the "kafka" sink. Its delivery guarantee is
// decided at Open: exactly_once runs a twophase.Operator over a txnSystem;
// at_least_once and none write through one idempotent producer. Build it
// with NewSink.
type Sink struct {
	spec *sinkSpec
	// ctx is the task's context from Open: the stream.Operator methods
	// after Open take none, and a restore in a mode other than
	// exactly_once still commits the checkpoint's transactions with it.
	ctx  context.Context
	octx *stream.OperatorContext
	log  *slog.Logger
	mode string

	tp    *twophase.Operator // exactly_once
	plain *producer          // at_least_once and none

	connectTimeout time.Duration
}

var (
	_ stream.Operator           = (*Sink)(nil)
	_ stream.Checkpointed       = (*Sink)(nil)
	_ stream.CheckpointListener = (*Sink)(nil)
)

// NewSink returns a sink for a JSON SinkConfig, or a config error. It has
// no side effects: Open connects.
func NewSink(config []byte) (*Sink, error) {
	spec, err := parseSinkConfig(config)
	if err != nil {
		return nil, err
	}
	return &Sink{spec: spec, connectTimeout: connectTimeout}, nil
}

func planSink(p *stream.PlanContext) (*stream.Schema, error) {
	spec, err := parseSinkConfig(p.Config)
	if err != nil {
		return nil, err
	}
	if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
		return nil, errSink("takes exactly one input, got %d", len(p.Inputs))
	}
	if _, _, err := spec.resolve(p.Inputs[0].Schema); err != nil {
		return nil, err
	}
	if err := spec.cfg.Security.checkPaths("kafka sink", p.Paths); err != nil {
		return nil, err
	}
	twophase.DeclareState(p)
	return nil, nil
}

// Mode returns the delivery guarantee the sink runs with (after Open).
func (s *Sink) Mode() string { return s.mode }

// Open connects and picks the delivery guarantee: the configured one, else
// exactly_once when the job checkpoints and at_least_once otherwise.
func (s *Sink) Open(ctx context.Context, octx *stream.OperatorContext) error {
	s.ctx, s.octx, s.log = ctx, octx, taskLogger(octx)
	s.mode = s.spec.guarantee
	if s.mode == "" {
		s.mode = AtLeastOnce
		if octx.Checkpointing {
			s.mode = ExactlyOnce
		}
	}
	if s.mode == ExactlyOnce {
		if !octx.Checkpointing {
			s.log.Warn("kafka sink: exactly_once in a job without checkpoints writes one transaction, committed at the end of input; it must end within transactionTimeout", "transactionTimeout", s.spec.txTimeout)
		}
		s.tp = twophase.NewOperator(s.newTxnSystem())
		return s.tp.Open(ctx, octx)
	}
	p, err := s.openProducer(ctx)
	if err != nil {
		return err
	}
	s.plain = p
	return nil
}

func (s *Sink) newTxnSystem() *txnSystem {
	return &txnSystem{spec: s.spec, connectTimeout: s.connectTimeout}
}

// ProcessBatch writes b.
func (s *Sink) ProcessBatch(input int, b *stream.Batch, out stream.Collector) error {
	if s.tp != nil {
		return s.tp.ProcessBatch(input, b, out)
	}
	defer b.Release()
	return s.plain.write(s.ctx, b)
}

// ProcessWatermark does nothing: a sink has no output.
func (s *Sink) ProcessWatermark(int64, stream.Collector) error { return nil }

// Finish commits (exactly_once without checkpoints) or flushes.
func (s *Sink) Finish(out stream.Collector) error {
	if s.tp != nil {
		return s.tp.Finish(out)
	}
	return s.plain.flush(s.ctx)
}

// SnapshotState pre-commits the open transaction (exactly_once) or flushes
// (at_least_once).
func (s *Sink) SnapshotState(c *stream.SnapshotContext) error {
	if s.tp != nil {
		return s.tp.SnapshotState(c)
	}
	if s.mode == AtLeastOnce {
		return s.plain.flush(s.ctx)
	}
	return nil
}

// RestoreState commits the transactions of the checkpoint and aborts the
// leftovers of earlier attempts. In a mode other than exactly_once it
// still does, should the checkpoint hold transactions of an exactly_once
// run of the sink.
func (s *Sink) RestoreState(c *stream.RestoreContext) error {
	if s.tp != nil {
		return s.tp.RestoreState(c)
	}
	if c.State == nil || len(c.State.List[twophase.PendingState]) == 0 && len(c.State.Union[twophase.WritersState]) == 0 {
		return nil
	}
	octx := *s.octx
	octx.Checkpointing = true
	tp := twophase.NewOperator(s.newTxnSystem())
	err := tp.Open(s.ctx, &octx)
	if err == nil {
		err = tp.RestoreState(c)
	}
	return errors.Join(err, tp.Close())
}

// NotifyCheckpointComplete commits the transactions of checkpoint id.
func (s *Sink) NotifyCheckpointComplete(id int64) error {
	if s.tp != nil {
		return s.tp.NotifyCheckpointComplete(id)
	}
	return nil
}

// NotifyCheckpointAborted keeps the transactions for the next checkpoint.
func (s *Sink) NotifyCheckpointAborted(id int64) error {
	if s.tp != nil {
		return s.tp.NotifyCheckpointAborted(id)
	}
	return nil
}

// Close aborts the open transaction (pre-committed ones stay for the
// restore to commit) or closes the producer; buffered records of mode none
// not yet sent are dropped.
func (s *Sink) Close() error {
	if s.tp != nil {
		return s.tp.Close()
	}
	if s.plain != nil {
		s.plain.cl.Close()
	}
	return nil
}

// producer writes rows through one idempotent producer (at_least_once and
// none).
type producer struct {
	cl  *kgo.Client
	enc *encoder
	err asyncErr
}

func (s *Sink) openProducer(ctx context.Context) (*producer, error) {
	enc, err := newEncoder(s.spec, s.octx)
	if err != nil {
		return nil, err
	}
	hook := new(connHook)
	opts, err := commonOpts("kafka sink", s.spec.servers, s.spec.cfg.Security, s.octx.Paths, s.log, hook)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, producerOpts(s.spec)...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	p := &producer{cl: cl, enc: enc}
	cctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	if err := checkTopicExists(cctx, kadm.NewClient(cl), s.spec, hook); err != nil {
		cl.Close()
		return nil, err
	}
	return p, nil
}

// producerOpts are the options of every producer of the sink.
func producerOpts(spec *sinkSpec) []kgo.Opt {
	return []kgo.Opt{
		kgo.DefaultProduceTopic(spec.cfg.Topic),
		kgo.ProducerBatchMaxBytes(int32(max(1_000_012, spec.maxBytes+64<<10))),
		kgo.FetchMaxBytes(1 << 20), // a producer fetches nothing; this only bounds the reads
		kgo.BrokerMaxReadBytes(16 << 20),
		kgo.MaxBufferedBytes(64 << 20),
		kgo.MaxBufferedRecords(100_000),
		// A record the brokers do not take within this time fails
		// the task, so that an unreachable cluster does not stall a
		// flush forever.
		kgo.RecordDeliveryTimeout(defaultUnreachableAfter),
	}
}

// checkTopicExists fails unless the sink's topic exists.
func checkTopicExists(ctx context.Context, adm *kadm.Client, spec *sinkSpec, hook *connHook) error {
	td, err := adm.ListTopics(ctx, spec.cfg.Topic)
	if err != nil {
		return unreachable("kafka sink", spec.servers, err, hook)
	}
	d, ok := td[spec.cfg.Topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka sink: topic %q does not exist at %v: %w; create it before starting the job (the sink does not create topics), or fix topic",
			spec.cfg.Topic, spec.servers, ErrTopicNotFound)
	}
	if d.Err != nil {
		return fmt.Errorf("kafka sink: topic %q: %w", spec.cfg.Topic, d.Err)
	}
	return nil
}

func (p *producer) write(ctx context.Context, b *stream.Batch) error {
	if err := p.err.get(); err != nil {
		return err
	}
	recs, err := p.enc.records(b)
	if err != nil {
		return err
	}
	for _, r := range recs {
		p.cl.Produce(ctx, r, p.err.promise)
	}
	return p.err.get()
}

func (p *producer) flush(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("kafka sink: flush: %w", err)
	}
	return p.err.get()
}

// asyncErr keeps the first error of the produce promises.
type asyncErr struct {
	mu  sync.Mutex
	err error
}

func (a *asyncErr) promise(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = fmt.Errorf("kafka sink: produce to topic %s: %w", r.Topic, err)
	}
}

func (a *asyncErr) get() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// encoder turns rows into records.
type encoder struct {
	keyCol, valueCol int
	json             *connectors.JSONRowEncoder
	maxBytes         int
	topic            string
	scratch          []byte
}

func newEncoder(spec *sinkSpec, octx *stream.OperatorContext) (*encoder, error) {
	if len(octx.InputSchemas) != 1 || octx.InputSchemas[0] == nil {
		return nil, fmt.Errorf("kafka sink: opened with %d input schemas, want 1", len(octx.InputSchemas))
	}
	in := octx.InputSchemas[0]
	keyCol, valueCol, err := spec.resolve(in)
	if err != nil {
		return nil, err
	}
	e := &encoder{keyCol: keyCol, valueCol: valueCol, maxBytes: spec.maxBytes, topic: spec.cfg.Topic}
	if !spec.raw {
		e.json = connectors.NewJSONRowEncoder(in)
	}
	return e, nil
}

// records encodes every row of b. The records and their bytes are new:
// the producer keeps them until they are acknowledged.
func (e *encoder) records(b *stream.Batch) ([]*kgo.Record, error) {
	n := b.Len()
	recs := make([]kgo.Record, n)
	out := make([]*kgo.Record, n)
	buf := make([]byte, 0, 64*n)
	for i := range n {
		r := &recs[i]
		r.Topic = e.topic
		start := len(buf)
		if e.keyCol >= 0 && !b.Cols[e.keyCol].IsNull(i) {
			buf = appendText(buf, &b.Cols[e.keyCol], i)
			r.Key = buf[start:len(buf):len(buf)]
		}
		vstart := len(buf)
		switch {
		case e.json != nil:
			buf = e.json.AppendRow(buf, b, i)
			r.Value = buf[vstart:len(buf):len(buf)]
		case !b.Cols[e.valueCol].IsNull(i):
			buf = append(buf, b.Cols[e.valueCol].Strs[i]...)
			r.Value = buf[vstart:len(buf):len(buf)]
		}
		if size := len(buf) - start; size > e.maxBytes {
			return nil, fmt.Errorf("kafka sink: row %d of a batch is %d bytes as a record (key and value), over maxMessageBytes %d: %w; raise maxMessageBytes (and the topic's max.message.bytes) or make the rows smaller",
				i, size, e.maxBytes, ErrRecordTooLarge)
		}
		out[i] = r
	}
	return out, nil
}

// appendText appends the text of row i of c: strings as they are, numbers
// in decimal, timestamps in RFC 3339 with milliseconds (UTC).
func appendText(dst []byte, c *stream.Column, i int) []byte {
	switch c.Type {
	case stream.TypeString:
		return append(dst, c.Strs[i]...)
	case stream.TypeInt64:
		return strconv.AppendInt(dst, c.Ints[i], 10)
	case stream.TypeFloat64:
		return strconv.AppendFloat(dst, c.Floats[i], 'g', -1, 64)
	case stream.TypeBool:
		return strconv.AppendBool(dst, c.Bools[i])
	case stream.TypeTimestamp:
		return time.UnixMilli(c.Ints[i]).UTC().AppendFormat(dst, "2006-01-02T15:04:05.000Z07:00")
	}
	return dst
}
