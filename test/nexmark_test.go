package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
)

// TestNexmarkQ7OnACluster runs examples/nexmark/q7.yaml (highest bid per
// 10 s window) on a real cluster at parallelism 2 with exactly-once
// checkpoints, its sink swapped for the two-phase-commit file sink, and
// compares the committed rows with an independent computation over the
// generator's bids.
func TestNexmarkQ7OnACluster(t *testing.T) {
	const events, rate = 200_000, 5_000 // 40 s of event time: four windows
	reg := builtin.Registry()
	g, err := jobspec.Load(filepath.Join("..", "examples", "nexmark", "q7.yaml"), reg)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	for _, v := range g.Vertices {
		switch v.Type {
		case "nexmark_bid":
			v.Parallelism = 2
			v.Config, _ = json.Marshal(map[string]any{"events": events, "eventsPerSecond": rate, "seed": 9})
		case "discard":
			v.Type = "file"
			v.Config, _ = json.Marshal(map[string]any{"path": out, "format": "csv"})
		default:
			if v.Parallelism == 0 {
				v.Parallelism = 2
			}
		}
	}
	g.Checkpoint = stream.CheckpointConfig{Interval: 500 * time.Millisecond, Storage: "file://" + filepath.Join(t.TempDir(), "ckpt")}
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 2, Slots: 2})
	id := c.Submit(g)
	job := c.WaitJob(id, 5*time.Minute)
	if job.GetJob().GetState() != weirpb.JobState_JOB_STATE_FINISHED {
		t.Fatalf("q7 ended %v: %s", job.GetJob().GetState(), job.GetJob().GetError())
	}

	// Independently: per 10 s window, the bids at its highest price.
	type bid struct{ auction, bidder, price, ts int64 }
	maxOf := map[int64]int64{}
	var bids []bid
	gen := nexmark.NewGenerator(nexmark.Config{Events: events, EventsPerSecond: rate, Seed: 9})
	for n := int64(0); n < events; n++ {
		e := gen.At(n)
		if e.Kind != nexmark.KindBid {
			continue
		}
		b := bid{e.Bid.Auction, e.Bid.Bidder, e.Bid.Price, e.Bid.DateTime}
		bids = append(bids, b)
		w := b.ts - b.ts%10_000
		maxOf[w] = max(maxOf[w], b.price)
	}
	var want []string
	for _, b := range bids {
		if b.price == maxOf[b.ts-b.ts%10_000] {
			want = append(want, fmt.Sprintf("%d/%d/%d/%d", b.auction, b.bidder, b.price, b.ts))
		}
	}
	header, rows := committedRows(t, out)
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, f := range []string{"auction", "bidder", "price", "dateTime"} {
		if _, ok := col[f]; !ok {
			t.Fatalf("output has no %q column: %v", f, header)
		}
	}
	var got []string
	for _, r := range rows {
		ts := parseTime(t, r[col["dateTime"]])
		a, _ := strconv.ParseInt(r[col["auction"]], 10, 64)
		bd, _ := strconv.ParseInt(r[col["bidder"]], 10, 64)
		p, _ := strconv.ParseInt(r[col["price"]], 10, 64)
		got = append(got, fmt.Sprintf("%d/%d/%d/%d", a, bd, p, ts))
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("q7 committed %d rows, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
}
