package nexmark

import (
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// Generator modes (Config.Generator).
const (
	// GeneratorCanonical writes every string of every event afresh, with the
	// reference generator's lengths and alphabets, and builds every event
	// of a source's split whatever its kind. It is the default.
	GeneratorCanonical = "canonical"
	// GeneratorFast picks every string from fixed pools built once and
	// builds only the events of the source's kind: a cheaper stream of the
	// same shape, whose figures are not comparable with other systems'.
	GeneratorFast = "fast"
)

// The canonical strings, after the reference generator:
//
//   - a person's name is one of 11 first names, a space and one of 9 last
//     names; e-mail is nextString(7) "@" nextString(5) ".com"; credit card
//     is four groups of four digits separated by spaces; city and state
//     come from fixed lists;
//   - an auction's item name is nextString(20), its description
//     nextString(100);
//   - nextString(max) is 3 + uniform[0, max-3) characters, each a space
//     with probability 1/13 and otherwise a lowercase letter, with leading
//     and trailing spaces trimmed;
//   - extra pads the event to the configured average size (AvgPersonBytes,
//     AvgAuctionBytes, AvgBidBytes): the size left over after the other
//     fields (8 bytes per number), ±20% uniformly, in lowercase letters.
//
// All random draws of one event's strings come from one splitmix64 stream
// seeded by (seed, event number), so any event can be built on its own.
// Numbers, ids, times and channels are the same as in the fast mode.

// maxEventBytes bounds the string bytes of one event: an auction's item
// name (< 20), description (< 100) and extra (≤ 1.2 × AvgAuctionBytes).
const maxEventBytes = 1024

// arenaChunk is the size of the byte chunks a source writes a batch's
// strings into.
const arenaChunk = 256 << 10

// eventRand is one event's stream of random draws.
type eventRand struct{ s uint64 }

func (r *eventRand) next() uint64    { r.s += golden; return mix64(r.s) }
func (r *eventRand) below(n int) int { return int(below(r.next(), uint64(n))) }

// appendNextString appends the reference's nextString(maxLen).
func (r *eventRand) appendNextString(dst []byte, maxLen int) []byte {
	n := 3 + r.below(maxLen-3)
	start := len(dst)
	for range n {
		x := r.next()
		if below(x, 13) == 0 {
			dst = append(dst, ' ')
		} else {
			dst = append(dst, byte('a'+below(mix64(x), 26)))
		}
	}
	// Trim the spaces at both ends, as the reference does.
	lo, hi := start, len(dst)
	for lo < hi && dst[lo] == ' ' {
		lo++
	}
	for hi > lo && dst[hi-1] == ' ' {
		hi--
	}
	if lo > start {
		copy(dst[start:], dst[lo:hi])
	}
	return dst[:start+hi-lo]
}

// appendExtra appends the reference's nextExtra(used, avg): lowercase
// letters, about avg-used of them (±20%), none when used ≥ avg.
func (r *eventRand) appendExtra(dst []byte, used, avg int) []byte {
	if used >= avg {
		return dst
	}
	want := avg - used
	delta := (want*2 + 5) / 10 // round(want × 0.2)
	size := want - delta
	if delta > 0 {
		size += r.below(2 * delta)
	}
	// 13 letters per 64-bit draw (26^13 < 2^64).
	for size > 0 {
		x := r.next()
		for k := 0; k < 13 && size > 0; k++ {
			dst = append(dst, byte('a'+x%26))
			x /= 26
			size--
		}
	}
	return dst
}

// appendDigits4 appends v (< 10000) as four digits.
func appendDigits4(dst []byte, v int) []byte {
	return append(dst, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
}

// arena hands out immutable strings written into byte chunks: a chunk is
// never written again below its length, so the strings stay valid for as
// long as anything refers to them.
type arena struct{ buf []byte }

// reserve makes room for at least n more bytes.
func (a *arena) reserve(n int) {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(arenaChunk, n))
	}
}

// str returns the bytes from off to the end as a string.
func (a *arena) str(off int) string {
	if off == len(a.buf) {
		return ""
	}
	return unsafe.String(&a.buf[off], len(a.buf)-off)
}

// canonicalStrings are the strings of one event; the ones of the other
// kinds are empty.
type canonicalStrings struct {
	name, email, card, city, state string // person
	itemName, description          string // auction
	extra                          string // every kind
}

