package jobmanager

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/jobmanager/webui/view"
)

// The jobmanager's Prometheus metrics. They are read from the core at
// scrape time (a custom collector), so they can never disagree with the
// REST and gRPC views. Checkpoint metrics exist for jobs that take
// checkpoints; every metric of a job carries its id in the label "job".
var (
	descCheckpointsInProgress = prometheus.NewDesc("weir_checkpoints_in_progress",
		"Checkpoints triggered and not yet completed or aborted.", []string{"job"}, nil)
	descCheckpointsCompleted = prometheus.NewDesc("weir_checkpoints_completed_total",
		"Checkpoints completed (manifest and pointer written).", []string{"job"}, nil)
	descCheckpointsFailed = prometheus.NewDesc("weir_checkpoints_failed_total",
		"Checkpoints that failed: declined by a task, expired, or their manifest could not be written.", []string{"job"}, nil)
	descCheckpointsAborted = prometheus.NewDesc("weir_checkpoints_aborted_total",
		"Checkpoints aborted through no fault of their own: subsumed by a newer one, or stopped by a failover, a cancel or the end of the job.",
		[]string{"job"}, nil)
	descLastDuration = prometheus.NewDesc("weir_checkpoint_last_duration_seconds",
		"Duration from trigger to completion of the latest completed checkpoint.", []string{"job"}, nil)
	descLastSize = prometheus.NewDesc("weir_checkpoint_last_size_bytes",
		"State size of the latest completed checkpoint, summed over its tasks.", []string{"job"}, nil)
	descLastStartDelay = prometheus.NewDesc("weir_checkpoint_last_start_delay_seconds",
		"Largest start delay (trigger to the subtask's first barrier) of any subtask in the latest completed checkpoint.", []string{"job"}, nil)
	descLastChannelState = prometheus.NewDesc("weir_checkpoint_last_channel_state_bytes",
		"In-flight data persisted by the latest completed checkpoint (unaligned checkpoints), summed over its subtasks.", []string{"job"}, nil)
	descLastStorageRequests = prometheus.NewDesc("weir_checkpoint_last_storage_requests",
		"Requests to checkpoint storage made for the latest completed checkpoint (its subtasks' uploads and its manifest), by kind.", []string{"job", "kind"}, nil)
	descJobStorageRequests = prometheus.NewDesc("weir_job_storage_requests_total",
		"Requests to the job's checkpoint storage: its tasks' uploads and the jobmanager's manifests, deletions and savepoint copies, by kind.", []string{"job", "kind"}, nil)
	descJobStorageCost = prometheus.NewDesc("weir_job_storage_estimated_monthly_cost",
		"Estimated monthly cost of the job's checkpoint storage requests: the mean requests of its recent completed checkpoints, at the current interval, at the configured prices.", []string{"job", "currency"}, nil)
	descAlignment = prometheus.NewDesc("weir_checkpoint_alignment_seconds",
		"Barrier alignment time of the task's latest checkpoint acknowledgement.", []string{"job", "task"}, nil)
	descRestarts = prometheus.NewDesc("weir_job_restarts_total",
		"Restarts (redeployments after a failure) of the job.", []string{"job"}, nil)
	descTaskManagersLive = prometheus.NewDesc("weir_taskmanagers_live",
		"Registered taskmanagers that are not lost.", nil, nil)
	descJobs = prometheus.NewDesc("weir_jobs",
		"Jobs by state (RESTARTING included).", []string{"state"}, nil)
	descRestartingRegions = prometheus.NewDesc("weir_job_restarting_regions",
		"Failover regions of the job that are restarting while the rest of it runs on.", []string{"job"}, nil)
	descStale = prometheus.NewDesc("weir_stale_messages_total",
		"Messages from taskmanagers dropped because they carried another execution attempt than the current one, "+
			"named an unknown job or execution, or came from a replaced registration: "+
			"kind task_report (status reports) or checkpoint_ack (checkpoint acknowledgements and declines).",
		[]string{"kind"}, nil)
	descLeader = prometheus.NewDesc("weir_jobmanager_leader",
		"1 while this jobmanager leads (always in ha: none), 0 while it stands by or after its leadership ended.", nil, nil)
	descEpoch = prometheus.NewDesc("weir_jobmanager_epoch",
		"The fencing epoch of this jobmanager's leadership (ha: etcd; 0 in ha: none or while standing by).", nil, nil)
	descFencedWrites = prometheus.NewDesc("weir_jobmanager_fenced_writes_total",
		"etcd writes of this jobmanager refused because its leadership had ended (zombie writes).", nil, nil)
	descJobInfo = prometheus.NewDesc("weir_job_info",
		"Always 1: names the job (job_name) for joins on the job id (label job).", []string{"job", "job_name"}, nil)
	descInterval = prometheus.NewDesc("weir_checkpoint_interval_seconds",
		"The job's current checkpoint interval (with interval: adaptive, the one the coordinator chose last); only for jobs that take checkpoints and have not ended.", []string{"job"}, nil)
	descLastCompleted = prometheus.NewDesc("weir_checkpoint_last_completed_timestamp_seconds",
		"When the job's latest completed checkpoint completed (seconds since the epoch), as this jobmanager saw it.", []string{"job"}, nil)
	descLastAge = prometheus.NewDesc("weir_checkpoint_last_completed_age_seconds",
		"Seconds since the job's latest completed checkpoint completed, at scrape time; before this jobmanager saw one complete, "+
			"since the job was submitted. Only for jobs that take checkpoints and have not ended.", []string{"job"}, nil)
	descDuration = prometheus.NewDesc("weir_checkpoint_duration_seconds",
		"Trigger-to-completion time of the job's completed checkpoints.", []string{"job"}, nil)
	descSize = prometheus.NewDesc("weir_checkpoint_size_bytes",
		"State size of the job's completed checkpoints, summed over their tasks.", []string{"job"}, nil)
	descRestoredFrom = prometheus.NewDesc("weir_checkpoint_restored_id",
		"The checkpoint the job's latest (re)deployment restored (0: none, it started empty).", []string{"job"}, nil)
	descRestoring = prometheus.NewDesc("weir_job_restoring_tasks",
		"Executions of the job that do not process yet: waiting for slots, deploying, or loading their state.", []string{"job"}, nil)
)

