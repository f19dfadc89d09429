package jobmanager

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/jobmanager/webui/view"
)

// This file builds the checkpoint statistics documents (per task and
// subtask, the summary over the recent history, and the explanation of one
// checkpoint) from what the coordinator kept of the acknowledgements. The
// functions are pure: the REST handlers read the scheduler under the lock
// and call them after.

// dist sums up vs (in any order; vs is sorted in place).
func dist(vs []int64) view.Dist {
	if len(vs) == 0 {
		return view.Dist{}
	}
	slices.Sort(vs)
	var sum int64
	for _, v := range vs {
		sum += v
	}
	// Nearest rank: the smallest value with at least p% of the values at
	// or below it.
	rank := func(p int) int64 { return vs[max((p*len(vs)+99)/100, 1)-1] }
	return view.Dist{Count: len(vs), Min: vs[0], Max: vs[len(vs)-1], Avg: sum / int64(len(vs)), P50: rank(50), P99: rank(99)}
}

// taskInfo is one task (operator chain) of a job's graph.
type taskInfo struct {
	head        int
	name        string
	uids        []string
	parallelism int
	// upstream are the heads of the tasks its head reads from.
	upstream []int
}

// jobTasks lists jv's tasks in graph order (a task's upstream tasks come
// before it).
func jobTasks(jv *scheduler.JobView) []taskInfo {
	var out []taskInfo
	at := make(map[int]int) // head → index in out
	names := make(map[int][]string)
	for _, v := range jv.Graph.Vertices {
		head, ok := jv.TaskOf[v.ID]
		if !ok {
			head = v.ID
		}
		i, ok := at[head]
		if !ok {
			i = len(out)
			at[head] = i
			out = append(out, taskInfo{head: head, parallelism: v.Parallelism})
			for _, e := range jv.Graph.Inputs(v.ID) {
				up, ok := jv.TaskOf[e.From]
				if !ok {
					up = e.From
				}
				if !slices.Contains(out[i].upstream, up) {
					out[i].upstream = append(out[i].upstream, up)
				}
			}
		}
		out[i].uids = append(out[i].uids, v.UID)
		names[head] = append(names[head], v.Name)
	}
	for i := range out {
		out[i].name = strings.Join(names[out[i].head], " -> ")
	}
	return out
}

// checkpointOf is a checkpoint of the coordinator's history as REST shows
// it; taskNames names the subtasks (coordinator ids to "name (i/n)").
func checkpointOf(s *coordinator.Stats, taskNames map[coordinator.TaskID]string, now time.Time) view.Checkpoint {
	c := view.Checkpoint{ID: s.ID, Status: strings.ToUpper(s.Status.String()), Manual: s.Manual, TriggerTimeMs: unixMillis(s.TriggerTime),
		SizeBytes: s.Bytes, MaxSyncMs: s.MaxSync.Milliseconds(), MaxAsyncMs: s.MaxAsync.Milliseconds(),
		MaxAlignmentMs: s.MaxAlignment.Milliseconds(), Acknowledged: int32(s.Acked), TotalTasks: int32(s.Total), Failure: s.Failure,
		StorageRequests: viewRequests(s.Storage)}
	if s.Status == coordinator.InProgress {
		c.DurationMs = max(now.Sub(s.TriggerTime), 0).Milliseconds()
	} else {
		c.DurationMs = s.Duration().Milliseconds()
	}
	if s.Acked > 0 {
		c.SlowestTask, c.SlowestTaskMs = taskNames[s.SlowestTask], s.SlowestAck.Milliseconds()
	}
	return c
}

// checkpointStats is checkpoint s with its acknowledgements subs, laid
// out by the job's tasks: every subtask has a row, those that have not
// acknowledged (yet, or ever) without values.
func checkpointStats(s *coordinator.Stats, subs []coordinator.SubtaskStats, tasks []taskInfo,
	taskNames map[coordinator.TaskID]string, now time.Time) view.CheckpointStats {
	out := view.CheckpointStats{Checkpoint: checkpointOf(s, taskNames, now), Tasks: make([]view.TaskCheckpointStats, 0, len(tasks))}
	byTask := make(map[coordinator.TaskID]*coordinator.SubtaskStats, len(subs))
	for i := range subs {
		byTask[subs[i].Task] = &subs[i]
		out.ChannelStateBytes += subs[i].ChannelStateBytes
	}
	for _, t := range tasks {
		ts := view.TaskCheckpointStats{TaskID: t.head, Name: t.name, Operators: slices.Clone(t.uids), Parallelism: t.parallelism,
			Subtasks: make([]view.SubtaskCheckpointStats, 0, t.parallelism)}
		var e2e, delay, align, syncs, asyncs, bytes, channel []int64
		for i := range t.parallelism {
			row := view.SubtaskCheckpointStats{Subtask: i}
			if a := byTask[coordinator.TaskID{Vertex: t.head, Subtask: i}]; a != nil {
				row = subtaskRow(i, a, s.TriggerTime)
				ts.Acknowledged++
				e2e, delay, align = append(e2e, row.EndToEndMs), append(delay, row.StartDelayMs), append(align, row.AlignmentMs)
				syncs, asyncs = append(syncs, row.SyncMs), append(asyncs, row.AsyncMs)
				bytes, channel = append(bytes, row.StateBytes), append(channel, row.ChannelStateBytes)
			}
			ts.Subtasks = append(ts.Subtasks, row)
		}
		ts.EndToEndMs, ts.StartDelayMs, ts.AlignmentMs = dist(e2e), dist(delay), dist(align)
		ts.SyncMs, ts.AsyncMs, ts.StateBytes, ts.ChannelStateBytes = dist(syncs), dist(asyncs), dist(bytes), dist(channel)
		out.Tasks = append(out.Tasks, ts)
	}
	return out
}

