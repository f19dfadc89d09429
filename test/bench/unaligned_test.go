package bench

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// throttledGraph is datagen (ratePerSecond rows/s in all; 0: as fast as it
// goes) → keyBy key → throttle (passRate rows/s per subtask) → discard at
// parallelism 2: with passRate below half the source rate the throttle
// backpressures the sources.
func throttledGraph(tb testing.TB, ckpt stream.CheckpointConfig, ratePerSecond, passRate float64) *stream.JobGraph {
	b := stream.NewBuilder("throttled").Parallelism(2)
	src := map[string]any{"rows": 0, "seed": 5, "batchSize": 64, "fields": []map[string]any{
		{"name": "key", "kind": "key", "cardinality": 1000, "type": "int64"},
		{"name": "value", "kind": "random", "type": "int64", "min": 0, "max": 1000},
	}}
	if ratePerSecond > 0 {
		src["ratePerSecond"] = ratePerSecond
	}
	b.Source("events", "datagen", src).KeyBy("key").Then("slow", "throttle", map[string]any{"rowsPerSecond": passRate}).Then("sink", "discard", nil)
	g, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	g.Checkpoint = ckpt
	return g
}

// ckRun is what one run of a throttled job measured.
type ckRun struct {
	durations    []float64 // ms, of the checkpoints completed in the window
	channelState []float64 // bytes of channel state, per checkpoint completed
	rate         float64   // records/s into the throttle
}

// BenchmarkUnalignedCheckpoints measures, on a cluster of two taskmanager
// processes with checkpoints every second to local files:
//
//   - backpressure_ckpt_p99_ratio_{aligned,unaligned}: the p99 duration
//     of checkpoints while a throttle passes a tenth of the source rate,
//     over the p99 without throttling (same job, throttle far above the
//     rate);
//   - unaligned_channel_state_bytes_p99: the channel state of the
//     throttled unaligned checkpoints;
//   - unaligned_overhead_ratio: the throughput of the job unthrottled with
//     an unbounded source, with unaligned checkpoints over without
//     checkpoints (best of two rounds each).
func BenchmarkUnalignedCheckpoints(b *testing.B) {
	c := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "warn"})
	storage := "file://" + b.TempDir()
	run := throttledRunner(b, c, storage)
	const sourceRate = 20000.0
	aligned := stream.CheckpointConfig{Interval: time.Second, Mode: stream.ExactlyOnce, Storage: storage, Retained: 20}
	unaligned := aligned
	unaligned.Unaligned = true
	ratio := func(ck stream.CheckpointConfig) (float64, ckRun, ckRun) {
		free := run(ck, sourceRate, 1e9)
		slow := run(ck, sourceRate, sourceRate/2/10) // per subtask: a tenth of the source rate in all
		if len(free.durations) < 3 || len(slow.durations) < 3 {
			b.Fatalf("too few checkpoints completed: %d unthrottled, %d throttled", len(free.durations), len(slow.durations))
		}
		return quantile(slow.durations, 0.99) / max(quantile(free.durations, 0.99), 1), free, slow
	}
	for i := 0; i < b.N; i++ {
		ra, free, slow := ratio(aligned)
		fmt.Printf("aligned_ckpt_p99_ms_unthrottled=%.0f aligned_ckpt_p99_ms_throttled=%.0f checkpoints=%d+%d\n",
			quantile(free.durations, 0.99), quantile(slow.durations, 0.99), len(free.durations), len(slow.durations))
		ru, ufree, uslow := ratio(unaligned)
		fmt.Printf("unaligned_ckpt_p99_ms_unthrottled=%.0f unaligned_ckpt_p99_ms_throttled=%.0f checkpoints=%d+%d\n",
			quantile(ufree.durations, 0.99), quantile(uslow.durations, 0.99), len(ufree.durations), len(uslow.durations))
		fmt.Printf("backpressure_ckpt_p99_ratio_aligned=%.2f\n", ra)
		fmt.Printf("backpressure_ckpt_p99_ratio_unaligned=%.2f\n", ru)
		fmt.Printf("unaligned_channel_state_bytes_p99=%.0f\n", quantile(uslow.channelState, 0.99))

		var base, with float64
		for round := 0; round < 2; round++ {
			base = max(base, run(stream.CheckpointConfig{}, 0, 1e9).rate)
			r := run(unaligned, 0, 1e9)
			if len(r.durations) == 0 {
				b.Fatal("no checkpoint completed during the unaligned unthrottled run")
			}
			with = max(with, r.rate)
		}
		if base <= 0 {
			b.Fatal("the job without checkpoints processed nothing")
		}
		fmt.Printf("unthrottled_records_per_sec=%.0f unthrottled_unaligned_records_per_sec=%.0f\n", base, with)
		fmt.Printf("unaligned_overhead_ratio=%.3f\n", with/base)
	}
}

