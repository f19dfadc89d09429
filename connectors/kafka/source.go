package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/stream"
)

const (
	// offsetEarliest is the next offset of a split that starts at the
	// partition's earliest offset and has read nothing yet (a partition
	// found by discovery).
	offsetEarliest = -2
	// noEnd is the end of a split of an unbounded source.
	noEnd = -1
	// idleWait is how long the runtime waits after an idle Poll: the
	// client fetches in the background, so data is picked up this late
	// at most.
	idleWait = 10 * time.Millisecond
)

// tp names a topic partition.
type tp struct {
	topic     string
	partition int32
}

func (p tp) String() string { return fmt.Sprintf("%s/%d", p.topic, p.partition) }

func compareTP(a, b tp) int {
	if c := cmp.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.partition, b.partition)
}

// split is one partition read by a subtask.
type split struct {
	tp
	// next is the offset after the last record emitted (or control
	// record passed), offsetEarliest before a partition adopted at its
	// earliest offset emitted anything.
	next int64
	// end is where a bounded source stops (exclusive), noEnd otherwise.
	end int64
	// maxTs is the largest event time emitted, math.MinInt64 before any.
	maxTs int64
	// active is the processing time (Unix ms) of the last record
	// emitted, or of the assignment.
	active int64
	done   bool // a bounded split read to its end
}

// Owner returns the subtask, of parallelism subtasks, that takes partition
// of topic when no subtask owns it yet (at a fresh start, or when it is
// discovered): the topic's partitions go round-robin over the subtasks,
// starting at a subtask chosen by a hash of the topic's name, so that the
// partitions of several topics spread evenly.
func Owner(topic string, partition int32, parallelism int) int {
	if parallelism <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(topic))
	return int((uint64(h.Sum32()) + uint64(partition)) % uint64(parallelism))
}

// Source is one subtask of the "kafka" source. Build it with NewSource.
type Source struct {
	spec *sourceSpec
	octx *stream.OperatorContext
	log  *slog.Logger
	name string
	now  func() int64

	cl   *kgo.Client
	adm  *kadm.Client
	hook *connHook
	bg   *background

	// splits are this subtask's partitions, sorted by topic and
	// partition; byTP indexes them.
	splits []*split
	byTP   map[tp]*split
	// known are the partitions some subtask owns or that were seen when
	// the subtask opened: discovery adopts only partitions outside it.
	known map[tp]bool
	// seen is the discovery round last applied.
	seen int64
	// assigned says the splits were handed to the consumer (first Poll).
	assigned bool

	wm      int64 // last watermark emitted
	commits []pendingCommit

	json  *connectors.JSONRowDecoder
	jsonS *stream.Schema
	arena arena

	// connectTimeout and unreachableAfter are connectTimeout and
	// defaultUnreachableAfter, shortened by tests.
	connectTimeout   time.Duration
	unreachableAfter time.Duration
}

var (
	_ stream.Source             = (*Source)(nil)
	_ stream.Checkpointed       = (*Source)(nil)
	_ stream.CheckpointListener = (*Source)(nil)
	_ stream.IdleHinter         = (*Source)(nil)
)

// NewSource returns a source for a JSON SourceConfig, or a config error. It
// has no side effects: Open connects.
func NewSource(config []byte) (*Source, error) {
	spec, err := parseSourceConfig(config)
	if err != nil {
		return nil, err
	}
	s := &Source{spec: spec, wm: stream.MinWatermark, connectTimeout: connectTimeout, unreachableAfter: defaultUnreachableAfter}
	if spec.json {
		s.jsonS = stream.MustSchema(spec.schema.Fields[:spec.nfields]...)
		s.json = connectors.NewJSONRowDecoder(s.jsonS)
	}
	return s, nil
}

func planSource(p *stream.PlanContext) (*stream.Schema, error) {
	spec, err := parseSourceConfig(p.Config)
	if err != nil {
		return nil, err
	}
	declareSourceState(p)
	if err := spec.cfg.Security.checkPaths("kafka source", p.Paths); err != nil {
		return nil, err
	}
	return spec.schema, nil
}

