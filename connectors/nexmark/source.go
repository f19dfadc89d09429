package nexmark

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirstream/weir/stream"
)

// Source type names.
const (
	TypePerson  = "nexmark_person"
	TypeAuction = "nexmark_auction"
	TypeBid     = "nexmark_bid"
)

// Schemas of the three streams, in the field order of Person, Auction and
// Bid.
var (
	PersonSchema = stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "name", Type: stream.TypeString},
		stream.Field{Name: "emailAddress", Type: stream.TypeString},
		stream.Field{Name: "creditCard", Type: stream.TypeString},
		stream.Field{Name: "city", Type: stream.TypeString},
		stream.Field{Name: "state", Type: stream.TypeString},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
		stream.Field{Name: "extra", Type: stream.TypeString},
	)
	AuctionSchema = stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "itemName", Type: stream.TypeString},
		stream.Field{Name: "description", Type: stream.TypeString},
		stream.Field{Name: "initialBid", Type: stream.TypeInt64},
		stream.Field{Name: "reserve", Type: stream.TypeInt64},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
		stream.Field{Name: "expires", Type: stream.TypeTimestamp},
		stream.Field{Name: "seller", Type: stream.TypeInt64},
		stream.Field{Name: "category", Type: stream.TypeInt64},
		stream.Field{Name: "extra", Type: stream.TypeString},
	)
	BidSchema = stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "bidder", Type: stream.TypeInt64},
		stream.Field{Name: "price", Type: stream.TypeInt64},
		stream.Field{Name: "channel", Type: stream.TypeString},
		stream.Field{Name: "url", Type: stream.TypeString},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
		stream.Field{Name: "extra", Type: stream.TypeString},
	)
)

// Register adds the sources nexmark_person, nexmark_auction and nexmark_bid
// to r.
func Register(r *stream.Registry) {
	for _, k := range []Kind{KindPerson, KindAuction, KindBid} {
		r.Register(stream.OperatorType{
			Name: typeName(k),
			Kind: stream.KindSource,
			Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
				if _, err := parseConfig(k, p.Config); err != nil {
					return nil, err
				}
				return SchemaOf(k), nil
			},
			NewSource: func(config []byte) (stream.Source, error) {
				cfg, err := parseConfig(k, config)
				if err != nil {
					return nil, err
				}
				return NewSource(k, cfg), nil
			},
			Doc: "the " + k.String() + " events of the Nexmark benchmark stream ({events, seed, eventsPerSecond, startMillis, batchSize})",
		})
	}
}

func typeName(k Kind) string {
	switch k {
	case KindPerson:
		return TypePerson
	case KindAuction:
		return TypeAuction
	}
	return TypeBid
}

// SchemaOf returns the schema of the stream of kind k.
func SchemaOf(k Kind) *stream.Schema {
	switch k {
	case KindPerson:
		return PersonSchema
	case KindAuction:
		return AuctionSchema
	}
	return BidSchema
}

const maxBatchSize = 1 << 20

func parseConfig(k Kind, raw []byte) (Config, error) {
	op := typeName(k)
	var c Config
	if err := stream.DecodeConfig(raw, &c); err != nil {
		return c, stream.ConfigErrorf("%s: %v (want {\"events\": 10000000, \"seed\": 1, \"eventsPerSecond\": 10000000})", op, err)
	}
	return c, c.Validate(op)
}

// Validate checks c; op names the source in errors.
func (c Config) Validate(op string) error {
	switch {
	case c.Events < 0:
		return stream.ConfigErrorf("%s: events %d: must be 0 (unbounded) or positive", op, c.Events)
	case c.EventsPerSecond < 0:
		return stream.ConfigErrorf("%s: eventsPerSecond %d: must be positive (0 or unset means %d)", op, c.EventsPerSecond, DefaultEventsPerSecond)
	case c.BatchSize < 0 || c.BatchSize > maxBatchSize:
		return stream.ConfigErrorf("%s: batchSize %d: must be between 1 and %d (0 or unset means %d)", op, c.BatchSize, maxBatchSize, stream.DefaultBatchSize)
	case c.StartMillis < 0:
		return stream.ConfigErrorf("%s: startMillis %d: must not be negative (0 or unset means %d, 2026-01-01)", op, c.StartMillis, DefaultStartMillis)
	}
	return nil
}

