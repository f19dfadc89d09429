package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
)

// jsonSource returns a json source of stream "events" at url; extra is
// more config, as JSON object members.
func jsonSource(t testing.TB, url, extra string) *Source {
	t.Helper()
	cfg := fmt.Sprintf(`{"url":%q,"stream":"events","format":"json","fields":%s`, url, eventFields)
	if extra != "" {
		cfg += "," + extra
	}
	src, err := newSource([]byte(cfg + "}"))
	if err != nil {
		t.Fatal(err)
	}
	return src.(*Source)
}

func openSource(t testing.TB, src *Source, sub, par int) {
	t.Helper()
	if err := src.Open(context.Background(), octxFor(sub, par)); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { src.Close() })
}

// TestSourceExactlyOnceThroughRestore reads part of a stream, takes a
// checkpoint, reads on (rows lost in the "crash"), and restores a new
// instance from the checkpoint: the rows before the checkpoint and those
// after the restore hold every message exactly once.
func TestSourceExactlyOnceThroughRestore(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "events", "ev.>")
	const n = 2500
	publishEvents(t, js, "ev.a", 0, n)

	src := jsonSource(t, url, `"batchSize":100,"stopAtEnd":true`)
	openSource(t, src, 0, 1)
	var before collector
	pollUntil(t, src, &before, func() bool { return before.len() >= 700 })
	st := snapshot(t, src, 1)
	if pos, owner := src.Position(); !owner || pos != uint64(before.len())+1 {
		t.Fatalf("position after %d rows = %d (owner %v), want %d", before.len(), pos, owner, before.len()+1)
	}
	var lost collector
	pollUntil(t, src, &lost, func() bool { return lost.len() >= 300 })
	src.Close()

	src2 := jsonSource(t, url, `"batchSize":100,"stopAtEnd":true`)
	openSource(t, src2, 0, 1)
	if err := restore(src2, 1, st); err != nil {
		t.Fatal(err)
	}
	var after collector
	drain(t, src2, &after)
	got := append(ids(before.rows(), 0), ids(after.rows(), 0)...)
	checkExactlyOnce(t, got, n)
	if !slices.IsSorted(got) {
		t.Fatal("rows are not in stream order")
	}
	if wms := after.watermarks; len(wms) != 1 || wms[0] != stream.MaxWatermark {
		t.Fatalf("watermarks %v, want only the end of input", wms)
	}
	for i, r := range after.rows() {
		want := eventFor(int64(before.len() + i))
		if r[1] != want.K || r[2] != want.TS {
			t.Fatalf("row %v, want %+v", r, want)
		}
	}
}

// TestSourceRescaled runs the source through restores at other
// parallelisms, state going through checkpoint storage as on a real
// restore: only the subtask holding the stream's position reads, the
// others end at once, and every message is emitted exactly once.
func TestSourceRescaled(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "events", "ev.>")
	const n = 3000
	publishEvents(t, js, "ev.a", 0, n)
	pars := []int{2, 3, 1, 4, 2}

	var got []int64
	var restored []*stream.OperatorSnapshot
	for stage, par := range pars {
		id := int64(stage + 1)
		last := stage == len(pars)-1
		snaps := make([]*stream.OperatorSnapshot, par)
		readers := 0
		for sub := range par {
			src := jsonSource(t, url, `"batchSize":64,"stopAtEnd":true`)
			openSource(t, src, sub, par)
			if restored != nil {
				if err := restore(src, id-1, restored[sub]); err != nil {
					t.Fatal(err)
				}
			}
			var c collector
			if last {
				drain(t, src, &c)
			} else {
				pollUntil(t, src, &c, func() bool { return c.len() >= 400 })
			}
			if _, owner := src.Position(); owner {
				readers++
			} else if c.len() != 0 || len(c.watermarks) != 1 || c.watermarks[0] != stream.MaxWatermark {
				t.Fatalf("stage %d: subtask %d reads no stream but emitted %d rows and watermarks %v", stage, sub, c.len(), c.watermarks)
			}
			got = append(got, ids(c.rows(), 0)...)
			if !last {
				snaps[sub] = snapshot(t, src, id)
				var lost collector // read after the checkpoint, lost
				pollUntil(t, src, &lost, func() bool { return lost.len() >= 100 })
			}
			src.Close()
		}
		if readers != 1 {
			t.Fatalf("stage %d (parallelism %d): %d subtasks read the stream, want 1", stage, par, readers)
		}
		if !last {
			restored = redistribute(t, id, snaps, pars[stage+1])
		}
	}
	checkExactlyOnce(t, got, n)
}

