package taskmanager

import (
	"fmt"
	"github.com/weirstream/weir/internal/storagemetrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/stream"
)

// metrics are the taskmanager's Prometheus metrics, served on
// Config.MetricsAddress at /metrics.
type metrics struct {
	reg             *prometheus.Registry
	stateBytesWrite prometheus.Counter
	stateBytesRead  prometheus.Counter
	snapshots       prometheus.Counter
	alignment       *prometheus.GaugeVec
	syncDuration    *prometheus.GaugeVec
	asyncDuration   *prometheus.GaugeVec
	tasksRunning    prometheus.GaugeFunc
	fencedCalls     prometheus.Counter
	// stateBytes, restoreDuration and restoreTime are per operator or
	// task subtask; their series end when the subtask leaves the
	// taskmanager (forgetSubtask), those of the other vectors with the job
	// (forgetEndedLocked).
	stateBytes      *prometheus.GaugeVec
	restoreDuration *prometheus.GaugeVec
	restoreTime     *prometheus.GaugeVec

	mu struct {
		sync.Mutex
		// jobs have series in the vectors above.
		jobs map[string]bool
	}
}

// endedSeriesGrace is how long the series of an ended task (its final
// record counts, its job's late records and snapshot gauges) stay after
// the task was reported ended, at least, once its job is no longer
// active: long enough for a few scrapes to see the final values.
const endedSeriesGrace = 2 * time.Minute

func newMetrics(tm *TaskManager) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.stateBytesWrite = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weir_statebackend_bytes_written_total", Help: "Bytes of state snapshots uploaded to checkpoint storage."})
	m.stateBytesRead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weir_statebackend_bytes_read_total", Help: "Bytes of state read from checkpoint storage on restore."})
	m.snapshots = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weir_task_snapshots_total", Help: "Task snapshots uploaded and acknowledged."})
	m.alignment = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weir_task_checkpoint_alignment_seconds", Help: "Barrier alignment time of the task's last checkpoint."},
		[]string{"job", "task"})
	m.syncDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weir_task_checkpoint_sync_seconds", Help: "Synchronous snapshot time of the task's last checkpoint."},
		[]string{"job", "task"})
	m.asyncDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weir_task_checkpoint_async_seconds", Help: "Upload time of the task's last checkpoint."},
		[]string{"job", "task"})
	m.tasksRunning = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weir_taskmanager_tasks", Help: "Tasks known to the taskmanager (running or not yet reported ended)."},
		func() float64 {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return float64(len(tm.mu.tasks))
		})
	m.stateBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weir_operator_state_bytes",
		Help: "State size of the operator subtask's last snapshot: encoded keyed and operator state plus the files of an incremental snapshot, " +
			"whether uploaded by this checkpoint or reused."},
		[]string{"job", "operator", "subtask"})
	m.restoreDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weir_task_restore_duration_seconds", Help: "Time the subtask's latest restore took to load its state from checkpoint storage."},
		[]string{"job", "task", "subtask"})
	m.restoreTime = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weir_task_restore_timestamp_seconds", Help: "When the subtask's latest restore finished (seconds since the epoch)."},
		[]string{"job", "task", "subtask"})
	m.fencedCalls = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weir_taskmanager_fenced_calls_total", Help: "Calls from a jobmanager with a lower fencing epoch than one already seen (a deposed leader), rejected."})
	exchangeSent := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "weir_exchange_sent_bytes_total", Help: "Bytes of data frames sent to other taskmanagers (encoded, before gRPC framing)."},
		func() float64 { return float64(tm.exchangeStats().SentBytes) })
	exchangeFrames := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "weir_exchange_sent_frames_total", Help: "Data frames sent to other taskmanagers."},
		func() float64 { return float64(tm.exchangeStats().SentFrames) })
	exchangeReceived := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "weir_exchange_received_bytes_total", Help: "Bytes of data frames received from other taskmanagers."},
		func() float64 { return float64(tm.exchangeStats().ReceivedBytes) })
	exchangeBuffered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weir_exchange_buffered_bytes", Help: "Bytes of batches from other taskmanagers waiting in input buffers (network memory in use)."},
		func() float64 { return float64(tm.exchangeStats().BufferedBytes) })
	exchangePeak := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weir_exchange_buffered_bytes_peak", Help: "The most network memory in use so far."},
		func() float64 { return float64(tm.exchangeStats().PeakBufferedBytes) })
	exchangeBudget := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weir_exchange_memory_bytes", Help: "The network memory budget (exchangeMemoryBytes)."},
		func() float64 { return float64(tm.cfg.ExchangeMemoryBytes) })
	m.reg.MustRegister(exchangeSent, exchangeFrames, exchangeReceived, exchangeBuffered, exchangePeak, exchangeBudget,
		&taskNetworkMemory{tm: tm, desc: prometheus.NewDesc("weir_task_network_buffered_bytes",
			"Bytes of batches from other taskmanagers waiting in the task's input buffers (its share of weir_exchange_buffered_bytes).",
			[]string{"job", "task"}, nil)})
	m.reg.MustRegister(m.fencedCalls, m.stateBytesWrite, m.stateBytesRead, m.snapshots, m.alignment, m.syncDuration, m.asyncDuration,
		m.tasksRunning, newLateRecords(tm.lateRecordCounts), m.stateBytes, m.restoreDuration, m.restoreTime, newTaskSeries(tm),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(storagemetrics.Collectors(&tm.storages.counts)...)
	return m
}

