package kafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/weirstream/weir/connectors/kafka/kafkatest"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// testJob is the job id of the sinks: unique, so that tests on a shared
// cluster never meet the transactions of another run.
var testJob = kafkatest.Topic("job")

func sinkOctx(in *stream.Schema, subtask, par int, attempt int64) *stream.OperatorContext {
	return &stream.OperatorContext{JobID: testJob, OperatorUID: "sink", Subtask: subtask, Parallelism: par, Attempt: attempt,
		Checkpointing: true, InputSchemas: []*stream.Schema{in}}
}

// openSink builds and opens a sink subtask, restoring snap (nil: a fresh
// start).
func openSink(t testing.TB, cfg SinkConfig, octx *stream.OperatorContext, ckp int64, snap *stream.OperatorSnapshot) *Sink {
	t.Helper()
	s, err := NewSink(cfgJSON(t, cfg))
	must(t, err)
	if err := s.Open(t.Context(), octx); err != nil {
		s.Close()
		t.Fatal(err)
	}
	if snap != nil {
		if err := s.RestoreState(&stream.RestoreContext{CheckpointID: ckp, State: snap}); err != nil {
			s.Close()
			t.Fatal(err)
		}
	}
	return s
}

// crash abandons a sink as a dying process does: its connections close,
// and whatever transactions it had open or pre-committed stay so. The
// records written so far reach the brokers first, so that a transaction
// left open holds some.
func crash(t *testing.T, s *Sink) {
	if s.tp != nil {
		sys := s.tp.System().(*txnSystem)
		for _, cl := range sys.live {
			must(t, cl.Flush(t.Context()))
		}
		sys.Close()
	} else {
		s.plain.cl.Close()
	}
}

// pipeline is a job of kafka source subtasks, each forwarding to a kafka
// sink subtask of the same index, driven by hand.
type pipeline struct {
	srcs  []*Source
	sinks []*Sink
	fed   []int // rows handed to each sink
}

func startPipeline(t *testing.T, src SourceConfig, sink SinkConfig, par int, attempt int64, ckp int64, srcSnaps, sinkSnaps []*stream.OperatorSnapshot) *pipeline {
	t.Helper()
	pl := &pipeline{fed: make([]int, par)}
	for sub := range par {
		var ss, ks *stream.OperatorSnapshot
		if srcSnaps != nil {
			ss, ks = srcSnaps[sub], sinkSnaps[sub]
		}
		s := openSource(t, src, srcOctx(sub, par), ckp, ss)
		pl.srcs = append(pl.srcs, s)
		pl.sinks = append(pl.sinks, openSink(t, sink, sinkOctx(s.Schema(), sub, par, attempt), ckp, ks))
	}
	return pl
}

// step moves up to n batches of each subtask's source into its sink and
// reports whether every source has ended.
func (pl *pipeline) step(t *testing.T, n int) bool {
	t.Helper()
	ended := true
	for sub, s := range pl.srcs {
		var c collector
		st := pollUntil(t, s, &c, func() bool { return len(c.batches) >= n })
		for _, b := range c.batches {
			pl.fed[sub] += b.Len()
			must(t, pl.sinks[sub].ProcessBatch(0, b, nil))
		}
		ended = ended && st == stream.PollEnd
	}
	return ended
}

// checkpoint snapshots every source, then every sink (the barrier's path).
func (pl *pipeline) checkpoint(t *testing.T, id int64) (srcs, sinks []*stream.OperatorSnapshot) {
	t.Helper()
	for sub := range pl.srcs {
		srcs = append(srcs, snapshot(t, pl.srcs[sub], id))
		sinks = append(sinks, snapshot(t, pl.sinks[sub], id))
	}
	return srcs, sinks
}

func (pl *pipeline) complete(t *testing.T, id int64) {
	t.Helper()
	for sub := range pl.srcs {
		must(t, pl.sinks[sub].NotifyCheckpointComplete(id))
		must(t, pl.srcs[sub].NotifyCheckpointComplete(id))
	}
}

// runToEnd steps until every source ended, then takes checkpoint id and
// completes it, and closes everything.
func (pl *pipeline) runToEnd(t *testing.T, id int64) {
	t.Helper()
	for !pl.step(t, 4) {
	}
	for _, k := range pl.sinks {
		must(t, k.Finish(nil))
	}
	pl.checkpoint(t, id)
	pl.complete(t, id)
	pl.close(t)
}

