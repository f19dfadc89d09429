package nexmark

import (
	"slices"
	"time"
)

// Baselines: the work of queries q1 and q5 as single-goroutine Go programs
// over plain structs, with Go maps and no channels, batches or
// serialisation — what the engine is measured against (the COST idea).
// Both make the events exactly as a source of the same Config does: in the
// canonical mode every event of every kind, strings included
// (Generator.AtInto), then keep the bids; in the fast mode only the bids,
// strings from the pools.

// BaselineSeed is the seed of the baselines' event sequence.
const BaselineSeed = 42

// BaselineQ1 converts the price of every bid among the first events events
// of cfg to euros (price * 0.908), as the q1 query does, and returns the
// digest of its result rows and the time taken. Like the query's
// benchmark sink, it hashes every result row (auction, bidder, price in
// euros, dateTime, extra) into a Digest, so that both do the same work
// and the baseline's output can be checked against the oracle's.
func BaselineQ1(cfg Config, events int64) (d Digest, elapsed time.Duration) {
	g := NewGenerator(cfg)
	var scratch Scratch
	start := time.Now()
	var touch int64
	for n := int64(0); n < events; n++ {
		var b Bid
		if g.canonical {
			e := g.AtInto(n, &scratch)
			if e.Kind != KindBid {
				touch += int64(len(e.Person.Extra) + len(e.Auction.Extra))
				continue
			}
			b = e.Bid
		} else {
			if KindOf(n) != KindBid {
				continue
			}
			b = g.BidAt(n)
		}
		r := NewRowHasher()
		hashQ1Row(&r, &b)
		d.AddRow(&r)
	}
	elapsed = time.Since(start)
	if touch == 42 {
		panic("unreachable: keeps the loop's results alive")
	}
	return d, elapsed
}

// hashQ1Row hashes q1's result row of bid b.
func hashQ1Row(r *RowHasher, b *Bid) {
	r.Int(b.Auction)
	r.Int(b.Bidder)
	r.Float(float64(b.Price) * 0.908)
	r.Int(b.DateTime)
	r.Str(b.Extra)
}

// Q5Row is one result of q5: an auction with the most bids in the sliding
// window [WindowStart, WindowEnd).
type Q5Row struct {
	Auction                int64
	WindowStart, WindowEnd int64
	Count                  int64
}

// Q5 window shape: 10 s windows every 2 s.
const (
	Q5SizeMillis  = 10_000
	Q5SlideMillis = 2_000
)

// BaselineQ5 counts the bids per auction in sliding windows of 10 s every
// 2 s of event time and finds, per window, the auctions with the most bids
// (all of them on a tie), as the q5 query does, over the first events
// events of cfg. It returns the digest of the result rows (hashed as the
// query's benchmark sink does) and the time taken.
func BaselineQ5(cfg Config, events int64) (d Digest, elapsed time.Duration) {
	start := time.Now()
	RunQ5(cfg, events, func(x Q5Row) {
		r := NewRowHasher()
		hashQ5Row(&r, x)
		d.AddRow(&r)
	})
	return d, time.Since(start)
}

// hashQ5Row hashes q5's result row x.
func hashQ5Row(r *RowHasher, x Q5Row) {
	r.Int(x.Auction)
	r.Int(x.WindowStart)
	r.Int(x.WindowEnd)
	r.Int(x.Count)
}

// RunQ5 is BaselineQ5 over the events of cfg below events; it calls emit
// (when not nil) for every result row, windows in order of end, auctions in
// ascending order within a window. It returns the number of rows.
func RunQ5(cfg Config, events int64, emit func(Q5Row)) int64 {
	g := NewGenerator(cfg)
	const panesPerWindow = Q5SizeMillis / Q5SlideMillis
	// ring holds the counts of the last panesPerWindow panes; ring[i] is
	// the pane starting at paneStart[i].
	var ring [panesPerWindow]map[int64]int64
	var paneStart [panesPerWindow]int64
	for i := range ring {
		ring[i] = make(map[int64]int64)
		paneStart[i] = -1 << 62
	}
	win := make(map[int64]int64)
	var rows int64
	var best []int64
	// fire emits the window ending at end from the panes in the ring.
	fire := func(end int64) {
		clear(win)
		for i := range ring {
			if paneStart[i] >= end-Q5SizeMillis && paneStart[i] < end {
				for a, c := range ring[i] {
					win[a] += c
				}
			}
		}
		var top int64
		best = best[:0]
		for a, c := range win {
			switch {
			case c > top:
				top, best = c, append(best[:0], a)
			case c == top:
				best = append(best, a)
			}
		}
		if emit != nil {
			slices.Sort(best)
			for _, a := range best {
				emit(Q5Row{Auction: a, WindowStart: end - Q5SizeMillis, WindowEnd: end, Count: top})
			}
		}
		rows += int64(len(best))
	}
	cur := int64(-1 << 62) // start of the pane being filled
	lastFired := int64(-1 << 62)
	// advance fires every window with data ending at or before upTo.
	advance := func(upTo int64) {
		first := int64(1 << 62)
		for i := range ring {
			if len(ring[i]) > 0 {
				first = min(first, paneStart[i])
			}
		}
		if first == 1<<62 {
			return
		}
		for e := max(lastFired+Q5SlideMillis, first+Q5SlideMillis); e <= upTo; e += Q5SlideMillis {
			// Skip windows none of whose panes hold data.
			has := false
			for i := range ring {
				has = has || len(ring[i]) > 0 && paneStart[i] >= e-Q5SizeMillis && paneStart[i] < e
			}
			if has {
				fire(e)
			}
			lastFired = e
		}
	}
	var scratch Scratch
	var touch int
	for n := int64(0); n < events; n++ {
		var b Bid
		if g.canonical {
			e := g.AtInto(n, &scratch)
			if e.Kind != KindBid {
				touch += len(e.Person.Extra) + len(e.Auction.Extra)
				continue
			}
			b = e.Bid
		} else {
			if KindOf(n) != KindBid {
				continue
			}
			b = g.BidAt(n)
		}
		p := b.DateTime - b.DateTime%Q5SlideMillis
		if p != cur {
			advance(p) // windows ending at or before p are complete
			cur = p
			slot := (p / Q5SlideMillis) % panesPerWindow
			clear(ring[slot])
			paneStart[slot] = p
		}
		ring[(p/Q5SlideMillis)%panesPerWindow][b.Auction]++
	}
	advance(cur + Q5SizeMillis)
	if touch < 0 {
		panic("unreachable: keeps the built events alive")
	}
	return rows
}
