package nexmark_test

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/connectors/nexmark"
)

// The query tests run each query spec (QuerySpec) on the task runtime
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

// TestQ4 checks canonical q4 (no windows): each auction's winning price is
// its highest bid placed within its lifetime (dateTime ≤ bid time ≤
// expires), decided when it closes, and each close emits its category's
// count of closed auctions and average winning price so far. Closes at the
// same expires time may arrive in any order, so the oracle checks the
// (category, count) rows exactly, and the average of every count whose set
// of closed auctions is determined (no tie at its boundary); there must be
// such rows, and almost all are.
func TestQ4(t *testing.T) {
	evs := events()
	auctions := map[int64]nexmark.Auction{}
	for _, e := range evs {
		if e.Kind == nexmark.KindAuction {
			auctions[e.Auction.ID] = e.Auction
		}
	}
	final := map[int64]int64{}
	for _, e := range evs {
		b := e.Bid
		a, ok := auctions[b.Auction]
		if e.Kind != nexmark.KindBid || !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		if p, seen := final[b.Auction]; !seen || b.Price > p {
			final[b.Auction] = b.Price
		}
	}
	type closing struct{ expires, price int64 }
	byCat := map[int64][]closing{}
	for id, p := range final {
		a := auctions[id]
		byCat[a.Category] = append(byCat[a.Category], closing{a.Expires, p})
	}
	// want: category|count -> average, or NaN where ties leave it open.
	want := map[string]float64{}
	for cat, cs := range byCat {
		slices.SortFunc(cs, func(x, y closing) int { return cmp.Compare(x.expires, y.expires) })
		var sum int64
		for k, c := range cs {
			sum += c.price
			avg := float64(sum) / float64(k+1)
			if k+1 < len(cs) && cs[k+1].expires == c.expires {
				avg = math.NaN()
			}
			want[row(cat, k+1)] = avg
		}
	}
	got := runQuery(t, "q4", testCfg)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("q4: got %d rows, want %d (one per closing auction with a bid)", len(got), len(want))
	}
	exact := 0
	for _, r := range got {
		parts := strings.Split(r, "|")
		key := parts[0] + "|" + parts[1]
		w, ok := want[key]
		if !ok {
			t.Fatalf("q4: unexpected row %s (category|count not expected, or repeated)", r)
		}
		delete(want, key)
		if math.IsNaN(w) {
			continue
		}
		if g, _ := strconv.ParseFloat(parts[2], 64); math.Abs(g-w) > 1e-9*math.Abs(w) {
			t.Fatalf("q4: row %s: average %v, want %v", r, g, w)
		}
		exact++
	}
	if exact < len(got)*9/10 {
		t.Fatalf("q4: only %d of %d averages were determined; the check proves little", exact, len(got))
	}
	t.Logf("q4: %d rows agree (%d averages checked exactly), %d auctions of %d closed with a bid", len(got), exact, len(final), len(auctions))
}

func TestQ5(t *testing.T) {
	var want []string
	nexmark.RunQ5(testCfg, testCfg.Events, func(r nexmark.Q5Row) {
		want = append(want, row(r.Auction, r.WindowStart, r.WindowEnd, r.Count))
	})
	checkQuery(t, "q5", want)
}

// TestQ7 checks canonical q7: every bid joined with its 10 s window's
// maximum price, so every bid at that price comes out, with the maximum and
// the window.
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
			want = append(want, row(b.Auction, b.Bidder, b.Price, b.Channel, b.URL, b.DateTime, b.Extra, b.Price, w, w+size))
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

// q11Cfg is q11's test stream: at 200 events/s the 200,000 events span
// 1,000 s of event time, so bidders have many sessions of various lengths
// and some bidder places two bids exactly the 10 s gap apart, the case
// that tells touching windows (which merge) from disjoint ones.
var q11Cfg = nexmark.Config{Events: 200_000, Seed: 7, EventsPerSecond: 200, BatchSize: 500}

// userSessions computes q11 as the test's reference, by another route
// than the oracle: every bidder's bid times, then sessions split where two
// consecutive bids are more than gap apart (or, with touching false, at
// least gap apart), each rendered bidder|count|start|end with end = last
// bid + gap. exact counts the consecutive bids exactly gap apart.
func userSessions(evs []nexmark.Event, gap int64, touching bool) (rows []string, exact int) {
	times := map[int64][]int64{}
	for _, e := range evs {
		if e.Kind == nexmark.KindBid {
			times[e.Bid.Bidder] = append(times[e.Bid.Bidder], e.Bid.DateTime)
		}
	}
	for bidder, ts := range times {
		slices.Sort(ts)
		first := 0
		for i := 1; i <= len(ts); i++ {
			if i < len(ts) && ts[i]-ts[i-1] == gap {
				exact++
			}
			if i < len(ts) && (ts[i]-ts[i-1] < gap || touching && ts[i]-ts[i-1] == gap) {
				continue
			}
			rows = append(rows, row(bidder, i-first, ts[first], ts[i-1]+gap))
			first = i
		}
	}
	slices.Sort(rows)
	return rows, exact
}

