package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"

	"github.com/weirstream/weir/test/polltest"
)

// keyedCountGraph is an unbounded keyed count: datagen → keyBy key →
// running_count → discard, at parallelism 2.
func keyedCountGraph(tb testing.TB, ckpt stream.CheckpointConfig) *stream.JobGraph {
	b := stream.NewBuilder("keyed-count").Parallelism(2)
	b.Source("events", "datagen", map[string]any{"rows": 0, "seed": 3, "fields": []map[string]any{
		{"name": "key", "kind": "key", "cardinality": 10000, "type": "int64"},
		{"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 1000},
	}}).KeyBy("key").Then("counts", "running_count", nil).Then("sink", "discard", nil)
	g, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	g.Checkpoint = ckpt
	return g
}

// countedRate samples the records entering the running_count tasks while
// the job runs and returns records/s over the window after a warm-up, and
// the number of checkpoints completed meanwhile.
func countedRate(tb testing.TB, c *clustertest.Cluster, id string, warmup, window time.Duration) float64 {
	sample := func() (int64, time.Time) {
		resp, err := c.Job(id)
		if err != nil {
			tb.Fatal(err)
		}
		if s := resp.GetJob().GetState(); s != weirpb.JobState_JOB_STATE_RUNNING {
			tb.Fatalf("job %s is %v: %s", id, s, resp.GetJob().GetError())
		}
		var n int64
		for _, t := range resp.GetTasks() {
			if t.GetId().GetVertexId() == 1 {
				n += t.GetRecordsIn()
			}
		}
		return n, time.Now()
	}
	time.Sleep(warmup) // benchmark warm-up, not synchronisation
	n0, t0 := sample()
	time.Sleep(window)
	n1, t1 := sample()
	return float64(n1-n0) / t1.Sub(t0).Seconds()
}

// BenchmarkCheckpointOverhead compares the throughput of a keyed count with
// exactly-once checkpoints every second to S3 (versitygw) with the same job
// without checkpoints, on a cluster of two taskmanager processes. The two
// alternate three times and the best run of each is compared: on a small,
// shared machine the best run is the one least disturbed by others.
func BenchmarkCheckpointOverhead(b *testing.B) {
	endpoint, access, secret := blobstoretest.StartVersityGW(b)
	c := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "warn", Env: []string{
		"WEIR_S3_ENDPOINT=" + endpoint, "WEIR_S3_ACCESS_KEY=" + access, "WEIR_S3_SECRET_KEY=" + secret, "WEIR_S3_INSECURE=true"}})
	warmup, window := 3*time.Second, 12*time.Second
	run := func(ckpt stream.CheckpointConfig) (float64, int64) {
		id := c.Submit(keyedCountGraph(b, ckpt))
		polltest.Eventually(b, time.Minute, "job running", func() bool {
			resp, err := c.Job(id)
			return err == nil && resp.GetJob().GetState() == weirpb.JobState_JOB_STATE_RUNNING
		})
		rate := countedRate(b, c, id, warmup, window)
		var completed int64
		if ckpt.Enabled() {
			resp, err := c.Checkpoints(id)
			if err != nil {
				b.Fatal(err)
			}
			completed = resp.GetCompleted()
		}
		if out, err := c.Weir("jobs", "cancel", id); err != nil {
			b.Fatalf("cancel: %v %s", err, out)
		}
		c.WaitJob(id, time.Minute)
		return rate, completed
	}
	with := stream.CheckpointConfig{Interval: time.Second, Mode: stream.ExactlyOnce,
		Storage: "s3://" + blobstoretest.VersityBucket + "/bench"}
	var base, ck float64
	var completed int64
	for i := 0; i < b.N; i++ {
		for round := 0; round < 3; round++ {
			r, _ := run(stream.CheckpointConfig{})
			base = max(base, r)
			r, n := run(with)
			ck = max(ck, r)
			completed += n
		}
	}
	if completed == 0 {
		b.Fatal("no checkpoint completed during the checkpointed runs")
	}
	fmt.Printf("keyed_count_records_per_sec=%.0f\n", base)
	fmt.Printf("keyed_count_with_checkpoints_records_per_sec=%.0f\n", ck)
	fmt.Printf("checkpoints_completed=%d\n", completed)
	fmt.Printf("checkpoint_overhead_ratio=%.3f\n", ck/base)
}
