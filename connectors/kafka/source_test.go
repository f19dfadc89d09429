package kafka

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/connectors/kafka/kafkatest"
	"github.com/weirstream/weir/stream"
)

// TestSourceRescaleExactlyOnce reads a six-partition topic through a job
// whose parallelism goes 2 → 2 → 3 → 1 → 4: at each stage every subtask emits
// a few batches, the job takes a checkpoint, emits some more (lost, as in a
// crash), and the next stage restores the checkpoint with the next
// parallelism (the same one first). Records keep arriving between stages. The rows the job's
// output holds (those before each checkpoint, and all of the last stage)
// must be every record exactly once, each with its own partition and
// offset.
func TestSourceRescaleExactlyOnce(t *testing.T) {
	const parts = 6
	brokers, topics := startKafka(t, map[string]int32{"in": parts})
	topic := topics["in"]
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, BatchSize: 7, PartitionDiscoveryInterval: "0"}
	total := 300
	kafkatest.Produce(t, brokers, topic, records("r", 0, total, parts)...)

	var kept [][]any
	var restored []*stream.OperatorSnapshot
	pars := []int{2, 2, 3, 1, 4}
	for stage, par := range pars {
		id := int64(stage + 1)
		last := stage == len(pars)-1
		ends := endOffsets(t, brokers, topic)
		srcs := make([]*Source, par)
		for sub := range par {
			var snap *stream.OperatorSnapshot
			if restored != nil {
				snap = restored[sub]
			}
			srcs[sub] = openSource(t, cfg, srcOctx(sub, par), id-1, snap)
		}
		if last {
			// Every subtask reads to the end.
			var c collector
			for _, s := range srcs {
				pollUntil(t, s, &c, func() bool { return caughtUp(s, ends) })
				kept = append(kept, c.rows()...)
				c = collector{}
			}
			for _, s := range srcs {
				// Nothing more to read: one more round emits nothing.
				st, err := s.Poll(t.Context(), &c)
				must(t, err)
				if st == stream.PollEmitted {
					t.Fatalf("a caught-up subtask emitted %d more rows", c.count())
				}
				s.Close()
			}
			break
		}
		snaps := make([]*stream.OperatorSnapshot, par)
		for sub, s := range srcs {
			var c collector
			want := 2 + (sub+stage)%3 // batches before the checkpoint
			pollUntil(t, s, &c, func() bool { return len(c.batches) >= want || caughtUp(s, ends) })
			kept = append(kept, c.rows()...)
			snaps[sub] = snapshot(t, s, id)
			var lost collector
			pollUntil(t, s, &lost, func() bool { return len(lost.batches) >= 2 || caughtUp(s, ends) })
			s.Close()
		}
		restored = redistribute(t, id, snaps, pars[stage+1])
		// New records arrive while the job restarts.
		kafkatest.Produce(t, brokers, topic, records("r", total, 50, parts)...)
		total += 50
	}
	checkExactlyOnce(t, valueCounts(kept, 1), values("r", 0, total))
	seen := make(map[string]bool)
	for _, r := range kept {
		if r[2] != topic {
			t.Fatalf("row %v: topic %v, want %s", r, r[2], topic)
		}
		if r[0] != "k"+r[1].(string) {
			t.Fatalf("row %v: key does not belong to the value", r)
		}
		at := fmt.Sprint(r[3], "/", r[4])
		if seen[at] {
			t.Fatalf("two rows at partition/offset %s", at)
		}
		seen[at] = true
	}
}

// TestSourceOwnership checks that a fresh start spreads the partitions so
// that each is read by exactly one subtask, its Owner.
func TestSourceOwnership(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"a": 5, "b": 3})
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topics["a"], topics["b"]}, PartitionDiscoveryInterval: "0"}
	const par = 3
	got := make(map[tp]int)
	for sub := range par {
		s := openSource(t, cfg, srcOctx(sub, par), 0, nil)
		for _, sp := range s.splits {
			if o := Owner(sp.topic, sp.partition, par); o != sub {
				t.Errorf("subtask %d reads %s, whose owner is %d", sub, sp.tp, o)
			}
			got[sp.tp]++
		}
		s.Close()
	}
	if len(got) != 8 {
		t.Fatalf("%d partitions read, want 8: %v", len(got), got)
	}
	for p, n := range got {
		if n != 1 {
			t.Errorf("partition %s read by %d subtasks", p, n)
		}
	}
}