// TestSourceStartPositions checks every startFrom on a fresh start.
func TestSourceStartPositions(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	s := createStream(t, js, "events", "ev.>")
	publishEvents(t, js, "ev.a", 0, 50)
	m, err := s.GetMsg(context.Background(), 31)
	if err != nil {
		t.Fatal(err)
	}
	at := m.Time.UTC().Format(time.RFC3339Nano)

	for _, tc := range []struct {
		name, cfg string
		first     int64 // the first id read, then every later one
	}{
		{"first", `"startFrom":"first"`, 0},
		{"default", ``, 0},
		{"sequence", `"startFrom":"sequence","startSequence":20`, 19},
		{"time", fmt.Sprintf(`"startFrom":"time","startTime":%q`, at), 30},
		{"sequence past the end", `"startFrom":"sequence","startSequence":500`, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `"stopAtEnd":true`
			if tc.cfg != "" {
				cfg += "," + tc.cfg
			}
			src := jsonSource(t, url, cfg)
			openSource(t, src, 0, 1)
			var c collector
			drain(t, src, &c)
			got := ids(c.rows(), 0)
			var want []int64
			for i := tc.first; i < 50; i++ {
				want = append(want, i)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("read ids %v, want %v", got, want)
			}
		})
	}

	t.Run("new", func(t *testing.T) {
		src := jsonSource(t, url, `"startFrom":"new"`)
		openSource(t, src, 0, 1)
		var c collector
		if st, err := src.Poll(context.Background(), &c); err != nil || st != stream.PollIdle {
			t.Fatalf("Poll before new messages = %v, %v; want idle", st, err)
		}
		// A checkpoint before any new message holds the resolved start,
		// so a restore does not skip what arrives in between.
		st := snapshot(t, src, 1)
		src.Close()
		publishEvents(t, js, "ev.a", 50, 20)
		src2 := jsonSource(t, url, `"startFrom":"new"`)
		openSource(t, src2, 0, 1)
		if err := restore(src2, 1, st); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, src2, &c, func() bool { return c.len() >= 20 })
		got := ids(c.rows(), 0)
		if !slices.Equal(got, []int64{50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69}) {
			t.Fatalf("read ids %v, want 50..69", got)
		}
	})
}

// TestSourceSubjectsAndBound reads two of three subjects of a stream in
// bounded mode: it ends after the last matching message present at
// start, though other subjects' messages follow it and more arrive.
func TestSourceSubjectsAndBound(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "events", "ev.>")
	for i := range int64(300) {
		publishEvents(t, js, "ev."+string(rune('a'+i%3)), i, 1)
	}
	publishEvents(t, js, "ev.b", 300, 5) // after the last a and c
	src := jsonSource(t, url, `"stopAtEnd":true,"batchSize":50,"subjects":["ev.a","ev.c"]`)
	openSource(t, src, 0, 1)
	publishEvents(t, js, "ev.a", 305, 5) // after the start: not read
	var c collector
	drain(t, src, &c)
	var want []int64
	for i := range int64(300) {
		if i%3 != 1 {
			want = append(want, i)
		}
	}
	if got := ids(c.rows(), 0); !slices.Equal(got, want) {
		t.Fatalf("read %d ids %v..., want %d ids of subjects ev.a and ev.c", len(got), got[:min(10, len(got))], len(want))
	}

	t.Run("wildcard", func(t *testing.T) {
		src := jsonSource(t, url, `"stopAtEnd":true,"subjects":["ev.*"]`)
		openSource(t, src, 0, 1)
		var c collector
		drain(t, src, &c)
		checkExactlyOnce(t, ids(c.rows(), 0), 310)
	})
}

// TestSourceBoundTailRemoved: the bound is the last message at start;
// when that message is deleted before it is read, the source still ends.
func TestSourceBoundTailRemoved(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	s := createStream(t, js, "events", "ev.>")
	publishEvents(t, js, "ev.a", 0, 40)
	src := jsonSource(t, url, `"stopAtEnd":true`)
	openSource(t, src, 0, 1)
	for seq := uint64(38); seq <= 40; seq++ {
		if err := s.DeleteMsg(context.Background(), seq); err != nil {
			t.Fatal(err)
		}
	}
	publishEvents(t, js, "ev.b", 40, 3) // after the bound
	var c collector
	drain(t, src, &c)
	if got := ids(c.rows(), 0); len(got) != 37 || got[36] != 36 {
		t.Fatalf("read ids %v, want 0..36", got)
	}
}

