package nexmark

import (
	"fmt"
	"math"
	"strings"
)

// The oracles: each query of Queries computed directly over the events of
// a Config (Generator.AtInto, one pass, plain maps), reduced to the Digest
// that a digest sink at the end of the query's spec computes. They are how
// the benchmark checks every run's output.

// QueryWindowMillis is the tumbling window of q7 and q8.
const QueryWindowMillis = 10_000

// SessionGapMillis is the session gap of q11: a bidder's session ends after
// this long without a bid.
const SessionGapMillis = 10_000

// ProcTimeWindowMillis is the processing-time tumbling window of q12.
const ProcTimeWindowMillis = 10_000

// DigestFields returns the fields a digest sink hashes for query q: nil
// (all) except for q4, whose running averages at equal closing times may
// come out in either order; its digest covers (category, count), which
// still pins down how many auctions of each category closed with a bid;
// and q12 (see DigestWeight). The query tests check q4's averages row by
// row.
func DigestFields(q string) []string {
	switch q {
	case "q4":
		return []string{"category", "count"}
	case "q12":
		return []string{"bidder"}
	}
	return nil
}

// DigestWeight returns the field that weights each row of query q's
// digest (DigestConfig.Weight), or "" for none. Only q12 has one: its
// windows are of processing time, so how a bidder's bids split into rows
// depends on when they arrived, but the digest of (bidder) weighted by
// bid_count is, per bidder, its number of bids × its hash, whatever the
// split: a lost or doubled bid, or one counted for another bidder,
// changes it.
func DigestWeight(q string) string {
	if q == "q12" {
		return "bid_count"
	}
	return ""
}

// DigestConfigFor returns the config of the digest sink that replaces
// query q's sink, writing to dir: the fields and weight its oracle
// expects.
func DigestConfigFor(q, dir string) DigestConfig {
	return DigestConfig{Dir: dir, Fields: DigestFields(q), Weight: DigestWeight(q)}
}

