package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/stream"
)

// benchMessages is how many messages a benchmark reads or writes per
// iteration.
const benchMessages = 100_000

// countingCollector counts rows and releases batches.
type countingCollector struct{ rows int }

func (c *countingCollector) Collect(b *stream.Batch) { c.rows += b.Len(); b.Release() }
func (c *countingCollector) EmitWatermark(int64)     {}

// BenchmarkSource measures messages per second that the source reads
// from a stream on an in-process server and emits as rows, in format raw
// and json (small events, 1024-row batches).
func BenchmarkSource(b *testing.B) {
	url := natstest.Start(b)
	js := client(b, url)
	createStream(b, js, "events", "ev.>")
	for i := range int64(benchMessages) {
		data, _ := json.Marshal(eventFor(i))
		if _, err := js.PublishAsync("ev.a", data); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			waitAcks(b, js)
		}
	}
	waitAcks(b, js)
	for _, format := range []string{"raw", "json"} {
		b.Run(format, func(b *testing.B) {
			cfg := fmt.Sprintf(`{"url":%q,"stream":"events","stopAtEnd":true,"batchSize":1024`, url)
			if format == "json" {
				cfg += `,"format":"json","fields":` + eventFields
			}
			total := 0
			for b.Loop() {
				src, err := newSource([]byte(cfg + "}"))
				if err != nil {
					b.Fatal(err)
				}
				if err := src.Open(context.Background(), octxFor(0, 1)); err != nil {
					b.Fatal(err)
				}
				var c countingCollector
				for {
					st, err := src.Poll(context.Background(), &c)
					if err != nil {
						b.Fatal(err)
					}
					if st == stream.PollEnd {
						break
					}
					if st == stream.PollIdle {
						time.Sleep(50 * time.Microsecond)
					}
				}
				src.Close()
				if c.rows != benchMessages {
					b.Fatalf("read %d rows, want %d", c.rows, benchMessages)
				}
				total += c.rows
			}
			rate := float64(total) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "msgs/s")
			fmt.Printf("nats_source_%s_msgs_per_sec=%.0f\n", format, rate)
		})
	}
}

// BenchmarkSink measures rows per second that the sink publishes as JSON
// and the server acknowledges, with and without message ids.
func BenchmarkSink(b *testing.B) {
	url := natstest.Start(b)
	js := client(b, url)
	batches := make([]*stream.Batch, benchMessages/sinkBatch)
	for i := range batches {
		batches[i] = inputBatch(i)
	}
	for _, dedupe := range []bool{true, false} {
		name := map[bool]string{true: "ids", false: "no_ids"}[dedupe]
		b.Run(name, func(b *testing.B) {
			total, iter := 0, 0
			for b.Loop() {
				iter++
				streamName := fmt.Sprintf("bench_%s_%d", name, iter)
				b.StopTimer()
				createStream(b, js, streamName, streamName+".>")
				b.StartTimer()
				s := newTestSink(b, fmt.Sprintf(`{"url":%q,"subject":"%s.rows","deduplicate":%v}`, url, streamName, dedupe))
				openSink(b, s, 0, 1)
				for _, in := range batches {
					cp := stream.NewBatch(rowSchema, in.Len())
					for i := range in.Len() {
						cp.AppendRow(in.Row(i)...)
					}
					if err := s.ProcessBatch(0, cp, nil); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Finish(nil); err != nil {
					b.Fatal(err)
				}
				s.Close()
				b.StopTimer()
				if n := msgCount(b, js, streamName); n != benchMessages {
					b.Fatalf("stream holds %d messages, want %d", n, benchMessages)
				}
				if err := js.DeleteStream(context.Background(), streamName); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				total += benchMessages
			}
			rate := float64(total) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "rows/s")
			fmt.Printf("nats_sink_%s_rows_per_sec=%.0f\n", name, rate)
		})
	}
}
