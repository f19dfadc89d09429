package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/stream"
)

// rowSchema is the sink tests' input: id counts the rows from 0.
var rowSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "k", Type: stream.TypeString},
	stream.Field{Name: "v", Type: stream.TypeFloat64},
)

const sinkBatch = 50

// inputBatch returns batch number i of the deterministic input: rows
// i*sinkBatch .. (i+1)*sinkBatch-1.
func inputBatch(i int) *stream.Batch {
	b := stream.NewBatch(rowSchema, sinkBatch)
	for j := range sinkBatch {
		id := int64(i*sinkBatch + j)
		b.AppendRow(id, fmt.Sprintf("k%d", id%5), float64(id)/4)
	}
	return b
}

func newTestSink(t testing.TB, config string) *Sink {
	t.Helper()
	op, err := newSink([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	return op.(*Sink)
}

func openSink(t testing.TB, s *Sink, sub, par int) {
	t.Helper()
	octx := octxFor(sub, par)
	octx.InputSchemas = []*stream.Schema{rowSchema}
	octx.Checkpointing = true
	if err := s.Open(context.Background(), octx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
}

// feed publishes input batches [from, to) into s.
func feed(t testing.TB, s *Sink, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.ProcessBatch(0, inputBatch(i), nil); err != nil {
			t.Fatalf("ProcessBatch(%d): %v", i, err)
		}
	}
}

// waitMsgs waits until the stream holds n messages.
func waitMsgs(t testing.TB, js jetstream.JetStream, name string, n uint64) {
	t.Helper()
	end := time.Now().Add(deadline)
	for got := msgCount(t, js, name); got != n; got = msgCount(t, js, name) {
		if time.Now().After(end) {
			t.Fatalf("stream %s holds %d messages, want %d", name, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// storedIDs returns the id field of every message of the stream.
func storedIDs(t testing.TB, js jetstream.JetStream, name string) []int64 {
	t.Helper()
	var out []int64
	for _, m := range readStream(t, js, name) {
		var row struct{ ID int64 }
		if err := json.Unmarshal(m.data, &row); err != nil {
			t.Fatalf("message %d: %v", m.seq, err)
		}
		out = append(out, row.ID)
	}
	return out
}

// countDuplicates returns how many stored rows repeat an earlier one.
func countDuplicates(ids []int64) int {
	seen := map[int64]bool{}
	dup := 0
	for _, id := range ids {
		if seen[id] {
			dup++
		}
		seen[id] = true
	}
	return dup
}

// TestSinkExactlyOnceThroughFailures publishes rows, takes checkpoints,
// publishes more (stored, then "lost" with the failed instance), and
// restores new instances that replay the same input from the
// checkpoint: the stream holds every row exactly once. Without message
// ids the same run stores the replayed rows twice, which shows that the
// check can fail.
func TestSinkExactlyOnceThroughFailures(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	cfg := func(stream string, dedupe bool) string {
		return fmt.Sprintf(`{"url":%q,"subject":"%s.rows","maxPending":64,"deduplicate":%v}`, url, stream, dedupe)
	}
	run := func(t *testing.T, name string, dedupe bool) (stored []int64, dropped int64) {
		createStream(t, js, name, name+".>")
		// Attempt 1: checkpoint 1 after 8 batches, then 6 more batches
		// are published (and stored), then the task fails.
		a := newTestSink(t, cfg(name, dedupe))
		openSink(t, a, 0, 1)
		feed(t, a, 0, 8)
		chk1 := snapshot(t, a, 1)
		feed(t, a, 8, 14)
		waitMsgs(t, js, name, 14*sinkBatch)
		a.Close()

		// Attempt 2 restores checkpoint 1 and replays batch 8 on. Its
		// checkpoint 2 is taken but never completes (the task fails
		// before the coordinator hears from everyone), so attempt 3
		// restores checkpoint 1 again.
		b := newTestSink(t, cfg(name, dedupe))
		openSink(t, b, 0, 1)
		if err := restore(b, 1, chk1); err != nil {
			t.Fatal(err)
		}
		feed(t, b, 8, 16)
		snapshot(t, b, 2)
		feed(t, b, 16, 18)
		if err := b.Finish(nil); err != nil { // only to be sure all are stored
			t.Fatal(err)
		}
		_, dupB := b.Published()
		b.Close()

		// Attempt 3: checkpoint 3 after batch 20, then a failure after 2
		// more batches; attempt 4 restores checkpoint 3 and finishes.
		c := newTestSink(t, cfg(name, dedupe))
		openSink(t, c, 0, 1)
		if err := restore(c, 1, chk1); err != nil {
			t.Fatal(err)
		}
		feed(t, c, 8, 20)
		chk3 := snapshot(t, c, 3)
		feed(t, c, 20, 22)
		if err := c.Finish(nil); err != nil {
			t.Fatal(err)
		}
		_, dupC := c.Published()
		c.Close()

		d := newTestSink(t, cfg(name, dedupe))
		openSink(t, d, 0, 1)
		if err := restore(d, 3, chk3); err != nil {
			t.Fatal(err)
		}
		feed(t, d, 20, 30)
		if err := d.Finish(nil); err != nil {
			t.Fatal(err)
		}
		_, dupD := d.Published()
		return storedIDs(t, js, name), dupB + dupC + dupD
	}

	t.Run("with message ids", func(t *testing.T) {
		stored, dropped := run(t, "dedup", true)
		checkExactlyOnce(t, stored, 30*sinkBatch)
		// Replayed and dropped: batches 8-13 (attempt 2), 8-17 (3), 20-21 (4).
		if want := int64((6 + 10 + 2) * sinkBatch); dropped != want {
			t.Fatalf("the stream reported %d duplicates, want %d", dropped, want)
		}
	})
	t.Run("without message ids", func(t *testing.T) {
		stored, _ := run(t, "plain", false)
		if dup, want := countDuplicates(stored), (6+10+2)*sinkBatch; dup != want {
			t.Fatalf("%d rows stored twice, want %d: without ids every replayed row is stored again", dup, want)
		}
	})
}

// TestSinkMessageIDs checks the ids: deterministic, per subtask and
// parallelism, continued by a restore at the same parallelism and
// started afresh (named by the restored checkpoint) at another.
func TestSinkMessageIDs(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "ids", "ids.>")
	cfg := fmt.Sprintf(`{"url":%q,"subject":"ids.x"}`, url)
	s := newTestSink(t, cfg)
	openSink(t, s, 1, 3)
	if got, want := s.MessageID(), "weir.job.nats.1-3.0.0"; got != want {
		t.Fatalf("first id %q, want %q", got, want)
	}
	feed(t, s, 0, 2)
	snaps := []*stream.OperatorSnapshot{nil, snapshot(t, s, 5), nil}
	stored := readStream(t, js, "ids")
	if len(stored) != 2*sinkBatch || stored[99].msgID != "weir.job.nats.1-3.0.99" {
		t.Fatalf("stored %d messages, the last with id %q", len(stored), stored[len(stored)-1].msgID)
	}

	same := newTestSink(t, cfg)
	openSink(t, same, 1, 3)
	if err := restore(same, 5, redistribute(t, 5, snaps, 3)[1]); err != nil {
		t.Fatal(err)
	}
	if got, want := same.MessageID(), "weir.job.nats.1-3.0.100"; got != want {
		t.Fatalf("id after a restore %q, want %q", got, want)
	}
	for sub, st := range redistribute(t, 5, snaps, 2) {
		other := newTestSink(t, cfg)
		openSink(t, other, sub, 2)
		if err := restore(other, 5, st); err != nil {
			t.Fatal(err)
		}
		if got, want := other.MessageID(), fmt.Sprintf("weir.job.nats.%d-2.5.0", sub); got != want {
			t.Fatalf("id after a rescale %q, want %q", got, want)
		}
	}
}

// TestSinkRescaledNoLoss restores a sink of parallelism 2 at parallelism
// 1 and 3: the rows after the checkpoint are replayed under new ids, so
// they may be stored twice, but none is lost.
func TestSinkRescaledNoLoss(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "out", "out.>")
	cfg := fmt.Sprintf(`{"url":%q,"subject":"out.rows"}`, url)
	// Two subtasks, each with half the batches.
	snaps := make([]*stream.OperatorSnapshot, 2)
	for sub := range 2 {
		s := newTestSink(t, cfg)
		openSink(t, s, sub, 2)
		for i := sub; i < 10; i += 2 {
			feed(t, s, i, i+1)
		}
		snaps[sub] = snapshot(t, s, 1)
		for i := 10 + sub; i < 14; i += 2 {
			feed(t, s, i, i+1)
		}
		if err := s.Finish(nil); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	restored := redistribute(t, 1, snaps, 3)
	for sub := range 3 {
		s := newTestSink(t, cfg)
		openSink(t, s, sub, 3)
		if err := restore(s, 1, restored[sub]); err != nil {
			t.Fatal(err)
		}
		for i := 10 + sub; i < 20; i += 3 {
			feed(t, s, i, i+1)
		}
		if err := s.Finish(nil); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	stored := storedIDs(t, js, "out")
	seen := map[int64]bool{}
	for _, id := range stored {
		seen[id] = true
	}
	for id := range int64(20 * sinkBatch) {
		if !seen[id] {
			t.Fatalf("row %d lost (%d rows stored)", id, len(stored))
		}
	}
	if len(seen) != 20*sinkBatch {
		t.Fatalf("%d distinct rows stored, want %d", len(seen), 20*sinkBatch)
	}
}

// TestSinkSubjectFieldRaw publishes format raw to subjects taken from
// the rows, into a named stream.
func TestSinkSubjectFieldRaw(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "routed", "routed.>")
	schema := stream.MustSchema(stream.Field{Name: "to", Type: stream.TypeString}, stream.Field{Name: "body", Type: stream.TypeString})
	s := newTestSink(t, fmt.Sprintf(`{"url":%q,"stream":"routed","subjectField":"to","format":"raw","valueField":"body"}`, url))
	octx := octxFor(0, 1)
	octx.InputSchemas = []*stream.Schema{schema}
	if err := s.Open(context.Background(), octx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := stream.NewBatch(schema, 4)
	b.AppendRow("routed.a", "one")
	b.AppendRow("routed.b", "two")
	b.AppendRow("routed.a", nil)
	if err := s.ProcessBatch(0, b, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range readStream(t, js, "routed") {
		got = append(got, m.subject+"="+string(m.data))
	}
	if want := []string{"routed.a=one", "routed.b=two", "routed.a="}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored %v, want %v", got, want)
	}

	for _, tc := range []struct {
		to   any
		want string
	}{
		{nil, "null"},
		{"routed.secret value", "whitespace"},
		{"routed.*", "wildcard"},
		{"elsewhere.x", "no answer from JetStream"},
	} {
		b := stream.NewBatch(schema, 1)
		b.AppendRow(tc.to, "x")
		err := s.ProcessBatch(0, b, nil)
		if err == nil {
			err = s.Finish(nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("subject %v: error %v, want one saying %q", tc.to, err, tc.want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("error %q echoes the row", err)
		}
		if strings.Contains(tc.want, "JetStream") {
			break // the sink has failed for good
		}
	}
}

// TestSinkFailures checks Open against a missing stream and an
// unreachable server, an oversized row, and a server that goes away with
// messages unacknowledged.
func TestSinkFailures(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "out", "out.>")
	for _, tc := range []struct {
		name, cfg, want string
	}{
		{"no stream for subject", fmt.Sprintf(`{"url":%q,"subject":"nowhere.x"}`, url), `no JetStream stream on`},
		{"no such stream", fmt.Sprintf(`{"url":%q,"stream":"absent","subjectField":"k"}`, url), `stream "absent" not found`},
		{"subject of another stream", fmt.Sprintf(`{"url":%q,"stream":"other","subject":"out.x"}`, url), `captured by stream "out", not by stream "other"`},
		{"unreachable", `{"url":"nats://127.0.0.1:1","subject":"out.x"}`, "cannot connect to NATS at nats://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "subject of another stream" {
				createStream(t, js, "other", "other.>")
			}
			s := newTestSink(t, tc.cfg)
			octx := octxFor(0, 1)
			octx.InputSchemas = []*stream.Schema{rowSchema}
			err := s.Open(context.Background(), octx)
			s.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open error %v, want one saying %q", err, tc.want)
			}
			if strings.HasPrefix(tc.name, "no") && !errors.Is(err, ErrNoStream) {
				t.Fatalf("error %v is not ErrNoStream", err)
			}
		})
	}

	t.Run("oversized row", func(t *testing.T) {
		s := newTestSink(t, fmt.Sprintf(`{"url":%q,"subject":"out.x","maxMessageBytes":20}`, url))
		openSink(t, s, 0, 1)
		err := s.ProcessBatch(0, inputBatch(0), nil)
		if err == nil || !strings.Contains(err.Error(), "row 0 of a batch is") || !strings.Contains(err.Error(), "maxMessageBytes 20") {
			t.Fatalf("error %v, want one naming the row and the limit", err)
		}
	})

	t.Run("server gone", func(t *testing.T) {
		srv := natstest.StartServer(t, nil)
		js := client(t, srv.ClientURL())
		createStream(t, js, "out", "out.>")
		s := newTestSink(t, fmt.Sprintf(`{"url":%q,"subject":"out.x","ackTimeout":"2s"}`, srv.ClientURL()))
		s.spec.conn.maxReconnects = 2
		openSink(t, s, 0, 1)
		feed(t, s, 0, 2)
		if err := s.Finish(nil); err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		srv.WaitForShutdown()
		var err error
		for i := 0; err == nil && i < 1000; i++ {
			if err = s.ProcessBatch(0, inputBatch(i), nil); err == nil && i%10 == 9 {
				err = s.flush()
			}
		}
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(srv.ClientURL(), "nats://")) {
			t.Fatalf("error %v, want one naming the server", err)
		}
		c := &stream.SnapshotContext{CheckpointID: 9}
		if err := s.SnapshotState(c); err == nil {
			t.Fatal("a checkpoint after failed publishes succeeded")
		}
	})
}