// observeSnapshot records an uploaded snapshot of subtask (named task) of
// job: its bytes uploaded, its durations, and the state size of each
// operator (by uid).
func (m *metrics) observeSnapshot(job, task string, subtask int, bytes int64, stateBytes map[string]int64,
	stats dataflow.SnapshotStats, async time.Duration) {
	m.noteJob(job)
	m.stateBytesWrite.Add(float64(bytes))
	m.snapshots.Inc()
	sub := strconv.Itoa(subtask)
	for uid, n := range stateBytes {
		m.stateBytes.WithLabelValues(job, uid, sub).Set(float64(n))
	}
	m.alignment.WithLabelValues(job, task).Set(stats.Alignment.Seconds())
	m.syncDuration.WithLabelValues(job, task).Set(stats.Sync.Seconds())
	m.asyncDuration.WithLabelValues(job, task).Set(async.Seconds())
}

// observeRestore records that a subtask (task name, as deployed, and
// index) of job loaded its state in d, ending at end.
func (m *metrics) observeRestore(job, name string, subtask, parallelism int, d time.Duration, end time.Time) {
	m.noteJob(job)
	task, sub := taskLabels(name, subtask, parallelism)
	m.restoreDuration.WithLabelValues(job, task, sub).Set(d.Seconds())
	m.restoreTime.WithLabelValues(job, task, sub).Set(float64(end.UnixNano()) / 1e9)
}

func (m *metrics) noteJob(job string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.jobs == nil {
		m.mu.jobs = make(map[string]bool)
	}
	m.mu.jobs[job] = true
}

// forgetJobs ends the vector series of the jobs keep says no.
func (m *metrics) forgetJobs(keep func(job string) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for job := range m.mu.jobs {
		if keep(job) {
			continue
		}
		l := prometheus.Labels{"job": job}
		for _, v := range []*prometheus.GaugeVec{m.alignment, m.syncDuration, m.asyncDuration, m.stateBytes, m.restoreDuration, m.restoreTime} {
			v.DeletePartialMatch(l)
		}
		delete(m.mu.jobs, job)
	}
}

// forgetSubtask ends the state-size and restore series of a subtask that
// leaves the taskmanager: a later attempt may run elsewhere, and the
// series would then be counted twice.
func (m *metrics) forgetSubtask(job, name string, subtask, parallelism int, ops []dataflow.OperatorInstance) {
	task, sub := taskLabels(name, subtask, parallelism)
	for _, op := range ops {
		m.stateBytes.DeleteLabelValues(job, op.UID, sub)
	}
	m.restoreDuration.DeleteLabelValues(job, task, sub)
	m.restoreTime.DeleteLabelValues(job, task, sub)
}

// taskLabels splits a deployed task name ("window -> sink (2/4)") into the
// labels task ("window -> sink") and subtask ("1", 0-based).
func taskLabels(name string, subtask, parallelism int) (task, sub string) {
	return strings.TrimSuffix(name, fmt.Sprintf(" (%d/%d)", subtask+1, parallelism)), strconv.Itoa(subtask)
}

// goneTask is what stays of a task that left tm.mu.tasks: the final
// values of its counters, for the grace period (endedSeriesGrace).
type goneTask struct {
	name                  string // as deployed
	parallelism           int
	recordsIn, recordsOut int64
	backpressured         time.Duration
	busy, idle            time.Duration
	at                    time.Time // when it left
}

// taskSeries is the prometheus.Collector of the per-subtask counters
// weir_task_records_in_total, weir_task_records_out_total,
// weir_task_backpressured_seconds_total, weir_task_busy_seconds_total and
// weir_task_idle_seconds_total, read from the tasks at every
// scrape. A task that ended keeps its final values for a while
// (goneTask); a new attempt of the subtask starts its counters at zero.
type taskSeries struct {
	tm                   *TaskManager
	in, out, backpressed *prometheus.Desc
	busy, idle           *prometheus.Desc
	// watermark and watermarkLag are gauges of running subtasks only.
	watermark, watermarkLag *prometheus.Desc
}

