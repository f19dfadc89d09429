package nexmark

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

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
// and the benchmark's digest sink (TypeDigest) to r.
func Register(r *stream.Registry) {
	registerDigest(r)
	for _, k := range []Kind{KindPerson, KindAuction, KindBid} {
		r.Register(stream.OperatorType{
			Name: typeName(k),
			Kind: stream.KindSource,
			Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
				if _, err := parseConfig(k, p.Config); err != nil {
					return nil, err
				}
				p.DeclareState(stream.StateDecl{Name: stateName, Kind: stream.StateOperatorList})
				p.DeclareState(stream.StateDecl{Name: markerName, Kind: stream.StateUnion})
				return SchemaOf(k), nil
			},
			NewSource: func(config []byte) (stream.Source, error) {
				cfg, err := parseConfig(k, config)
				if err != nil {
					return nil, err
				}
				return NewSource(k, cfg), nil
			},
			Config: Config{},
			Doc:    "the " + k.String() + " events of the Nexmark benchmark stream ({events, seed, eventsPerSecond, startMillis, batchSize, generator: canonical|fast})",
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
	case c.MaxEventsPerSecond < 0:
		return stream.ConfigErrorf("%s: maxEventsPerSecond %d: must be positive, or 0 (unset) for no limit", op, c.MaxEventsPerSecond)
	case c.Generator != "" && c.Generator != GeneratorCanonical && c.Generator != GeneratorFast:
		return stream.ConfigErrorf("%s: generator: unknown mode; use %q (the default) or %q", op, GeneratorCanonical, GeneratorFast)
	}
	return nil
}

// Source is one subtask of a nexmark_person, nexmark_auction or nexmark_bid
// source: it emits the events of its kind among the event numbers of the
// splits it owns, below Config.Events, one batch per Poll. In the
// canonical mode (the default) it builds every event it scans, of every
// kind, writing their strings afresh into chunks of memory the batches
// share; in the fast mode it builds only its kind, filling whole columns at
// a time from fixed string pools (no allocation per row).
//
// A split is the event numbers n ≡ start (mod stride): a job started with
// parallelism p (not from a checkpoint) has the p splits start = 0..p-1 of
// stride p, and subtask i owns split i. A restore hands out the splits
// anew: a subtask then owns exactly the splits it received, whatever the
// parallelism, possibly none (it ends at once) or several (it merges them,
// so that it still emits in increasing event number and event time).
type Source struct {
	kind  Kind
	cfg   Config
	gen   *Generator
	batch int

	subtask, parallelism int64
	// splits are the splits the subtask owns, by start; nil before Open.
	splits []split
	// nsplits is the number of splits of the job (the stride of every
	// split): the parallelism the job was first started with.
	nsplits int64
	ns      []int64 // event numbers of the batch being built
	ts      []int64 // their timestamps

	// The canonical mode's string memory: arena for the emitted events'
	// strings (chunks shared by the batches, never rewritten), scratch for
	// the events of other kinds, built and dropped; dropped keeps their
	// values alive.
	arena, scratch arena
	dropped        int64

	// The rate limit (Config.MaxEventsPerSecond): perSec event numbers
	// per second for this subtask since opened; scanned counts them.
	perSec  float64
	opened  time.Time
	scanned int64
}

// split is the event numbers start, start+stride, ...; next is the next
// one the subtask looks at.
type split struct{ start, stride, next int64 }

var (
	_ stream.Source       = (*Source)(nil)
	_ stream.Checkpointed = (*Source)(nil)
	_ stream.IdleHinter   = (*Source)(nil)
)

// NewSource returns a source of the events of kind k; cfg must be valid.
func NewSource(k Kind, cfg Config) *Source {
	bs := cfg.BatchSize
	if bs == 0 {
		bs = stream.DefaultBatchSize
	}
	return &Source{kind: k, cfg: cfg, batch: bs, parallelism: 1}
}

// Open builds the generator and gives the subtask its own split.
func (s *Source) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.gen = NewGenerator(s.cfg)
	s.subtask, s.parallelism = int64(octx.Subtask), int64(max(1, octx.Parallelism))
	s.nsplits = s.parallelism
	s.splits = []split{{start: s.subtask, stride: s.parallelism, next: s.subtask}}
	s.ns = make([]int64, 0, s.batch)
	s.ts = make([]int64, 0, s.batch)
	if s.cfg.MaxEventsPerSecond > 0 {
		s.perSec = float64(s.cfg.MaxEventsPerSecond) / float64(s.parallelism)
		s.opened = time.Now()
	}
	return nil
}