func subtaskRow(i int, a *coordinator.SubtaskStats, trigger time.Time) view.SubtaskCheckpointStats {
	return view.SubtaskCheckpointStats{Subtask: i, Acknowledged: true, AckTimeMs: unixMillis(a.AckTime),
		EndToEndMs: a.EndToEnd(trigger).Milliseconds(), StartDelayMs: a.StartDelay(trigger).Milliseconds(),
		AlignmentMs: a.AlignmentDuration.Milliseconds(), SyncMs: a.SyncDuration.Milliseconds(), AsyncMs: a.AsyncDuration.Milliseconds(),
		StateBytes: a.Bytes, ChannelStateBytes: a.ChannelStateBytes, StorageRequests: viewRequests(a.Storage)}
}

func viewRequests(r coordinator.StorageRequests) view.StorageRequests {
	return view.StorageRequests{Put: r.Put, Get: r.Get, List: r.List, Delete: r.Delete}
}

// month is the period the request cost is estimated for.
const month = 30 * 24 * time.Hour

// storageCost is what a job's checkpoints cost in storage requests: total
// its requests so far, perCheckpoint the mean of the completed
// checkpoints in history, at one checkpoint every interval.
func storageCost(total view.StorageRequests, history []coordinator.Stats, interval time.Duration, prices StoragePrices) view.StorageCost {
	out := view.StorageCost{Requests: total, Currency: prices.Currency,
		Prices: view.StoragePrices{Put: prices.Put, Get: prices.Get, List: prices.List, Delete: prices.Delete}}
	var sum coordinator.StorageRequests
	n := 0
	for i := range history {
		if history[i].Status == coordinator.Completed {
			sum = sum.Add(history[i].Storage)
			n++
		}
	}
	if n > 0 {
		f := float64(n)
		out.PerCheckpoint = view.StorageRequestRates{Put: float64(sum.Put) / f, Get: float64(sum.Get) / f,
			List: float64(sum.List) / f, Delete: float64(sum.Delete) / f}
	}
	if interval > 0 {
		out.CheckpointsPerMonth = float64(month) / float64(interval)
	}
	out.EstimatedMonthlyCost = requestCost(out.PerCheckpoint, prices) * out.CheckpointsPerMonth
	return out
}

// requestCost is what r requests cost at prices (per 1,000).
func requestCost(r view.StorageRequestRates, prices StoragePrices) float64 {
	return (r.Put*prices.Put + r.Get*prices.Get + r.List*prices.List + r.Delete*prices.Delete) / 1000
}

// explainStorage adds to ex what checkpoint cs asked of storage and what
// that costs a month at one checkpoint every interval.
func explainStorage(ex *view.CheckpointExplain, cs *view.CheckpointStats, interval time.Duration, prices StoragePrices) {
	r := cs.StorageRequests
	ex.StorageRequests = r
	if r == (view.StorageRequests{}) {
		return
	}
	msg := fmt.Sprintf("Storage requests: %d PUT, %d GET, %d LIST, %d DELETE (the subtasks' uploads and the manifest).", r.Put, r.Get, r.List, r.Delete)
	if interval > 0 {
		rates := view.StorageRequestRates{Put: float64(r.Put), Get: float64(r.Get), List: float64(r.List), Delete: float64(r.Delete)}
		ex.EstimatedMonthlyCost = requestCost(rates, prices) * float64(month) / float64(interval)
		msg += fmt.Sprintf(" At one checkpoint every %v that is about %.2f %s a month in requests at the configured prices.", interval, ex.EstimatedMonthlyCost, prices.Currency)
	}
	ex.Explanation = append(ex.Explanation, msg)
}