var _ prometheus.Collector = (*taskSeries)(nil)

func newTaskSeries(tm *TaskManager) *taskSeries {
	labels := []string{"job", "task", "subtask"}
	return &taskSeries{tm: tm,
		in: prometheus.NewDesc("weir_task_records_in_total",
			"Rows entering the subtask's chain (for a source task: rows the source emitted), in the current attempt.", labels, nil),
		out: prometheus.NewDesc("weir_task_records_out_total",
			"Rows the subtask's last operator emitted to its main output and to side outputs that something reads, in the current attempt.",
			labels, nil),
		backpressed: prometheus.NewDesc("weir_task_backpressured_seconds_total",
			"Time the subtask waited to send a batch because a downstream input buffer was full (no credit), in the current attempt.",
			labels, nil),
		busy: prometheus.NewDesc("weir_task_busy_seconds_total",
			"Time the subtask worked: the time it ran less the time it was idle or backpressured, in the current attempt.",
			labels, nil),
		idle: prometheus.NewDesc("weir_task_idle_seconds_total",
			"Time the subtask waited for input (or an idle source for its next poll, or a finished task for its final checkpoint), in the current attempt.",
			labels, nil),
		watermark: prometheus.NewDesc("weir_task_watermark_seconds",
			"The running subtask's current event-time watermark (seconds since the epoch); absent before its first watermark.",
			labels, nil),
		watermarkLag: prometheus.NewDesc("weir_task_watermark_lag_seconds",
			"How far the running subtask's watermark is behind the taskmanager's clock: its event-time latency, for event times that follow the wall clock.",
			labels, nil),
	}
}

func (c *taskSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.in
	ch <- c.out
	ch <- c.backpressed
	ch <- c.busy
	ch <- c.idle
	ch <- c.watermark
	ch <- c.watermarkLag
}

func (c *taskSeries) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		job string
		sub int
		g   goneTask
		wm  int64 // a running task's watermark, stream.MinWatermark for none
	}
	var out []series
	c.tm.mu.Lock()
	for k, rt := range c.tm.mu.tasks {
		if rt.task == nil {
			continue
		}
		m := rt.task.Metrics()
		out = append(out, series{k.job, int(k.subtask), goneTask{name: rt.name, parallelism: rt.spec.Parallelism,
			recordsIn: m.RecordsIn.Load(), recordsOut: m.RecordsOut.Load(), backpressured: m.BackpressuredTime(),
			busy: m.BusyTime(), idle: m.IdleTime()}, m.Watermark.Load()})
	}
	for k, g := range c.tm.mu.goneTasks {
		if _, shadowed := c.tm.mu.tasks[k]; !shadowed {
			out = append(out, series{k.job, int(k.subtask), *g, stream.MinWatermark})
		}
	}
	c.tm.mu.Unlock()
	for _, s := range out {
		task, sub := taskLabels(s.g.name, s.sub, s.g.parallelism)
		ch <- prometheus.MustNewConstMetric(c.in, prometheus.CounterValue, float64(s.g.recordsIn), s.job, task, sub)
		ch <- prometheus.MustNewConstMetric(c.out, prometheus.CounterValue, float64(s.g.recordsOut), s.job, task, sub)
		ch <- prometheus.MustNewConstMetric(c.backpressed, prometheus.CounterValue, s.g.backpressured.Seconds(), s.job, task, sub)
		ch <- prometheus.MustNewConstMetric(c.busy, prometheus.CounterValue, s.g.busy.Seconds(), s.job, task, sub)
		ch <- prometheus.MustNewConstMetric(c.idle, prometheus.CounterValue, s.g.idle.Seconds(), s.job, task, sub)
		if s.wm > stream.MinWatermark && s.wm < stream.MaxWatermark {
			ch <- prometheus.MustNewConstMetric(c.watermark, prometheus.GaugeValue, float64(s.wm)/1000, s.job, task, sub)
			lag := float64(time.Now().UnixMilli()-s.wm) / 1000
			ch <- prometheus.MustNewConstMetric(c.watermarkLag, prometheus.GaugeValue, lag, s.job, task, sub)
		}
	}
}

// lateRecords is the prometheus.Collector of
// weir_operator_late_records_dropped_total{job,operator}: at every scrape it
// reads the counts of the operators that implement
// stream.LateRecordsCounter, so operators need no metrics code of their own.
type lateRecords struct {
	desc *prometheus.Desc
	// counts returns the current sums by job and operator uid.
	counts func() map[lateKey]int64
}

// lateKey is one series of weir_operator_late_records_dropped_total.
type lateKey struct{ job, operator string }

