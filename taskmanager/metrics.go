package taskmanager

import (
	"slices"
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
}

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
		m.tasksRunning, newLateRecords(tm.lateRecordCounts),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeSnapshot(job, task string, bytes int64, stats dataflow.SnapshotStats, async time.Duration) {
	m.stateBytesWrite.Add(float64(bytes))
	m.snapshots.Inc()
	m.alignment.WithLabelValues(job, task).Set(stats.Alignment.Seconds())
	m.syncDuration.WithLabelValues(job, task).Set(stats.Sync.Seconds())
	m.asyncDuration.WithLabelValues(job, task).Set(async.Seconds())
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

// retireLocked keeps the late-record counts of task rt (key k), which is
// leaving tm.mu.tasks. tm.mu must be held.
func (tm *TaskManager) retireLocked(k taskKey, rt *runningTask) {
	if rt.task == nil {
		return
	}
	for _, op := range rt.task.Operators() {
		if lc, ok := op.Instance.(stream.LateRecordsCounter); ok {
			if tm.mu.lateGone == nil {
				tm.mu.lateGone = make(map[lateKey]int64)
			}
			tm.mu.lateGone[lateKey{k.job, op.UID}] += lc.LateRecordsDropped()
		}
	}
}

// forgetLateLocked drops the kept late-record counts of jobs that are not
// in active and have no task here: their series end. tm.mu must be held.
func (tm *TaskManager) forgetLateLocked(active []string) {
	for k := range tm.mu.lateGone {
		if !slices.Contains(active, k.job) && !tm.runsTaskOfLocked(k.job) {
			delete(tm.mu.lateGone, k)
		}
	}
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
