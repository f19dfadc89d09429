package nexmark_test

import (
	"encoding/json"
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
			v.Config, _ = json.Marshal(nexmark.DigestConfig{Dir: dir, Fields: nexmark.DigestFields(q)})
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