// Schema returns the source's output schema.
func (s *Source) Schema() *stream.Schema { return s.spec.schema }

// Open connects to the cluster, lists the partitions of the configured
// topics and prepares this subtask's share of them with their start
// offsets, for a fresh start; RestoreState replaces them on a restore.
func (s *Source) Open(ctx context.Context, octx *stream.OperatorContext) error {
	s.octx = octx
	s.log = taskLogger(octx)
	s.name = "kafka source"
	if octx.OperatorUID != "" {
		s.name = fmt.Sprintf("kafka source %q (subtask %d)", octx.OperatorUID, octx.Subtask)
	}
	s.now = octx.ProcessingTime
	s.hook = new(connHook)
	opts, err := commonOpts(s.name, s.spec.servers, s.spec.cfg.Security, octx.Paths, s.log, s.hook)
	if err != nil {
		return err
	}
	fetchMax := max(16<<20, int32(s.spec.maxBytes))
	opts = append(opts,
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // to see a partition's position move past commit and abort markers
		kgo.FetchMaxBytes(fetchMax),
		kgo.FetchMaxPartitionBytes(max(1<<20, int32(s.spec.maxBytes))),
		kgo.BrokerMaxReadBytes(fetchMax+int32(s.spec.maxBytes)+1<<20),
		kgo.MaxDecompressBatchBytes(256<<20),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// New partitions are consumed as soon as metadata names their
		// leaders: let the client refresh it soon after it asks.
		kgo.MetadataMinAge(250*time.Millisecond),
		// A fetch waits this long for data before the brokers answer;
		// a partition assigned meanwhile joins the next fetch (Kafka's
		// default, where the client's is 5s).
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if s.cl, err = kgo.NewClient(opts...); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.adm = kadm.NewClient(s.cl)

	cctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	parts, err := s.listPartitions(cctx, true)
	if err != nil {
		return err
	}
	s.known = make(map[tp]bool)
	var mine []tp
	for _, p := range parts {
		s.known[p] = true
		if Owner(p.topic, p.partition, max(1, octx.Parallelism)) == octx.Subtask {
			mine = append(mine, p)
		}
	}
	starts, err := s.startOffsets(cctx, mine)
	if err != nil {
		return err
	}
	var ends map[tp]int64
	if s.spec.bounded {
		if ends, err = s.listOffsets(cctx, mine, s.adm.ListCommittedOffsets); err != nil {
			return err
		}
	}
	now := s.now()
	s.byTP = make(map[tp]*split)
	s.splits = nil
	for _, p := range mine {
		sp := &split{tp: p, next: starts[p], end: noEnd, maxTs: math.MinInt64, active: now}
		if s.spec.bounded {
			sp.end = ends[p]
		}
		s.add(sp)
	}
	if s.spec.discovery > 0 || s.spec.cfg.Group != "" {
		s.bg = startBackground(ctx, s)
	}
	return nil
}

// add adds a split, keeping s.splits sorted.
func (s *Source) add(sp *split) {
	sp.done = sp.end != noEnd && sp.next != offsetEarliest && sp.next >= sp.end
	i, _ := slices.BinarySearchFunc(s.splits, sp.tp, func(a *split, b tp) int { return compareTP(a.tp, b) })
	s.splits = slices.Insert(s.splits, i, sp)
	s.byTP[sp.tp] = sp
}

// wanted reports whether the config reads topic.
func (s *Source) wanted(topic string) bool {
	if s.spec.pattern != nil {
		return s.spec.pattern.MatchString(topic)
	}
	_, ok := slices.BinarySearch(s.spec.topics, topic)
	return ok
}

// listPartitions returns the partitions of the configured topics, sorted,
// from a metadata request of its own (the client's cached metadata may be
// older than partitionDiscoveryInterval). With strict, a configured topic
// that does not exist is an error.
func (s *Source) listPartitions(ctx context.Context, strict bool) ([]tp, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range s.spec.topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, unreachable(s.name, s.spec.servers, err, s.hook)
	}
	var out []tp
	found := make(map[string]bool)
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("%s: topic %q: %w", s.name, name, err)
		}
		if t.IsInternal || !s.wanted(name) {
			continue
		}
		found[name] = true
		for _, p := range t.Partitions {
			out = append(out, tp{name, p.Partition})
		}
	}
	if strict {
		for _, t := range s.spec.topics {
			if !found[t] {
				return nil, fmt.Errorf("%s: topic %q does not exist at %v: %w; create it, or fix topics", s.name, t, s.spec.servers, ErrTopicNotFound)
			}
		}
	}
	slices.SortFunc(out, compareTP)
	return out, nil
}

