package nexmark

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"

	"github.com/weirstream/weir/stream"
)

// Config configures the event sequence and a source. The JSON names are the
// source types' config keys.
type Config struct {
	// Events is the number of events of all kinds (event numbers
	// 0..Events-1); 0 means unbounded.
	Events int64 `json:"events,omitempty"`
	// Seed varies every random choice.
	Seed int64 `json:"seed,omitempty"`
	// EventsPerSecond is the event-time rate: event n happens at
	// StartMillis + n*1000/EventsPerSecond ms. Default
	// DefaultEventsPerSecond (10 million, the rate of the Nexmark suite's
	// standard runs): 10 million events span one second of event time.
	EventsPerSecond int64 `json:"eventsPerSecond,omitempty"`
	// StartMillis is the event time of event 0, in ms since the Unix epoch.
	// Default DefaultStartMillis (2026-01-01T00:00:00Z).
	StartMillis int64 `json:"startMillis,omitempty"`
	// BatchSize is the rows per batch a source emits; default
	// stream.DefaultBatchSize.
	BatchSize int `json:"batchSize,omitempty"`
	// Generator is how events are made: GeneratorCanonical (the default)
	// writes every string of every event afresh with the reference
	// generator's lengths and alphabets and builds every event of a
	// source's split, of all kinds; GeneratorFast picks strings from fixed
	// pools and builds only the source's kind. The two modes agree on
	// every number, id, time and channel; they differ in the other strings.
	Generator string `json:"generator,omitempty"`
	// MaxEventsPerSecond, if positive, limits how fast a source subtask
	// goes through event numbers in wall-clock time: to MaxEventsPerSecond
	// divided by the parallelism, counting from Open. 0 (the default) is
	// as fast as possible. Tests use it to keep a job running long enough
	// for checkpoints; it does not change the events.
	MaxEventsPerSecond int64 `json:"maxEventsPerSecond,omitempty"`
}

// Defaults and the fixed shape of the stream (the reference generator's
// constants).
const (
	DefaultEventsPerSecond = 10_000_000
	DefaultStartMillis     = 1767225600000 // 2026-01-01T00:00:00Z

	PersonProportion  = 1
	AuctionProportion = 3
	BidProportion     = 46
	TotalProportion   = PersonProportion + AuctionProportion + BidProportion

	FirstPersonID   = 1000
	FirstAuctionID  = 1000
	FirstCategoryID = 10
	NumCategories   = 5

	NumActivePeople     = 1000
	NumInFlightAuctions = 100
	PersonIDLead        = 10
	AuctionIDLead       = 10

	// HotAuctionRatio: a bid goes to a hot auction unless a draw of
	// [0, HotAuctionRatio) is 0; likewise sellers and bidders.
	HotAuctionRatio = 2
	HotSellersRatio = 4
	HotBiddersRatio = 4
	// HotGroup: hot auctions, sellers and bidders are multiples of it.
	HotGroup = 100

	AvgPersonBytes  = 200
	AvgAuctionBytes = 500
	AvgBidBytes     = 100
	NumChannels     = 10000
)

// Kind is the kind of an event.
type Kind uint8

const (
	KindPerson Kind = iota + 1
	KindAuction
	KindBid
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return "invalid"
}

// KindOf returns the kind of event number n.
func KindOf(n int64) Kind {
	switch r := n % TotalProportion; {
	case r < PersonProportion:
		return KindPerson
	case r < PersonProportion+AuctionProportion:
		return KindAuction
	}
	return KindBid
}

// Person is a new user of the auction site.
type Person struct {
	ID           int64
	Name         string
	EmailAddress string
	CreditCard   string
	City         string
	State        string
	DateTime     int64 // ms since the Unix epoch
	Extra        string
}

// Auction is an item put up for auction.
type Auction struct {
	ID          int64
	ItemName    string
	Description string
	InitialBid  int64
	Reserve     int64
	DateTime    int64
	Expires     int64
	Seller      int64
	Category    int64
	Extra       string
}

// Bid is a bid on an auction.
type Bid struct {
	Auction  int64
	Bidder   int64
	Price    int64
	Channel  string
	URL      string
	DateTime int64
	Extra    string
}

// Event is one event: Kind says which of Person, Auction and Bid is set.
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// Field numbers, for the per-field hash seeds. Part of the data's
// definition: renumbering changes every generated value.
const (
	fPersonName = iota
	fPersonEmail
	fPersonCard
	fPersonCity
	fPersonState
	fPersonExtra
	fAuctionName
	fAuctionDesc
	fAuctionInitial
	fAuctionReserve
	fAuctionExpires
	fAuctionSeller
	fAuctionCategory
	fAuctionExtra
	fBidAuction
	fBidBidder
	fBidPrice
	fBidChannel
	fBidExtra
	fCanonical // the stream of one event's canonical strings
	numFields
)

