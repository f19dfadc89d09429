package nexmark_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/stream"
)

func TestProportionsPerBlock(t *testing.T) {
	g := nexmark.NewGenerator(nexmark.Config{Seed: 1})
	for block := int64(0); block < 200; block++ {
		counts := map[nexmark.Kind]int{}
		for n := block * 50; n < block*50+50; n++ {
			counts[g.At(n).Kind]++
		}
		if counts[nexmark.KindPerson] != 1 || counts[nexmark.KindAuction] != 3 || counts[nexmark.KindBid] != 46 {
			t.Fatalf("block %d: %v, want 1 person, 3 auctions, 46 bids", block, counts)
		}
	}
}

func TestIDsAndTimes(t *testing.T) {
	cfg := nexmark.Config{Seed: 3, EventsPerSecond: 1000}
	g := nexmark.NewGenerator(cfg)
	var persons, auctions int64
	var lastTs int64
	for n := int64(0); n < 20_000; n++ {
		e := g.At(n)
		var ts int64
		switch e.Kind {
		case nexmark.KindPerson:
			if e.Person.ID != nexmark.FirstPersonID+persons {
				t.Fatalf("event %d: person id %d, want %d", n, e.Person.ID, nexmark.FirstPersonID+persons)
			}
			persons++
			ts = e.Person.DateTime
		case nexmark.KindAuction:
			a := e.Auction
			if a.ID != nexmark.FirstAuctionID+auctions {
				t.Fatalf("event %d: auction id %d, want %d", n, a.ID, nexmark.FirstAuctionID+auctions)
			}
			auctions++
			if a.Seller >= nexmark.FirstPersonID+persons+nexmark.PersonIDLead || a.Category < 10 || a.Category > 14 || a.Expires <= a.DateTime || a.Reserve < a.InitialBid {
				t.Fatalf("event %d: implausible auction %+v (persons so far %d)", n, a, persons)
			}
			ts = a.DateTime
		default:
			b := e.Bid
			if b.Auction > nexmark.FirstAuctionID+auctions+nexmark.AuctionIDLead || b.Price < 100 || b.Price > 100_000_000 {
				t.Fatalf("event %d: implausible bid %+v", n, b)
			}
			ts = b.DateTime
		}
		if want := nexmark.DefaultStartMillis + n; ts != want { // 1000 events/s: 1 ms each
			t.Fatalf("event %d: time %d, want %d", n, ts, want)
		}
		if ts < lastTs {
			t.Fatalf("event %d: time went back", n)
		}
		lastTs = ts
	}
}

func TestDeterminism(t *testing.T) {
	a := nexmark.NewGenerator(nexmark.Config{Seed: 5})
	b := nexmark.NewGenerator(nexmark.Config{Seed: 5})
	c := nexmark.NewGenerator(nexmark.Config{Seed: 6})
	differ := 0
	for n := int64(0); n < 5000; n++ {
		if !reflect.DeepEqual(a.At(n), b.At(n)) {
			t.Fatalf("event %d differs between two generators of one seed", n)
		}
		if !reflect.DeepEqual(a.At(n), nexmark.EventAt(nexmark.Config{Seed: 5}, n)) {
			t.Fatalf("event %d: EventAt differs from Generator.At", n)
		}
		if !reflect.DeepEqual(a.At(n), c.At(n)) {
			differ++
		}
	}
	if differ < 4000 {
		t.Fatalf("only %d of 5000 events differ between seeds 5 and 6", differ)
	}
}

