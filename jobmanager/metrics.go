package jobmanager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/jobmanager/scheduler"
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
)

// collector exports the core's state as Prometheus metrics.
type collector struct{ jm *JobManager }

var _ prometheus.Collector = (*collector)(nil)

func (*collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCheckpointsInProgress, descCheckpointsCompleted, descCheckpointsFailed,
		descCheckpointsAborted, descLastDuration, descLastSize, descAlignment, descRestarts, descTaskManagersLive, descJobs,
		descRestartingRegions, descStale, descLeader, descEpoch, descFencedWrites} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.jm.mu.Lock()
	jobs, live := c.jm.mu.core.Metrics()
	staleReports, staleAcks := c.jm.mu.core.StaleCounts()
	c.jm.mu.Unlock()
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
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