// budget returns how many event numbers the subtask may look at now.
func (s *Source) budget() int {
	if s.perSec == 0 {
		return maxScan
	}
	allowed := int64(time.Since(s.opened).Seconds()*s.perSec) - s.scanned
	return int(min(max(allowed, 0), maxScan))
}

// IdleFor says how long a rate-limited source waits for its next event
// number.
func (s *Source) IdleFor() time.Duration {
	if s.perSec == 0 {
		return time.Millisecond
	}
	return min(time.Duration(float64(s.batch)/s.perSec*float64(time.Second)), 50*time.Millisecond)
}

// Position returns the next event number the subtask will look at, or -1
// when it has looked at all of its splits' events.
func (s *Source) Position() int64 {
	if sp := s.lowest(); sp != nil {
		return sp.next
	}
	return -1
}

// lowest returns the split with the lowest next event number below
// Config.Events, or nil if there is none.
func (s *Source) lowest() *split {
	var low *split
	for i := range s.splits {
		sp := &s.splits[i]
		if (s.cfg.Events <= 0 || sp.next < s.cfg.Events) && (low == nil || sp.next < low.next) {
			low = sp
		}
	}
	return low
}

// maxScan bounds the event numbers one Poll of an unbounded source looks at.
const maxScan = 1 << 20

// Poll emits the next batch of events of the source's kind, or PollEnd.
func (s *Source) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	end := s.cfg.Events
	ns := s.ns[:0]
	// all: the canonical mode builds every event it scans, so ns holds
	// them all; rows counts those of the source's kind.
	all := s.gen.canonical
	rows := 0
	limit := s.budget()
	if limit == 0 && s.lowest() != nil {
		return stream.PollIdle, nil // rate limited
	}
	if len(s.splits) == 1 {
		// The usual case: one split, in a tight loop.
		sp := &s.splits[0]
		n, step := sp.next, sp.stride
		scanned := 0
		for ; rows < s.batch && (end <= 0 || n < end) && scanned < limit; scanned++ {
			if KindOf(n) == s.kind {
				ns = append(ns, n)
				rows++
			} else if all {
				ns = append(ns, n)
			}
			n += step
		}
		sp.next = n
		s.scanned += int64(scanned)
	} else {
		for ; rows < s.batch && limit > 0; limit-- {
			sp := s.lowest()
			if sp == nil {
				break
			}
			if KindOf(sp.next) == s.kind {
				ns = append(ns, sp.next)
				rows++
			} else if all {
				ns = append(ns, sp.next)
			}
			sp.next += sp.stride
			s.scanned++
		}
	}
	s.ns = ns
	if all && rows == 0 {
		// Events of other kinds only: build them (their cost is part of
		// the stream's) and emit nothing.
		for _, n := range ns {
			s.dropOther(n, KindOf(n), &s.scratch)
		}
	}
	if rows == 0 {
		if s.lowest() == nil {
			return stream.PollEnd, nil
		}
		return stream.PollIdle, nil // an unbounded stretch without events of this kind
	}
	b := stream.NewBatch(SchemaOf(s.kind), rows)
	if all {
		s.fillCanonical(b, ns)
	} else {
		s.fill(b, ns)
	}
	b.SetLen(rows)
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

// Checkpoint state. Each subtask writes one item of operator list state
// "positions" per split it owns,
//
//	version=2 | varint start | varint stride | varint next event number
//
// and one item of union state "splitCount", version=1 | varint number of
// splits of the job, which every subtask receives on restore: it tells a
// subtask that received no split that it is restoring (and has nothing to
// do) rather than starting afresh. Every subtask writes it, because the
// state of a subtask that has finished is not in later checkpoints. After a
// restore a subtask owns exactly the splits it received; the runtime hands
// every item to exactly one subtask, so every event goes out once whatever
// the parallelism.
//
// Version 1 items, written before the sources could be rescaled, are one
// per subtask: version=1 | varint subtask | varint parallelism | varint
// next event number, read as the split (subtask, parallelism, next). Their
// checkpoints have no "splitCount", so they restore only with the
// parallelism they were taken with.
const (
	stateName    = "positions"
	markerName   = "splitCount"
	stateVersion = 2
)