// canonicalPerson writes person n's strings into a. a must have
// maxEventBytes of room (arena.reserve).
func (g *Generator) canonicalPerson(n int64, a *arena) canonicalStrings {
	r := eventRand{s: g.hash(fCanonical, n)}
	var s canonicalStrings
	off := len(a.buf)
	a.buf = append(a.buf, firstNames[r.below(len(firstNames))]...)
	a.buf = append(a.buf, ' ')
	a.buf = append(a.buf, lastNames[r.below(len(lastNames))]...)
	s.name, off = a.str(off), len(a.buf)
	a.buf = r.appendNextString(a.buf, 7)
	a.buf = append(a.buf, '@')
	a.buf = r.appendNextString(a.buf, 5)
	a.buf = append(a.buf, ".com"...)
	s.email, off = a.str(off), len(a.buf)
	for i := range 4 {
		if i > 0 {
			a.buf = append(a.buf, ' ')
		}
		a.buf = appendDigits4(a.buf, r.below(10000))
	}
	s.card = a.str(off)
	s.city = usCities[r.below(len(usCities))]
	s.state = usStates[r.below(len(usStates))]
	used := 8 + len(s.name) + len(s.email) + len(s.card) + len(s.city) + len(s.state)
	off = len(a.buf)
	a.buf = r.appendExtra(a.buf, used, AvgPersonBytes)
	s.extra = a.str(off)
	return s
}

// canonicalAuction writes auction n's strings into a.
func (g *Generator) canonicalAuction(n int64, a *arena) canonicalStrings {
	r := eventRand{s: g.hash(fCanonical, n)}
	var s canonicalStrings
	off := len(a.buf)
	a.buf = r.appendNextString(a.buf, 20)
	s.itemName, off = a.str(off), len(a.buf)
	a.buf = r.appendNextString(a.buf, 100)
	s.description, off = a.str(off), len(a.buf)
	used := 8 + len(s.itemName) + len(s.description) + 5*8
	a.buf = r.appendExtra(a.buf, used, AvgAuctionBytes)
	s.extra = a.str(off)
	return s
}

// canonicalBid writes bid n's extra into a.
func (g *Generator) canonicalBid(n int64, a *arena) canonicalStrings {
	r := eventRand{s: g.hash(fCanonical, n)}
	off := len(a.buf)
	a.buf = r.appendExtra(a.buf, 4*8, AvgBidBytes)
	return canonicalStrings{extra: a.str(off)}
}

// canonicalStringsOf writes event n's strings into a.
func (g *Generator) canonicalStringsOf(n int64, k Kind, a *arena) canonicalStrings {
	switch k {
	case KindPerson:
		return g.canonicalPerson(n, a)
	case KindAuction:
		return g.canonicalAuction(n, a)
	}
	return g.canonicalBid(n, a)
}

// canonicalAt is At in the canonical mode.
func (g *Generator) canonicalAt(n int64) Event {
	return g.canonicalEvent(n, &arena{buf: make([]byte, 0, maxEventBytes)})
}

// canonicalEvent builds event n with its strings in a, which must have
// maxEventBytes of room.
func (g *Generator) canonicalEvent(n int64, a *arena) Event {
	k := KindOf(n)
	s := g.canonicalStringsOf(n, k, a)
	switch k {
	case KindPerson:
		p := g.fastPersonAt(n)
		p.Name, p.EmailAddress, p.CreditCard, p.City, p.State, p.Extra = s.name, s.email, s.card, s.city, s.state, s.extra
		return Event{Kind: k, Person: p}
	case KindAuction:
		x := g.fastAuctionAt(n)
		x.ItemName, x.Description, x.Extra = s.itemName, s.description, s.extra
		return Event{Kind: k, Auction: x}
	}
	b := g.fastBidAt(n)
	b.Extra = s.extra
	return Event{Kind: k, Bid: b}
}