// Oracle returns the digest of query q's output over the first events
// events of cfg.
func Oracle(q string, cfg Config, events int64) (Digest, error) {
	g := NewGenerator(cfg)
	var s Scratch
	var d Digest
	row := func(f func(r *RowHasher)) {
		r := NewRowHasher()
		f(&r)
		d.AddRow(&r)
	}
	switch q {
	case "q0", "q1", "q2":
		for n := int64(0); n < events; n++ {
			e := g.AtInto(n, &s)
			if e.Kind != KindBid {
				continue
			}
			b := &e.Bid
			switch q {
			case "q0":
				row(func(r *RowHasher) {
					r.Int(b.Auction)
					r.Int(b.Bidder)
					r.Int(b.Price)
					r.Str(b.Channel)
					r.Str(b.URL)
					r.Int(b.DateTime)
					r.Str(b.Extra)
				})
			case "q1":
				row(func(r *RowHasher) { hashQ1Row(r, b) })
			case "q2":
				if b.Auction%123 == 0 {
					row(func(r *RowHasher) { r.Int(b.Auction); r.Int(b.Price) })
				}
			}
		}
	case "q3":
		type person struct{ name, city, state string }
		persons := map[int64]person{}
		type auction struct{ id, seller int64 }
		var auctions []auction
		for n := int64(0); n < events; n++ {
			e := g.AtInto(n, &s)
			switch e.Kind {
			case KindPerson:
				if st := e.Person.State; st == "OR" || st == "ID" || st == "CA" {
					persons[e.Person.ID] = person{strings.Clone(e.Person.Name), e.Person.City, st}
				}
			case KindAuction:
				if e.Auction.Category == 10 {
					auctions = append(auctions, auction{e.Auction.ID, e.Auction.Seller})
				}
			}
		}
		for _, a := range auctions {
			if p, ok := persons[a.seller]; ok {
				row(func(r *RowHasher) { r.Str(p.name); r.Str(p.city); r.Str(p.state); r.Int(a.id) })
			}
		}
	case "q4":
		type auction struct{ start, end, cat, best int64 }
		auctions := map[int64]*auction{}
		type bid struct{ t, price int64 }
		early := map[int64][]bid{} // bids on auctions not created yet
		fold := func(a *auction, t, price int64) {
			if t >= a.start && t <= a.end && price > a.best {
				a.best = price
			}
		}
		for n := int64(0); n < events; n++ {
			e := g.AtInto(n, &s)
			switch e.Kind {
			case KindAuction:
				x := e.Auction
				a := &auction{start: x.DateTime, end: x.Expires, cat: x.Category, best: -1}
				auctions[x.ID] = a
				for _, b := range early[x.ID] {
					fold(a, b.t, b.price)
				}
				delete(early, x.ID)
			case KindBid:
				b := e.Bid
				if a, ok := auctions[b.Auction]; ok {
					fold(a, b.DateTime, b.Price)
				} else {
					early[b.Auction] = append(early[b.Auction], bid{b.DateTime, b.Price})
				}
			}
		}
		closed := map[int64]int64{}
		for _, a := range auctions {
			if a.best >= 0 {
				closed[a.cat]++
			}
		}
		for cat, k := range closed {
			for c := int64(1); c <= k; c++ {
				row(func(r *RowHasher) { r.Int(cat); r.Int(c) })
			}
		}
	case "q9":
		winningBids(g, events, func(a *Auction, b *Bid) {
			row(func(r *RowHasher) {
				r.Int(a.ID)
				r.Int(a.InitialBid)
				r.Int(a.Reserve)
				r.Int(a.DateTime)
				r.Int(a.Expires)
				r.Int(a.Seller)
				r.Int(a.Category)
				r.Int(b.Bidder)
				r.Int(b.Price)
				r.Int(b.DateTime)
			})
		})
	case "q5":
		RunQ5(cfg, events, func(x Q5Row) {
			row(func(r *RowHasher) { hashQ5Row(r, x) })
		})
	case "q7":
		var best []Bid // the bids at the current window's highest price
		w := int64(-1)
		flush := func() {
			for _, b := range best {
				row(func(r *RowHasher) {
					r.Int(b.Auction)
					r.Int(b.Bidder)
					r.Int(b.Price)
					r.Str(b.Channel)
					r.Str(b.URL)
					r.Int(b.DateTime)
					r.Str(b.Extra)
					r.Int(b.Price)
					r.Int(w)
					r.Int(w + QueryWindowMillis)
				})
			}
			best = best[:0]
		}
		for n := int64(0); n < events; n++ {
			e := g.AtInto(n, &s)
			if e.Kind != KindBid {
				continue
			}
			b := e.Bid
			if bw := b.DateTime - b.DateTime%QueryWindowMillis; bw != w {
				flush()
				w = bw
			}
			if len(best) > 0 && b.Price < best[0].Price {
				continue
			}
			if len(best) > 0 && b.Price > best[0].Price {
				best = best[:0]
			}
			b.Extra = strings.Clone(b.Extra)
			best = append(best, b)
		}
		flush()
	case "q8":
		type person struct {
			id   int64
			name string
		}
		var persons []person
		sellers := map[int64]bool{}
		w := int64(-1)
		flush := func() {
			for _, p := range persons {
				if sellers[p.id] {
					row(func(r *RowHasher) { r.Int(p.id); r.Str(p.name); r.Int(w) })
				}
			}
			persons = persons[:0]
			clear(sellers)
		}
		for n := int64(0); n < events; n++ {
			e := g.AtInto(n, &s)
			if e.Kind == KindBid {
				continue
			}
			t := e.Person.DateTime
			if e.Kind == KindAuction {
				t = e.Auction.DateTime
			}
			if ew := t - t%QueryWindowMillis; ew != w {
				flush()
				w = ew
			}
			if e.Kind == KindPerson {
				persons = append(persons, person{e.Person.ID, strings.Clone(e.Person.Name)})
			} else {
				sellers[e.Auction.Seller] = true
			}
		}
		flush()
	case "q12":
		// Every bid once, hashed by its bidder: the weighted digest of
		// any split of the bids into (bidder, window, count) rows.
		for n := int64(0); n < events; n++ {
			if KindOf(n) != KindBid {
				continue
			}
			bidder := g.bidBidder(n)
			row(func(r *RowHasher) { r.Int(bidder) })
		}
	case "q11":
		if err := userSessions(g, events, SessionGapMillis, func(bidder, count, start, end int64) {
			row(func(r *RowHasher) { r.Int(bidder); r.Int(count); r.Int(start); r.Int(end) })
		}); err != nil {
			return Digest{}, err
		}
	default:
		return Digest{}, fmt.Errorf("nexmark: no oracle for query %q; the queries are %v", q, Queries)
	}
	return d, nil
}