// summarize sums up the completed checkpoints among history, each phase
// with its slowest subtask's value and in-flight data with its total (as
// the coordinator keeps them per checkpoint).
func summarize(history []coordinator.Stats) view.CheckpointSummary {
	var e2e, size, channel, delay, align, syncs, asyncs []int64
	for i := range history {
		s := &history[i]
		if s.Status != coordinator.Completed {
			continue
		}
		e2e, size, channel = append(e2e, s.Duration().Milliseconds()), append(size, s.Bytes), append(channel, s.ChannelStateBytes)
		delay, align = append(delay, s.MaxStartDelay.Milliseconds()), append(align, s.MaxAlignment.Milliseconds())
		syncs, asyncs = append(syncs, s.MaxSync.Milliseconds()), append(asyncs, s.MaxAsync.Milliseconds())
	}
	return view.CheckpointSummary{EndToEndMs: dist(e2e), SizeBytes: dist(size), ChannelStateBytes: dist(channel),
		StartDelayMs: dist(delay), AlignmentMs: dist(align), SyncMs: dist(syncs), AsyncMs: dist(asyncs)}
}

// Causes of a slow checkpoint (view.CheckpointExplain.Cause).
const (
	causeBackpressure = "backpressure"
	causeBarrierDelay = "barrier_delay"
	causeSlowUpload   = "slow_upload"
	causeSlowSnapshot = "slow_snapshot"
	causeSlowAck      = "slow_ack"
	causeNone         = "none"
)

// backpressuredAt is the upstream backpressure fraction at which a delayed
// barrier counts as caused by backpressure.
const backpressuredAt = 0.1

