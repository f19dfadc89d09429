package dataflowtest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
)

// oddsplit sends rows with an even "seq" to its main output and rows with
// an odd one to its side output "odd" (seq and key only, a schema of its
// own).
type oddsplit struct {
	stream.BaseOperator
	seq, key int
	unread   *sideCounts
}

var oddSchema = stream.MustSchema(
	stream.Field{Name: "odd_seq", Type: stream.TypeInt64},
	stream.Field{Name: "key", Type: stream.TypeInt64},
)

func (o *oddsplit) Open(_ context.Context, octx *stream.OperatorContext) error {
	idx, err := octx.InputSchemas[0].Lookup("seq", "key")
	if err != nil {
		return err
	}
	o.seq, o.key = idx[0], idx[1]
	if octx.SideOutputSchemas["odd"] != oddSchema {
		return fmt.Errorf("OperatorContext.SideOutputSchemas = %v, want odd: %v", octx.SideOutputSchemas, oddSchema)
	}
	return nil
}

func (o *oddsplit) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := b.Len()
	odd := stream.NewBatch(oddSchema, n)
	var keep []int
	for i, s := range b.Cols[o.seq].Ints[:n] {
		if s%2 == 0 {
			keep = append(keep, i)
		} else {
			odd.AppendRow(s, b.Cols[o.key].Ints[i])
		}
	}
	// The odd rows first: a side-output batch may precede the main one.
	if !stream.CollectSide(out, "odd", odd) {
		return fmt.Errorf("side output odd reported no reader")
	}
	// Nothing reads "unread": its batches are dropped, not an error.
	o.unread.add(stream.CollectSide(out, "unread", stream.NewBatch(oddSchema, 0)))
	b.Filter(keep)
	out.Collect(b)
	return nil
}

type sideCounts struct {
	mu           sync.Mutex
	read, unread int
}

func (c *sideCounts) add(read bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if read {
		c.read++
	} else {
		c.unread++
	}
}

// seqSink records, per sink uid, the first column of every row.
type seqSink struct {
	stream.BaseOperator
	c   *seqs
	uid string
}

type seqs struct {
	mu sync.Mutex
	by map[string][]int64
}

func (s *seqSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.uid = octx.OperatorUID
	return nil
}

func (s *seqSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	s.c.mu.Lock()
	s.c.by[s.uid] = append(s.c.by[s.uid], b.Cols[0].Ints[:b.Len()]...)
	s.c.mu.Unlock()
	return nil
}

const sideSpec = `
name: side
maxParallelism: 16
operators:
  - uid: gen
    type: datagen
    parallelism: 2
    config:
      rows: 5000
      batchSize: 64
      fields: [{name: seq, kind: sequence}, {name: key, kind: sequence, modulo: 7}]
  - {uid: split, type: oddsplit, parallelism: 2}
  - {uid: even, type: seqs, keyBy: key, parallelism: 2}
  - {uid: odd, type: seqs, input: split.odd, parallelism: 3}
`

// TestRunGraphSideOutput parses a job spec whose operator reads a side
// output, runs it, and checks that every row arrives exactly once on the
// output it belongs to: even rows through a hash edge, odd ones through the
// side output (which becomes a rebalance edge between parallelisms 2 and 3).
func TestRunGraphSideOutput(t *testing.T) {
	got := &seqs{by: map[string][]int64{}}
	counts := &sideCounts{}
	reg := stream.NewRegistry()
	connectors.Register(reg)
	reg.Register(stream.OperatorType{
		Name: "oddsplit", Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			if _, err := p.Inputs[0].Schema.Lookup("seq", "key"); err != nil {
				return nil, err
			}
			p.DeclareSideOutput("odd", oddSchema)
			p.DeclareSideOutput("unread", oddSchema)
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func([]byte) (stream.Operator, error) { return &oddsplit{unread: counts}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "seqs", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &seqSink{c: got}, nil },
	})
	g, err := jobspec.Parse("side.yaml", []byte(sideSpec), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := dataflowtest.RunGraph(t.Context(), g, reg); err != nil {
		t.Fatal(err)
	}
	const rows = 5000
	for _, out := range []struct {
		uid    string
		parity int64
	}{{"even", 0}, {"odd", 1}} {
		seen := make(map[int64]int)
		var foreign []int64
		for _, s := range got.by[out.uid] {
			if s < 0 || s >= rows || s%2 != out.parity {
				foreign = append(foreign, s)
				continue
			}
			seen[s]++
		}
		var lost, dup int
		for s := out.parity; s < rows; s += 2 {
			switch seen[s] {
			case 0:
				lost++
			case 1:
			default:
				dup++
			}
		}
		if lost != 0 || dup != 0 || len(foreign) != 0 {
			slices.Sort(foreign)
			t.Errorf("%s: %d rows, %d lost, %d duplicated, %d of the other output (first %v)",
				out.uid, len(got.by[out.uid]), lost, dup, len(foreign), foreign[:min(len(foreign), 8)])
		}
	}
	if counts.read != 0 || counts.unread == 0 {
		t.Errorf("CollectSide on the unread side output reported a reader %d times and none %d times; want never and at least once", counts.read, counts.unread)
	}
}