// digestOf hashes rendered rows of int64 values as the digest sink would.
func digestOf(t *testing.T, rows []string) nexmark.Digest {
	t.Helper()
	var d nexmark.Digest
	for _, r := range rows {
		h := nexmark.NewRowHasher()
		for _, f := range strings.Split(r, "|") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("row %s: %v", r, err)
			}
			h.Int(v)
		}
		d.AddRow(&h)
	}
	return d
}

// TestQ11 checks q11 (user sessions, 10 s gap) three ways: the rows of
// the spec at parallelism 1 against the test's reference, the digest of the
// spec at parallelism 2 against the oracle's and the reference's; and it
// makes sure these checks can fail: the reference with a gap one ms
// shorter or longer, or with windows that merge only when they overlap
// (not when they touch), differs from what the engine produced.
func TestQ11(t *testing.T) {
	const gap = nexmark.SessionGapMillis
	evs := make([]nexmark.Event, q11Cfg.Events)
	g := nexmark.NewGenerator(q11Cfg)
	for n := range evs {
		evs[n] = g.At(int64(n))
	}
	want, exact := userSessions(evs, gap, true)
	if len(want) == 0 || exact == 0 {
		t.Fatalf("q11: the reference has %d sessions and %d bids exactly the gap apart; the test needs both", len(want), exact)
	}
	got := runQuery(t, "q11", q11Cfg)
	if !slices.Equal(got, want) {
		t.Fatalf("q11: got %d rows, want %d; first difference: %s", len(got), len(want), firstDiff(got, want))
	}
	d := runDigest(t, "q11", q11Cfg, 2)
	oracle, err := nexmark.Oracle("q11", q11Cfg, q11Cfg.Events)
	if err != nil {
		t.Fatal(err)
	}
	if ref := digestOf(t, want); d != oracle || d != ref {
		t.Fatalf("q11: engine digest %v, oracle %v, reference %v", d, oracle, ref)
	}
	for _, v := range []struct {
		name     string
		gap      int64
		touching bool
	}{{"gap-1ms", gap - 1, true}, {"gap+1ms", gap + 1, true}, {"touching windows apart", gap, false}} {
		rows, _ := userSessions(evs, v.gap, v.touching)
		if slices.Equal(rows, got) || digestOf(t, rows) == d {
			t.Fatalf("q11: sessions with %s agree with the engine's; the check cannot tell them apart", v.name)
		}
	}
	bids := 0
	for _, r := range got {
		c, _ := strconv.Atoi(strings.Split(r, "|")[1])
		bids += c
	}
	t.Logf("q11: %d sessions (%d bids) agree, digest %v; %d consecutive bids exactly %d ms apart", len(got), bids, d, exact, gap)
}

// firstDiff describes the first row where two sorted row lists differ.
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("row %d: got %s, want %s", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("one list is a prefix of the other (%d, %d rows)", len(got), len(want))
}

// TestQ9 checks q9 (winning bids): every auction that got a bid within
// its lifetime (dateTime ≤ bid time ≤ expires), with the bid that won it:
// the highest price, then the earliest, then the smallest bidder. The
// reference sorts each auction's bids by that order; it also counts the
// auctions whose highest price was bid more than once, where the order
// beyond the price decides.
func TestQ9(t *testing.T) {
	evs := events()
	bids := map[int64][]nexmark.Bid{}
	for _, e := range evs {
		if e.Kind == nexmark.KindBid {
			bids[e.Bid.Auction] = append(bids[e.Bid.Auction], e.Bid)
		}
	}
	var want []string
	ties := 0
	for _, e := range evs {
		a := e.Auction
		if e.Kind != nexmark.KindAuction {
			continue
		}
		var in []nexmark.Bid
		for _, b := range bids[a.ID] {
			if b.DateTime >= a.DateTime && b.DateTime <= a.Expires {
				in = append(in, b)
			}
		}
		if len(in) == 0 {
			continue
		}
		slices.SortFunc(in, func(x, y nexmark.Bid) int {
			return cmp.Or(cmp.Compare(y.Price, x.Price), cmp.Compare(x.DateTime, y.DateTime), cmp.Compare(x.Bidder, y.Bidder))
		})
		if len(in) > 1 && in[1].Price == in[0].Price {
			ties++
		}
		w := in[0]
		want = append(want, row(a.ID, a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, w.Bidder, w.Price, w.DateTime))
	}
	checkQuery(t, "q9", want)
	t.Logf("q9: %d auctions won, %d of them at a price bid more than once", len(want), ties)
}