var _ prometheus.Collector = (*lateRecords)(nil)

func newLateRecords(counts func() map[lateKey]int64) *lateRecords {
	return &lateRecords{
		desc: prometheus.NewDesc("weir_operator_late_records_dropped_total",
			"Records an operator dropped because they arrived after their window was emitted (later than its allowed lateness), "+
				"summed over the operator's subtasks in this taskmanager. Restarts with the tasks, like any process counter.",
			[]string{"job", "operator"}, nil),
		counts: counts,
	}
}

func (c *lateRecords) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lateRecords) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.counts() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), k.job, k.operator)
	}
}

// lateRecordCounts sums stream.LateRecordsCounter over the operators of
// every task the taskmanager holds (running, or ended and not yet reported
// to the jobmanager) and of the tasks of the same jobs it held before, by
// job and operator uid. Operators without late records to count have no
// series.
func (tm *TaskManager) lateRecordCounts() map[lateKey]int64 {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make(map[lateKey]int64, len(tm.mu.lateGone))
	for k, n := range tm.mu.lateGone {
		out[k] = n
	}
	for k, rt := range tm.mu.tasks {
		if rt.task == nil {
			continue
		}
		for _, op := range rt.task.Operators() {
			if lc, ok := op.Instance.(stream.LateRecordsCounter); ok {
				out[lateKey{k.job, op.UID}] += lc.LateRecordsDropped()
			}
		}
	}
	return out
}

// retireLocked keeps the late-record counts and the final record counts
// of task rt (key k), which is leaving tm.mu.tasks. tm.mu must be held.
func (tm *TaskManager) retireLocked(k taskKey, rt *runningTask) {
	if rt.task == nil {
		return
	}
	m := rt.task.Metrics()
	if tm.mu.goneTasks == nil {
		tm.mu.goneTasks = make(map[taskKey]*goneTask)
	}
	tm.mu.goneTasks[k] = &goneTask{name: rt.name, parallelism: rt.spec.Parallelism, recordsIn: m.RecordsIn.Load(),
		recordsOut: m.RecordsOut.Load(), backpressured: m.BackpressuredTime(), busy: m.BusyTime(), idle: m.IdleTime(), at: time.Now()}
	tm.metrics.forgetSubtask(k.job, rt.name, int(k.subtask), rt.spec.Parallelism, rt.task.Operators())
	for _, op := range rt.task.Operators() {
		if lc, ok := op.Instance.(stream.LateRecordsCounter); ok {
			if tm.mu.lateGone == nil {
				tm.mu.lateGone = make(map[lateKey]int64)
			}
			tm.mu.lateGone[lateKey{k.job, op.UID}] += lc.LateRecordsDropped()
		}
	}
}

// forgetEndedLocked ends the series of jobs that are not in active, have
// no task here, and none of whose tasks ended less than
// tm.endedSeriesGrace ago: the kept late-record and record counts, and
// the per-job gauges. tm.mu must be held.
func (tm *TaskManager) forgetEndedLocked(active []string, now time.Time) {
	recent := make(map[string]bool)
	for k, g := range tm.mu.goneTasks {
		if now.Sub(g.at) < tm.endedSeriesGrace {
			recent[k.job] = true
		}
	}
	keep := func(job string) bool {
		return recent[job] || slices.Contains(active, job) || tm.runsTaskOfLocked(job)
	}
	for k := range tm.mu.goneTasks {
		if !keep(k.job) {
			delete(tm.mu.goneTasks, k)
		}
	}
	for k := range tm.mu.lateGone {
		if !keep(k.job) {
			delete(tm.mu.lateGone, k)
		}
	}
	tm.metrics.forgetJobs(keep)
}

// exchangeStats are the counters of the taskmanager's exchange, zero before
// it exists.
func (tm *TaskManager) exchangeStats() dataflow.ExchangeStats {
	if x := tm.exchangeRef.Load(); x != nil {
		return x.Stats()
	}
	return dataflow.ExchangeStats{}
}

// taskNetworkMemory is the collector of
// weir_task_network_buffered_bytes{job,task}, read from the running tasks
// at every scrape.
type taskNetworkMemory struct {
	tm   *TaskManager
	desc *prometheus.Desc
}

func (c *taskNetworkMemory) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *taskNetworkMemory) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		job, task string
		n         int64
	}
	var out []series
	c.tm.mu.Lock()
	for k, rt := range c.tm.mu.tasks {
		if rt.task != nil && !terminal(rt.state) {
			out = append(out, series{k.job, rt.name, rt.task.Metrics().NetworkBufferedBytes.Load()})
		}
	}
	c.tm.mu.Unlock()
	for _, s := range out {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.n), s.job, s.task)
	}
}