func TestHotKeys(t *testing.T) {
	g := nexmark.NewGenerator(nexmark.Config{Seed: 9})
	var bids, hotAuction, hotBidder, auctions, hotSeller int
	for n := int64(1000); n < 101_000; n++ {
		e := g.At(n)
		switch e.Kind {
		case nexmark.KindBid:
			bids++
			if (e.Bid.Auction-nexmark.FirstAuctionID)%nexmark.HotGroup == 0 {
				hotAuction++
			}
			if (e.Bid.Bidder-nexmark.FirstPersonID)%nexmark.HotGroup == 1 {
				hotBidder++
			}
		case nexmark.KindAuction:
			auctions++
			if (e.Auction.Seller-nexmark.FirstPersonID)%nexmark.HotGroup == 0 {
				hotSeller++
			}
		}
	}
	// Hot choices: 1/2 of bids' auctions, 3/4 of bidders and sellers, plus
	// the uniform choices that hit a multiple of 100 by chance.
	check := func(what string, hot, all int, lo, hi float64) {
		if f := float64(hot) / float64(all); f < lo || f > hi {
			t.Errorf("%s: %.3f hot, want in [%.2f, %.2f]", what, f, lo, hi)
		}
	}
	check("bid auctions", hotAuction, bids, 0.49, 0.53)
	check("bidders", hotBidder, bids, 0.74, 0.77)
	check("sellers", hotSeller, auctions, 0.72, 0.78)
}

