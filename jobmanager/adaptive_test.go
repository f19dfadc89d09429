package jobmanager

import (
	"math"
	"testing"
	"time"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// TestAdaptiveIntervalExposed: with interval: adaptive the coordinator
// measures the acknowledged pauses and the REST document and the
// weir_checkpoint_interval_seconds metric report the interval it chose.
// The fake taskmanager acknowledges with sync 1ms and alignment
// subtask+1 ms, so the most paused task (subtask 3 of the parallelism-4
// vertex) pauses 5ms a checkpoint, and the interval must settle near the
// independently computed goal 5ms ÷ (maxOverhead × headroom 0.8).
func TestAdaptiveIntervalExposed(t *testing.T) {
	c, _, _ := startCheckpointCluster(t)
	g := checkpointedPipeline(t)
	const overhead = 0.03
	g.Checkpoint = stream.CheckpointConfig{Interval: time.Second, Adaptive: true, MaxOverhead: overhead,
		MinInterval: 50 * time.Millisecond, MaxInterval: 2 * time.Second}
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	base := "http://" + c.jm.RESTAddr()
	goal := 5 * time.Millisecond.Seconds() / (overhead * 0.8) // 208ms

	var list restCheckpoints
	var metric float64
	eventually(t, 4*waitTimeout, "the adaptive interval to settle near the goal", func() bool {
		getJSON(t, base+"/v1/jobs/"+id+"/checkpoints", 200, &list)
		metric = seriesOf(scrapeJobManager(t, c), "weir_checkpoint_interval_seconds", id).GetGauge().GetValue()
		cur := float64(list.Config.CurrentIntervalMs) / 1000
		return list.Completed >= 4 && math.Abs(math.Log(cur/goal)) < math.Log(1.15) && math.Abs(math.Log(metric/goal)) < math.Log(1.15)
	})
	if list.Config.IntervalMs != 1000 {
		t.Errorf("intervalMs %d, want the starting interval 1000", list.Config.IntervalMs)
	}
	t.Logf("adaptive interval: goal=%.3fs currentIntervalMs=%d metric=%.3fs completed=%d",
		goal, list.Config.CurrentIntervalMs, metric, list.Completed)
}

// TestStorageRequestMetrics: the jobmanager counts the requests of its
// checkpoint storage. Every completed checkpoint writes a manifest and the
// completed pointer (two PUTs), so with n completed at least 2n PUTs must
// be counted; with one checkpoint retained, older ones are deleted.
func TestStorageRequestMetrics(t *testing.T) {
	c, _, _ := startCheckpointCluster(t)
	id := c.submit(checkpointedPipeline(t), 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)
	c.waitCompleted(id, 3)
	if _, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	c.waitState(id, weirpb.JobState_JOB_STATE_CANCELED)
	mfs := scrapeJobManager(t, c)
	value := func(name, label, v string) float64 {
		for _, m := range mfs[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == v {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("%s{%s=%q} missing", name, label, v)
		return 0
	}
	completed := seriesOf(mfs, "weir_checkpoints_completed_total", id).GetCounter().GetValue()
	puts := value("weir_storage_requests_total", "kind", "put")
	out := value("weir_storage_bytes_total", "direction", "out")
	deletes := value("weir_storage_requests_total", "kind", "delete")
	if puts < 2*completed {
		t.Errorf("%v PUTs counted for %v completed checkpoints; each writes a manifest and the pointer", puts, completed)
	}
	if out <= 0 || deletes <= 0 {
		t.Errorf("bytes out %v, deletes %v: want both positive (one checkpoint retained, so older ones were discarded)", out, deletes)
	}
	t.Logf("storage: completed=%v put=%v delete=%v list=%v get=%v bytes_out=%v", completed, puts, deletes,
		value("weir_storage_requests_total", "kind", "list"), value("weir_storage_requests_total", "kind", "get"), out)
}