// TestSourceDiscovery adds partitions while the job runs and while it is
// down: every record of the new partitions is read exactly once, from
// their earliest offset although the job started at latest, by exactly
// one subtask, their owner.
func TestSourceDiscovery(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"grow": 2})
	topic := topics["grow"]
	adm := newAdmin(t, brokers)
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, StartFrom: StartLatest, PartitionDiscoveryInterval: "200ms"}
	kafkatest.Produce(t, brokers, topic, records("old", 0, 10, 2)...) // before the start: skipped

	const par = 2
	srcs := make([]*Source, par)
	for sub := range par {
		srcs[sub] = openSource(t, cfg, srcOctx(sub, par), 0, nil)
	}
	var c collector
	for _, s := range srcs {
		st, err := s.Poll(t.Context(), &c)
		must(t, err)
		if st != stream.PollIdle {
			t.Fatalf("status %v before any new record", st)
		}
	}
	kafkatest.Produce(t, brokers, topic, records("a", 0, 10, 2)...)
	// Two more partitions, written at once: discovery (every 200ms) most
	// likely finds them only after the records are there.
	_, err := adm.CreatePartitions(t.Context(), 2, topic)
	must(t, err)
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Key: []byte("k"), Value: fmt.Appendf(nil, "b%d", i), Partition: int32(2 + i%2)})
	}
	kafkatest.Produce(t, brokers, topic, recs...)
	ends := endOffsets(t, brokers, topic)
	for _, s := range srcs {
		pollUntil(t, s, &c, func() bool { return len(s.splits) == 2 && caughtUp(s, ends) })
	}
	checkExactlyOnce(t, valueCounts(c.rows(), 1), append(values("a", 0, 10), values("b", 0, 20)...))
	owners := make(map[tp]int)
	for sub, s := range srcs {
		for _, sp := range s.splits {
			owners[sp.tp]++
			if o := Owner(sp.topic, sp.partition, par); o != sub {
				t.Errorf("subtask %d reads %s, whose owner is %d", sub, sp.tp, o)
			}
		}
	}
	if len(owners) != 4 {
		t.Fatalf("partitions read: %v, want 4", owners)
	}

	// A checkpoint, then the job goes down; a fifth partition appears
	// with records; the job restores with parallelism 3 and discovery
	// off: the restored partitions resume, the new one is read from its
	// earliest offset by its owner.
	snaps := []*stream.OperatorSnapshot{snapshot(t, srcs[0], 1), snapshot(t, srcs[1], 1)}
	for _, s := range srcs {
		s.Close()
	}
	_, err = adm.CreatePartitions(t.Context(), 1, topic)
	must(t, err)
	kafkatest.Produce(t, brokers, topic, &kgo.Record{Value: []byte("c0"), Partition: 4}, &kgo.Record{Value: []byte("c1"), Partition: 4},
		&kgo.Record{Value: []byte("d0"), Partition: 0})
	ends = endOffsets(t, brokers, topic)
	cfg.PartitionDiscoveryInterval = "0"
	restored := redistribute(t, 1, snaps, 3)
	var c2 collector
	owners = make(map[tp]int)
	for sub := range 3 {
		s := openSource(t, cfg, srcOctx(sub, 3), 1, restored[sub])
		pollUntil(t, s, &c2, func() bool { return caughtUp(s, ends) })
		for _, sp := range s.splits {
			owners[sp.tp]++
		}
		s.Close()
	}
	checkExactlyOnce(t, valueCounts(c2.rows(), 1), []string{"c0", "c1", "d0"})
	if len(owners) != 5 {
		t.Fatalf("partitions read after the restore: %v, want 5 each once", owners)
	}
	for p, n := range owners {
		if n != 1 {
			t.Fatalf("partition %s read by %d subtasks", p, n)
		}
	}
}

