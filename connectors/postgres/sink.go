package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// TypeName is the sink's operator type.
const TypeName = "postgres"

// Register adds the "postgres" sink to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:        TypeName,
		Kind:        stream.KindSink,
		Plan:        plan,
		NewOperator: newOperator,
		Config:      Config{},
		Doc:         "writes rows into a PostgreSQL table: exactly once by prepared transactions (two-phase commit), or upserts or inserts committed at each checkpoint",
	})
}

func plan(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg Config
	if err := stream.DecodeOperatorConfig("postgres sink", p.Config, &cfg); err != nil {
		return nil, err
	}
	if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
		return nil, stream.ConfigErrorf("postgres sink: want one input, got %d", len(p.Inputs))
	}
	s, err := newSettings(cfg, p.Inputs[0].Schema)
	if err != nil {
		return nil, err
	}
	if cfg.DSNFile != "" {
		if err := p.Paths.Check("postgres sink dsnFile", cfg.DSNFile); err != nil {
			return nil, err
		}
	}
	if s.mode == "" || s.mode == ModeExactlyOnce {
		twophase.DeclareState(p)
	}
	return nil, nil
}

func newOperator(config []byte) (stream.Operator, error) {
	var cfg Config
	if err := stream.DecodeOperatorConfig("postgres sink", config, &cfg); err != nil {
		return nil, err
	}
	return NewSink(cfg)
}

// Sink is one subtask of the "postgres" sink. It picks its mode at Open
// (exactly_once when unset and the job checkpoints, else at_least_once)
// and then behaves as that mode's operator: a twophase.Operator over a
// System, or a plain transactional writer (see the package comment).
type Sink struct {
	cfg  Config
	mode string
	impl interface {
		stream.Operator
		stream.Checkpointed
		stream.CheckpointListener
	}
}

var (
	_ stream.Operator           = (*Sink)(nil)
	_ stream.Checkpointed       = (*Sink)(nil)
	_ stream.CheckpointListener = (*Sink)(nil)
)

// errNotOpen is a call to a Sink that was not opened.
var errNotOpen = errors.New("postgres sink: not opened")

// NewSink returns a sink for cfg, or a config error. It checks what
// needs no input schema; Open checks the rest.
func NewSink(cfg Config) (*Sink, error) {
	if _, _, _, _, err := checkConfig(cfg); err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg}, nil
}

// Mode returns the mode Open chose ("" before Open).
func (k *Sink) Mode() string { return k.mode }

// Pending returns the exactly_once transactions pre-committed and not yet
// committed, oldest first (none in the other modes).
func (k *Sink) Pending() []twophase.Pending {
	if op, ok := k.impl.(*twophase.Operator); ok {
		return op.Pending()
	}
	return nil
}

// Open checks the config against the input, picks the mode, connects and
// checks the table.
func (k *Sink) Open(ctx context.Context, octx *stream.OperatorContext) error {
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("postgres sink: want 1 input schema, got %d", len(octx.InputSchemas))
	}
	s, err := newSettings(k.cfg, octx.InputSchemas[0])
	if err != nil {
		return err
	}
	k.mode = s.mode
	if k.mode == "" {
		k.mode = ModeAtLeastOnce
		if octx.Checkpointing {
			k.mode = ModeExactlyOnce
		}
	}
	if k.mode == ModeExactlyOnce {
		k.impl = twophase.NewOperator(newSystem(s))
	} else {
		k.impl = newPlainSink(s, k.mode == ModeUpsert)
	}
	return k.impl.Open(ctx, octx)
}

func (k *Sink) ProcessBatch(input int, b *stream.Batch, out stream.Collector) error {
	if k.impl == nil {
		b.Release()
		return errNotOpen
	}
	return k.impl.ProcessBatch(input, b, out)
}

func (k *Sink) ProcessWatermark(int64, stream.Collector) error { return nil }

func (k *Sink) Finish(out stream.Collector) error {
	if k.impl == nil {
		return errNotOpen
	}
	return k.impl.Finish(out)
}

func (k *Sink) SnapshotState(c *stream.SnapshotContext) error {
	if k.impl == nil {
		return errNotOpen
	}
	return k.impl.SnapshotState(c)
}

func (k *Sink) RestoreState(c *stream.RestoreContext) error {
	if k.impl == nil {
		return errNotOpen
	}
	return k.impl.RestoreState(c)
}

func (k *Sink) NotifyCheckpointComplete(id int64) error {
	if k.impl == nil {
		return errNotOpen
	}
	return k.impl.NotifyCheckpointComplete(id)
}

func (k *Sink) NotifyCheckpointAborted(id int64) error {
	if k.impl == nil {
		return errNotOpen
	}
	return k.impl.NotifyCheckpointAborted(id)
}

// Close rolls back the open transaction (exactly_once: if not prepared)
// and closes the connections.
func (k *Sink) Close() error {
	if k.impl == nil {
		return nil
	}
	return k.impl.Close()
}
