package nexmark_test

import (
	"slices"
	"testing"

	"github.com/weirstream/weir/connectors/nexmark"
)

// The query tests run each examples/nexmark spec on the task runtime
// (dataflowtest.RunGraph, one task per vertex in this process) over the
// generated events and compare the sink's rows with a plain Go
// implementation of the query over Generator.At. The rate gives 30 s of
// event time, so every windowed query fires several windows.
var testCfg = nexmark.Config{Events: 300_000, Seed: 7, EventsPerSecond: 10_000, BatchSize: 500}

// events returns the events of testCfg.
func events() []nexmark.Event {
	g := nexmark.NewGenerator(testCfg)
	out := make([]nexmark.Event, testCfg.Events)
	for n := range out {
		out[n] = g.At(int64(n))
	}
	return out
}

func winStart(ts, size int64) int64 { return ts - ts%size }

func checkQuery(t *testing.T, q string, want []string) {
	t.Helper()
	got := runQuery(t, q, testCfg)
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatalf("%s: the oracle produced no rows; the test would prove nothing", q)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: got %d rows, want %d", q, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d (sorted): got %s, want %s", q, i, got[i], want[i])
		}
	}
	t.Logf("%s: %d rows agree", q, len(got))
}

func TestQ0(t *testing.T) {
	var want []string
	for _, e := range events() {
		if e.Kind == nexmark.KindBid {
			b := e.Bid
			want = append(want, row(b.Auction, b.Bidder, b.Price, b.Channel, b.URL, b.DateTime, b.Extra))
		}
	}
	checkQuery(t, "q0", want)
}

func TestQ1(t *testing.T) {
	var want []string
	for _, e := range events() {
		if e.Kind == nexmark.KindBid {
			b := e.Bid
			want = append(want, row(b.Auction, b.Bidder, float64(b.Price)*0.908, b.DateTime, b.Extra))
		}
	}
	checkQuery(t, "q1", want)
}

func TestQ2(t *testing.T) {
	var want []string
	for _, e := range events() {
		if e.Kind == nexmark.KindBid && e.Bid.Auction%123 == 0 {
			want = append(want, row(e.Bid.Auction, e.Bid.Price))
		}
	}
	checkQuery(t, "q2", want)
}

func TestQ3(t *testing.T) {
	persons := map[int64]nexmark.Person{}
	var auctions []nexmark.Auction
	for _, e := range events() {
		switch e.Kind {
		case nexmark.KindPerson:
			if s := e.Person.State; s == "OR" || s == "ID" || s == "CA" {
				persons[e.Person.ID] = e.Person
			}
		case nexmark.KindAuction:
			if e.Auction.Category == 10 {
				auctions = append(auctions, e.Auction)
			}
		}
	}
	var want []string
	for _, a := range auctions {
		if p, ok := persons[a.Seller]; ok {
			want = append(want, row(p.Name, p.City, p.State, a.ID))
		}
	}
	checkQuery(t, "q3", want)
}

func TestQ4(t *testing.T) {
	const size = 10_000
	type aw struct{ id, w int64 }
	auctions := map[aw]nexmark.Auction{}
	evs := events()
	for _, e := range evs {
		if e.Kind == nexmark.KindAuction {
			a := e.Auction
			auctions[aw{a.ID, winStart(a.DateTime, size)}] = a
		}
	}
	final := map[aw]int64{} // winning price per auction and window
	for _, e := range evs {
		if e.Kind != nexmark.KindBid {
			continue
		}
		b := e.Bid
		k := aw{b.Auction, winStart(b.DateTime, size)}
		a, ok := auctions[k]
		if !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		if p, seen := final[k]; !seen || b.Price > p {
			final[k] = b.Price
		}
	}
	type cw struct{ cat, w int64 }
	sum, cnt := map[cw]int64{}, map[cw]int64{}
	for k, p := range final {
		c := cw{auctions[k].Category, k.w}
		sum[c] += p
		cnt[c]++
	}
	var want []string
	for c, s := range sum {
		want = append(want, row(c.cat, c.w, c.w+size, float64(s)/float64(cnt[c])))
	}
	checkQuery(t, "q4", want)
}

func TestQ5(t *testing.T) {
	var want []string
	nexmark.RunQ5(testCfg, testCfg.Events, func(r nexmark.Q5Row) {
		want = append(want, row(r.Auction, r.WindowStart, r.WindowEnd, r.Count))
	})
	checkQuery(t, "q5", want)
}

func TestQ7(t *testing.T) {
	const size = 10_000
	best := map[int64]int64{}
	evs := events()
	for _, e := range evs {
		if e.Kind == nexmark.KindBid {
			w := winStart(e.Bid.DateTime, size)
			if p, ok := best[w]; !ok || e.Bid.Price > p {
				best[w] = e.Bid.Price
			}
		}
	}
	var want []string
	for _, e := range evs {
		if b := e.Bid; e.Kind == nexmark.KindBid && b.Price == best[winStart(b.DateTime, size)] {
			w := winStart(b.DateTime, size)
			want = append(want, row(b.Auction, b.Bidder, b.Price, b.Channel, b.URL, b.DateTime, b.Extra, w, w+size))
		}
	}
	checkQuery(t, "q7", want)
}

func TestQ8(t *testing.T) {
	const size = 10_000
	type pw struct{ id, w int64 }
	sellers := map[pw]bool{}
	evs := events()
	for _, e := range evs {
		if e.Kind == nexmark.KindAuction {
			sellers[pw{e.Auction.Seller, winStart(e.Auction.DateTime, size)}] = true
		}
	}
	var want []string
	for _, e := range evs {
		if p := e.Person; e.Kind == nexmark.KindPerson && sellers[pw{p.ID, winStart(p.DateTime, size)}] {
			want = append(want, row(p.ID, p.Name, winStart(p.DateTime, size)))
		}
	}
	checkQuery(t, "q8", want)
}