// userSessions calls emit with every session of q11 among the bids of the
// first events events of g, in no particular order: a bidder, its number
// of bids in the session, the session's start (its first bid's time) and
// its end (its last bid's time plus gap).
//
// It follows the session_window operator: a bid at t opens [t, t+gap) and
// windows of one bidder that overlap or touch merge, so a bid joins the
// bidder's open session if t ≤ last+gap. A bid is dropped as late only if
// its window merges with no held session and t+gap-1 is at or below the
// watermark; every source subtask emits in increasing event time, so each
// bid is at or after the watermark of its channel (which lags its largest
// time by 4 s) and none is late. The event sequence is in time order (the
// check below says so if that ever changes), so the sessions can be built
// in one pass, and a session is emitted once time has passed its end.
func userSessions(g *Generator, events, gap int64, emit func(bidder, count, start, end int64)) error {
	type session struct{ start, last, count int64 }
	open := map[int64]*session{}
	prev := int64(math.MinInt64)
	sweep := int64(math.MinInt64) // time of the next sweep of ended sessions
	for n := int64(0); n < events; n++ {
		if KindOf(n) != KindBid {
			continue
		}
		t, bidder := g.Timestamp(n), g.bidBidder(n)
		if t < prev {
			return fmt.Errorf("nexmark: q11 oracle: event %d is earlier than the event before it; the oracle assumes events in time order", n)
		}
		prev = t
		if t > sweep {
			// Sessions whose end is behind t take no more bids: emit them,
			// which keeps the map to the bidders of the last gap.
			for b, s := range open {
				if s.last+gap < t {
					emit(b, s.count, s.start, s.last+gap)
					delete(open, b)
				}
			}
			sweep = t + gap
		}
		s := open[bidder]
		switch {
		case s == nil:
			open[bidder] = &session{start: t, last: t, count: 1}
		case t <= s.last+gap:
			s.last, s.count = t, s.count+1
		default:
			emit(bidder, s.count, s.start, s.last+gap)
			*s = session{start: t, last: t, count: 1}
		}
	}
	for b, s := range open {
		emit(b, s.count, s.start, s.last+gap)
	}
	return nil
}

// winningBids calls emit with every auction among the first events events
// of g that got a bid within its lifetime (dateTime ≤ bid time ≤ expires)
// and its winning bid, in no particular order: the highest price, then
// the earliest time, then the smallest bidder, as q9's lifetime_max
// decides. The strings of both are not filled in. No bid is late (every
// source subtask emits in increasing event time, as for q4), and bids on
// an auction not created yet are kept until it is. Auction ids count up in
// event order, so an id at or below the last one created that is not in
// the map belongs to an auction that has closed.
func winningBids(g *Generator, events int64, emit func(*Auction, *Bid)) {
	type entry struct {
		a   Auction
		win Bid
		has bool
	}
	auctions := map[int64]*entry{}
	early := map[int64][]Bid{}     // bids on auctions not created yet
	lastID := int64(math.MinInt64) // auction ids count up in event order
	fold := func(e *entry, b Bid) {
		if b.DateTime < e.a.DateTime || b.DateTime > e.a.Expires {
			return
		}
		w := e.win
		if !e.has || b.Price > w.Price || b.Price == w.Price && (b.DateTime < w.DateTime || b.DateTime == w.DateTime && b.Bidder < w.Bidder) {
			e.win, e.has = b, true
		}
	}
	var s Scratch
	sweep := int64(math.MinInt64) // time of the next sweep of closed auctions
	for n := int64(0); n < events; n++ {
		if t := g.Timestamp(n); t > sweep {
			// Events come in time order: an auction that expired before t
			// takes no more bids. Emitting it keeps the map to the
			// auctions in flight.
			for id, e := range auctions {
				if e.a.Expires < t {
					if e.has {
						emit(&e.a, &e.win)
					}
					delete(auctions, id)
				}
			}
			sweep = t + 1000
		}
		ev := g.AtInto(n, &s)
		switch ev.Kind {
		case KindAuction:
			a := ev.Auction
			a.ItemName, a.Description, a.Extra = "", "", ""
			e := &entry{a: a}
			auctions[a.ID] = e
			lastID = a.ID
			for _, b := range early[a.ID] {
				fold(e, b)
			}
			delete(early, a.ID)
		case KindBid:
			b := ev.Bid
			b.Channel, b.URL, b.Extra = "", "", ""
			if e, ok := auctions[b.Auction]; ok {
				fold(e, b)
			} else if b.Auction > lastID {
				early[b.Auction] = append(early[b.Auction], b)
			} // else the auction closed before b: b does not count
		}
	}
	for _, e := range auctions {
		if e.has {
			emit(&e.a, &e.win)
		}
	}
}
