package jobmanager

import (
	"math"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weirstream/weir/proto/weirpb"
)

// scrapeJobManager returns the jobmanager's metric families by name.
func scrapeJobManager(t *testing.T, c *testCluster) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	c.jm.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// seriesOf returns the metric of family name whose label job is job, or
// nil.
func seriesOf(mfs map[string]*dto.MetricFamily, name, job string) *dto.Metric {
	for _, m := range mfs[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "job" && l.GetValue() == job {
				return m
			}
		}
	}
	return nil
}

// kindSeriesOf is seriesOf for the series whose kind label is kind.
func kindSeriesOf(mfs map[string]*dto.MetricFamily, name, job, kind string) *dto.Metric {
	for _, m := range mfs[name].GetMetric() {
		var j, k bool
		for _, l := range m.GetLabel() {
			j = j || l.GetName() == "job" && l.GetValue() == job
			k = k || l.GetName() == "kind" && l.GetValue() == kind
		}
		if j && k {
			return m
		}
	}
	return nil
}

// TestCheckpointHistogramMetrics: the duration and size histograms count
// every completed checkpoint exactly once, across scrapes, with the sizes
// and durations the checkpoint list reports; the last-completed timestamp,
// its age and the configured interval describe the job while it runs and
// end with it.
func TestCheckpointHistogramMetrics(t *testing.T) {
	c, _, _ := startCheckpointCluster(t)
	g := checkpointedPipeline(t)
	g.Checkpoint.Interval = 150 * time.Millisecond // 50 in the history last 7.5 s
	id := c.submit(g, 0)
	c.waitState(id, weirpb.JobState_JOB_STATE_RUNNING)

	check := func(minCompleted int64) {
		t.Helper()
		c.waitCompleted(id, minCompleted)
		mfs := scrapeJobManager(t, c)
		list := c.listCheckpoints(id) // after the scrape: holds every checkpoint the scrape saw
		completed := seriesOf(mfs, "weir_checkpoints_completed_total", id).GetCounter().GetValue()
		dur := seriesOf(mfs, "weir_checkpoint_duration_seconds", id).GetHistogram()
		size := seriesOf(mfs, "weir_checkpoint_size_bytes", id).GetHistogram()
		if float64(dur.GetSampleCount()) != completed || float64(size.GetSampleCount()) != completed {
			t.Fatalf("histograms count %d durations and %d sizes, weir_checkpoints_completed_total is %v",
				dur.GetSampleCount(), size.GetSampleCount(), completed)
		}
		if list.GetCompleted() > 50 {
			t.Fatalf("%d checkpoints completed: more than the history holds; lengthen the interval", list.GetCompleted())
		}
		// The oldest n completed checkpoints of the list are the ones the
		// scrape counted.
		var infos []*weirpb.CheckpointInfo
		for _, ck := range list.GetCheckpoints() {
			if ck.GetStatus() == weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				infos = append(infos, ck)
			}
		}
		slices.Reverse(infos)
		n := int(completed)
		if len(infos) < n {
			t.Fatalf("the list has %d completed checkpoints, the scrape counted %d", len(infos), n)
		}
		var wantBytes, wantMs float64
		for _, ck := range infos[:n] {
			wantBytes += float64(ck.GetSizeBytes())
			wantMs += float64(ck.GetDurationMs())
		}
		if size.GetSampleSum() != wantBytes {
			t.Errorf("size histogram sum %v, the list's %d checkpoints sum to %v bytes", size.GetSampleSum(), n, wantBytes)
		}
		// Durations in the list are whole milliseconds.
		if d := dur.GetSampleSum() - wantMs/1000; d < 0 || d > float64(n)*0.001 {
			t.Errorf("duration histogram sum %v s, the list's %d checkpoints last %v ms", dur.GetSampleSum(), n, wantMs)
		}
		var buckets uint64
		for _, b := range dur.GetBucket() {
			buckets = max(buckets, b.GetCumulativeCount())
		}
		if buckets > dur.GetSampleCount() {
			t.Errorf("duration buckets count %d, more than the %d samples", buckets, dur.GetSampleCount())
		}
		last := infos[n-1]
		wantEnd := float64(last.GetTriggerTimeMs()+last.GetDurationMs()) / 1000
		end := seriesOf(mfs, "weir_checkpoint_last_completed_timestamp_seconds", id).GetGauge().GetValue()
		if math.Abs(end-wantEnd) > 0.002 {
			t.Errorf("last completed at %v, the list says %v", end, wantEnd)
		}
		age := seriesOf(mfs, "weir_checkpoint_last_completed_age_seconds", id).GetGauge().GetValue()
		if since := time.Since(time.UnixMilli(int64(end * 1000))).Seconds(); age < 0 || age > since+0.01 {
			t.Errorf("age %v s, but the checkpoint completed %v s ago", age, since)
		}
		if iv := seriesOf(mfs, "weir_checkpoint_interval_seconds", id).GetGauge().GetValue(); iv != 0.15 {
			t.Errorf("weir_checkpoint_interval_seconds %v, want 0.15", iv)
		}
		info := seriesOf(mfs, "weir_job_info", id)
		if info == nil || !slices.ContainsFunc(info.GetLabel(), func(l *dto.LabelPair) bool {
			return l.GetName() == "job_name" && l.GetValue() == g.Name
		}) {
			t.Errorf("weir_job_info of %s: %v, want job_name %q", id, info, g.Name)
		}
	}
	check(2)
	check(6) // counted again at the second scrape: not twice

	if _, err := c.jobs.CancelJob(t.Context(), &weirpb.CancelJobRequest{JobId: id}); err != nil {
		t.Fatal(err)
	}
	c.waitState(id, weirpb.JobState_JOB_STATE_CANCELED)
	mfs := scrapeJobManager(t, c)
	for _, name := range []string{"weir_checkpoint_last_completed_age_seconds", "weir_checkpoint_interval_seconds"} {
		if m := seriesOf(mfs, name, id); m != nil {
			t.Errorf("%s of the cancelled job: %v", name, m)
		}
	}
	if seriesOf(mfs, "weir_checkpoint_duration_seconds", id) == nil {
		t.Error("the duration histogram of the cancelled job ended; it stays while the job is listed")
	}
}