// explainCheckpoint finds the critical path of checkpoint cs: its slowest
// subtask's phases, the task whose barrier came latest and the input it
// came through, and names a cause. upstream gives the upstream task heads
// of each task head; backpressure each task's current backpressure
// fraction (the mean of its running subtasks), which stands in for the
// backpressure while the checkpoint ran.
func explainCheckpoint(cs *view.CheckpointStats, upstream map[int][]int, backpressure map[int]float64) view.CheckpointExplain {
	ex := view.CheckpointExplain{ID: cs.ID, Status: cs.Status, EndToEndMs: cs.DurationMs, ChannelStateBytes: cs.ChannelStateBytes,
		Cause: causeNone, Path: []view.Phase{}, Explanation: []string{}}
	byHead := make(map[int]*view.TaskCheckpointStats, len(cs.Tasks))
	var slowest, delayed *view.SubtaskCheckpointStats
	var slowestTask, delayedTask *view.TaskCheckpointStats
	waiting := 0
	for i := range cs.Tasks {
		t := &cs.Tasks[i]
		byHead[t.TaskID] = t
		for j := range t.Subtasks {
			s := &t.Subtasks[j]
			if !s.Acknowledged {
				waiting++
				continue
			}
			// Acknowledgements sent together (a taskmanager batches
			// them) arrive at once: among equal end-to-end times the
			// subtask that finished its own work last is the slow one.
			if slowest == nil || s.EndToEndMs > slowest.EndToEndMs ||
				s.EndToEndMs == slowest.EndToEndMs && ownWork(s) > ownWork(slowest) {
				slowest, slowestTask = s, t
			}
			// Ties go downstream (tasks come in graph order): a barrier
			// reaches a task after its upstream tasks.
			if delayed == nil || s.StartDelayMs+s.AlignmentMs >= delayed.StartDelayMs+delayed.AlignmentMs {
				delayed, delayedTask = s, t
			}
		}
	}
	say := func(format string, args ...any) {
		ex.Explanation = append(ex.Explanation, fmt.Sprintf(format, args...))
	}
	if slowest == nil {
		say("Checkpoint %d (%s): no subtask has acknowledged it, so there is no path to explain.", cs.ID, cs.Status)
		return ex
	}
	ex.SlowestTaskID, ex.SlowestTask, ex.SlowestSubtask = slowestTask.TaskID, slowestTask.Name, slowest.Subtask
	rest := max(slowest.EndToEndMs-slowest.StartDelayMs-slowest.AlignmentMs-slowest.SyncMs-slowest.AsyncMs, 0)
	ex.Path = []view.Phase{{Name: "start_delay", Ms: slowest.StartDelayMs}, {Name: "alignment", Ms: slowest.AlignmentMs},
		{Name: "sync", Ms: slowest.SyncMs}, {Name: "async", Ms: slowest.AsyncMs}, {Name: "ack", Ms: rest}}
	dom := ex.Path[0]
	for _, p := range ex.Path[1:] {
		if p.Ms > dom.Ms {
			dom = p
		}
	}
	ex.Dominant = dom.Name
	say("Checkpoint %d (%s) took %d ms end to end; the last acknowledgement came from %s, subtask %d, %d ms after the trigger.",
		cs.ID, cs.Status, cs.DurationMs, slowestTask.Name, slowest.Subtask, slowest.EndToEndMs)
	say("Its path: barrier after %d ms (start delay), alignment %d ms, synchronous snapshot %d ms, upload %d ms, acknowledgement %d ms: %s dominated.",
		slowest.StartDelayMs, slowest.AlignmentMs, slowest.SyncMs, slowest.AsyncMs, rest, strings.ReplaceAll(dom.Name, "_", " "))
	if waiting > 0 {
		say("%d subtasks have not acknowledged it.", waiting)
	}
	if d := cs.DurationMs - slowest.EndToEndMs; cs.Status == "COMPLETED" && d > 0 {
		say("After the last acknowledgement, writing the checkpoint's manifest and pointer took %d ms.", d)
	}
	ex.DelayedTask, ex.DelayedSubtask, ex.DelayedMs = delayedTask.Name, delayed.Subtask, delayed.StartDelayMs+delayed.AlignmentMs
	// The input the barrier came through last: the upstream task whose
	// barrier left latest (its start delay, alignment and snapshot).
	var input *view.TaskCheckpointStats
	var inputLeft int64 = -1
	for _, up := range upstream[delayedTask.TaskID] {
		t := byHead[up]
		if t == nil {
			continue
		}
		for _, s := range t.Subtasks {
			if left := s.StartDelayMs + s.AlignmentMs + s.SyncMs; s.Acknowledged && left > inputLeft {
				input, inputLeft = t, left
			}
		}
	}
	for _, up := range upstream[delayedTask.TaskID] {
		ex.UpstreamBackpressure = max(ex.UpstreamBackpressure, backpressure[up])
	}
	if input != nil {
		ex.SlowestInput = input.Name + " → " + delayedTask.Name
	}
	if ex.DelayedMs > 0 {
		if input != nil {
			say("The barrier waited longest at %s, subtask %d (%d ms from the trigger until aligned); it came last through the input %s, whose sender is %.0f%% backpressured now.",
				delayedTask.Name, delayed.Subtask, ex.DelayedMs, ex.SlowestInput, 100*ex.UpstreamBackpressure)
		} else {
			say("The barrier waited longest at %s, subtask %d (%d ms from the trigger until aligned).", delayedTask.Name, delayed.Subtask, ex.DelayedMs)
		}
	}
	if cs.ChannelStateBytes > 0 {
		say("In-flight data persisted with the snapshot: %d bytes.", cs.ChannelStateBytes)
	}
	switch dom.Name {
	case "start_delay", "alignment":
		if ex.UpstreamBackpressure >= backpressuredAt {
			ex.Cause = causeBackpressure
			say("Cause: backpressure. The barrier queued behind records on their way to %s, which cannot keep up; make it faster or give it more parallelism, or use unaligned checkpoints.", delayedTask.Name)
		} else {
			ex.Cause = causeBarrierDelay
			say("Cause: the barrier was delayed on its way to %s, though its inputs are not backpressured now; look for a slow or skewed input, or long processing of single batches.", delayedTask.Name)
		}
	case "async":
		ex.Cause = causeSlowUpload
		say("Cause: slow upload. %s took %d ms to write its state (%d bytes) to checkpoint storage; check the storage's throughput, or use incremental checkpoints.",
			slowestTask.Name, slowest.AsyncMs, slowest.StateBytes)
	case "sync":
		ex.Cause = causeSlowSnapshot
		say("Cause: slow snapshot. %s spent %d ms in its synchronous snapshot, while it processed nothing; a large heap state copies slowly, the Pebble backend snapshots in constant time.",
			slowestTask.Name, slowest.SyncMs)
	case "ack":
		ex.Cause = causeSlowAck
		say("Cause: the acknowledgement reached the jobmanager %d ms after the upload ended; the network, or the jobmanager itself, was slow.", rest)
	}
	return ex
}

// ownWork is the time from the trigger until s had uploaded its state.
func ownWork(s *view.SubtaskCheckpointStats) int64 {
	return s.StartDelayMs + s.AlignmentMs + s.SyncMs + s.AsyncMs
}

// backpressureByTask is the mean backpressure of each task's running
// subtasks.
func backpressureByTask(tasks []scheduler.TaskView) map[int]float64 {
	sum, n := make(map[int]float64), make(map[int]int)
	for _, t := range tasks {
		if t.State == scheduler.TaskRunning {
			sum[t.Vertex] += t.Backpressure
			n[t.Vertex]++
		}
	}
	for h := range sum {
		sum[h] /= float64(n[h])
	}
	return sum
}

// upstreamOf maps each task head to its upstream task heads.
func upstreamOf(tasks []taskInfo) map[int][]int {
	m := make(map[int][]int, len(tasks))
	for _, t := range tasks {
		m[t.head] = t.upstream
	}
	return m
}