// Bucket bounds of the checkpoint histograms: durations from 50 ms to 10
// min, sizes from 1 KiB to 64 GiB in steps of 4.
var (
	durationBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	sizeBuckets     = prometheus.ExponentialBuckets(1024, 4, 14)
)

// collector exports the core's state as Prometheus metrics.
//
// The checkpoint histograms are folded in at scrape time from the
// coordinator's history (the latest coordinator.HistorySize checkpoints of
// each job): a checkpoint is counted once, by id, at the first scrape that
// sees it completed. Checkpoints that complete and leave the history
// between two scrapes (more than HistorySize of them) are missed.
type collector struct {
	jm *JobManager

	hist struct {
		sync.Mutex
		jobs map[string]*jobCheckpoints // by job id
	}
}

// jobCheckpoints is what the collector learnt of one job's completed
// checkpoints.
type jobCheckpoints struct {
	seen     int64     // highest checkpoint id counted
	lastEnd  time.Time // completion of the latest completed checkpoint; zero: none seen
	duration histogram
	size     histogram
}

// histogram is a cumulative Prometheus histogram kept by hand, so that it
// can be filled at scrape time.
type histogram struct {
	bounds []float64
	counts []uint64 // per bound, not cumulative
	count  uint64
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	h.count++
	h.sum += v
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
			return
		}
	}
}

func (h *histogram) metric(d *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		buckets[b] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.count, h.sum, buckets, labels...)
}

// observeCheckpoints folds the completed checkpoints of history (newest
// first) that it has not counted yet into the histograms of job id, and
// returns when the latest of them completed (zero: none seen yet).
func (c *collector) observeCheckpoints(id string, history []coordinator.Stats) (lastEnd time.Time, dur, size histogram) {
	if c.hist.jobs == nil {
		c.hist.jobs = make(map[string]*jobCheckpoints)
	}
	jc := c.hist.jobs[id]
	if jc == nil {
		jc = &jobCheckpoints{duration: newHistogram(durationBuckets), size: newHistogram(sizeBuckets)}
		c.hist.jobs[id] = jc
	}
	seen := jc.seen
	for i := len(history) - 1; i >= 0; i-- { // oldest first
		s := history[i]
		if s.Status != coordinator.Completed || s.ID <= seen {
			continue
		}
		jc.duration.observe(s.Duration().Seconds())
		jc.size.observe(float64(s.Bytes))
		jc.seen = max(jc.seen, s.ID)
		if s.EndTime.After(jc.lastEnd) {
			jc.lastEnd = s.EndTime
		}
	}
	return jc.lastEnd, jc.duration, jc.size
}

var _ prometheus.Collector = (*collector)(nil)

