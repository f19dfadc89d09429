package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connectors/kafka/kafkatest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitDeadline bounds every wait of the tests: generous, the machine is
// slow and shared.
const waitDeadline = 45 * time.Second

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

func (c *collector) count() int {
	n := 0
	for _, b := range c.batches {
		n += b.Len()
	}
	return n
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// cfgJSON marshals a config.
func cfgJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

func srcOctx(subtask, par int) *stream.OperatorContext {
	return &stream.OperatorContext{JobID: "job", OperatorUID: "src", Subtask: subtask, Parallelism: par, Checkpointing: true}
}

// openSource builds and opens a source subtask, restoring snap (nil: a
// fresh start).
func openSource(t testing.TB, cfg SourceConfig, octx *stream.OperatorContext, ckp int64, snap *stream.OperatorSnapshot) *Source {
	t.Helper()
	s, err := NewSource(cfgJSON(t, cfg))
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

// pollUntil polls src into c until done() holds, failing after
// waitDeadline. It returns the last status.
func pollUntil(t testing.TB, src stream.Source, c *collector, done func() bool) stream.PollStatus {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	var st stream.PollStatus
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %v (%d rows polled)", waitDeadline, c.count())
		}
		var err error
		st, err = src.Poll(t.Context(), c)
		must(t, err)
		if st == stream.PollEnd {
			return st
		}
		if st == stream.PollIdle {
			time.Sleep(time.Millisecond)
		}
	}
	return st
}

// drainBounded polls a bounded source until PollEnd.
func drainBounded(t testing.TB, src stream.Source, c *collector) {
	t.Helper()
	if st := pollUntil(t, src, c, func() bool { return false }); st != stream.PollEnd {
		t.Fatalf("status %v, want PollEnd", st)
	}
}

// snapshot takes a source's or sink's state for checkpoint id.
func snapshot(t testing.TB, op stream.Checkpointed, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id}
	must(t, op.SnapshotState(c))
	return &c.State
}

const testMaxParallelism = 128

// redistribute hands the state that the subtasks of one operator
// snapshotted for checkpoint id (snaps[i] of old subtask i) to the q
// subtasks of the restoring job, as a restore does: through the real
// checkpoint storage, union state in objects of its own.
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
			must(t, err)
			upload := st.UploadSnapshot
			if i > 0 {
				upload = st.UploadUnionSnapshot
			}
			h, err := upload(t.Context(), "job", id, "op", sub, p, 1, kg, data)
			must(t, err)
			handles = append(handles, h)
		}
	}
	out := make([]*stream.OperatorSnapshot, q)
	for sub := range out {
		snap, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(testMaxParallelism, q, sub), sub, q)
		must(t, err)
		out[sub] = snap
	}
	return out
}

// records returns n records with values <prefix><i> (i from first), spread
// round-robin over partitions.
func records(prefix string, first, n, partitions int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range n {
		v := fmt.Sprintf("%s%d", prefix, first+i)
		out[i] = &kgo.Record{Key: []byte("k" + v), Value: []byte(v), Partition: int32((first + i) % partitions)}
	}
	return out
}

// newAdmin returns an admin client of brokers, closed by t.Cleanup.
func newAdmin(t testing.TB, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	must(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// endOffsets returns the high watermark of every partition of topic.
func endOffsets(t testing.TB, brokers []string, topic string) map[tp]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitDeadline)
	defer cancel()
	lo, err := newAdmin(t, brokers).ListEndOffsets(ctx, topic)
	must(t, err)
	out := make(map[tp]int64)
	for p, o := range lo[topic] {
		must(t, o.Err)
		out[tp{topic, p}] = o.Offset
	}
	return out
}

// caughtUp reports whether every split of s is at or past ends.
func caughtUp(s *Source, ends map[tp]int64) bool {
	for _, sp := range s.splits {
		if e, ok := ends[sp.tp]; ok && (sp.next == offsetEarliest && e > 0 || sp.next < e) {
			return false
		}
	}
	return true
}

// valueCounts counts the rows by their value column.
func valueCounts(rows [][]any, col int) map[string]int {
	m := make(map[string]int)
	for _, r := range rows {
		m[r[col].(string)]++
	}
	return m
}

// checkExactlyOnce fails unless counts holds every value of want exactly
// once and nothing else, reporting lost and duplicated values.
func checkExactlyOnce(t testing.TB, counts map[string]int, want []string) {
	t.Helper()
	var lost, dup []string
	wanted := make(map[string]bool)
	for _, v := range want {
		wanted[v] = true
		switch n := counts[v]; {
		case n == 0:
			lost = append(lost, v)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s×%d", v, n))
		}
	}
	var extra []string
	for v := range counts {
		if !wanted[v] {
			extra = append(extra, v)
		}
	}
	if len(lost)+len(dup)+len(extra) > 0 {
		t.Fatalf("exactly once violated: %d of %d values lost %s, %d duplicated %s, %d unexpected %s",
			len(lost), len(want), head(lost), len(dup), head(dup), len(extra), head(extra))
	}
}

func head(s []string) string {
	if len(s) > 10 {
		return "[" + strings.Join(s[:10], " ") + " ...]"
	}
	return fmt.Sprint(s)
}

// values returns the values <prefix><first> ... <prefix><first+n-1>.
func values(prefix string, first, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s%d", prefix, first+i)
	}
	return out
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

// startKafka starts a cluster with topics named after bases (each with a
// random suffix) and returns the brokers and the topic names.
func startKafka(t testing.TB, partitions map[string]int32) ([]string, map[string]string) {
	t.Helper()
	names := make(map[string]string)
	topics := make(map[string]int32)
	for base, n := range partitions {
		names[base] = kafkatest.Topic(base)
		topics[names[base]] = n
	}
	return kafkatest.Start(t, topics), names
}