// TestQ12 checks q12 (bids per bidder in 10 s windows of processing
// time). Which window a bid lands in depends on when it arrives, so the
// rows are checked for what does not: every row is a 10 s window aligned
// to the clock's epoch, no (bidder, window) comes twice, and each bidder's
// counts sum, over its windows, to its number of bids in the reference
// (counted from the events). The digest of the spec at parallelism 2
// (bidder weighted by bid_count) must equal the oracle's, and the same
// weighted digest of the collected rows too. The check can fail: the
// reference with one bid dropped, or with one bid moved to another bidder,
// and the rows with one count changed, each give another digest.
func TestQ12(t *testing.T) {
	const size = nexmark.ProcTimeWindowMillis
	bids := map[int64]int64{}
	total := int64(0)
	for _, e := range events() {
		if e.Kind == nexmark.KindBid {
			bids[e.Bid.Bidder]++
			total++
		}
	}
	got := runQuery(t, "q12", testCfg)
	type bw struct{ bidder, start int64 }
	seen := map[bw]bool{}
	counted := map[int64]int64{}
	var rows [][2]int64 // bidder, bid_count
	for _, r := range got {
		f := strings.Split(r, "|")
		if len(f) != 4 {
			t.Fatalf("q12: row %s has %d fields, want bidder|bid_count|starttime|endtime", r, len(f))
		}
		var v [4]int64
		for i := range v {
			var err error
			if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				t.Fatalf("q12: row %s: %v", r, err)
			}
		}
		bidder, count, start, end := v[0], v[1], v[2], v[3]
		if end-start != size || start%size != 0 || count <= 0 {
			t.Fatalf("q12: row %s is not a positive count in an aligned %d ms window", r, size)
		}
		if k := (bw{bidder, start}); seen[k] {
			t.Fatalf("q12: bidder %d has two rows for the window at %d", bidder, start)
		} else {
			seen[k] = true
		}
		counted[bidder] += count
		rows = append(rows, [2]int64{bidder, count})
	}
	if len(counted) != len(bids) {
		t.Fatalf("q12: %d bidders counted, want %d", len(counted), len(bids))
	}
	for b, n := range bids {
		if counted[b] != n {
			t.Fatalf("q12: bidder %d: %d bids counted over its windows, want %d", b, counted[b], n)
		}
	}
	weighted := func(rows [][2]int64) nexmark.Digest {
		var d nexmark.Digest
		for _, r := range rows {
			h := nexmark.NewRowHasher()
			h.Int(r[0])
			d.AddWeighted(&h, r[1])
		}
		return d
	}
	d := runDigest(t, "q12", testCfg, 2)
	oracle, err := nexmark.Oracle("q12", testCfg, testCfg.Events)
	if err != nil {
		t.Fatal(err)
	}
	if rd := weighted(rows); d != oracle || rd != oracle || oracle.Rows != total {
		t.Fatalf("q12: engine digest %v, digest of the collected rows %v, oracle %v (%d bids)", d, rd, oracle, total)
	}
	// The check can fail.
	var ref [][2]int64
	for b, n := range bids {
		ref = append(ref, [2]int64{b, n})
	}
	slices.SortFunc(ref, func(x, y [2]int64) int { return cmp.Compare(x[0], y[0]) })
	if weighted(ref) != oracle {
		t.Fatalf("q12: the reference's digest %v differs from the oracle's %v", weighted(ref), oracle)
	}
	dropped := slices.Clone(ref)
	dropped[0][1]--
	moved := slices.Clone(ref)
	moved[0][1]--
	moved[1][1]++
	changed := slices.Clone(rows)
	changed[len(changed)/2][1]++
	for name, r := range map[string][][2]int64{"one bid dropped": dropped, "one bid moved to another bidder": moved, "one row's count changed": changed} {
		if weighted(r) == oracle {
			t.Fatalf("q12: %s gives the oracle's digest %v; the check cannot tell", name, oracle)
		}
	}
	t.Logf("q12: %d rows, %d bids of %d bidders counted once each, digest %v", len(got), total, len(bids), d)
}