func (pl *pipeline) close(t *testing.T) {
	t.Helper()
	for sub := range pl.srcs {
		must(t, pl.sinks[sub].Close())
		must(t, pl.srcs[sub].Close())
	}
}

func (pl *pipeline) crash(t *testing.T) {
	for sub := range pl.srcs {
		crash(t, pl.sinks[sub])
		pl.srcs[sub].Close()
	}
}

// outputValues decodes the "value" field of JSON rows written by the sink.
func outputValues(t *testing.T, vals [][]byte) map[string]int {
	t.Helper()
	m := make(map[string]int)
	for _, v := range vals {
		var row struct{ Value string }
		must(t, json.Unmarshal(v, &row))
		m[row.Value]++
	}
	return m
}

// TestSinkExactlyOnceFailover runs Kafka → sink jobs that fail after a
// pre-commit (the sinks are abandoned without Close, their transactions
// open or pre-committed), restore from a checkpoint with another
// parallelism and replay. A read_committed consumer of the output must see
// every input record exactly once; a read_uncommitted one sees the aborted
// records of the failed attempt as well.
func TestSinkExactlyOnceFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		// completed: checkpoint 2 completed before the crash, but the
		// sinks never heard; else it did not complete, and the job
		// restores checkpoint 1.
		completed bool
		par       []int
	}{
		{"restore the completed checkpoint the sinks did not commit", true, []int{2, 3}},
		{"restore an older checkpoint", false, []int{3, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topics := startKafka(t, map[string]int32{"in": 4, "out": 3})
			const n = 400
			kafkatest.Produce(t, brokers, topics["in"], records("r", 0, n, 4)...)
			src := SourceConfig{BootstrapServers: brokers, Topics: []string{topics["in"]}, StopAtEnd: true, BatchSize: 10}
			sink := SinkConfig{BootstrapServers: brokers, Topic: topics["out"], TransactionTimeout: "1m"}

			pl := startPipeline(t, src, sink, tc.par[0], 1, 0, nil, nil)
			pl.step(t, 2)
			srcs1, sinks1 := pl.checkpoint(t, 1)
			pl.complete(t, 1)
			pl.step(t, 2)
			srcs2, sinks2 := pl.checkpoint(t, 2) // the sinks pre-commit
			pl.step(t, 2)                        // an open transaction, never committed
			pl.crash(t)
			if pending := len(pl.sinks[0].tp.Pending()); pending == 0 {
				t.Fatal("no transaction was pending at the crash")
			}

			restoreFrom, srcSnaps, sinkSnaps := int64(1), srcs1, sinks1
			if tc.completed {
				restoreFrom, srcSnaps, sinkSnaps = 2, srcs2, sinks2
			}
			pl2 := startPipeline(t, src, sink, tc.par[1], 2, restoreFrom,
				redistribute(t, restoreFrom, srcSnaps, tc.par[1]), redistribute(t, restoreFrom, sinkSnaps, tc.par[1]))
			pl2.runToEnd(t, 3)

			committed := kafkatest.ReadAll(t, brokers, topics["out"], true)
			checkExactlyOnce(t, outputValues(t, committed), values("r", 0, n))
			all := kafkatest.ReadAll(t, brokers, topics["out"], false)
			if len(all) <= n {
				t.Fatalf("read_uncommitted sees %d records, want more than %d (the failed attempt's aborted ones)", len(all), n)
			}
			checkNoOpenTransactions(t, brokers)
		})
	}
}

// checkNoOpenTransactions fails if a transaction of the test job is open.
func checkNoOpenTransactions(t *testing.T, brokers []string) {
	t.Helper()
	if os.Getenv(kafkatest.BrokersEnv) != "" {
		return
	}
	open, err := newAdmin(t, brokers).ListTransactions(t.Context(), nil, []string{"Ongoing"})
	must(t, err)
	for id := range open {
		if strings.HasPrefix(id, defaultPrefix(testJob, "sink")) {
			t.Errorf("transaction %s is still open", id)
		}
	}
}

