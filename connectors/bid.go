package connectors

import (
	"strconv"
	"strings"

	"github.com/weirstream/weir/stream"
)

// Bid is one row of the datagen "bid" preset, a Nexmark-like auction bid of
// about 100 bytes.
type Bid struct {
	Auction  int64
	Bidder   int64
	Price    int64
	Channel  string
	URL      string
	DateTime int64 // milliseconds since the Unix epoch
	Extra    string
}

// BidSchema is the schema of the "bid" preset, in Bid's field order.
var BidSchema = stream.MustSchema(
	stream.Field{Name: "auction", Type: stream.TypeInt64},
	stream.Field{Name: "bidder", Type: stream.TypeInt64},
	stream.Field{Name: "price", Type: stream.TypeInt64},
	stream.Field{Name: "channel", Type: stream.TypeString},
	stream.Field{Name: "url", Type: stream.TypeString},
	stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
	stream.Field{Name: "extra", Type: stream.TypeString},
)

// Shape of the bid preset. Half the bids go to one of BidHotAuctions hot
// auctions, the rest spread over BidAuctions; event time advances one
// millisecond per bid (seq) from BidEpochMillis.
const (
	BidFirstAuction = 1000
	BidAuctions     = 10000
	BidHotAuctions  = 100
	BidFirstBidder  = 2000
	BidBidders      = 100000
	BidHotBidders   = 1000
	BidMinPrice     = 100
	BidMaxPrice     = 100000
	BidEpochMillis  = 1767225600000 // 2026-01-01T00:00:00Z
)

const (
	bidURLPool   = 1024
	bidExtraPool = 256
)

var (
	bidChannelDict = stream.NewStringDict([]string{"Google", "Facebook", "Baidu", "Apple", "Bing", "DuckDuckGo", "Twitter", "Reddit"})
	bidURLDict     = stream.NewStringDict(makeBidURLs())
	bidExtraDict   = stream.NewStringDict(makeBidExtras())
)

func makeBidURLs() []string {
	out := make([]string, bidURLPool)
	for i := range out {
		h := mix64(uint64(i) + 0x5eed)
		out[i] = "https://www.nexmark.com/" + randomWord(h, 5+int(h%4)) + "/item.htm?query=1&channel_id=" + strconv.Itoa(int(h>>40)%10000)
	}
	return out
}

func makeBidExtras() []string {
	out := make([]string, bidExtraPool)
	for i := range out {
		h := mix64(uint64(i) + 0xe7a)
		out[i] = randomWord(h, 8+int(h%17))
	}
	return out
}

// randomWord returns a deterministic lowercase string of n letters from h.
func randomWord(h uint64, n int) string {
	var b strings.Builder
	b.Grow(n)
	for range n {
		h = mix64(h + golden)
		b.WriteByte(byte('a' + below(h, 26)))
	}
	return b.String()
}

// The bid value functions. The columnar generator and BidAt both call them
// (for the strings, both call pick on the same dictionary), so the two
// produce identical bids.

func bidAuction(h uint64) int64 {
	if h&1 == 0 {
		return BidFirstAuction + int64(below(h, BidHotAuctions))
	}
	return BidFirstAuction + int64(below(h, BidAuctions))
}

func bidBidder(h uint64) int64 {
	if h&1 == 0 {
		return BidFirstBidder + int64(below(h, BidHotBidders))
	}
	return BidFirstBidder + int64(below(h, BidBidders))
}

func bidPrice(h uint64) int64 {
	return BidMinPrice + int64(below(h, BidMaxPrice-BidMinPrice+1))
}

func bidChannel(h uint64) string { return pick(bidChannelDict.Values, h) }
func bidURL(h uint64) string     { return pick(bidURLDict.Values, h) }
func bidExtra(h uint64) string   { return pick(bidExtraDict.Values, h) }
func bidDateTime(seq int64) int64 {
	return BidEpochMillis + seq
}

// Field numbers of the bid preset, for the per-field hash seeds.
const (
	bidFAuction = iota
	bidFBidder
	bidFPrice
	bidFChannel
	bidFURL
	bidFDateTime
	bidFExtra
)

// BidAt returns the bid that the "bid" preset with seed generates for global
// sequence number seq. It is for baselines and tests that generate the same
// bids without the engine.
func BidAt(seed, seq int64) Bid {
	return Bid{
		Auction:  bidAuction(seqHash(fieldSeed(seed, bidFAuction), seq)),
		Bidder:   bidBidder(seqHash(fieldSeed(seed, bidFBidder), seq)),
		Price:    bidPrice(seqHash(fieldSeed(seed, bidFPrice), seq)),
		Channel:  bidChannel(seqHash(fieldSeed(seed, bidFChannel), seq)),
		URL:      bidURL(seqHash(fieldSeed(seed, bidFURL), seq)),
		DateTime: bidDateTime(seq),
		Extra:    bidExtra(seqHash(fieldSeed(seed, bidFExtra), seq)),
	}
}

// BidGenerator generates bids like BidAt with the field seeds computed once;
// a hand-written baseline loop can call it per bid.
type BidGenerator struct{ fs [7]uint64 }

// NewBidGenerator returns a generator for seed.
func NewBidGenerator(seed int64) *BidGenerator {
	g := &BidGenerator{}
	for i := range g.fs {
		g.fs[i] = fieldSeed(seed, i)
	}
	return g
}

// At returns BidAt(seed, seq).
func (g *BidGenerator) At(seq int64) Bid {
	return Bid{
		Auction:  bidAuction(seqHash(g.fs[bidFAuction], seq)),
		Bidder:   bidBidder(seqHash(g.fs[bidFBidder], seq)),
		Price:    bidPrice(seqHash(g.fs[bidFPrice], seq)),
		Channel:  bidChannel(seqHash(g.fs[bidFChannel], seq)),
		URL:      bidURL(seqHash(g.fs[bidFURL], seq)),
		DateTime: bidDateTime(seq),
		Extra:    bidExtra(seqHash(g.fs[bidFExtra], seq)),
	}
}

// bidColumn fills one column of the bid preset.
type bidColumn struct {
	field int
	fs    uint64
}

func (g *bidColumn) fill(c *stream.Column, seq, stride int64, n int) {
	switch g.field {
	case bidFAuction, bidFBidder, bidFPrice:
		out := intsOf(c, n)
		fs := g.fs
		switch g.field {
		case bidFAuction:
			for j := range out {
				out[j] = bidAuction(seqHash(fs, seq))
				seq += stride
			}
		case bidFBidder:
			for j := range out {
				out[j] = bidBidder(seqHash(fs, seq))
				seq += stride
			}
		default:
			for j := range out {
				out[j] = bidPrice(seqHash(fs, seq))
				seq += stride
			}
		}
	case bidFDateTime:
		out := intsOf(c, n)
		for j := range out {
			out[j] = bidDateTime(seq)
			seq += stride
		}
	default:
		// The values come from fixed pools, kept in dictionaries the
		// columns name, so an exchange encodes them by code.
		var dict *stream.StringDict
		switch g.field {
		case bidFChannel:
			dict = bidChannelDict
		case bidFURL:
			dict = bidURLDict
		default:
			dict = bidExtraDict
		}
		fillFromDict(c, dict, g.fs, seq, stride, n)
	}
}

func bidColumns(seed int64) []columnGen {
	out := make([]columnGen, len(BidSchema.Fields))
	for i := range out {
		out[i] = &bidColumn{field: i, fs: fieldSeed(seed, i)}
	}
	return out
}
