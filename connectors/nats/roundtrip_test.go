package nats

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/stream"
)

// chain is a task of a source and a sink, driven by hand: what Poll
// emits goes straight into the sink, and a checkpoint snapshots the
// source, then the sink, as a chained task does at a barrier.
type chain struct {
	t    testing.TB
	src  stream.Source
	sink stream.Operator
}

func (c *chain) Collect(b *stream.Batch) {
	if err := c.sink.ProcessBatch(0, b, &collector{}); err != nil {
		c.t.Fatalf("sink: %v", err)
	}
}

func (c *chain) EmitWatermark(wm int64) {
	if err := c.sink.ProcessWatermark(wm, &collector{}); err != nil {
		c.t.Fatalf("sink: %v", err)
	}
}

// pollRows polls until at least n rows went to the sink, or the source
// ended (true).
func (c *chain) pollRows(n int) bool {
	c.t.Helper()
	var cc collector
	st := pollUntil(c.t, c.src, &cc, func() bool { return cc.len() >= n })
	for _, b := range cc.batches {
		c.Collect(b)
	}
	for _, wm := range cc.watermarks {
		c.EmitWatermark(wm)
	}
	return st == stream.PollEnd
}

// drain polls until the source ends.
func (c *chain) drain() { c.pollRows(1 << 62) }

// checkpoint snapshots the source and the sink for checkpoint id.
func (c *chain) checkpoint(id int64) (src, sink *stream.OperatorSnapshot) {
	return snapshot(c.t, c.src.(stream.Checkpointed), id), snapshot(c.t, c.sink.(stream.Checkpointed), id)
}

func (c *chain) restore(id int64, src, sink *stream.OperatorSnapshot) {
	c.t.Helper()
	if err := restore(c.src.(stream.Checkpointed), id, src); err != nil {
		c.t.Fatal(err)
	}
	if err := restore(c.sink.(stream.Checkpointed), id, sink); err != nil {
		c.t.Fatal(err)
	}
}

func (c *chain) close() {
	c.src.Close()
	c.sink.Close()
}

// TestNATSToFile reads a stream into the file sink, exactly once with
// both: checkpoint 1 completes, checkpoint 2 is taken but the job fails
// before it completes, and the restore from checkpoint 1 runs to the end.
// The committed files hold every message exactly once.
func TestNATSToFile(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "events", "ev.>")
	const n = 2000
	publishEvents(t, js, "ev.a", 0, n)
	dir := t.TempDir()

	open := func() *chain {
		src := jsonSource(t, url, `"batchSize":64,"stopAtEnd":true`)
		sink, err := connectors.NewFileSink(connectors.FileSinkConfig{Path: dir, Format: "jsonl"})
		if err != nil {
			t.Fatal(err)
		}
		octx := octxFor(0, 1)
		octx.Checkpointing = true
		if err := src.Open(context.Background(), octx); err != nil {
			t.Fatal(err)
		}
		sctx := octxFor(0, 1)
		sctx.OperatorUID, sctx.Checkpointing, sctx.InputSchemas = "files", true, []*stream.Schema{src.Schema()}
		if err := sink.Open(context.Background(), sctx); err != nil {
			t.Fatal(err)
		}
		return &chain{t: t, src: src, sink: sink}
	}

	a := open()
	a.pollRows(300)
	src1, sink1 := a.checkpoint(1)
	if err := a.sink.(stream.CheckpointListener).NotifyCheckpointComplete(1); err != nil {
		t.Fatal(err)
	}
	a.pollRows(250)
	a.checkpoint(2) // never completes
	a.pollRows(200)
	a.close()

	b := open()
	b.restore(1, src1, sink1)
	b.drain()
	if err := b.sink.Finish(nil); err != nil {
		t.Fatal(err)
	}
	b.checkpoint(3)
	if err := b.sink.(stream.CheckpointListener).NotifyCheckpointComplete(3); err != nil {
		t.Fatal(err)
	}
	b.close()

	var got []int64
	files, _ := filepath.Glob(filepath.Join(dir, "part-*"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e struct {
				ID int64
				K  string
				TS string // the file sink writes RFC 3339 with milliseconds
			}
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			want := eventFor(e.ID)
			if ts := time.UnixMilli(want.TS).UTC().Format("2006-01-02T15:04:05.000Z07:00"); e.K != want.K || e.TS != ts {
				t.Fatalf("%s: row %+v, want %+v (ts %s)", f, e, want, ts)
			}
			got = append(got, e.ID)
		}
		fh.Close()
	}
	checkExactlyOnce(t, got, n)
}

// TestFileToNATS reads JSON-lines files with the file source at
// parallelism 2, each subtask chained to a nats sink subtask, through a
// failure after checkpoint 1 (rows after it already stored) and a
// restore: the stream holds every row exactly once.
func TestFileToNATS(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "out", "out.>")
	dir := t.TempDir()
	const files, perFile = 4, 600
	for f := range files {
		var sb strings.Builder
		for i := range perFile {
			e := eventFor(int64(f*perFile + i))
			fmt.Fprintf(&sb, `{"id":%d,"k":%q,"ts":%d}`+"\n", e.ID, e.K, e.TS)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in-%d.jsonl", f)), []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const par = 2
	open := func(sub int) *chain {
		src, err := connectors.NewFileSource(connectors.FileSourceConfig{
			Path: dir, Format: "jsonl", BatchSize: 50,
			Fields: []connectors.FileField{{Name: "id", Type: "int64"}, {Name: "k", Type: "string"}, {Name: "ts", Type: "timestamp"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Open(context.Background(), octxFor(sub, par)); err != nil {
			t.Fatal(err)
		}
		sink := newTestSink(t, fmt.Sprintf(`{"url":%q,"subject":"out.events","maxPending":100}`, url))
		octx := octxFor(sub, par)
		octx.Checkpointing, octx.InputSchemas = true, []*stream.Schema{eventSchema}
		if err := sink.Open(context.Background(), octx); err != nil {
			t.Fatal(err)
		}
		return &chain{t: t, src: src, sink: sink}
	}

	type state struct{ src, sink *stream.OperatorSnapshot }
	saved := make([]state, par)
	stored := 0
	for sub := range par {
		a := open(sub)
		a.pollRows((3 + sub) * 50)
		saved[sub].src, saved[sub].sink = a.checkpoint(1)
		a.pollRows(4 * 50)
		if err := a.sink.Finish(nil); err != nil { // the rows after the checkpoint are stored
			t.Fatal(err)
		}
		published, _ := a.sink.(*Sink).Published()
		stored += int(published)
		a.close()
	}
	if got := msgCount(t, js, "out"); got != uint64(stored) {
		t.Fatalf("stream holds %d messages, want the %d published before the failure", got, stored)
	}
	var dropped int64
	for sub := range par {
		b := open(sub)
		b.restore(1, saved[sub].src, saved[sub].sink)
		b.drain()
		if err := b.sink.Finish(nil); err != nil {
			t.Fatal(err)
		}
		_, d := b.sink.(*Sink).Published()
		dropped += d
		b.close()
	}
	checkExactlyOnce(t, storedIDs(t, js, "out"), files*perFile)
	if dropped != 2*4*50 {
		t.Fatalf("the stream dropped %d replayed rows, want %d", dropped, 2*4*50)
	}
}

var eventSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "k", Type: stream.TypeString},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
)
