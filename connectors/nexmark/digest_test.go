package nexmark_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

// runDigest runs query q over cfg's events at parallelism par with its sink
// replaced by a digest sink and returns the digest it wrote.
func runDigest(t *testing.T, q string, cfg nexmark.Config, par int) nexmark.Digest {
	t.Helper()
	reg := registry(&sinkRows{})
	g := loadQuery(t, q, cfg, reg)
	dir := t.TempDir()
	for _, v := range g.Vertices {
		if v.Type == collectType {
			v.Type = nexmark.TypeDigest
			v.Config, _ = json.Marshal(nexmark.DigestConfigFor(q, dir))
		}
		v.Parallelism = par
	}
	g.Parallelism = par
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	if err := dataflowtest.RunGraph(t.Context(), g, reg); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	d, files, err := nexmark.ReadDigests(dir)
	if err != nil {
		t.Fatal(err)
	}
	if files != par {
		t.Fatalf("%s: %d digest files, want one per subtask (%d)", q, files, par)
	}
	return d
}

// TestOracles: every query, run on the task runtime at parallelism 2 with
// a digest sink, produces the digest its oracle computes over the same
// events; and the oracle over other events (another seed) differs, so the
// check can fail.
func TestOracles(t *testing.T) {
	cfg := nexmark.Config{Events: 100_000, Seed: 13, EventsPerSecond: 4_000, BatchSize: 256}
	for _, q := range nexmark.Queries {
		t.Run(q, func(t *testing.T) {
			got := runDigest(t, q, cfg, 2)
			want, err := nexmark.Oracle(q, cfg, cfg.Events)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || want.Rows == 0 {
				t.Fatalf("%s: engine %v, oracle %v", q, got, want)
			}
			other := cfg
			other.Seed++
			if d, _ := nexmark.Oracle(q, other, cfg.Events); d == want {
				t.Fatalf("%s: the oracle over other events gives the same digest %v; it cannot tell them apart", q, want)
			}
			t.Logf("%s: %v agree", q, got)
		})
	}
}

// TestDigestRowsAgree: DigestBatch over a batch equals RowHasher fed the
// same values, with and without nulls, and the order of rows does not
// matter.
func TestDigestRowsAgree(t *testing.T) {
	s := stream.MustSchema(
		stream.Field{Name: "a", Type: stream.TypeInt64},
		stream.Field{Name: "b", Type: stream.TypeString},
		stream.Field{Name: "c", Type: stream.TypeFloat64},
	)
	rows := [][]any{{int64(1), "hello, world!", 0.5}, {int64(-7), "", 2.25}, {int64(1), nil, 0.5}}
	var want nexmark.Digest
	for _, r := range rows {
		h := nexmark.NewRowHasher()
		h.Int(r[0].(int64))
		if r[1] == nil {
			h.Null()
		} else {
			h.Str(r[1].(string))
		}
		h.Float(r[2].(float64))
		want.AddRow(&h)
	}
	for _, order := range [][]int{{0, 1, 2}, {2, 0, 1}} {
		var got nexmark.Digest
		for _, part := range [][]int{order[:1], order[1:]} {
			b := stream.NewBatch(s, 3)
			for _, i := range part {
				b.AppendRow(rows[i]...)
			}
			nexmark.DigestBatch(&got, b, nil, nil)
		}
		if got != want {
			t.Fatalf("order %v: %v, want %v", order, got, want)
		}
	}
}

