package nexmark

import (
	"fmt"
	"strings"
)

// The oracles: each query of Queries computed directly over the events of
// a Config (Generator.AtInto, one pass, plain maps), reduced to the Digest
// that a digest sink at the end of the query's spec computes. They are how
// the benchmark checks every run's output.

// QueryWindowMillis is the tumbling window of q7 and q8.
const QueryWindowMillis = 10_000

// DigestFields returns the fields a digest sink hashes for query q: nil
// (all) except for q4, whose running averages at equal closing times may
// come out in either order; its digest covers (category, count), which
// still pins down how many auctions of each category closed with a bid.
// The query tests check q4's averages row by row.
func DigestFields(q string) []string {
	if q == "q4" {
		return []string{"category", "count"}
	}
	return nil
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
				row(func(r *RowHasher) {
					r.Int(b.Auction)
					r.Int(b.Bidder)
					r.Float(float64(b.Price) * 0.908)
					r.Int(b.DateTime)
					r.Str(b.Extra)
				})
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
	case "q5":
		RunQ5(cfg, events, func(x Q5Row) {
			row(func(r *RowHasher) { r.Int(x.Auction); r.Int(x.WindowStart); r.Int(x.WindowEnd); r.Int(x.Count) })
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
	default:
		return Digest{}, fmt.Errorf("nexmark: no oracle for query %q; the queries are %v", q, Queries)
	}
	return d, nil
}