// splitmix64, as in the datagen source (stream.Mix64).
const golden = stream.Golden64

func mix64(z uint64) uint64 { return stream.Mix64(z) }

// below maps a uniform h to [0, n).
func below(h, n uint64) uint64 {
	hi, _ := bits.Mul64(h, n)
	return hi
}

// Generator computes events of one Config. It is immutable after
// NewGenerator and safe for concurrent use.
type Generator struct {
	cfg       Config
	rate      int64
	fs        [numFields]uint64
	p         *pools
	canonical bool
}

// NewGenerator returns a generator for cfg (defaults filled in).
func NewGenerator(cfg Config) *Generator {
	cfg = cfg.withDefaults()
	g := &Generator{cfg: cfg, rate: cfg.EventsPerSecond, p: getPools(), canonical: cfg.Generator != GeneratorFast}
	for f := range g.fs {
		g.fs[f] = mix64(uint64(cfg.Seed) ^ mix64(uint64(f)+golden))
	}
	return g
}

func (c Config) withDefaults() Config {
	if c.EventsPerSecond <= 0 {
		c.EventsPerSecond = DefaultEventsPerSecond
	}
	if c.StartMillis == 0 {
		c.StartMillis = DefaultStartMillis
	}
	if c.Generator == "" {
		c.Generator = GeneratorCanonical
	}
	return c
}

// Config returns the generator's config with defaults filled in.
func (g *Generator) Config() Config { return g.cfg }

func (g *Generator) hash(f int, n int64) uint64 { return mix64(g.fs[f] + uint64(n)*golden) }

// Timestamp returns the event time of event n in ms.
func (g *Generator) Timestamp(n int64) int64 {
	return g.cfg.StartMillis + n*1000/g.rate
}

// LastBase0PersonID is the 0-based id of the last person created at or
// before event n.
func LastBase0PersonID(n int64) int64 {
	epoch, off := n/TotalProportion, n%TotalProportion
	if off >= PersonProportion {
		off = PersonProportion - 1
	}
	return epoch*PersonProportion + off
}

// LastBase0AuctionID is the 0-based id of the last auction created at or
// before event n (-1 before the first).
func LastBase0AuctionID(n int64) int64 {
	epoch, off := n/TotalProportion, n%TotalProportion
	switch {
	case off < PersonProportion:
		epoch--
		off = AuctionProportion - 1
	case off >= PersonProportion+AuctionProportion:
		off = AuctionProportion - 1
	default:
		off -= PersonProportion
	}
	return epoch*AuctionProportion + off
}

// nextBase0PersonID picks one of the active people (or one a little ahead)
// at event n, from the uniform h.
func nextBase0PersonID(n int64, h uint64) int64 {
	num := LastBase0PersonID(n) + 1
	active := min(num, NumActivePeople)
	return num - active + int64(below(h, uint64(active+PersonIDLead)))
}

// nextBase0AuctionID picks one of the auctions in flight (or one a little
// ahead) at event n, from the uniform h.
func nextBase0AuctionID(n int64, h uint64) int64 {
	hi := LastBase0AuctionID(n)
	lo := max(hi-NumInFlightAuctions, 0)
	return lo + int64(below(h, uint64(hi-lo+1+AuctionIDLead)))
}

// price is the reference generator's round(10^(6u) * 100).
func price(h uint64) int64 {
	u := float64(h>>11) * (1.0 / (1 << 53))
	return int64(math.Round(math.Exp(u*(6*math.Ln10)) * 100))
}

// Value functions, shared by the column fillers and EventAt.

func (g *Generator) personID(n int64) int64 { return FirstPersonID + LastBase0PersonID(n) }
func (g *Generator) personName(n int64) string {
	return g.p.names[below(g.hash(fPersonName, n), uint64(len(g.p.names)))]
}
func (g *Generator) personEmail(n int64) string {
	return g.p.emails[below(g.hash(fPersonEmail, n), poolSize)]
}
func (g *Generator) personCard(n int64) string {
	return g.p.cards[below(g.hash(fPersonCard, n), poolSize)]
}
func (g *Generator) personCity(n int64) string {
	return usCities[below(g.hash(fPersonCity, n), uint64(len(usCities)))]
}
func (g *Generator) personState(n int64) string {
	return usStates[below(g.hash(fPersonState, n), uint64(len(usStates)))]
}
func (g *Generator) personExtra(n int64) string {
	return g.p.personExtras[below(g.hash(fPersonExtra, n), extraPoolSize)]
}