func (*collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCheckpointsInProgress, descCheckpointsCompleted, descCheckpointsFailed,
		descCheckpointsAborted, descLastDuration, descLastSize, descAlignment, descRestarts, descTaskManagersLive, descJobs,
		descRestartingRegions, descStale, descLeader, descEpoch, descFencedWrites, descJobInfo, descInterval, descLastCompleted,
		descLastAge, descDuration, descSize, descRestoredFrom, descRestoring, descLastStartDelay, descLastChannelState,
		descLastStorageRequests, descJobStorageRequests, descJobStorageCost} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.jm.mu.Lock()
	jobs, live := c.jm.mu.core.Metrics()
	staleReports, staleAcks := c.jm.mu.core.StaleCounts()
	views := c.jm.mu.core.Jobs()
	history := make(map[string][]coordinator.Stats)
	intervals := make(map[string]time.Duration)
	for _, j := range jobs {
		if j.Checkpointing {
			if v, err := c.jm.mu.core.Checkpoints(j.ID); err == nil {
				history[j.ID] = v.History
				intervals[j.ID] = v.Interval
			}
		}
	}
	c.jm.mu.Unlock()
	now := c.jm.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descTaskManagersLive, float64(live))
	leader, epoch := c.jm.leading()
	gauge(descLeader, float64(b2i(leader)))
	gauge(descEpoch, float64(epoch))
	var fenced int64
	if hc := c.jm.haClient.Load(); hc != nil {
		fenced = hc.FencedWrites()
	}
	counter(descFencedWrites, float64(fenced))
	counter(descStale, float64(staleReports), "task_report")
	counter(descStale, float64(staleAcks), "checkpoint_ack")
	byState := make(map[string]int)
	for _, s := range scheduler.JobStates() {
		byState[s.String()] = 0
	}
	for _, j := range jobs {
		byState[j.State.String()]++
		counter(descRestarts, float64(j.Restarts), j.ID)
		gauge(descRestartingRegions, float64(j.RestartingRegions), j.ID)
		if !j.Checkpointing {
			continue
		}
		gauge(descCheckpointsInProgress, float64(j.InProgress), j.ID)
		counter(descCheckpointsCompleted, float64(j.Completed), j.ID)
		counter(descCheckpointsFailed, float64(j.Failed), j.ID)
		counter(descCheckpointsAborted, float64(j.Aborted), j.ID)
		if j.HaveLast {
			gauge(descLastDuration, j.LastDuration.Seconds(), j.ID)
			gauge(descLastSize, float64(j.LastSize), j.ID)
		}
		for task, d := range j.Alignment {
			gauge(descAlignment, d.Seconds(), j.ID, task)
		}
	}
	for s, n := range byState {
		gauge(descJobs, float64(n), s)
	}
	c.collectJobs(ch, views, history, intervals, now)
}

// collectJobs exports the per-job metrics that the views, the checkpoint
// histories and the current checkpoint intervals (of jobs that take
// checkpoints) give.
func (c *collector) collectJobs(ch chan<- prometheus.Metric, views []scheduler.JobView, history map[string][]coordinator.Stats,
	intervals map[string]time.Duration, now time.Time) {
	c.hist.Lock()
	defer c.hist.Unlock()
	known := make(map[string]bool, len(views))
	for _, v := range views {
		known[v.ID] = true
		ch <- prometheus.MustNewConstMetric(descJobInfo, prometheus.GaugeValue, 1, v.ID, v.Name)
		ch <- prometheus.MustNewConstMetric(descRestoring, prometheus.GaugeValue, float64(v.Restore.TasksRestoring), v.ID)
		if !v.Checkpointing {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descRestoredFrom, prometheus.GaugeValue, float64(v.RestoredFrom), v.ID)
		for _, s := range history[v.ID] { // newest first
			if s.Status == coordinator.Completed {
				ch <- prometheus.MustNewConstMetric(descLastStartDelay, prometheus.GaugeValue, s.MaxStartDelay.Seconds(), v.ID)
				ch <- prometheus.MustNewConstMetric(descLastChannelState, prometheus.GaugeValue, float64(s.ChannelStateBytes), v.ID)
				for kind, n := range requestKinds(s.Storage) {
					ch <- prometheus.MustNewConstMetric(descLastStorageRequests, prometheus.GaugeValue, float64(n), v.ID, kind)
				}
				break
			}
		}
		total := c.jm.jobStorageCounters(v.ID).Snapshot()
		for kind, n := range requestKinds(coordinatorRequests(total)) {
			ch <- prometheus.MustNewConstMetric(descJobStorageRequests, prometheus.CounterValue, float64(n), v.ID, kind)
		}
		if iv, ok := intervals[v.ID]; ok {
			cost := storageCost(view.StorageRequests{}, history[v.ID], iv, c.jm.cfg.StoragePrices)
			ch <- prometheus.MustNewConstMetric(descJobStorageCost, prometheus.GaugeValue, cost.EstimatedMonthlyCost, v.ID, cost.Currency)
		}
		lastEnd, dur, size := c.observeCheckpoints(v.ID, history[v.ID])
		ch <- dur.metric(descDuration, v.ID)
		ch <- size.metric(descSize, v.ID)
		if !lastEnd.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLastCompleted, prometheus.GaugeValue, float64(lastEnd.UnixNano())/1e9, v.ID)
		}
		if v.State.Terminal() {
			continue
		}
		since := lastEnd
		if since.IsZero() {
			since = v.Start
		}
		ch <- prometheus.MustNewConstMetric(descLastAge, prometheus.GaugeValue, max(0, now.Sub(since).Seconds()), v.ID)
		if iv, ok := intervals[v.ID]; ok {
			ch <- prometheus.MustNewConstMetric(descInterval, prometheus.GaugeValue, iv.Seconds(), v.ID)
		}
	}
	for id := range c.hist.jobs {
		if !known[id] { // forgotten by the scheduler
			delete(c.hist.jobs, id)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// requestKinds are r's counts by the kind label of the storage metrics.
func requestKinds(r coordinator.StorageRequests) map[string]int64 {
	return map[string]int64{blobstore.RequestPut: r.Put, blobstore.RequestGet: r.Get,
		blobstore.RequestList: r.List, blobstore.RequestDelete: r.Delete}
}