// Source is one subtask of a nexmark_person, nexmark_auction or nexmark_bid
// source: it emits the events of its kind among event numbers subtask,
// subtask+parallelism, ... below Config.Events, one batch per Poll, filling
// whole columns at a time from fixed string pools (no allocation per row).
type Source struct {
	kind  Kind
	cfg   Config
	gen   *Generator
	batch int

	subtask, parallelism int64
	// next is the next event number this subtask looks at.
	next int64
	ns   []int64 // event numbers of the batch being built
	ts   []int64 // their timestamps
}

var (
	_ stream.Source       = (*Source)(nil)
	_ stream.Checkpointed = (*Source)(nil)
)

// NewSource returns a source of the events of kind k; cfg must be valid.
func NewSource(k Kind, cfg Config) *Source {
	bs := cfg.BatchSize
	if bs == 0 {
		bs = stream.DefaultBatchSize
	}
	return &Source{kind: k, cfg: cfg, batch: bs, parallelism: 1}
}

// Open builds the generator and positions the subtask at its first event.
func (s *Source) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.gen = NewGenerator(s.cfg)
	s.subtask, s.parallelism = int64(octx.Subtask), int64(max(1, octx.Parallelism))
	s.next = s.subtask
	s.ns = make([]int64, 0, s.batch)
	s.ts = make([]int64, 0, s.batch)
	return nil
}

// Position returns the next event number the subtask will look at.
func (s *Source) Position() int64 { return s.next }

// maxScan bounds the event numbers one Poll of an unbounded source looks at.
const maxScan = 1 << 20

// Poll emits the next batch of events of the source's kind, or PollEnd.
func (s *Source) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	end := s.cfg.Events
	if end > 0 && s.next >= end {
		return stream.PollEnd, nil
	}
	ns := s.ns[:0]
	n, step := s.next, s.parallelism
	for scanned := 0; len(ns) < s.batch && (end <= 0 || n < end) && scanned < maxScan; scanned++ {
		if KindOf(n) == s.kind {
			ns = append(ns, n)
		}
		n += step
	}
	s.next, s.ns = n, ns
	if len(ns) == 0 {
		if end > 0 && n >= end {
			return stream.PollEnd, nil
		}
		return stream.PollIdle, nil // an unbounded stretch without events of this kind
	}
	b := stream.NewBatch(SchemaOf(s.kind), len(ns))
	s.fill(b, ns)
	out.Collect(b)
	return stream.PollEmitted, nil
}