// TestSourceDecoding checks format json (types, nulls, missing keys) and
// format raw (every column), and what a bad message does.
func TestSourceDecoding(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	s := createStream(t, js, "events", "ev.>")
	msgs := []string{
		`{"id": 1, "k": "x", "ts": "2024-05-01T12:00:00.250Z", "f": 1.5, "b": true}`,
		`{"id": 2, "k": null, "ts": 1714564800250, "extra": {"nested": [1, 2]}}`,
		`{"id": 3}`,
		`{"id": "secret-value-4"}`, // a type error
		`not json at all`,
		`{"id": 6, "k": "` + strings.Repeat("y", 3000) + `"}`, // over maxMessageBytes
		`{"id": 7, "k": "z"}`,
	}
	for _, m := range msgs {
		if _, err := js.Publish(context.Background(), "ev.x", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	fields := `"fields":[{"name":"id","type":"int64"},{"name":"k","type":"string"},{"name":"ts","type":"timestamp"},{"name":"f","type":"float64"},{"name":"b","type":"bool"}]`

	t.Run("json fail", func(t *testing.T) {
		src, err := newSource([]byte(fmt.Sprintf(`{"url":%q,"stream":"events","format":"json",%s,"stopAtEnd":true,"maxMessageBytes":2048}`, url, fields)))
		if err != nil {
			t.Fatal(err)
		}
		openSource(t, src.(*Source), 0, 1)
		var c collector
		for end := time.Now().Add(deadline); err == nil; {
			var st stream.PollStatus
			st, err = src.Poll(context.Background(), &c)
			if st == stream.PollEnd || time.Now().After(end) {
				t.Fatal("the source did not fail on the bad message")
			}
		}
		for _, want := range []string{"sequence 4", `"id"`, "int64"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "secret-value") {
			t.Fatalf("error %q echoes the data", err)
		}
	})

	t.Run("json skip", func(t *testing.T) {
		src, err := newSource([]byte(fmt.Sprintf(`{"url":%q,"stream":"events","format":"json",%s,"stopAtEnd":true,"maxMessageBytes":2048,"onDecodeError":"skip"}`, url, fields)))
		if err != nil {
			t.Fatal(err)
		}
		openSource(t, src.(*Source), 0, 1)
		var c collector
		drain(t, src, &c)
		want := [][]any{
			{int64(1), "x", int64(1714564800250), 1.5, true},
			{int64(2), nil, int64(1714564800250), nil, nil},
			{int64(3), nil, nil, nil, nil},
			{int64(7), "z", nil, nil, nil},
		}
		if got := c.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		if n := src.(*Source).Skipped(); n != 3 {
			t.Fatalf("skipped %d, want 3", n)
		}
	})

	t.Run("raw", func(t *testing.T) {
		src, err := newSource([]byte(fmt.Sprintf(`{"url":%q,"stream":"events","stopAtEnd":true,"subjects":["ev.x"]}`, url)))
		if err != nil {
			t.Fatal(err)
		}
		openSource(t, src.(*Source), 0, 1)
		var c collector
		drain(t, src, &c)
		rows := c.rows()
		if len(rows) != len(msgs) {
			t.Fatalf("%d rows, want %d", len(rows), len(msgs))
		}
		for i, r := range rows {
			m, err := s.GetMsg(context.Background(), uint64(i+1))
			if err != nil {
				t.Fatal(err)
			}
			want := []any{"ev.x", msgs[i], int64(i + 1), m.Time.UnixMilli()}
			if fmt.Sprint(r) != fmt.Sprint(want) {
				t.Fatalf("row %d = %.80v, want %.80v", i, r, want)
			}
		}
	})
}

// TestSourceWatermark checks the source's own watermarks: event times in
// Batch.Times, the watermark max - maxOutOfOrderness - 1 after each
// batch, and the end of input.
func TestSourceWatermark(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "events", "ev.>")
	publishEvents(t, js, "ev.a", 0, 100)
	src := jsonSource(t, url, `"stopAtEnd":true,"batchSize":30,"watermark":{"field":"ts","maxOutOfOrderness":"15ms"}`)
	openSource(t, src, 0, 1)
	var c collector
	drain(t, src, &c)
	var want []int64
	for _, b := range c.batches {
		if len(b.Times) != b.Len() {
			t.Fatalf("batch of %d rows has %d times", b.Len(), len(b.Times))
		}
		for i := range b.Len() {
			if b.Times[i] != b.Cols[2].Ints[i] {
				t.Fatalf("time %d, want the ts field %d", b.Times[i], b.Cols[2].Ints[i])
			}
		}
		want = append(want, slices.Max(b.Times)-15-1)
	}
	want = append(want, stream.MaxWatermark)
	if !slices.Equal(c.watermarks, want) {
		t.Fatalf("watermarks %v, want %v", c.watermarks, want)
	}
}

// TestSourceFailures checks the errors of a server that cannot be
// reached, of a missing stream, and of a server that goes away.
func TestSourceFailures(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		src := jsonSource(t, "nats://user:hunter2@127.0.0.1:1", `"connectTimeout":"2s"`)
		err := src.Open(context.Background(), octxFor(0, 1))
		src.Close()
		if err == nil {
			t.Fatal("Open succeeded")
		}
		for _, want := range []string{"cannot connect", "127.0.0.1:1", "check that the server runs"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("error %q shows the password", err)
		}
	})
	t.Run("no stream", func(t *testing.T) {
		url := natstest.Start(t)
		src := jsonSource(t, url, "")
		err := src.Open(context.Background(), octxFor(0, 1))
		src.Close()
		if !errors.Is(err, ErrNoStream) || !strings.Contains(err.Error(), `"events"`) {
			t.Fatalf("Open error %v, want ErrNoStream naming the stream", err)
		}
	})
	t.Run("filter outside the stream", func(t *testing.T) {
		url := natstest.Start(t)
		js := client(t, url)
		createStream(t, js, "events", "ev.>")
		src := jsonSource(t, url, `"subjects":["ev.a","other.x"]`)
		err := src.Open(context.Background(), octxFor(1, 2))
		src.Close()
		if err == nil || !strings.Contains(err.Error(), `subjects[1] "other.x" matches none of the subjects of stream "events" (ev.>)`) {
			t.Fatalf("Open error %v, want one explaining the bad filter", err)
		}
	})
	t.Run("server gone", func(t *testing.T) {
		srv := natstest.StartServer(t, nil)
		js := client(t, srv.ClientURL())
		createStream(t, js, "events", "ev.>")
		publishEvents(t, js, "ev.a", 0, 10)
		src := jsonSource(t, srv.ClientURL(), "")
		src.spec.conn.maxReconnects = 2
		openSource(t, src, 0, 1)
		var c collector
		pollUntil(t, src, &c, func() bool { return c.len() == 10 })
		srv.Shutdown()
		srv.WaitForShutdown()
		err := pollErr(t, src)
		if !strings.Contains(err.Error(), srv.ClientURL()[len("nats://"):]) {
			t.Fatalf("error %q does not name the server", err)
		}
	})
}

