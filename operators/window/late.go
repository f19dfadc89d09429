package window

import (
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// LateOutput is the side output that the window operators send records
// later than their allowed lateness to: the input rows as they came, with
// their event times. Nothing reads it unless a job's spec does (input:
// <uid>.late); either way the records count in LateRecordsDropped.
const LateOutput = "late"

// sendLate passes rows idx of b (of schema in) to the late side output. The
// strings are copied: b is released when its batch is processed.
func sendLate(in *stream.Schema, b *stream.Batch, idx []int32, out stream.Collector) {
	if len(idx) == 0 {
		return
	}
	lb := stream.NewBatch(in, len(idx))
	for j := range b.Cols {
		c := &lb.Cols[j]
		rowenc.Gather(c, &b.Cols[j], idx)
		if c.Type == stream.TypeString {
			for i, s := range c.Strs {
				c.Strs[i] = strings.Clone(s)
			}
		}
	}
	for _, i := range idx {
		lb.Times = append(lb.Times, b.Times[i])
	}
	lb.SetLen(len(idx))
	rowenc.PadBatchNulls(lb)
	stream.CollectSide(out, LateOutput, lb)
}