// TestSourceStartPositions checks startFrom.
func TestSourceStartPositions(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"pos": 2})
	topic := topics["pos"]
	const t0 = 1_700_000_000_000
	var old []*kgo.Record
	for i := range 10 {
		old = append(old, &kgo.Record{Value: fmt.Appendf(nil, "o%d", i), Partition: int32(i % 2), Timestamp: time.UnixMilli(t0 + int64(i)*1000)})
	}
	kafkatest.Produce(t, brokers, topic, old...)
	base := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, StopAtEnd: true}
	read := func(t *testing.T, cfg SourceConfig) map[string]int {
		var c collector
		s := openSource(t, cfg, srcOctx(0, 1), 0, nil)
		defer s.Close()
		drainBounded(t, s, &c)
		return valueCounts(c.rows(), 1)
	}

	t.Run("earliest", func(t *testing.T) {
		checkExactlyOnce(t, read(t, base), values("o", 0, 10))
	})
	t.Run("timestamp", func(t *testing.T) {
		for _, ts := range []string{fmt.Sprint(t0 + 6000), time.UnixMilli(t0 + 6000).UTC().Format(time.RFC3339)} {
			cfg := base
			cfg.StartFrom, cfg.StartTimestamp = StartTimestamp, ts
			checkExactlyOnce(t, read(t, cfg), values("o", 6, 4))
		}
	})
	t.Run("groupOffsets", func(t *testing.T) {
		adm := newAdmin(t, brokers)
		var offs kadm.Offsets
		offs.AddOffset(topic, 0, 3, -1) // partition 0 holds o0 o2 o4 o6 o8
		group := kafkatest.Topic("g1")  // unique on a shared cluster too
		_, err := adm.CommitOffsets(t.Context(), group, offs)
		must(t, err)
		cfg := base
		cfg.StartFrom, cfg.Group, cfg.ResetTo = StartGroupOffsets, group, StartLatest
		checkExactlyOnce(t, read(t, cfg), []string{"o6", "o8"}) // partition 1 has no offset: latest
		cfg.ResetTo = ""
		checkExactlyOnce(t, read(t, cfg), []string{"o6", "o8", "o1", "o3", "o5", "o7", "o9"})
	})
	t.Run("latest", func(t *testing.T) {
		cfg := base
		cfg.StopAtEnd, cfg.StartFrom, cfg.PartitionDiscoveryInterval = false, StartLatest, "0"
		s := openSource(t, cfg, srcOctx(0, 1), 0, nil)
		defer s.Close()
		var c collector
		kafkatest.Produce(t, brokers, topic, records("n", 0, 4, 2)...)
		ends := endOffsets(t, brokers, topic)
		pollUntil(t, s, &c, func() bool { return caughtUp(s, ends) })
		checkExactlyOnce(t, valueCounts(c.rows(), 1), values("n", 0, 4))
	})
	t.Run("group commit on checkpoint complete", func(t *testing.T) {
		cfg := base
		cfg.Group = kafkatest.Topic("g2")
		s := openSource(t, cfg, srcOctx(0, 1), 0, nil)
		defer s.Close()
		var c collector
		drainBounded(t, s, &c)
		snapshot(t, s, 1)
		must(t, s.NotifyCheckpointComplete(1))
		ends := endOffsets(t, brokers, topic)
		adm := newAdmin(t, brokers)
		deadline := time.Now().Add(waitDeadline)
		for {
			// The commit is asynchronous: until it lands the group
			// does not exist.
			got, err := adm.FetchOffsets(t.Context(), cfg.Group)
			if !errors.Is(err, kerr.GroupIDNotFound) {
				must(t, err)
			}
			ok := err == nil
			for p, e := range ends {
				o, found := got.Lookup(p.topic, p.partition)
				ok = ok && found && o.At == e
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %s has offsets %v, want %v", cfg.Group, got, ends)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestSourceWatermarks checks per-partition watermarks with idleness
// against a hand computation, on a manual processing-time clock.
func TestSourceWatermarks(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"wm": 3})
	topic := topics["wm"]
	rec := func(p int32, ts int64) *kgo.Record {
		return &kgo.Record{Value: fmt.Appendf(nil, "%d@%d", ts, p), Partition: p, Timestamp: time.UnixMilli(ts)}
	}
	kafkatest.Produce(t, brokers, topic, rec(0, 1000), rec(0, 3000), rec(0, 2000), rec(1, 1500))
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, PartitionDiscoveryInterval: "0",
		Watermark: &WatermarkConfig{MaxOutOfOrderness: "100ms", IdleTimeout: "1s"}}
	var clock int64
	octx := srcOctx(0, 1)
	octx.Clock = func() int64 { return clock }
	s := openSource(t, cfg, octx, 0, nil)
	defer s.Close()
	var c collector

	// Partition 2 has no record and is not idle yet: no watermark.
	clock = 600
	pollUntil(t, s, &c, func() bool { return c.count() == 4 })
	for _, b := range c.batches {
		for i := range b.Len() {
			if b.Times[i] != b.Cols[5].Ints[i] {
				t.Fatalf("event time %d, want the record timestamp %d", b.Times[i], b.Cols[5].Ints[i])
			}
		}
	}
	if len(c.watermarks) != 0 {
		t.Fatalf("watermarks %v while partition 2 holds them back", c.watermarks)
	}
	// At 1000 partition 2 has been idle for 1s (since the start):
	// min(3000, 1500) - 100 - 1.
	clock = 1000
	poll1(t, s, &c)
	want := []int64{1399}
	checkWatermarks(t, c.watermarks, want)
	// At 1700 partitions 0 and 1 are idle too: no advance.
	clock = 1700
	poll1(t, s, &c)
	checkWatermarks(t, c.watermarks, want)
	// Partition 1 resumes alone: 5000 - 101.
	clock = 1800
	kafkatest.Produce(t, brokers, topic, rec(1, 5000))
	pollUntil(t, s, &c, func() bool { return c.count() == 5 })
	want = append(want, 4899)
	checkWatermarks(t, c.watermarks, want)
	// Partition 0 resumes behind: the watermark does not go back.
	clock = 1900
	kafkatest.Produce(t, brokers, topic, rec(0, 2500))
	pollUntil(t, s, &c, func() bool { return c.count() == 6 })
	poll1(t, s, &c)
	checkWatermarks(t, c.watermarks, want)
	// Partition 1 moves on; partition 0 (largest 3000) now holds it back.
	kafkatest.Produce(t, brokers, topic, rec(1, 9000))
	pollUntil(t, s, &c, func() bool { return c.count() == 7 })
	checkWatermarks(t, c.watermarks, want)
	// The watermark of each partition survives a checkpoint.
	snap := snapshot(t, s, 1)
	s2 := openSource(t, cfg, octx, 1, redistribute(t, 1, []*stream.OperatorSnapshot{snap}, 1)[0])
	defer s2.Close()
	// Partition 2's first record: partition 0, at 3000 before the
	// checkpoint, now holds the watermark at 2899.
	var c2 collector
	clock = 2000
	kafkatest.Produce(t, brokers, topic, rec(2, 8000))
	pollUntil(t, s2, &c2, func() bool { return c2.count() == 1 })
	checkWatermarks(t, c2.watermarks, []int64{2899})
}

func poll1(t *testing.T, s stream.Source, c *collector) {
	t.Helper()
	_, err := s.Poll(t.Context(), c)
	must(t, err)
}

func checkWatermarks(t *testing.T, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("watermarks %v, want %v", got, want)
	}
}

