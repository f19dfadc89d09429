package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors/kafka/kafkatest"
	"github.com/weirstream/weir/stream"
)

// BenchmarkKafkaSink measures the sink's throughput on kfake, exactly_once
// (a transaction per checkpoint, committed when it completes) against
// at_least_once (an idempotent producer flushed at each checkpoint), with
// a checkpoint every 2,000 rows of 500-row batches, and reports
// kafka_exactly_once_vs_at_least_once = exactly_once rows/s ÷
// at_least_once rows/s. Each run's output is read back and counted.
func BenchmarkKafkaSink(b *testing.B) {
	const (
		rows      = 20_000
		batch     = 500
		perCkp    = 4 // batches per checkpoint
		partition = 4
	)
	in := stream.MustSchema(stream.Field{Name: "id", Type: stream.TypeInt64}, stream.Field{Name: "name", Type: stream.TypeString})
	brokers := kafkatest.Start(b, nil)
	adm := newAdmin(b, brokers)
	run := func(guarantee string) float64 {
		topic := kafkatest.Topic("bench")
		if _, err := adm.CreateTopic(b.Context(), partition, -1, nil, topic); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { adm.DeleteTopic(context.Background(), topic) })
		s := openSink(b, SinkConfig{BootstrapServers: brokers, Topic: topic, DeliveryGuarantee: guarantee}, sinkOctx(in, 0, 1, 1), 0, nil)
		start := time.Now()
		ckp := int64(0)
		for i := 0; i < rows/batch; i++ {
			bt := stream.NewBatch(in, batch)
			for j := range batch {
				id := int64(i*batch + j)
				bt.AppendRow(id, fmt.Sprintf("name-%d", id))
			}
			if err := s.ProcessBatch(0, bt, nil); err != nil {
				b.Fatal(err)
			}
			if (i+1)%perCkp == 0 {
				ckp++
				snapshot(b, s, ckp)
				must(b, s.NotifyCheckpointComplete(ckp))
			}
		}
		must(b, s.Finish(nil))
		ckp++
		snapshot(b, s, ckp)
		must(b, s.NotifyCheckpointComplete(ckp))
		elapsed := time.Since(start)
		must(b, s.Close())
		if n := len(kafkatest.ReadAll(b, brokers, topic, true)); n != rows {
			b.Fatalf("%s: %d records in the topic, want %d", guarantee, n, rows)
		}
		return rows / elapsed.Seconds()
	}
	var eo, alo float64
	for b.Loop() {
		eo = run(ExactlyOnce)
		alo = run(AtLeastOnce)
	}
	b.ReportMetric(eo, "exactly_once_records/s")
	b.ReportMetric(alo, "at_least_once_records/s")
	fmt.Printf("kafka_exactly_once_vs_at_least_once=%.3f\n", eo/alo)
	fmt.Printf("kafka_exactly_once_records_per_sec=%.0f\nkafka_at_least_once_records_per_sec=%.0f\n", eo, alo)
}