// TestSourceRestoreErrors checks that damaged or misrouted state fails
// the restore with an explanation.
func TestSourceRestoreErrors(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	createStream(t, js, "events", "ev.>")
	pos := func(stream string, next uint64) []byte {
		b := statecodec.AppendString([]byte{stateVersion}, stream)
		return append(append(b, byte(next)), 0)
	}
	for _, tc := range []struct {
		name  string
		state *stream.OperatorSnapshot
		want  string
	}{
		{"two positions", &stream.OperatorSnapshot{List: map[string][][]byte{sourcePositionState: {pos("events", 3), pos("events", 4)}}}, "got 2 positions"},
		{"other stream", &stream.OperatorSnapshot{List: map[string][][]byte{sourcePositionState: {pos("other", 3)}}}, `stream "other"`},
		{"truncated", &stream.OperatorSnapshot{List: map[string][][]byte{sourcePositionState: {{stateVersion, 9}}}}, "truncated"},
		{"version", &stream.OperatorSnapshot{List: map[string][][]byte{sourcePositionState: {{7}}}}, "unknown format version 7"},
		{"bad marker", &stream.OperatorSnapshot{Union: map[string][][]byte{sourceSplitsMarker: {{stateVersion, 2}}}}, "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := jsonSource(t, url, "")
			openSource(t, src, 0, 1)
			err := restore(src, 4, tc.state)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "checkpoint 4") {
				t.Fatalf("restore error %v, want one naming checkpoint 4 and %q", err, tc.want)
			}
		})
	}
}

// TestSourceConsumerReplaced deletes the source's consumer behind its
// back (as the server does to an idle one): the source makes a new one
// after the last message it received and loses nothing.
func TestSourceConsumerReplaced(t *testing.T) {
	url := natstest.Start(t)
	js := client(t, url)
	s := createStream(t, js, "events", "ev.>")
	publishEvents(t, js, "ev.a", 0, 500)
	src := jsonSource(t, url, `"batchSize":50`)
	src.fetchWait = 20 * time.Millisecond // check the consumer after 200ms idle
	openSource(t, src, 0, 1)
	var c collector
	pollUntil(t, src, &c, func() bool { return c.len() >= 100 })
	ctx := context.Background()
	deleted := 0
	for name := range s.ConsumerNames(ctx).Name() {
		if err := s.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatal("the source has no consumer")
	}
	publishEvents(t, js, "ev.a", 500, 100)
	pollUntil(t, src, &c, func() bool { return c.len() >= 600 })
	checkExactlyOnce(t, ids(c.rows(), 0), 600)
}