// TestCombinedWatermark checks the combination rule on its own.
func TestCombinedWatermark(t *testing.T) {
	sp := func(maxTs, active int64, done bool) *split {
		return &split{maxTs: maxTs, active: active, done: done}
	}
	none := int64(math.MinInt64)
	for _, tc := range []struct {
		name   string
		splits []*split
		now    int64
		wm     int64
		ok     bool
	}{
		{"no splits", nil, 0, 0, false},
		{"min of active", []*split{sp(100, 0, false), sp(50, 0, false)}, 10, 50 - 5 - 1, true},
		{"active without data holds back", []*split{sp(100, 0, false), sp(none, 0, false)}, 10, 0, false},
		{"idle excluded", []*split{sp(100, 50, false), sp(none, 0, false)}, 100, 100 - 5 - 1, true},
		{"all idle", []*split{sp(100, 0, false), sp(200, 0, false)}, 100, 0, false},
		{"done excluded", []*split{sp(100, 90, false), sp(10, 90, true)}, 100, 94, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wm, ok := combinedWatermark(tc.splits, tc.now, 5, 100)
			if ok != tc.ok || ok && wm != tc.wm {
				t.Fatalf("combinedWatermark = %d, %v; want %d, %v", wm, ok, tc.wm, tc.ok)
			}
		})
	}
}