// TestSinkTransactions drives the exactly-once System directly, on a
// cluster with transaction.version 2 (the epoch moves on with every
// transaction, and ListTransactions finds leftovers) and on one that
// behaves like Kafka 2.8 (neither), and checks what the brokers answer:
// a transaction pre-committed by one process commits from another;
// committing twice is fine; an aborted one is reported lost; an unknown
// one is not found; leftovers are aborted and kept ones are not.
func TestSinkTransactions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kfake.Opt
	}{
		{"transaction.version 2", nil},
		{"kafka 2.8", []kfake.Opt{kfake.MaxVersions(kversion.V2_8_0())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var brokers []string
			topic := kafkatest.Topic("out")
			if tc.opts == nil {
				brokers = kafkatest.Start(t, map[string]int32{topic: 2})
			} else {
				if os.Getenv(kafkatest.BrokersEnv) != "" {
					t.Skip("needs kfake")
				}
				c, err := kfake.NewCluster(append(tc.opts, kfake.NumBrokers(1), kfake.SeedTopics(2, topic))...)
				must(t, err)
				t.Cleanup(c.Close)
				brokers = c.ListenAddrs()
			}
			listing := tc.opts == nil
			sink := SinkConfig{BootstrapServers: brokers, Topic: topic, TransactionTimeout: "1m"}
			spec, err := sink.spec()
			must(t, err)
			in := stream.MustSchema(stream.Field{Name: "value", Type: stream.TypeString})
			open := func(attempt int64) *txnSystem {
				sys := &txnSystem{spec: spec, connectTimeout: connectTimeout}
				must(t, sys.Open(t.Context(), sinkOctx(in, 0, 1, attempt)))
				t.Cleanup(func() { sys.Close() })
				if sys.listTxns != listing {
					t.Fatalf("ListTransactions supported: %v, want %v", sys.listTxns, listing)
				}
				return sys
			}
			id := func(attempt, ckp int64) twophase.TxnID {
				return twophase.TxnID{JobID: testJob, OperatorUID: "sink", Attempt: attempt, Checkpoint: ckp, Seq: 1}
			}
			write := func(sys *txnSystem, id twophase.TxnID, vals ...string) twophase.Pending {
				txn, err := sys.Begin(t.Context(), id)
				must(t, err)
				b := stream.NewBatch(in, len(vals))
				for _, v := range vals {
					b.AppendRow(v)
				}
				must(t, txn.Write(t.Context(), b))
				h, err := txn.PreCommit(t.Context())
				must(t, err)
				return twophase.Pending{ID: id, Checkpoint: id.Checkpoint, Handle: h}
			}
			committed := func() map[string]int {
				m := make(map[string]int)
				for _, v := range kafkatest.ReadAll(t, brokers, topic, true) {
					var row struct{ Value string }
					must(t, json.Unmarshal(v, &row))
					m[row.Value]++
				}
				return m
			}

			// A transaction pre-committed by a process that then dies
			// commits from another process, twice.
			a := open(1)
			must(t, a.Recover(t.Context(), twophase.Recovery{Subtasks: []int{0}, OldParallelism: 1, Attempt: 1}))
			p1 := write(a, id(1, 1), "a1", "a2")
			a.Close()
			checkExactlyOnce(t, committed(), nil)
			b := open(2)
			must(t, b.Commit(t.Context(), p1))
			must(t, b.Commit(t.Context(), p1))
			checkExactlyOnce(t, committed(), []string{"a1", "a2"})

			// A transaction committed by its own producer, then again
			// with its handle.
			p2 := write(b, id(2, 2), "b1")
			must(t, b.Commit(t.Context(), p2))
			must(t, b.Commit(t.Context(), p2))
			checkExactlyOnce(t, committed(), []string{"a1", "a2", "b1"})

			// A leftover after the restored checkpoint is aborted by
			// Recover; committing it then reports it lost.
			p3 := write(b, id(2, 3), "c1")
			b.Close()
			c := open(3)
			must(t, c.Recover(t.Context(), twophase.Recovery{Restored: true, CheckpointID: 2, RestoreJobID: testJob, Subtasks: []int{0}, OldParallelism: 1, Attempt: 3}))
			if err := c.Commit(t.Context(), p3); !errors.Is(err, ErrTransactionLost) {
				t.Fatalf("commit of an aborted transaction: %v, want ErrTransactionLost", err)
			}

			// A transaction the checkpoint keeps is not aborted.
			p4 := write(c, id(3, 4), "d1")
			c.Close()
			d := open(4)
			must(t, d.Recover(t.Context(), twophase.Recovery{Restored: true, CheckpointID: 4, RestoreJobID: testJob, Subtasks: []int{0}, OldParallelism: 1, Attempt: 4,
				KeepNames: map[string]bool{p4.ID.Name(): true}, Committed: nil}))
			must(t, d.Commit(t.Context(), p4))
			checkExactlyOnce(t, committed(), []string{"a1", "a2", "b1", "d1"})

			// An unknown transaction is not found.
			bogus := twophase.Pending{ID: id(4, 99), Checkpoint: 99, Handle: handle{txnID: transactionalID(d.prefix, 0, 99), pid: 12345, epoch: 3}.encode()}
			if err := d.Commit(t.Context(), bogus); !errors.Is(err, twophase.ErrNotFound) {
				t.Fatalf("commit of an unknown transaction: %v, want twophase.ErrNotFound", err)
			}

			if listing {
				// A leftover after a gap (checkpoints 5 and 6 passed
				// without rows) is found too.
				write(d, id(4, 7), "e1")
				d.Close()
				e := open(5)
				must(t, e.Recover(t.Context(), twophase.Recovery{Restored: true, CheckpointID: 4, RestoreJobID: testJob, Subtasks: []int{0}, OldParallelism: 1, Attempt: 5}))
				checkNoOpenTransactions(t, brokers)
			}
			checkExactlyOnce(t, committed(), []string{"a1", "a2", "b1", "d1"})
		})
	}
}