// fillCanonical builds every event of ns — the event numbers the source
// scanned, of every kind — and writes those of the source's kind into b.
// The others are built in full and dropped, as a reference source that
// generates the whole stream and filters it does. It returns the number
// of rows written.
func (s *Source) fillCanonical(b *stream.Batch, ns []int64) int {
	g := s.gen
	m := 0
	for _, n := range ns {
		if KindOf(n) == s.kind {
			m++
		}
	}
	ints := func(c int) []int64 {
		col := &b.Cols[c]
		col.Ints = col.Ints[:0]
		return col.Ints
	}
	strs := func(c int) []string {
		col := &b.Cols[c]
		col.Strs = col.Strs[:0]
		return col.Strs
	}
	a := &s.arena
	scratch := &s.scratch
	switch s.kind {
	case KindPerson:
		id, name, email, card, city, state, dt, extra := ints(0), strs(1), strs(2), strs(3), strs(4), strs(5), ints(6), strs(7)
		for _, n := range ns {
			k := KindOf(n)
			if k != KindPerson {
				s.dropOther(n, k, scratch)
				continue
			}
			a.reserve(maxEventBytes)
			x := g.canonicalPerson(n, a)
			id = append(id, g.personID(n))
			name, email, card = append(name, x.name), append(email, x.email), append(card, x.card)
			city, state = append(city, x.city), append(state, x.state)
			dt, extra = append(dt, g.Timestamp(n)), append(extra, x.extra)
		}
		b.Cols[0].Ints, b.Cols[1].Strs, b.Cols[2].Strs, b.Cols[3].Strs = id, name, email, card
		b.Cols[4].Strs, b.Cols[5].Strs, b.Cols[6].Ints, b.Cols[7].Strs = city, state, dt, extra
	case KindAuction:
		id, item, desc, initial, reserve, dt, exp, seller, cat, extra :=
			ints(0), strs(1), strs(2), ints(3), ints(4), ints(5), ints(6), ints(7), ints(8), strs(9)
		for _, n := range ns {
			k := KindOf(n)
			if k != KindAuction {
				s.dropOther(n, k, scratch)
				continue
			}
			a.reserve(maxEventBytes)
			x := g.canonicalAuction(n, a)
			ts := g.Timestamp(n)
			in := g.auctionInitial(n)
			id, item, desc = append(id, g.auctionID(n)), append(item, x.itemName), append(desc, x.description)
			initial, reserve = append(initial, in), append(reserve, g.auctionReserve(n, in))
			dt, exp = append(dt, ts), append(exp, g.auctionExpires(n, ts))
			seller, cat = append(seller, g.auctionSeller(n)), append(cat, g.auctionCategory(n))
			extra = append(extra, x.extra)
		}
		b.Cols[0].Ints, b.Cols[1].Strs, b.Cols[2].Strs, b.Cols[3].Ints, b.Cols[4].Ints = id, item, desc, initial, reserve
		b.Cols[5].Ints, b.Cols[6].Ints, b.Cols[7].Ints, b.Cols[8].Ints, b.Cols[9].Strs = dt, exp, seller, cat, extra
	default:
		p := g.p
		auc, bidder, price, ch, url, dt, extra := ints(0), ints(1), ints(2), strs(3), strs(4), ints(5), strs(6)
		for _, n := range ns {
			k := KindOf(n)
			if k != KindBid {
				s.dropOther(n, k, scratch)
				continue
			}
			a.reserve(maxEventBytes)
			x := g.canonicalBid(n, a)
			c := g.bidChannel(n)
			auc, bidder, price = append(auc, g.bidAuction(n)), append(bidder, g.bidBidder(n)), append(price, g.bidPrice(n))
			ch, url = append(ch, p.channels[c]), append(url, p.urls[c])
			dt, extra = append(dt, g.Timestamp(n)), append(extra, x.extra)
		}
		b.Cols[0].Ints, b.Cols[1].Ints, b.Cols[2].Ints, b.Cols[3].Strs = auc, bidder, price, ch
		b.Cols[4].Strs, b.Cols[5].Ints, b.Cols[6].Strs = url, dt, extra
	}
	return m
}

// dropOther builds event n of another kind than the source's in full
// (numbers and strings) and drops it. The strings go into scratch, reused
// from event to event: nothing refers to them afterwards.
func (s *Source) dropOther(n int64, k Kind, scratch *arena) {
	g := s.gen
	scratch.buf = scratch.buf[:0]
	scratch.reserve(maxEventBytes)
	var sum int64
	switch k {
	case KindPerson:
		sum = g.personID(n)
	case KindAuction:
		ts := g.Timestamp(n)
		in := g.auctionInitial(n)
		sum = g.auctionID(n) ^ g.auctionReserve(n, in) ^ g.auctionExpires(n, ts) ^ g.auctionSeller(n) ^ g.auctionCategory(n)
	default:
		sum = g.bidAuction(n) ^ g.bidBidder(n) ^ g.bidPrice(n) ^ int64(g.bidChannel(n))
	}
	g.canonicalStringsOf(n, k, scratch)
	s.dropped += sum + int64(len(scratch.buf))
}

// Scratch is reusable memory for Generator.AtInto.
type Scratch struct{ a arena }

// AtInto returns event n like At, writing its strings into s: they stay
// valid only until the next call with s. It allocates nothing once s has
// grown, which is what a tight loop over the stream (a baseline) wants.
func (g *Generator) AtInto(n int64, s *Scratch) Event {
	if !g.canonical {
		return g.At(n)
	}
	s.a.buf = s.a.buf[:0]
	s.a.reserve(maxEventBytes)
	return g.canonicalEvent(n, &s.a)
}