// TestSourceJSON decodes JSON values into declared fields plus metadata
// columns, with the event time from a field.
func TestSourceJSON(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"json": 1, "bad": 1})
	topic := topics["json"]
	kafkatest.Produce(t, brokers, topic,
		&kgo.Record{Key: []byte("k1"), Value: []byte(`{"id": 1, "name": "a", "ts": "2024-01-01T00:00:01Z", "score": 1.5, "extra": [1, {"x": 2}]}`)},
		&kgo.Record{Value: []byte(`{"id": 2, "ts": 1704067202000, "score": null}`)},
	)
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, StopAtEnd: true, Format: "json",
		Fields:          []Field{{"id", "int64"}, {"name", "string"}, {"ts", "timestamp"}, {"score", "float64"}},
		MetadataColumns: []string{ColTopic, ColPartition, ColOffset, ColKey},
		Watermark:       &WatermarkConfig{Field: "ts"}}
	s := openSource(t, cfg, srcOctx(0, 1), 0, nil)
	defer s.Close()
	if got := s.Schema().String(); got != "(id int64, name string, ts timestamp, score float64, topic string, partition int64, offset int64, key string)" {
		t.Fatalf("schema %s", got)
	}
	var c collector
	drainBounded(t, s, &c)
	want := [][]any{
		{int64(1), "a", int64(1704067201000), 1.5, topic, int64(0), int64(0), "k1"},
		{int64(2), nil, int64(1704067202000), nil, topic, int64(0), int64(1), nil},
	}
	if got := c.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows\n%v\nwant\n%v", got, want)
	}
	if got := c.batches[0].Times; !slices.Equal(got, []int64{1704067201000, 1704067202000}) {
		t.Fatalf("event times %v", got)
	}
	// The partition ended with the poll that read it: a done partition
	// holds nothing back, and the end of input is the largest watermark.
	checkWatermarks(t, c.watermarks, []int64{stream.MaxWatermark})

	// A value that is not a JSON object fails the task, naming where it
	// is but not what it holds.
	kafkatest.Produce(t, brokers, topics["bad"], &kgo.Record{Value: []byte(`{"id": 1, "ts": 5}`)}, &kgo.Record{Value: []byte(`secret-stuff`)})
	cfg.Topics = []string{topics["bad"]}
	s2 := openSource(t, cfg, srcOctx(0, 1), 0, nil)
	defer s2.Close()
	err := pollErr(t, s2)
	for _, w := range []string{topics["bad"], "partition 0", "offset 1"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not name %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q shows the record", err)
	}
}