// TestDigestWeighted: a row of weight w adds to the digest what w copies
// of it add, in the sink (DigestBatchWeighted) as in AddWeighted; a null
// weight is refused; and the sink's checkpointed state has the same bytes
// with and without the option (version 1 | varint rows | hash), so that
// its checkpoints stay readable.
func TestDigestWeighted(t *testing.T) {
	s := stream.MustSchema(
		stream.Field{Name: "bidder", Type: stream.TypeInt64},
		stream.Field{Name: "bid_count", Type: stream.TypeInt64},
		stream.Field{Name: "tag", Type: stream.TypeString},
	)
	rows := [][]any{{int64(1001), int64(3), "a"}, {int64(1002), int64(1), "b"}, {int64(1001), int64(2), nil}}
	// want: each row repeated bid_count times, hashed over bidder alone,
	// digested unweighted by a sink without the option.
	copies := stream.NewBatch(s, 6)
	var byHand nexmark.Digest
	for _, r := range rows {
		h := nexmark.NewRowHasher()
		h.Int(r[0].(int64))
		byHand.AddWeighted(&h, r[1].(int64))
		for range r[1].(int64) {
			copies.AppendRow(r...)
		}
	}
	plain := openDigestSink(t, nexmark.DigestConfig{Dir: t.TempDir(), Fields: []string{"bidder"}}, s)
	if err := plain.ProcessBatch(0, copies, nil); err != nil {
		t.Fatal(err)
	}
	weighted := openDigestSink(t, nexmark.DigestConfig{Dir: t.TempDir(), Fields: []string{"bidder"}, Weight: "bid_count"}, s)
	if err := weighted.ProcessBatch(0, batchRows(s, rows[:1]...), nil); err != nil {
		t.Fatal(err)
	}
	if err := weighted.ProcessBatch(0, batchRows(s, rows[1:]...), nil); err != nil {
		t.Fatal(err)
	}
	if plain.Digest() != byHand || weighted.Digest() != byHand || byHand.Rows != 6 {
		t.Fatalf("six copies unweighted %v, three weighted rows %v, by hand %v: want all equal, 6 rows", plain.Digest(), weighted.Digest(), byHand)
	}
	// One weight changed changes the digest: the check can fail.
	changed := slices.Clone(rows)
	changed[2] = []any{int64(1001), int64(1), nil}
	other := openDigestSink(t, nexmark.DigestConfig{Dir: t.TempDir(), Fields: []string{"bidder"}, Weight: "bid_count"}, s)
	if err := other.ProcessBatch(0, batchRows(s, changed...), nil); err != nil {
		t.Fatal(err)
	}
	if other.Digest() == byHand {
		t.Fatalf("a weight of 1 instead of 2 gives the same digest %v", byHand)
	}
	// The state bytes: the documented format, the same for both configs.
	want := binary.LittleEndian.AppendUint64(binary.AppendVarint([]byte{1}, 6), byHand.Hash)
	for name, sink := range map[string]*nexmark.DigestSink{"plain": plain, "weighted": weighted} {
		c := &stream.SnapshotContext{CheckpointID: 1}
		if err := sink.SnapshotState(c); err != nil {
			t.Fatal(err)
		}
		if items := c.State.List["digest"]; len(items) != 1 || !bytes.Equal(items[0], want) {
			t.Fatalf("%s sink state %x, want %x", name, items, want)
		}
	}
	// A null weight fails the batch, naming the column but no value.
	err := weighted.ProcessBatch(0, batchRows(s, []any{int64(7), nil, "x"}), nil)
	if err == nil || !strings.Contains(err.Error(), `"bid_count"`) || strings.Contains(err.Error(), "7") {
		t.Fatalf("null weight: error %v, want one naming bid_count and no value", err)
	}
	// A weight that is not an int64 field is refused at planning.
	reg := stream.NewRegistry()
	nexmark.Register(reg)
	typ, _ := reg.Lookup(nexmark.TypeDigest, false)
	for _, w := range []string{"tag", "nope"} {
		cfg, _ := json.Marshal(nexmark.DigestConfig{Dir: t.TempDir(), Weight: w})
		if _, err := typ.Plan(&stream.PlanContext{UID: "sink", Config: cfg, Inputs: []stream.PlanInput{{Schema: s}}}); err == nil || !strings.Contains(err.Error(), "weight") {
			t.Fatalf("weight %q: plan error %v, want one about the weight", w, err)
		}
	}
}

func openDigestSink(t *testing.T, cfg nexmark.DigestConfig, in *stream.Schema) *nexmark.DigestSink {
	t.Helper()
	reg := stream.NewRegistry()
	nexmark.Register(reg)
	typ, _ := reg.Lookup(nexmark.TypeDigest, false)
	raw, _ := json.Marshal(cfg)
	op, err := typ.NewOperator(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Open(t.Context(), &stream.OperatorContext{InputSchemas: []*stream.Schema{in}}); err != nil {
		t.Fatal(err)
	}
	return op.(*nexmark.DigestSink)
}

func batchRows(s *stream.Schema, rows ...[]any) *stream.Batch {
	b := stream.NewBatch(s, len(rows))
	for _, r := range rows {
		b.AppendRow(r...)
	}
	return b
}
