package window

import (
	"context"
	"fmt"
	"math"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// Watermarks is one subtask of a watermarks operator: it copies each record's
// event time from the timestamp field into Batch.Times and, after forwarding
// a batch, emits the watermark maxTimestamp - maxOutOfOrderness - 1 if that
// advanced, evaluated per batch rather than on a timer. Records may thus lag
// the largest timestamp seen by up to maxOutOfOrderness: a watermark w says
// no record at or before w is still to come, so the -1 keeps a record
// exactly maxOutOfOrderness behind on time.
//
// Upstream watermarks are swallowed — this operator is the watermark source of
// its stream — except stream.MaxWatermark, the end of input, which is
// forwarded so that downstream windows fire.
//
// A null timestamp fails the task: dropping the record silently would make
// results depend on data quality that nobody sees. Filter such records out
// upstream if they are expected.
type Watermarks struct {
	stream.BaseOperator
	spec  *watermarksSpec
	name  string
	col   int
	maxTs int64
	wm    int64 // last watermark emitted
}

var _ stream.Operator = (*Watermarks)(nil)

// NewWatermarks returns a watermarks operator for a JSON WatermarksConfig.
func NewWatermarks(config []byte) (*Watermarks, error) {
	spec, err := parseWatermarksConfig(config)
	if err != nil {
		return nil, err
	}
	return &Watermarks{spec: spec, name: TypeWatermarks, maxTs: math.MinInt64, wm: stream.MinWatermark}, nil
}

// Open finds the timestamp field in the input.
func (o *Watermarks) Open(_ context.Context, octx *stream.OperatorContext) error {
	if octx.OperatorUID != "" {
		o.name = fmt.Sprintf("%s %q", TypeWatermarks, octx.OperatorUID)
	}
	if len(octx.InputSchemas) != 1 {
		return fmt.Errorf("%s: got %d inputs, want 1", o.name, len(octx.InputSchemas))
	}
	col, err := o.spec.resolve(octx.InputSchemas[0])
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	o.col = col
	return nil
}

// ProcessBatch sets b.Times, forwards b and emits a watermark if it advanced.
func (o *Watermarks) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := b.Len()
	if n == 0 {
		b.Release()
		return nil
	}
	rowenc.PadBatchNulls(b)
	c := &b.Cols[o.col]
	ts := c.Ints[:n]
	if c.Nulls != nil {
		for w, word := range c.Nulls {
			if word == 0 {
				continue
			}
			for i := w << 6; i < min(n, (w+1)<<6); i++ {
				if c.IsNull(i) {
					err := fmt.Errorf("%s: record %d of a batch has a null %q; every record needs an event time, so filter out records without one upstream", o.name, i, o.spec.field)
					b.Release()
					return err
				}
			}
		}
	}
	maxTs := o.maxTs
	for _, t := range ts {
		maxTs = max(maxTs, t)
	}
	b.Times = append(b.Times[:0], ts...)
	o.maxTs = maxTs
	out.Collect(b)
	if wm := satSub(satSub(maxTs, o.spec.ooo), 1); wm > o.wm && o.wm != stream.MaxWatermark {
		o.wm = wm
		out.EmitWatermark(wm)
	}
	return nil
}

// ProcessWatermark swallows upstream watermarks but forwards the end of
// input.
func (o *Watermarks) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm == stream.MaxWatermark && o.wm != stream.MaxWatermark {
		o.wm = wm
		out.EmitWatermark(wm)
	}
	return nil
}
