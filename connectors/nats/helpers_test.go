package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// deadline is how long a test waits for a condition: generous, for a
// slow and shared machine.
const deadline = 60 * time.Second

// client connects a test client to url and closes it at cleanup.
func client(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// createStream creates a file-stored stream called name on subjects.
func createStream(t testing.TB, js jetstream.JetStream, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: subjects})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// event is the JSON message the source tests publish: id is its index,
// counted from 0.
type event struct {
	ID int64  `json:"id"`
	K  string `json:"k"`
	TS int64  `json:"ts"`
}

const eventBase = int64(1_700_000_000_000)

func eventFor(i int64) event {
	return event{ID: i, K: fmt.Sprintf("k%d", i%7), TS: eventBase + i*10}
}

var eventFields = `[{"name":"id","type":"int64"},{"name":"k","type":"string"},{"name":"ts","type":"timestamp"}]`

// publishEvents publishes events first..first+n-1 to subject, waiting for
// every acknowledgement.
func publishEvents(t testing.TB, js jetstream.JetStream, subject string, first, n int64) {
	t.Helper()
	for i := first; i < first+n; i++ {
		data, _ := json.Marshal(eventFor(i))
		if _, err := js.PublishAsync(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	waitAcks(t, js)
}

func waitAcks(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(deadline):
		t.Fatal("publish acknowledgements did not arrive")
	}
}

// collector keeps every batch and watermark it is given.
type collector struct {
	batches    []*stream.Batch
	watermarks []int64
}

func (c *collector) Collect(b *stream.Batch) {
	if err := b.Validate(); err != nil {
		panic(err)
	}
	c.batches = append(c.batches, b)
}

func (c *collector) EmitWatermark(wm int64) {
	if n := len(c.watermarks); n > 0 && wm < c.watermarks[n-1] {
		panic(fmt.Sprintf("watermark %d after %d", wm, c.watermarks[n-1]))
	}
	c.watermarks = append(c.watermarks, wm)
}

func (c *collector) rows() [][]any {
	var out [][]any
	for _, b := range c.batches {
		for i := range b.Len() {
			out = append(out, b.Row(i))
		}
	}
	return out
}

func (c *collector) len() int {
	n := 0
	for _, b := range c.batches {
		n += b.Len()
	}
	return n
}

func octxFor(subtask, parallelism int) *stream.OperatorContext {
	return &stream.OperatorContext{JobID: "job", OperatorUID: "nats", Subtask: subtask, Parallelism: parallelism, Attempt: 1}
}

// pollUntil polls src into c until cond holds or the source ends, and
// returns the last status. It fails the test at the deadline.
func pollUntil(t testing.TB, src stream.Source, c *collector, cond func() bool) stream.PollStatus {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		st, err := src.Poll(context.Background(), c)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		switch st {
		case stream.PollEnd:
			return st
		case stream.PollIdle:
			if time.Now().After(end) {
				t.Fatalf("condition not reached within %v (%d rows so far)", deadline, c.len())
			}
			time.Sleep(time.Millisecond) // a poll interval, as the runtime's backoff
		}
	}
	return stream.PollEmitted
}

// drain polls src until PollEnd.
func drain(t testing.TB, src stream.Source, c *collector) {
	t.Helper()
	if st := pollUntil(t, src, c, func() bool { return false }); st != stream.PollEnd {
		t.Fatalf("source did not end")
	}
}

// pollErr polls src until it returns an error, and returns it.
func pollErr(t testing.TB, src stream.Source) error {
	t.Helper()
	var c collector
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		st, err := src.Poll(context.Background(), &c)
		if err != nil {
			return err
		}
		if st == stream.PollEnd {
			t.Fatal("source ended instead of failing")
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("source did not fail within %v", deadline)
	return nil
}

func snapshot(t testing.TB, op stream.Checkpointed, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: stream.KeyGroupRange{Start: 0, End: -1}}
	if err := op.SnapshotState(c); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return &c.State
}

func restore(op stream.Checkpointed, id int64, st *stream.OperatorSnapshot) error {
	return op.RestoreState(&stream.RestoreContext{CheckpointID: id, JobID: "job", State: st})
}

const testMaxParallelism = 128

// redistribute hands the state that the subtasks of one operator
// snapshotted for checkpoint id (snaps[i] of old subtask i; nil for one
// that had finished) to the q subtasks of the restoring job as a restore
// does: through checkpoint storage, with union state in objects of its
// own, loaded with checkpoint.LoadOperatorState.
func redistribute(t testing.TB, id int64, snaps []*stream.OperatorSnapshot, q int) []*stream.OperatorSnapshot {
	t.Helper()
	st := checkpoint.NewStorage(blobstore.NewMem())
	p := len(snaps)
	var handles []*weirpb.StateHandle
	for sub, snap := range snaps {
		if snap == nil {
			continue
		}
		kg := stream.KeyGroupRangeFor(testMaxParallelism, p, sub)
		parts := []*stream.OperatorSnapshot{{List: snap.List}}
		if len(snap.Union) > 0 {
			parts = append(parts, &stream.OperatorSnapshot{Union: snap.Union})
		}
		for i, part := range parts {
			data, err := checkpoint.EncodeSnapshot(part)
			if err != nil {
				t.Fatal(err)
			}
			upload := st.UploadSnapshot
			if i > 0 {
				upload = st.UploadUnionSnapshot
			}
			h, err := upload(context.Background(), "job", id, "op", sub, p, 1, kg, data)
			if err != nil {
				t.Fatal(err)
			}
			handles = append(handles, h)
		}
	}
	out := make([]*stream.OperatorSnapshot, q)
	for sub := range out {
		snap, err := st.LoadOperatorState(context.Background(), handles, stream.KeyGroupRangeFor(testMaxParallelism, q, sub), sub, q)
		if err != nil {
			t.Fatal(err)
		}
		out[sub] = snap
	}
	return out
}

// counts checks that ids holds every id in [0, n) exactly once and
// reports the lost and duplicated ones.
func checkExactlyOnce(t testing.TB, ids []int64, n int64) {
	t.Helper()
	seen := make(map[int64]int, n)
	for _, id := range ids {
		seen[id]++
	}
	var lost, dup, stray int64
	for id := range n {
		switch c := seen[id]; {
		case c == 0:
			lost++
		case c > 1:
			dup += int64(c - 1)
		}
	}
	for id := range seen {
		if id < 0 || id >= n {
			stray++
		}
	}
	if lost != 0 || dup != 0 || stray != 0 {
		t.Fatalf("%d rows for %d ids: %d lost, %d duplicated, %d not expected", len(ids), n, lost, dup, stray)
	}
}

// ids returns column col of rows as int64s.
func ids(rows [][]any, col int) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r[col].(int64)
	}
	return out
}

// readStream returns the payloads of every message in the stream, in
// order, with their subjects and Nats-Msg-Id headers.
type storedMsg struct {
	seq     uint64
	subject string
	data    []byte
	msgID   string
}

func readStream(t testing.TB, js jetstream.JetStream, name string) []storedMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedMsg
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	for uint64(len(out)) < info.State.Msgs {
		m, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		meta, _ := m.Metadata()
		out = append(out, storedMsg{seq: meta.Sequence.Stream, subject: m.Subject(), data: m.Data(), msgID: m.Headers().Get(jetstream.MsgIDHeader)})
	}
	return out
}

// msgCount returns how many messages the stream holds.
func msgCount(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
