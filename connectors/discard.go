package connectors

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/weirstream/weir/stream"
)

func planDiscard(p *stream.PlanContext) (*stream.Schema, error) {
	var cfg struct{}
	return nil, stream.DecodeOperatorConfig("discard", p.Config, &cfg)
}

// discarded counts rows per operator uid, summed over subtasks and runs.
var discarded sync.Map // uid -> *atomic.Int64

func discardCounter(uid string) *atomic.Int64 {
	c, _ := discarded.LoadOrStore(uid, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// DiscardedRows returns how many rows the discard sinks with operator uid
// have dropped in this process, over all their subtasks.
func DiscardedRows(uid string) int64 { return discardCounter(uid).Load() }

// ResetDiscardedRows sets the count of uid back to zero.
func ResetDiscardedRows(uid string) { discardCounter(uid).Store(0) }

// Discard is one subtask of the "discard" sink: it releases every batch and
// counts its rows.
type Discard struct {
	stream.BaseOperator
	rows  atomic.Int64
	total *atomic.Int64
}

var _ stream.Operator = (*Discard)(nil)

func newDiscardOperator(config []byte) (stream.Operator, error) {
	var cfg struct{}
	if err := stream.DecodeOperatorConfig("discard", config, &cfg); err != nil {
		return nil, err
	}
	return &Discard{}, nil
}

// Open attaches the instance to its uid's process-wide counter.
func (d *Discard) Open(_ context.Context, octx *stream.OperatorContext) error {
	d.total = discardCounter(octx.OperatorUID)
	return nil
}

// ProcessBatch counts and releases b.
func (d *Discard) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	n := int64(b.Len())
	b.Release()
	d.rows.Add(n)
	d.total.Add(n)
	return nil
}

// Rows returns the rows this instance has dropped; it may be read from any
// goroutine.
func (d *Discard) Rows() int64 { return d.rows.Load() }