func (g *Generator) auctionID(n int64) int64 { return FirstAuctionID + LastBase0AuctionID(n) }
func (g *Generator) auctionName(n int64) string {
	return g.p.itemNames[below(g.hash(fAuctionName, n), poolSize)]
}
func (g *Generator) auctionDesc(n int64) string {
	return g.p.descs[below(g.hash(fAuctionDesc, n), poolSize)]
}
func (g *Generator) auctionInitial(n int64) int64 { return price(g.hash(fAuctionInitial, n)) }
func (g *Generator) auctionReserve(n, initial int64) int64 {
	return initial + price(g.hash(fAuctionReserve, n))
}

// auctionExpires: 1 + a uniform draw below twice the event-time span of the
// events that create the next NumInFlightAuctions auctions.
func (g *Generator) auctionExpires(n, ts int64) int64 {
	const span = NumInFlightAuctions * TotalProportion / AuctionProportion
	horizon := g.Timestamp(n+span) - ts
	return ts + 1 + int64(below(g.hash(fAuctionExpires, n), uint64(max(2*horizon, 1))))
}
func (g *Generator) auctionSeller(n int64) int64 {
	h := g.hash(fAuctionSeller, n)
	if below(h, HotSellersRatio) > 0 {
		return FirstPersonID + LastBase0PersonID(n)/HotGroup*HotGroup
	}
	return FirstPersonID + nextBase0PersonID(n, mix64(h+golden))
}
func (g *Generator) auctionCategory(n int64) int64 {
	return FirstCategoryID + int64(below(g.hash(fAuctionCategory, n), NumCategories))
}
func (g *Generator) auctionExtra(n int64) string {
	return g.p.auctionExtras[below(g.hash(fAuctionExtra, n), extraPoolSize)]
}

func (g *Generator) bidAuction(n int64) int64 {
	h := g.hash(fBidAuction, n)
	if below(h, HotAuctionRatio) > 0 {
		return FirstAuctionID + LastBase0AuctionID(n)/HotGroup*HotGroup
	}
	return FirstAuctionID + nextBase0AuctionID(n, mix64(h+golden))
}
func (g *Generator) bidBidder(n int64) int64 {
	h := g.hash(fBidBidder, n)
	if below(h, HotBiddersRatio) > 0 {
		return FirstPersonID + LastBase0PersonID(n)/HotGroup*HotGroup + 1
	}
	return FirstPersonID + nextBase0PersonID(n, mix64(h+golden))
}
func (g *Generator) bidPrice(n int64) int64 { return price(g.hash(fBidPrice, n)) }

// bidChannel returns the index into the channel pools: the first
// len(hotChannels) are the hot ones, chosen half the time.
func (g *Generator) bidChannel(n int64) int {
	h := g.hash(fBidChannel, n)
	h2 := mix64(h + golden)
	if below(h, 2) > 0 {
		return int(below(h2, uint64(len(hotChannels))))
	}
	return len(hotChannels) + int(below(h2, NumChannels))
}
func (g *Generator) bidExtra(n int64) string {
	return g.p.bidExtras[below(g.hash(fBidExtra, n), extraPoolSize)]
}

// PersonAt returns event n as a person; n must be a person event.
func (g *Generator) PersonAt(n int64) Person {
	if g.canonical {
		return g.canonicalAt(n).Person
	}
	return g.fastPersonAt(n)
}

// AuctionAt returns event n as an auction; n must be an auction event.
func (g *Generator) AuctionAt(n int64) Auction {
	if g.canonical {
		return g.canonicalAt(n).Auction
	}
	return g.fastAuctionAt(n)
}

// BidAt returns event n as a bid; n must be a bid event.
func (g *Generator) BidAt(n int64) Bid {
	if g.canonical {
		return g.canonicalAt(n).Bid
	}
	return g.fastBidAt(n)
}

func (g *Generator) fastPersonAt(n int64) Person {
	return Person{
		ID: g.personID(n), Name: g.personName(n), EmailAddress: g.personEmail(n),
		CreditCard: g.personCard(n), City: g.personCity(n), State: g.personState(n),
		DateTime: g.Timestamp(n), Extra: g.personExtra(n),
	}
}

func (g *Generator) fastAuctionAt(n int64) Auction {
	ts := g.Timestamp(n)
	initial := g.auctionInitial(n)
	return Auction{
		ID: g.auctionID(n), ItemName: g.auctionName(n), Description: g.auctionDesc(n),
		InitialBid: initial, Reserve: g.auctionReserve(n, initial), DateTime: ts,
		Expires: g.auctionExpires(n, ts), Seller: g.auctionSeller(n),
		Category: g.auctionCategory(n), Extra: g.auctionExtra(n),
	}
}