// throttledRunner returns a function that runs throttledGraph on c with
// checkpoint config ckpt, source rate rate and throttle pass, measures it
// for 12 s after a 3 s warm-up, and cancels it.
func throttledRunner(b *testing.B, c *clustertest.Cluster, storage string) func(ckpt stream.CheckpointConfig, rate, pass float64) ckRun {
	st, err := checkpoint.OpenStorage(b.Context(), storage)
	if err != nil {
		b.Fatal(err)
	}
	warmup, window := 3*time.Second, 12*time.Second
	return func(ckpt stream.CheckpointConfig, rate, pass float64) ckRun {
		id := c.Submit(throttledGraph(b, ckpt, rate, pass))
		polltest.Eventually(b, time.Minute, "job running", func() bool {
			resp, err := c.Job(id)
			return err == nil && resp.GetJob().GetState() == weirpb.JobState_JOB_STATE_RUNNING
		})
		var r ckRun
		r.rate = countedRateOf(b, c, id, 1, warmup, window)
		start := time.Now().Add(-window).UnixMilli()
		if ckpt.Enabled() {
			resp, err := c.Checkpoints(id)
			if err != nil {
				b.Fatal(err)
			}
			for _, ck := range resp.GetCheckpoints() {
				if ck.GetStatus() != weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED || ck.GetTriggerTimeMs() < start {
					continue
				}
				r.durations = append(r.durations, float64(ck.GetDurationMs()))
				if m, err := st.ReadManifest(b.Context(), id, ck.GetCheckpointId()); err == nil {
					r.channelState = append(r.channelState, float64(checkpoint.ChannelStateBytes(m)))
				}
			}
		}
		if out, err := c.Weir("jobs", "cancel", id); err != nil {
			b.Fatalf("cancel: %v %s", err, out)
		}
		c.WaitJob(id, time.Minute)
		return r
	}
}

// BenchmarkDebloat measures what the sender's byte budget does to aligned
// checkpoints under backpressure: the throttled job of
// BenchmarkUnalignedCheckpoints (aligned checkpoints every second, the
// throttle passing a tenth of the source rate) on a cluster with
// debloating off and on one with a 100 ms debloat target, each as p99
// checkpoint duration throttled over unthrottled
// (backpressure_ckpt_p99_ratio_aligned_{nodebloat,debloat100ms}), and the
// throttled job's throughput with debloating over without
// (debloat_throttled_rate_ratio, which should stay near 1: the budget
// must not slow the bottleneck).
func BenchmarkDebloat(b *testing.B) {
	const sourceRate = 20000.0
	for i := 0; i < b.N; i++ {
		type result struct {
			ratio, free, slow float64
			rate              float64
		}
		measure := func(target string) result {
			c := clustertest.Start(b, clustertest.Options{TaskManagers: 2, Slots: 2, LogLevel: "warn",
				TaskManagerArgs: []string{"--network-debloat-target=" + target}})
			storage := "file://" + b.TempDir()
			run := throttledRunner(b, c, storage)
			ck := stream.CheckpointConfig{Interval: time.Second, Mode: stream.ExactlyOnce, Storage: storage, Retained: 20}
			free := run(ck, sourceRate, 1e9)
			slow := run(ck, sourceRate, sourceRate/2/10)
			if len(free.durations) < 3 || len(slow.durations) < 3 {
				b.Fatalf("debloat target %s: too few checkpoints completed: %d unthrottled, %d throttled", target, len(free.durations), len(slow.durations))
			}
			f, s := quantile(free.durations, 0.99), quantile(slow.durations, 0.99)
			return result{ratio: s / max(f, 1), free: f, slow: s, rate: slow.rate}
		}
		off := measure("0s")
		on := measure("100ms")
		fmt.Printf("aligned_ckpt_p99_ms_nodebloat=%.0f/%.0f aligned_ckpt_p99_ms_debloat100ms=%.0f/%.0f (unthrottled/throttled) throttled_records_per_sec=%.0f/%.0f\n",
			off.free, off.slow, on.free, on.slow, off.rate, on.rate)
		fmt.Printf("backpressure_ckpt_p99_ratio_aligned_nodebloat=%.2f\n", off.ratio)
		fmt.Printf("backpressure_ckpt_p99_ratio_aligned_debloat100ms=%.2f\n", on.ratio)
		fmt.Printf("debloat_throttled_rate_ratio=%.3f\n", on.rate/max(off.rate, 1))
	}
}

// countedRateOf is countedRate for the tasks of vertex.
func countedRateOf(tb testing.TB, c *clustertest.Cluster, id string, vertex int32, warmup, window time.Duration) float64 {
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
			if t.GetId().GetVertexId() == vertex {
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

// quantile is the q-quantile of xs (nearest rank); 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
