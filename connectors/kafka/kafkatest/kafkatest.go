// Package kafkatest runs tests of Kafka connectors against a Kafka cluster:
// franz-go's fake cluster kfake, in process and listening on loopback TCP
// (so that other processes of a test, such as taskmanagers, can connect to
// it too), or a real cluster named by the environment variable
// WEIR_KAFKA_BROKERS (comma-separated host:port), where the tests' topics
// are created and deleted again.
//
// It imports the standard library and the franz-go packages only.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BrokersEnv names the environment variable that points the tests at a
// real cluster.
const BrokersEnv = "WEIR_KAFKA_BROKERS"

// timeout bounds every helper's work.
const timeout = 60 * time.Second

// Start returns the addresses of a cluster that has topics (name →
// partitions). Without WEIR_KAFKA_BROKERS it starts a kfake cluster of
// one broker on 127.0.0.1, closed by t.Cleanup. With it, it creates the
// topics on that cluster and deletes them in t.Cleanup; give them names
// no other run uses (Topic).
func Start(t testing.TB, topics map[string]int32) []string {
	t.Helper()
	if env := os.Getenv(BrokersEnv); env != "" {
		brokers := strings.Split(env, ",")
		adm := admin(t, brokers)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		for name, n := range topics {
			if _, err := adm.CreateTopic(ctx, n, -1, nil, name); err != nil {
				t.Fatalf("kafkatest: create topic %s: %v", name, err)
			}
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			for name := range topics {
				if _, err := adm.DeleteTopic(ctx, name); err != nil {
					t.Logf("kafkatest: delete topic %s: %v", name, err)
				}
			}
		})
		return brokers
	}
	byCount := make(map[int32][]string)
	for name, n := range topics {
		byCount[n] = append(byCount[n], name)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	for n, names := range byCount {
		opts = append(opts, kfake.SeedTopics(n, names...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// Topic returns base followed by a random suffix, a topic name that no
// other test run uses.
func Topic(base string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return base + "-" + hex.EncodeToString(b[:])
}

// admin returns an admin client of brokers, closed by t.Cleanup.
func admin(t testing.TB, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// Produce writes records to topic (each record's Topic is set to it), each
// to the partition its Partition field names, and waits until all are
// acknowledged.
func Produce(t testing.TB, brokers []string, topic string, records ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, r := range records {
		r.Topic = topic
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("kafkatest: produce to %s: %v", topic, err)
	}
}

// ReadAll returns the values of the records of topic up to its end when
// called, partition after partition, each in offset order: with
// readCommitted the committed records (isolation level read_committed, up
// to the last stable offset), else every record, those of open and aborted
// transactions included (up to the high watermark).
func ReadAll(t testing.TB, brokers []string, topic string, readCommitted bool) [][]byte {
	t.Helper()
	adm := admin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	list := adm.ListEndOffsets
	isolation := kgo.ReadUncommitted()
	if readCommitted {
		list, isolation = adm.ListCommittedOffsets, kgo.ReadCommitted()
	}
	ends, err := list(ctx, topic)
	if err != nil {
		t.Fatalf("kafkatest: list end offsets of %s: %v", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("kafkatest: list start offsets of %s: %v", topic, err)
	}
	assign := make(map[int32]kgo.Offset)
	pos := make(map[int32]int64)
	end := make(map[int32]int64)
	for p, o := range ends[topic] {
		if o.Err != nil {
			t.Fatalf("kafkatest: end offset of %s/%d: %v", topic, p, o.Err)
		}
		s := starts[topic][p].Offset
		if s < o.Offset {
			assign[p] = kgo.NewOffset().At(s)
			pos[p], end[p] = s, o.Offset
		}
	}
	values := make(map[int32][][]byte)
	if len(assign) > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(isolation), kgo.KeepControlRecords(),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}))
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		defer cl.Close()
		for pending := len(assign); pending > 0; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("kafkatest: read %s: %d partitions not read to their end within %v", topic, pending, timeout)
			}
			for _, e := range fs.Errors() {
				t.Fatalf("kafkatest: read %s/%d: %v", e.Topic, e.Partition, e.Err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset < pos[r.Partition] || r.Offset >= end[r.Partition] {
					return
				}
				pos[r.Partition] = r.Offset + 1
				if pos[r.Partition] >= end[r.Partition] {
					pending--
				}
				if !r.Attrs.IsControl() {
					values[r.Partition] = append(values[r.Partition], r.Value)
				}
			})
		}
	}
	var out [][]byte
	for p := range int32(len(ends[topic])) {
		out = append(out, values[p]...)
	}
	return out
}