// pollErr polls s until it fails and returns the error.
func pollErr(t *testing.T, s stream.Source) error {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	var c collector
	for time.Now().Before(deadline) {
		st, err := s.Poll(t.Context(), &c)
		if err != nil {
			return err
		}
		if st == stream.PollEnd {
			t.Fatal("the source ended without an error")
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no error within the deadline")
	return nil
}

// TestSourceReadCommitted: records of aborted transactions are not read;
// a bounded source passes the markers and ends.
func TestSourceReadCommitted(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"txn": 2})
	topic := topics["txn"]
	txnProduce(t, brokers, topic, topic+"-a", true, records("c", 0, 6, 2))
	txnProduce(t, brokers, topic, topic+"-b", false, records("a", 0, 6, 2))
	txnProduce(t, brokers, topic, topic+"-c", true, records("c", 6, 6, 2))
	if n := len(kafkatest.ReadAll(t, brokers, topic, false)); n != 18 {
		t.Fatalf("read_uncommitted sees %d records, want 18 (the aborted ones too)", n)
	}
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, StopAtEnd: true}
	s := openSource(t, cfg, srcOctx(0, 1), 0, nil)
	defer s.Close()
	var c collector
	drainBounded(t, s, &c)
	checkExactlyOnce(t, valueCounts(c.rows(), 1), values("c", 0, 12))
}

// txnProduce writes recs in one transaction, committed or aborted.
func txnProduce(t *testing.T, brokers []string, topic, txnID string, commit bool, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID(txnID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	must(t, err)
	defer cl.Close()
	must(t, cl.BeginTransaction())
	for _, r := range recs {
		r.Topic = topic
	}
	must(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	must(t, cl.EndTransaction(t.Context(), kgo.TransactionEndTry(commit)))
}

// TestSourceRecordTooLarge: a record over maxMessageBytes fails the task,
// naming topic, partition and offset, never the value.
func TestSourceRecordTooLarge(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"big": 1})
	topic := topics["big"]
	kafkatest.Produce(t, brokers, topic, &kgo.Record{Value: []byte("small")}, &kgo.Record{Value: []byte(strings.Repeat("secret", 50))})
	cfg := SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, MaxMessageBytes: 100}
	s := openSource(t, cfg, srcOctx(0, 1), 0, nil)
	defer s.Close()
	err := pollErr(t, s)
	if !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("error %v, want ErrRecordTooLarge", err)
	}
	for _, w := range []string{topic, "partition 0", "offset 1", "maxMessageBytes 100"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not name %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q shows the record", err)
	}
}

// TestSourceOpenErrors: a cluster that does not answer and a topic that
// does not exist fail Open clearly.
func TestSourceOpenErrors(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"x": 1})
	t.Run("missing topic", func(t *testing.T) {
		s, err := NewSource(cfgJSON(t, SourceConfig{BootstrapServers: brokers, Topics: []string{topics["x"], "no-such-topic-" + topics["x"]}}))
		must(t, err)
		defer s.Close()
		err = s.Open(t.Context(), srcOctx(0, 1))
		if !errors.Is(err, ErrTopicNotFound) || !strings.Contains(err.Error(), "no-such-topic") {
			t.Fatalf("Open: %v, want ErrTopicNotFound naming the topic", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		addr := deadAddr(t)
		s, err := NewSource(cfgJSON(t, SourceConfig{BootstrapServers: []string{addr}, Topics: []string{"t"}}))
		must(t, err)
		defer s.Close()
		s.connectTimeout = 2 * time.Second
		err = s.Open(t.Context(), srcOctx(0, 1))
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "bootstrapServers") {
			t.Fatalf("Open: %v, want ErrUnreachable naming %s and the fix", err, addr)
		}
	})
}

// TestSourceClusterGoesAway: when partition discovery fails for longer
// than the limit, Poll fails the task with ErrUnreachable.
func TestSourceClusterGoesAway(t *testing.T) {
	if os.Getenv(kafkatest.BrokersEnv) != "" {
		t.Skip("stops the cluster")
	}
	topic := kafkatest.Topic("gone")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	must(t, err)
	defer c.Close()
	s := openSource(t, SourceConfig{BootstrapServers: c.ListenAddrs(), Topics: []string{topic}, PartitionDiscoveryInterval: "20ms"}, srcOctx(0, 1), 0, nil)
	defer s.Close()
	s.unreachableAfter = 300 * time.Millisecond
	poll1(t, s, &collector{})
	c.Close()
	if err := pollErr(t, s); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Poll: %v, want ErrUnreachable", err)
	}
}