// TestSinkAtLeastOnce: after a failure the replayed rows are written
// again; every row arrives, and the duplicates are exactly the rows
// flushed after the restored checkpoint.
func TestSinkAtLeastOnce(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"in": 2, "out": 2})
	const n = 200
	kafkatest.Produce(t, brokers, topics["in"], records("r", 0, n, 2)...)
	src := SourceConfig{BootstrapServers: brokers, Topics: []string{topics["in"]}, StopAtEnd: true, BatchSize: 10}
	sink := SinkConfig{BootstrapServers: brokers, Topic: topics["out"], DeliveryGuarantee: AtLeastOnce}

	pl := startPipeline(t, src, sink, 2, 1, 0, nil, nil)
	if m := pl.sinks[0].Mode(); m != AtLeastOnce {
		t.Fatalf("mode %s", m)
	}
	pl.step(t, 3)
	srcs1, sinks1 := pl.checkpoint(t, 1)
	pl.complete(t, 1)
	before := pl.fed[0] + pl.fed[1]
	pl.step(t, 3)
	pl.checkpoint(t, 2) // flushes; never completes
	dups := pl.fed[0] + pl.fed[1] - before
	pl.crash(t)

	pl2 := startPipeline(t, src, sink, 2, 2, 1, redistribute(t, 1, srcs1, 2), redistribute(t, 1, sinks1, 2))
	pl2.runToEnd(t, 3)
	counts := outputValues(t, kafkatest.ReadAll(t, brokers, topics["out"], true))
	lost, extra := 0, 0
	for _, v := range values("r", 0, n) {
		switch c := counts[v]; {
		case c == 0:
			lost++
		case c > 1:
			extra += c - 1
		}
	}
	if lost != 0 || extra != dups {
		t.Fatalf("%d rows lost and %d duplicated; want none lost and %d duplicated (the rows flushed after checkpoint 1)", lost, extra, dups)
	}
	t.Logf("%d rows, %d duplicated", n, extra)
}

// TestSinkWithoutCheckpointing: without checkpoints the default is
// at_least_once, flushed at the end; exactly_once commits one transaction
// at the end.
func TestSinkWithoutCheckpointing(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"a": 1, "b": 1})
	in := stream.MustSchema(stream.Field{Name: "value", Type: stream.TypeString})
	for _, tc := range []struct{ topic, guarantee, mode string }{
		{topics["a"], "", AtLeastOnce},
		{topics["b"], ExactlyOnce, ExactlyOnce},
	} {
		octx := sinkOctx(in, 0, 1, 1)
		octx.Checkpointing = false
		s := openSink(t, SinkConfig{BootstrapServers: brokers, Topic: tc.topic, DeliveryGuarantee: tc.guarantee}, octx, 0, nil)
		if s.Mode() != tc.mode {
			t.Fatalf("mode %s, want %s", s.Mode(), tc.mode)
		}
		b := stream.NewBatch(in, 3)
		for _, v := range values("v", 0, 3) {
			b.AppendRow(v)
		}
		must(t, s.ProcessBatch(0, b, nil))
		must(t, s.Finish(nil))
		must(t, s.Close())
		checkExactlyOnce(t, outputValues(t, kafkatest.ReadAll(t, brokers, tc.topic, true)), values("v", 0, 3))
	}
}