// drain runs a source subtask to its end and returns its rows.
func drain(t *testing.T, k nexmark.Kind, cfg nexmark.Config, sub, par int) [][]any {
	t.Helper()
	s := nexmark.NewSource(k, cfg)
	if err := s.Open(context.Background(), &stream.OperatorContext{Subtask: sub, Parallelism: par}); err != nil {
		t.Fatal(err)
	}
	c := &rowCollector{}
	for {
		st, err := s.Poll(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if st == stream.PollEnd {
			return c.rows
		}
	}
}

type rowCollector struct{ rows [][]any }

func (c *rowCollector) Collect(b *stream.Batch) {
	for i := range b.Len() {
		c.rows = append(c.rows, b.Row(i))
	}
	b.Release()
}
func (c *rowCollector) EmitWatermark(int64) {}

func eventRow(e nexmark.Event) []any {
	switch e.Kind {
	case nexmark.KindPerson:
		p := e.Person
		return []any{p.ID, p.Name, p.EmailAddress, p.CreditCard, p.City, p.State, p.DateTime, p.Extra}
	case nexmark.KindAuction:
		a := e.Auction
		return []any{a.ID, a.ItemName, a.Description, a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, a.Extra}
	}
	b := e.Bid
	return []any{b.Auction, b.Bidder, b.Price, b.Channel, b.URL, b.DateTime, b.Extra}
}

// TestSubtasksPartitionEvents: the sources of every kind at parallelism 3
// emit exactly the events of 0..N-1, each once, equal to EventAt.
func TestSubtasksPartitionEvents(t *testing.T) {
	for _, mode := range []string{nexmark.GeneratorCanonical, nexmark.GeneratorFast} {
		t.Run(mode, func(t *testing.T) {
			testSubtasksPartitionEvents(t, nexmark.Config{Events: 20_011, Seed: 11, BatchSize: 97, Generator: mode})
		})
	}
}

func testSubtasksPartitionEvents(t *testing.T, cfg nexmark.Config) {
	g := nexmark.NewGenerator(cfg)
	const par = 3
	for _, k := range []nexmark.Kind{nexmark.KindPerson, nexmark.KindAuction, nexmark.KindBid} {
		total := 0
		for sub := range par {
			rows := drain(t, k, cfg, sub, par)
			total += len(rows)
			j := 0
			for n := int64(sub); n < cfg.Events; n += par {
				if nexmark.KindOf(n) != k {
					continue
				}
				if j >= len(rows) {
					t.Fatalf("%v subtask %d: %d rows, ran out at event %d", k, sub, len(rows), n)
				}
				if want := eventRow(g.At(n)); !reflect.DeepEqual(rows[j], want) {
					t.Fatalf("%v subtask %d row %d (event %d): got %v, want %v", k, sub, j, n, rows[j], want)
				}
				j++
			}
			if j != len(rows) {
				t.Fatalf("%v subtask %d: %d rows, want %d", k, sub, len(rows), j)
			}
		}
		want := 0
		for n := int64(0); n < cfg.Events; n++ {
			if nexmark.KindOf(n) == k {
				want++
			}
		}
		if total != want {
			t.Fatalf("%v: %d rows over %d subtasks, want %d", k, total, par, want)
		}
	}
}

// TestSourceCheckpoint: a source restored from a snapshot taken after a few
// polls continues exactly where it was.
func TestSourceCheckpoint(t *testing.T) {
	cfg := nexmark.Config{Events: 50_000, Seed: 2, BatchSize: 128}
	full := drain(t, nexmark.KindAuction, cfg, 1, 2)
	octx := &stream.OperatorContext{Subtask: 1, Parallelism: 2}
	s := nexmark.NewSource(nexmark.KindAuction, cfg)
	if err := s.Open(context.Background(), octx); err != nil {
		t.Fatal(err)
	}
	c := &rowCollector{}
	for range 5 {
		if _, err := s.Poll(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	snap := &stream.SnapshotContext{CheckpointID: 1}
	if err := s.SnapshotState(snap); err != nil {
		t.Fatal(err)
	}
	r := nexmark.NewSource(nexmark.KindAuction, cfg)
	if err := r.Open(context.Background(), octx); err != nil {
		t.Fatal(err)
	}
	if err := r.RestoreState(&stream.RestoreContext{CheckpointID: 1, State: &snap.State}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := r.Poll(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if st == stream.PollEnd {
			break
		}
	}
	if !reflect.DeepEqual(c.rows, full) {
		t.Fatalf("restored run emitted %d rows, uninterrupted %d, or they differ", len(c.rows), len(full))
	}
}

func TestBaselines(t *testing.T) {
	// The baselines produce the queries' results: their digests equal
	// the oracles', in both generator modes.
	for _, mode := range []string{nexmark.GeneratorCanonical, nexmark.GeneratorFast} {
		cfg := nexmark.Config{Seed: nexmark.BaselineSeed, Generator: mode}
		d1, el := nexmark.BaselineQ1(cfg, 100_000)
		if d1.Rows != 92_000 || el <= 0 {
			t.Fatalf("%s: BaselineQ1(100000) = %v, %v; want 92000 rows", mode, d1, el)
		}
		d5, _ := nexmark.BaselineQ5(cfg, 100_000)
		if d5.Rows == 0 {
			t.Fatalf("%s: BaselineQ5 produced no rows", mode)
		}
		for q, got := range map[string]nexmark.Digest{"q1": d1, "q5": d5} {
			want, err := nexmark.Oracle(q, cfg, 100_000)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: baseline %s %v, oracle %v", mode, q, got, want)
			}
		}
	}
}

func BenchmarkBidSource(b *testing.B) {
	for range b.N {
		s := nexmark.NewSource(nexmark.KindBid, nexmark.Config{Events: 1_000_000})
		_ = s.Open(context.Background(), &stream.OperatorContext{Parallelism: 1})
		c := discard{}
		for {
			st, _ := s.Poll(context.Background(), c)
			if st == stream.PollEnd {
				break
			}
		}
	}
	b.ReportMetric(float64(b.N)*1e6/b.Elapsed().Seconds(), "events/s")
}

type discard struct{}

func (discard) Collect(b *stream.Batch) { b.Release() }
func (discard) EmitWatermark(int64)     {}

func BenchmarkBaselines(b *testing.B) {
	for range b.N {
		_, e1 := nexmark.BaselineQ1(nexmark.Config{Seed: nexmark.BaselineSeed}, 5_000_000)
		_, e5 := nexmark.BaselineQ5(nexmark.Config{Seed: nexmark.BaselineSeed}, 5_000_000)
		b.ReportMetric(5e6/e1.Seconds(), "q1_events/s")
		b.ReportMetric(5e6/e5.Seconds(), "q5_events/s")
	}
}
