package window

import (
	"context"
	"fmt"
	"math"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// Watermarks is one subtask of a watermarks operator: it copies each record's
// event time from the timestamp field into Batch.Times and emits the
// watermark maxTimestamp - maxOutOfOrderness - 1 when that advanced. Records
// may thus lag the largest timestamp seen by up to maxOutOfOrderness: a
// watermark w says no record at or before w is still to come, so the -1
// keeps a record exactly maxOutOfOrderness behind on time.
//
// Watermarks are emitted periodically, as with Flink's auto-watermark
// interval: at most once per slot of autoWatermarkInterval of processing
// time (default DefaultAutoWatermarkInterval; the slots start at multiples
// of the interval since the Unix epoch), and only when the watermark
// advanced. The first advance in a slot goes out after its batch at once;
// later ones wait for the next slot, through a processing-time deadline
// (stream.ProcessingTimeDeadline) that exists only while an advance is
// unemitted, so an idle subtask has no timer. Each emission goes to every
// downstream channel, so on a wide keyBy (p × p channels) the interval
// rather than the batch rate bounds their cost; and because every subtask's
// slots begin at the same instants, the subtasks of a busy stream emit
// together and a downstream task takes their watermarks in one wake-up. An
// interval of 0 emits after every batch that advanced the watermark.
//
// Upstream watermarks are swallowed — this operator is the watermark source of
// its stream — except stream.MaxWatermark, the end of input, which is
// forwarded at once so that downstream windows fire.
//
// A null timestamp fails the task: dropping the record silently would make
// results depend on data quality that nobody sees. Filter such records out
// upstream if they are expected.
type Watermarks struct {
	stream.BaseOperator
	spec  *watermarksSpec
	name  string
	col   int
	clock func() int64 // the task's processing time, Unix ms
	maxTs int64
	wm    int64 // last watermark emitted
	// lastEmit is when wm was emitted (processing time, ms); due is the
	// deadline of an unemitted advance, the start of the next slot, valid
	// while pending.
	lastEmit int64
	due      int64
	pending  bool
}

var (
	_ stream.Operator               = (*Watermarks)(nil)
	_ stream.ProcessingTimeDeadline = (*Watermarks)(nil)
)

// NewWatermarks returns a watermarks operator for a JSON WatermarksConfig.
func NewWatermarks(config []byte) (*Watermarks, error) {
	spec, err := parseWatermarksConfig(config)
	if err != nil {
		return nil, err
	}
	return &Watermarks{spec: spec, name: TypeWatermarks, maxTs: math.MinInt64, wm: stream.MinWatermark, lastEmit: math.MinInt64}, nil
}

// Open finds the timestamp field in the input.
func (o *Watermarks) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.clock = octx.ProcessingTime
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

// ProcessBatch sets b.Times, forwards b and emits a watermark if it advanced
// and the interval allows; otherwise it sets a deadline for the advance.
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
	if o.pending || o.current() <= o.wm || o.wm == stream.MaxWatermark {
		return nil // nothing new, or already waiting for the deadline
	}
	if o.spec.interval == 0 {
		o.emit(out, 0)
		return nil
	}
	now := o.clock()
	if last := floorDiv(o.lastEmit, o.spec.interval); floorDiv(now, o.spec.interval) <= last {
		o.due, o.pending = (last+1)*o.spec.interval, true // the next slot
		return nil
	}
	o.emit(out, now)
	return nil
}

// floorDiv is a / b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// current is the watermark the timestamps seen so far allow.
func (o *Watermarks) current() int64 { return satSub(satSub(o.maxTs, o.spec.ooo), 1) }

// emit emits the current watermark at processing time now.
func (o *Watermarks) emit(out stream.Collector, now int64) {
	o.wm, o.lastEmit, o.pending = o.current(), now, false
	out.EmitWatermark(o.wm)
}

// NextProcessingTime is the deadline of an advance not yet emitted.
func (o *Watermarks) NextProcessingTime() (int64, bool) { return o.due, o.pending }

// OnProcessingTime emits the advance waiting for its deadline.
func (o *Watermarks) OnProcessingTime(now int64, out stream.Collector) error {
	if o.pending && now >= o.due {
		o.emit(out, now)
	}
	return nil
}

// ProcessWatermark swallows upstream watermarks but forwards the end of
// input at once.
func (o *Watermarks) ProcessWatermark(wm int64, out stream.Collector) error {
	if wm == stream.MaxWatermark && o.wm != stream.MaxWatermark {
		o.wm, o.pending = wm, false
		out.EmitWatermark(wm)
	}
	return nil
}