// fill writes the events ns into b's columns, one column at a time.
func (s *Source) fill(b *stream.Batch, ns []int64) {
	g, p := s.gen, s.gen.p
	m := len(ns)
	ts := s.ts[:m]
	for j, n := range ns {
		ts[j] = g.Timestamp(n)
	}
	ints := func(c int) []int64 {
		col := &b.Cols[c]
		col.Ints = col.Ints[:m]
		return col.Ints
	}
	strs := func(c int) []string {
		col := &b.Cols[c]
		col.Strs = col.Strs[:m]
		return col.Strs
	}
	switch s.kind {
	case KindPerson:
		id := ints(0)
		for j, n := range ns {
			id[j] = g.personID(n)
		}
		fillStrs(strs(1), ns, g.personName)
		fillStrs(strs(2), ns, g.personEmail)
		fillStrs(strs(3), ns, g.personCard)
		fillStrs(strs(4), ns, g.personCity)
		fillStrs(strs(5), ns, g.personState)
		copy(ints(6), ts)
		fillStrs(strs(7), ns, g.personExtra)
	case KindAuction:
		id, initial, reserve := ints(0), ints(3), ints(4)
		for j, n := range ns {
			id[j] = g.auctionID(n)
		}
		fillStrs(strs(1), ns, g.auctionName)
		fillStrs(strs(2), ns, g.auctionDesc)
		for j, n := range ns {
			initial[j] = g.auctionInitial(n)
		}
		for j, n := range ns {
			reserve[j] = g.auctionReserve(n, initial[j])
		}
		copy(ints(5), ts)
		exp := ints(6)
		for j, n := range ns {
			exp[j] = g.auctionExpires(n, ts[j])
		}
		seller, cat := ints(7), ints(8)
		for j, n := range ns {
			seller[j] = g.auctionSeller(n)
		}
		for j, n := range ns {
			cat[j] = g.auctionCategory(n)
		}
		fillStrs(strs(9), ns, g.auctionExtra)
	default:
		auc, bidder, pr := ints(0), ints(1), ints(2)
		for j, n := range ns {
			auc[j] = g.bidAuction(n)
		}
		for j, n := range ns {
			bidder[j] = g.bidBidder(n)
		}
		for j, n := range ns {
			pr[j] = g.bidPrice(n)
		}
		ch, url := strs(3), strs(4)
		for j, n := range ns {
			k := g.bidChannel(n)
			ch[j], url[j] = p.channels[k], p.urls[k]
		}
		copy(ints(5), ts)
		fillStrs(strs(6), ns, g.bidExtra)
	}
	b.SetLen(m)
}

func fillStrs(out []string, ns []int64, f func(int64) string) {
	for j, n := range ns {
		out[j] = f(n)
	}
}

// Close does nothing.
func (s *Source) Close() error { return nil }

// Checkpoint state: one item of operator list state "positions" per subtask,
// byte version = 1 | varint subtask | varint parallelism | varint next event
// number. A restore needs the same parallelism (the stride of a subtask's
// event numbers is the parallelism).
const (
	stateName    = "positions"
	stateVersion = 1
)

// SnapshotState records the next event number of this subtask.
func (s *Source) SnapshotState(c *stream.SnapshotContext) error {
	item := []byte{stateVersion}
	item = binary.AppendVarint(item, s.subtask)
	item = binary.AppendVarint(item, s.parallelism)
	item = binary.AppendVarint(item, s.next)
	c.AddListState(stateName, item)
	return nil
}

var errCorrupt = errors.New("corrupt position state")

// RestoreState continues from the checkpointed position.
func (s *Source) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil || len(c.State.List[stateName]) == 0 {
		return nil
	}
	name := fmt.Sprintf("%s subtask %d: checkpoint %d", typeName(s.kind), s.subtask, c.CheckpointID)
	items := c.State.List[stateName]
	if len(items) != 1 {
		return fmt.Errorf("%s: got %d positions, want exactly this subtask's one; restore with the parallelism the checkpoint was taken with", name, len(items))
	}
	vals := make([]int64, 0, 3)
	b := items[0]
	if len(b) == 0 || b[0] != stateVersion {
		return fmt.Errorf("%s: %w: unknown version", name, errCorrupt)
	}
	b = b[1:]
	for range 3 {
		v, n := binary.Varint(b)
		if n <= 0 {
			return fmt.Errorf("%s: %w: truncated", name, errCorrupt)
		}
		vals = append(vals, v)
		b = b[n:]
	}
	sub, par, next := vals[0], vals[1], vals[2]
	if par != s.parallelism || sub != s.subtask {
		return fmt.Errorf("%s: the checkpoint holds the position of subtask %d of %d, this is subtask %d of %d: rescaling a Nexmark source is not supported; restore with parallelism %d",
			name, sub, par, s.subtask, s.parallelism, par)
	}
	if next < s.subtask || (next-s.subtask)%s.parallelism != 0 {
		return fmt.Errorf("%s: %w: position %d is not one of this subtask's event numbers", name, errCorrupt, next)
	}
	s.next = next
	return nil
}
