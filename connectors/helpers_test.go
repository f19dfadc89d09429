package connectors

import (
	"context"
	"testing"

	"github.com/weirstream/weir/stream"
)

// collector keeps every batch and watermark it is given.
type collector struct {
	batches    []*stream.Batch
	watermarks []int64
}

func (c *collector) Collect(b *stream.Batch) {
	if err := b.Validate(); err != nil {
		panic(err)
	}
	c.batches = append(c.batches, b)
}
func (c *collector) EmitWatermark(wm int64) { c.watermarks = append(c.watermarks, wm) }

func (c *collector) rows() [][]any {
	var out [][]any
	for _, b := range c.batches {
		for i := range b.Len() {
			out = append(out, b.Row(i))
		}
	}
	return out
}

func octxFor(subtask, parallelism int) *stream.OperatorContext {
	return &stream.OperatorContext{OperatorUID: "op", Subtask: subtask, Parallelism: parallelism}
}

// drain polls src until PollEnd (at most maxPolls times) and returns the rows.
func drain(t *testing.T, src stream.Source, maxPolls int) ([][]any, error) {
	t.Helper()
	var c collector
	ctx := context.Background()
	for range maxPolls {
		st, err := src.Poll(ctx, &c)
		if err != nil {
			return c.rows(), err
		}
		if st == stream.PollEnd {
			return c.rows(), nil
		}
	}
	t.Fatalf("source did not end within %d polls", maxPolls)
	return nil, nil
}

// planErr plans a one-vertex (source) or source+sink job and returns the
// error.
func planSource(typ string, config string) (*stream.Schema, error) {
	r := stream.NewRegistry()
	Register(r)
	t, _ := r.Lookup(typ, true)
	return t.Plan(&stream.PlanContext{UID: "src", Config: []byte(config), Parallelism: 1})
}

func planSink(typ string, config string, in *stream.Schema) error {
	r := stream.NewRegistry()
	Register(r)
	t, _ := r.Lookup(typ, false)
	_, err := t.Plan(&stream.PlanContext{UID: "sink", Config: []byte(config), Parallelism: 1, Inputs: []stream.PlanInput{{Schema: in}}})
	return err
}