// SnapshotState records the next event number of every split of this
// subtask.
func (s *Source) SnapshotState(c *stream.SnapshotContext) error {
	for _, sp := range s.splits {
		item := []byte{stateVersion}
		item = binary.AppendVarint(item, sp.start)
		item = binary.AppendVarint(item, sp.stride)
		item = binary.AppendVarint(item, sp.next)
		c.AddListState(stateName, item)
	}
	c.AddUnionState(markerName, binary.AppendVarint([]byte{1}, s.nsplits))
	return nil
}

var (
	errCorrupt = errors.New("corrupt position state")
	// errRescale marks the restore, into another subtask or with another
	// parallelism, of state that cannot be rescaled (written by an older
	// Weir).
	errRescale = errors.New("state cannot be rescaled")
)

// decodeItem returns the version and the varints of a state item.
func decodeItem(b []byte, versions ...byte) (byte, []int64, error) {
	if len(b) == 0 || !slices.Contains(versions, b[0]) {
		return 0, nil, fmt.Errorf("%w: unknown version", errCorrupt)
	}
	v := b[0]
	var vals []int64
	for b = b[1:]; len(b) > 0; {
		x, n := binary.Varint(b)
		if n <= 0 {
			return 0, nil, fmt.Errorf("%w: truncated", errCorrupt)
		}
		vals = append(vals, x)
		b = b[n:]
	}
	return v, vals, nil
}

// RestoreState makes this subtask work on exactly the splits it received,
// each from its checkpointed position: none, its own or others'.
func (s *Source) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	markers, items := c.State.Union[markerName], c.State.List[stateName]
	if len(markers) == 0 && len(items) == 0 {
		return nil
	}
	name := fmt.Sprintf("%s subtask %d: checkpoint %d", typeName(s.kind), s.subtask, c.CheckpointID)
	nsplits := int64(-1)
	for _, m := range markers {
		_, vals, err := decodeItem(m, 1)
		if err == nil && (len(vals) != 1 || vals[0] <= 0 || nsplits >= 0 && vals[0] != nsplits) {
			err = fmt.Errorf("%w: bad %s item", errCorrupt, markerName)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		nsplits = vals[0]
	}
	splits := make([]split, 0, len(items))
	for _, item := range items {
		v, vals, err := decodeItem(item, 1, 2)
		if err == nil && len(vals) != 3 {
			err = fmt.Errorf("%w: %d fields, want 3", errCorrupt, len(vals))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		sp := split{start: vals[0], stride: vals[1], next: vals[2]}
		if nsplits < 0 {
			if v != 1 {
				return fmt.Errorf("%s: %w: the checkpoint holds splits but not their %s item", name, errCorrupt, markerName)
			}
			// Version 1: start and stride are the writer's subtask and
			// parallelism, and every subtask must get its own item back.
			if sp.stride != s.parallelism || sp.start != s.subtask || len(items) != 1 {
				return fmt.Errorf("%s: %w: the checkpoint holds the position of subtask %d of %d in a format written before Nexmark sources could be rescaled, and this is subtask %d of %d (with %d positions); restore it with parallelism %d, then take a checkpoint or savepoint and rescale from that",
					name, errRescale, sp.start, sp.stride, s.subtask, s.parallelism, len(items), sp.stride)
			}
		} else if sp.stride != nsplits {
			return fmt.Errorf("%s: %w: a split of stride %d in a job of %d splits", name, errCorrupt, sp.stride, nsplits)
		}
		if sp.start < 0 || sp.start >= sp.stride || sp.next < sp.start || (sp.next-sp.start)%sp.stride != 0 {
			return fmt.Errorf("%s: %w: position %d is not an event number of split %d of %d", name, errCorrupt, sp.next, sp.start, sp.stride)
		}
		if slices.ContainsFunc(splits, func(o split) bool { return o.start == sp.start }) {
			return fmt.Errorf("%s: got split %d twice, so the runtime distributed the list state wrongly", name, sp.start)
		}
		splits = append(splits, sp)
	}
	if nsplits < 0 {
		nsplits = s.parallelism // version 1, checked above
	}
	slices.SortFunc(splits, func(a, b split) int { return cmp.Compare(a.start, b.start) })
	s.splits, s.nsplits = splits, nsplits
	return nil
}