func (g *Generator) fastBidAt(n int64) Bid {
	ch := g.bidChannel(n)
	return Bid{
		Auction: g.bidAuction(n), Bidder: g.bidBidder(n), Price: g.bidPrice(n),
		Channel: g.p.channels[ch], URL: g.p.urls[ch], DateTime: g.Timestamp(n),
		Extra: g.bidExtra(n),
	}
}

// At returns event n.
func (g *Generator) At(n int64) Event {
	if g.canonical {
		return g.canonicalAt(n)
	}
	switch k := KindOf(n); k {
	case KindPerson:
		return Event{Kind: k, Person: g.PersonAt(n)}
	case KindAuction:
		return Event{Kind: k, Auction: g.AuctionAt(n)}
	default:
		return Event{Kind: k, Bid: g.BidAt(n)}
	}
}

// EventAt returns event number n of the sequence cfg describes. It builds a
// Generator per call; loops should use NewGenerator and Generator.At.
func EventAt(cfg Config, n int64) Event { return NewGenerator(cfg).At(n) }

// String pools. They are fixed (independent of the seed) and built once.

const (
	poolSize      = 1024
	extraPoolSize = 256
)

var (
	usStates    = []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities    = []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	firstNames  = []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames   = []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	hotChannels = []string{"Google", "Facebook", "Baidu", "Apple"}
)

type pools struct {
	names, emails, cards, itemNames, descs []string
	personExtras, auctionExtras, bidExtras []string
	channels, urls                         []string
}

var (
	poolsOnce sync.Once
	thePools  *pools
)

func getPools() *pools {
	poolsOnce.Do(func() { thePools = buildPools() })
	return thePools
}

// poolRand is a splitmix64 stream for building pools.
type poolRand struct{ s uint64 }

func (r *poolRand) next() uint64    { r.s += golden; return mix64(r.s) }
func (r *poolRand) below(n int) int { return int(below(r.next(), uint64(n))) }

// word returns n random lowercase letters, with a space now and then as in
// the reference generator's nextString.
func (r *poolRand) word(n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := range n {
		if i > 0 && i < n-1 && r.below(13) == 0 {
			b.WriteByte(' ')
			continue
		}
		b.WriteByte(byte('a' + r.below(26)))
	}
	return b.String()
}

// varWord is the reference's nextString(maxLength): a length in
// [3, maxLength).
func (r *poolRand) varWord(maxLen int) string { return r.word(3 + r.below(maxLen-3)) }

// extra returns a string of about avg-used bytes (±20%), the reference
// generator's padding to an average record size.
func (r *poolRand) extra(used, avg int) string {
	if used >= avg {
		return ""
	}
	want := avg - used
	delta := int(math.Round(float64(want) * 0.2))
	return r.word(want - delta + r.below(2*delta+1))
}

func buildPools() *pools {
	r := &poolRand{s: 0x6e65786d61726b}
	p := &pools{}
	for _, f := range firstNames {
		for _, l := range lastNames {
			p.names = append(p.names, f+" "+l)
		}
	}
	for range poolSize {
		p.emails = append(p.emails, r.varWord(7)+"@"+r.varWord(5)+".com")
		card := strconv.Itoa(1000+r.below(9000)) + " " + strconv.Itoa(1000+r.below(9000)) + " " +
			strconv.Itoa(1000+r.below(9000)) + " " + strconv.Itoa(1000+r.below(9000))
		p.cards = append(p.cards, card)
		p.itemNames = append(p.itemNames, r.varWord(20))
		p.descs = append(p.descs, r.varWord(100))
	}
	for range extraPoolSize {
		p.personExtras = append(p.personExtras, r.extra(8+12+14+19+10+2, AvgPersonBytes))
		p.auctionExtras = append(p.auctionExtras, r.extra(8+12+50+5*8, AvgAuctionBytes))
		p.bidExtras = append(p.bidExtras, r.extra(4*8, AvgBidBytes))
	}
	for _, c := range hotChannels {
		p.channels = append(p.channels, c)
		p.urls = append(p.urls, "https://www.nexmark.com/"+strings.ToLower(c)+"/item.htm?query=1")
	}
	for i := range NumChannels {
		p.channels = append(p.channels, "channel-"+strconv.Itoa(i))
		rev := []byte(strconv.Itoa(i))
		for a, b := 0, len(rev)-1; a < b; a, b = a+1, b-1 {
			rev[a], rev[b] = rev[b], rev[a]
		}
		p.urls = append(p.urls, "https://www.nexmark.com/"+r.word(5)+"/"+r.word(5)+"/item.htm?query=1&channel_id="+string(rev))
	}
	return p
}