// listOffsets returns an offset per partition from a kadm listing.
func (s *Source) listOffsets(ctx context.Context, parts []tp, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[tp]int64, error) {
	out := make(map[tp]int64, len(parts))
	if len(parts) == 0 {
		return out, nil
	}
	lo, err := list(ctx, topicsOf(parts)...)
	if err != nil {
		return nil, fmt.Errorf("%s: list offsets: %w", s.name, err)
	}
	for _, p := range parts {
		o, ok := lo.Lookup(p.topic, p.partition)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: list offsets: no answer for partition %s", s.name, p)
		case o.Err != nil:
			return nil, fmt.Errorf("%s: list offsets of partition %s: %w", s.name, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}

// startOffsets resolves startFrom for parts to concrete offsets.
func (s *Source) startOffsets(ctx context.Context, parts []tp) (map[tp]int64, error) {
	switch s.spec.startFrom {
	case StartLatest:
		return s.listOffsets(ctx, parts, s.adm.ListCommittedOffsets)
	case StartTimestamp:
		return s.listOffsets(ctx, parts, func(ctx context.Context, topics ...string) (kadm.ListedOffsets, error) {
			return s.adm.ListOffsetsAfterMilli(ctx, s.spec.startTs, topics...)
		})
	case StartGroupOffsets:
		if len(parts) == 0 {
			return map[tp]int64{}, nil
		}
		committed, err := s.adm.FetchOffsetsForTopics(ctx, s.spec.cfg.Group, topicsOf(parts)...)
		if err != nil {
			return nil, fmt.Errorf("%s: fetch the offsets of group %q: %w", s.name, s.spec.cfg.Group, err)
		}
		reset := s.adm.ListStartOffsets
		if s.spec.resetTo == StartLatest {
			reset = s.adm.ListCommittedOffsets
		}
		fallback, err := s.listOffsets(ctx, parts, reset)
		if err != nil {
			return nil, err
		}
		out := make(map[tp]int64, len(parts))
		for _, p := range parts {
			out[p] = fallback[p]
			if o, ok := committed.Lookup(p.topic, p.partition); ok && o.Err == nil && o.At >= 0 {
				out[p] = o.At
			}
		}
		return out, nil
	}
	return s.listOffsets(ctx, parts, s.adm.ListStartOffsets)
}

func topicsOf(parts []tp) []string {
	var ts []string
	for _, p := range parts {
		if len(ts) == 0 || ts[len(ts)-1] != p.topic {
			ts = append(ts, p.topic)
		}
	}
	return slices.Compact(ts)
}

// assign hands the splits that are not done to the consumer.
func (s *Source) assign(splits []*split) {
	m := make(map[string]map[int32]kgo.Offset)
	for _, sp := range splits {
		if sp.done {
			continue
		}
		o := kgo.NewOffset().At(sp.next)
		if sp.next == offsetEarliest {
			o = kgo.NewOffset().AtStart()
		}
		if m[sp.topic] == nil {
			m[sp.topic] = make(map[int32]kgo.Offset)
		}
		m[sp.topic][sp.partition] = o
	}
	s.cl.AddConsumePartitions(m)
}

// adopt takes the partitions of a discovery round that no subtask owns
// yet and that this subtask is the owner of, from their earliest offsets.
func (s *Source) adopt(parts []tp) {
	var added []*split
	now := s.now()
	for _, p := range parts {
		if s.known[p] {
			continue
		}
		s.known[p] = true
		if Owner(p.topic, p.partition, max(1, s.octx.Parallelism)) != s.octx.Subtask {
			continue
		}
		sp := &split{tp: p, next: offsetEarliest, end: noEnd, maxTs: math.MinInt64, active: now}
		s.add(sp)
		added = append(added, sp)
		s.log.Info(s.name+": reading a new partition from its earliest offset", "topic", p.topic, "partition", p.partition)
	}
	if s.assigned && len(added) > 0 {
		s.assign(added)
	}
}

// Poll emits up to one batch of the records the client has fetched, and a
// watermark when it advanced. It never waits for the network.
func (s *Source) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if s.bg != nil {
		parts, round, err := s.bg.discovered(s.seen, s.unreachableAfter)
		if err != nil {
			return 0, unreachable(s.name, s.spec.servers, err, s.hook)
		}
		if round != s.seen {
			s.seen = round
			s.adopt(parts)
		}
	}
	if !s.assigned {
		s.assigned = true
		s.assign(s.splits)
	}
	fetches := s.cl.PollRecords(nil, s.spec.batch)
	now := s.now()
	var b *stream.Batch
	var finished map[string][]int32
	rows := 0
	for _, f := range fetches {
		for ti := range f.Topics {
			ft := &f.Topics[ti]
			for pi := range ft.Partitions {
				fp := &ft.Partitions[pi]
				if fp.Err != nil {
					var loss *kgo.ErrDataLoss
					if errors.As(fp.Err, &loss) {
						s.log.Warn(s.name+": records were lost from the partition before they could be read (deleted by retention?)", "topic", ft.Topic, "partition", fp.Partition, "error", fp.Err)
						continue
					}
					b.Release()
					return 0, fmt.Errorf("%s: topic %s partition %d: %w", s.name, ft.Topic, fp.Partition, fp.Err)
				}
				sp := s.byTP[tp{ft.Topic, fp.Partition}]
				if sp == nil || sp.done {
					continue // a partition no longer read
				}
				for _, r := range fp.Records {
					if sp.next != offsetEarliest && r.Offset < sp.next {
						continue
					}
					if sp.end != noEnd && r.Offset >= sp.end {
						break
					}
					if !r.Attrs.IsControl() {
						if b == nil {
							b = stream.NewBatch(s.spec.schema, s.spec.batch)
						}
						if err := s.decode(r, b, rows); err != nil {
							b.Release()
							return 0, err
						}
						sp.maxTs = max(sp.maxTs, b.Times[len(b.Times)-1])
						sp.active = now
						rows++
					}
					sp.next = r.Offset + 1
				}
				if sp.end != noEnd && sp.next != offsetEarliest && sp.next >= sp.end {
					sp.done = true
					if finished == nil {
						finished = make(map[string][]int32)
					}
					finished[sp.topic] = append(finished[sp.topic], sp.partition)
				}
			}
		}
	}
	if finished != nil {
		s.cl.RemoveConsumePartitions(finished)
	}
	if rows > 0 {
		if !s.spec.watermarks {
			b.Times = b.Times[:0]
		}
		b.SetLen(rows)
		out.Collect(b)
	}
	if s.spec.watermarks {
		if wm, ok := combinedWatermark(s.splits, now, s.spec.ooo, s.spec.idle); ok && wm > s.wm {
			s.wm = wm
			out.EmitWatermark(wm)
		}
	}
	if rows > 0 {
		return stream.PollEmitted, nil
	}
	if s.spec.bounded && !slices.ContainsFunc(s.splits, func(sp *split) bool { return !sp.done }) {
		if s.wm != stream.MaxWatermark {
			s.wm = stream.MaxWatermark
			out.EmitWatermark(stream.MaxWatermark)
		}
		return stream.PollEnd, nil
	}
	return stream.PollIdle, nil
}

// IdleFor says how long to wait after an idle Poll.
func (s *Source) IdleFor() time.Duration { return idleWait }

// combinedWatermark returns the least, over the splits that are neither
// done nor idle at now, of their largest event time minus ooo minus 1; ok
// is false when there is none, or when an active split has seen no record
// yet (it holds the watermark back until it has, or turns idle).
func combinedWatermark(splits []*split, now, ooo, idle int64) (wm int64, ok bool) {
	wm = math.MaxInt64
	for _, sp := range splits {
		if sp.done || idle > 0 && now-sp.active >= idle {
			continue
		}
		if sp.maxTs == math.MinInt64 {
			return 0, false
		}
		ok = true
		wm = min(wm, sp.maxTs-ooo-1)
	}
	return wm, ok
}

// decode appends record r as row row of b, and its event time to b.Times.
func (s *Source) decode(r *kgo.Record, b *stream.Batch, row int) error {
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size > s.spec.maxBytes {
		return fmt.Errorf("%s: topic %s partition %d offset %d: a record of %d bytes (key, value and headers) is over maxMessageBytes %d: %w; raise maxMessageBytes, or keep such records out of the topic",
			s.name, r.Topic, r.Partition, r.Offset, size, s.spec.maxBytes, ErrRecordTooLarge)
	}
	ts := r.Timestamp.UnixMilli()
	if !s.spec.json {
		c := b.Cols
		c[0].Strs = append(c[0].Strs, s.arena.str(r.Key))
		if r.Key == nil {
			c[0].SetNull(row, cap(c[0].Strs))
		}
		c[1].Strs = append(c[1].Strs, s.arena.str(r.Value))
		if r.Value == nil {
			c[1].SetNull(row, cap(c[1].Strs))
		}
		c[2].Strs = append(c[2].Strs, r.Topic)
		c[3].Ints = append(c[3].Ints, int64(r.Partition))
		c[4].Ints = append(c[4].Ints, r.Offset)
		c[5].Ints = append(c[5].Ints, ts)
	} else {
		view := stream.Batch{Schema: s.jsonS, Cols: b.Cols[:s.spec.nfields]}
		if err := s.json.Decode(r.Value, &view, row); err != nil {
			return fmt.Errorf("%s: topic %s partition %d offset %d: value: %w", s.name, r.Topic, r.Partition, r.Offset, err)
		}
		for i, m := range s.spec.meta {
			c := &b.Cols[s.spec.nfields+i]
			switch m {
			case ColKey:
				c.Strs = append(c.Strs, s.arena.str(r.Key))
				if r.Key == nil {
					c.SetNull(row, cap(c.Strs))
				}
			case ColTopic:
				c.Strs = append(c.Strs, r.Topic)
			case ColPartition:
				c.Ints = append(c.Ints, int64(r.Partition))
			case ColOffset:
				c.Ints = append(c.Ints, r.Offset)
			case ColTimestamp:
				c.Ints = append(c.Ints, ts)
			}
		}
	}
	if c := s.spec.wmCol; c >= 0 {
		if b.Cols[c].IsNull(row) {
			return fmt.Errorf("%s: topic %s partition %d offset %d: the event-time column %q is null; every record needs an event time",
				s.name, r.Topic, r.Partition, r.Offset, s.spec.schema.Fields[c].Name)
		}
		ts = b.Cols[c].Ints[row]
	}
	b.Times = append(b.Times, ts)
	return nil
}

// Close stops the background work and closes the client.
func (s *Source) Close() error {
	if s.bg != nil {
		s.bg.stop()
		s.bg = nil
	}
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	return nil
}

// arena copies byte strings into large shared chunks, so that a batch of
// strings costs one allocation per chunk rather than one per record. Bytes
// once handed out are never written again.
type arena struct{ buf []byte }

const arenaChunk = 64 << 10

func (a *arena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaChunk/4 {
		return string(b)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, arenaChunk)
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[start], len(b))
}