// TestSinkRawKeys writes a string column as the value and another column
// as the key, and reads them back with the source.
func TestSinkRawKeys(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"raw": 2})
	in := stream.MustSchema(stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "v", Type: stream.TypeString})
	s := openSink(t, SinkConfig{BootstrapServers: brokers, Topic: topics["raw"], Format: "raw", ValueField: "v", KeyField: "k"},
		sinkOctx(in, 0, 1, 1), 0, nil)
	b := stream.NewBatch(in, 3)
	b.AppendRow(int64(7), "seven")
	b.AppendRow(nil, "no key")
	b.AppendRow(int64(-1), nil)
	must(t, s.ProcessBatch(0, b, nil))
	snapshot(t, s, 1)
	must(t, s.NotifyCheckpointComplete(1))
	must(t, s.Close())

	src := openSource(t, SourceConfig{BootstrapServers: brokers, Topics: []string{topics["raw"]}, StopAtEnd: true}, srcOctx(0, 1), 0, nil)
	defer src.Close()
	var c collector
	drainBounded(t, src, &c)
	got := make(map[string]bool)
	for _, r := range c.rows() {
		got[fmt.Sprint(r[0], "=", r[1])] = true
	}
	for _, w := range []string{"7=seven", "<nil>=no key", "-1=<nil>"} {
		if !got[w] {
			t.Fatalf("records %v lack %s", got, w)
		}
	}
	if len(got) != 3 {
		t.Fatalf("records %v, want 3", got)
	}
}

// TestSinkErrors: a missing topic and an unreachable cluster fail Open; a
// row over maxMessageBytes fails the write without showing the row.
func TestSinkErrors(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"small": 1})
	in := stream.MustSchema(stream.Field{Name: "value", Type: stream.TypeString})
	for _, guarantee := range []string{ExactlyOnce, AtLeastOnce} {
		s, err := NewSink(cfgJSON(t, SinkConfig{BootstrapServers: brokers, Topic: "missing-" + topics["small"], DeliveryGuarantee: guarantee}))
		must(t, err)
		err = s.Open(t.Context(), sinkOctx(in, 0, 1, 1))
		s.Close()
		if !errors.Is(err, ErrTopicNotFound) || !strings.Contains(err.Error(), "missing-"+topics["small"]) {
			t.Fatalf("%s: Open: %v, want ErrTopicNotFound naming the topic", guarantee, err)
		}
	}
	addr := deadAddr(t)
	s, err := NewSink(cfgJSON(t, SinkConfig{BootstrapServers: []string{addr}, Topic: "t"}))
	must(t, err)
	s.connectTimeout = 2e9
	err = s.Open(t.Context(), sinkOctx(in, 0, 1, 1))
	s.Close()
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open: %v, want ErrUnreachable naming %s", err, addr)
	}

	s = openSink(t, SinkConfig{BootstrapServers: brokers, Topic: topics["small"], MaxMessageBytes: 50}, sinkOctx(in, 0, 1, 1), 0, nil)
	defer s.Close()
	b := stream.NewBatch(in, 2)
	b.AppendRow("fine")
	b.AppendRow(strings.Repeat("secret", 20))
	err = s.ProcessBatch(0, b, nil)
	if !errors.Is(err, ErrRecordTooLarge) || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "row 1") {
		t.Fatalf("ProcessBatch: %v, want ErrRecordTooLarge naming row 1 without its contents", err)
	}
}

// TestSinkModeChangeOnRestore: a sink restored as at_least_once from a
// checkpoint its exactly_once run took still commits that checkpoint's
// transactions.
func TestSinkModeChangeOnRestore(t *testing.T) {
	brokers, topics := startKafka(t, map[string]int32{"out": 1})
	in := stream.MustSchema(stream.Field{Name: "value", Type: stream.TypeString})
	cfg := SinkConfig{BootstrapServers: brokers, Topic: topics["out"]}
	s := openSink(t, cfg, sinkOctx(in, 0, 1, 1), 0, nil)
	b := stream.NewBatch(in, 2)
	b.AppendRow("p0")
	b.AppendRow("p1")
	must(t, s.ProcessBatch(0, b, nil))
	snap := snapshot(t, s, 1) // pre-committed; the job dies before it completes
	crash(t, s)

	cfg.DeliveryGuarantee = AtLeastOnce
	s2 := openSink(t, cfg, sinkOctx(in, 0, 1, 2), 1, redistribute(t, 1, []*stream.OperatorSnapshot{snap}, 1)[0])
	must(t, s2.Close())
	checkExactlyOnce(t, outputValues(t, kafkatest.ReadAll(t, brokers, topics["out"], true)), []string{"p0", "p1"})
}
