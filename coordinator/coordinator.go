package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/stream"
)

// Config holds the coordinator's knobs. Build it with ConfigFrom from a job's
// stream.CheckpointConfig; New replaces out-of-range values by the defaults
// noted on each field.
type Config struct {
	// Interval between periodic triggers, measured from the previous trigger
	// (periodic or manual). 0 means only manual triggers.
	Interval time.Duration
	// Timeout after which a checkpoint that is still collecting
	// acknowledgements is aborted and counted as a failure. Default 10m.
	Timeout time.Duration
	// MinPause is the least time from the end (completion or abort) of one
	// checkpoint to the next periodic trigger. When it is positive, periodic
	// triggers also wait until no checkpoint is pending (a minimum pause
	// implies one checkpoint at a time: the pause separates checkpoints, so
	// they cannot overlap). Default 0.
	MinPause time.Duration
	// MaxConcurrent is how many checkpoints may be pending at once, for
	// periodic and manual triggers alike. Default 1.
	MaxConcurrent int
	// TolerableFailures is how many consecutive checkpoint failures are
	// tolerated; one more emits FailJobAction. Default 0.
	TolerableFailures int
	// Retained is how many completed checkpoints are kept; older ones are
	// discarded. Default 1.
	Retained int
	// Adaptive, when non-nil, makes Interval the starting interval of an
	// adaptive one (see AdaptiveConfig).
	Adaptive *AdaptiveConfig
}

// DefaultTimeout is the checkpoint timeout used when Config.Timeout is not
// positive.
const DefaultTimeout = 10 * time.Minute

// HistorySize is how many checkpoints History reports at most. The
// acknowledgements of those checkpoints are kept too (SubtaskStats), so a
// coordinator holds at most HistorySize × tasks of them.
const HistorySize = 50

// ConfigFrom converts a job's checkpoint settings, applying their defaults.
func ConfigFrom(c stream.CheckpointConfig) Config {
	c = c.WithDefaults()
	cfg := Config{
		Interval:          c.Interval,
		Timeout:           c.Timeout,
		MinPause:          c.MinPause,
		MaxConcurrent:     c.MaxConcurrent,
		TolerableFailures: c.TolerableFailures,
		Retained:          c.Retained,
	}
	if c.Adaptive {
		cfg.Adaptive = &AdaptiveConfig{MaxOverhead: c.MaxOverhead, MinInterval: c.MinInterval, MaxInterval: c.MaxInterval}
	}
	return cfg
}

func (c Config) normalized() Config {
	if c.Interval < 0 {
		c.Interval = 0
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MinPause < 0 {
		c.MinPause = 0
	}
	if c.MaxConcurrent < 1 {
		c.MaxConcurrent = 1
	}
	if c.TolerableFailures < 0 {
		c.TolerableFailures = 0
	}
	if c.Retained < 1 {
		c.Retained = 1
	}
	if c.Adaptive != nil {
		a := c.Adaptive.normalized()
		c.Adaptive = &a
		c.Interval = min(max(c.Interval, a.MinInterval), a.MaxInterval)
	}
	return c
}

// TaskID names one subtask of one job vertex. It identifies the task across
// restarts; the shell maps it to the current execution attempt.
type TaskID struct{ Vertex, Subtask int }

func (t TaskID) String() string { return fmt.Sprintf("%d/%d", t.Vertex, t.Subtask) }

func compareTasks(a, b TaskID) int {
	if a.Vertex != b.Vertex {
		return a.Vertex - b.Vertex
	}
	return a.Subtask - b.Subtask
}

// AckStats are the measurements a task reports with its acknowledgement.
type AckStats struct {
	SyncDuration, AsyncDuration, AlignmentDuration time.Duration
	// Bytes is the size of the state the task uploaded.
	Bytes int64
	// ChannelStateBytes is the size of the in-flight data persisted with
	// the snapshot (unaligned checkpoints).
	ChannelStateBytes int64
	// BarrierReceived is when the task received the checkpoint's first
	// barrier (a source: the trigger), on the task's clock; zero when
	// unknown.
	BarrierReceived time.Time
	// Storage are the requests the task's upload made to checkpoint
	// storage.
	Storage StorageRequests
}

// StorageRequests counts requests to checkpoint storage by the kind an
// object store bills for.
type StorageRequests struct {
	Put, Get, List, Delete int64
}

// Add returns the sum of r and o.
func (r StorageRequests) Add(o StorageRequests) StorageRequests {
	return StorageRequests{Put: r.Put + o.Put, Get: r.Get + o.Get, List: r.List + o.List, Delete: r.Delete + o.Delete}
}

// Total is the number of requests of every kind.
func (r StorageRequests) Total() int64 { return r.Put + r.Get + r.List + r.Delete }

// Errors returned by TriggerNow; test with errors.Is.
var (
	ErrStopped        = errors.New("coordinator: stopped")
	ErrTooManyPending = errors.New("coordinator: too many checkpoints in progress")
	ErrNoSources      = errors.New("coordinator: no running source tasks")
)

type phase int

const (
	collecting phase = iota // waiting for acknowledgements
	acked                   // every required task acked; waiting for the manifest slot
	writing                 // WriteManifestAction emitted; waiting for ManifestWritten
)

// taskTable numbers the tasks of one New or Reset: task i is tasks[i]
// (sorted), and indexOf maps a task back to i. It never changes: Reset
// makes a new one, and a checkpoint keeps the one it was triggered with.
type taskTable struct {
	tasks []TaskID
	// rows[v][s] is the index of task {v, s}, or -1; nil when the tasks
	// are too sparse for it (then index holds them).
	rows  [][]int32
	index map[TaskID]int32
}

func newTaskTable(tasks []TaskID) *taskTable {
	t := &taskTable{tasks: sortedSet(tasks)}
	// Vertices and subtasks are small dense numbers in a job: a table of
	// rows costs a fraction of a map and looks up without hashing. Other
	// numbers (none, in practice) go to a map.
	cells, dense := 0, true
	for i, task := range t.tasks {
		if task.Vertex < 0 || task.Subtask < 0 || task.Vertex > 2*len(t.tasks)+64 {
			dense = false
			break
		}
		if i == len(t.tasks)-1 || t.tasks[i+1].Vertex != task.Vertex {
			cells += task.Subtask + 1 // the row's last (largest) subtask
		}
	}
	if dense && cells <= 2*len(t.tasks)+64 {
		for i, task := range t.tasks {
			if task.Vertex >= len(t.rows) {
				t.rows = append(t.rows, make([][]int32, task.Vertex+1-len(t.rows))...)
			}
			row := t.rows[task.Vertex]
			if task.Subtask >= len(row) {
				row = append(row, make([]int32, task.Subtask+1-len(row))...)
				for k := len(t.rows[task.Vertex]); k < task.Subtask; k++ {
					row[k] = -1
				}
				t.rows[task.Vertex] = row
			}
			row[task.Subtask] = int32(i)
		}
		return t
	}
	t.index = make(map[TaskID]int32, len(t.tasks))
	for i, task := range t.tasks {
		t.index[task] = int32(i)
	}
	return t
}

// indexOf returns the index of task, and whether it is one of the table's.
func (t *taskTable) indexOf(task TaskID) (int32, bool) {
	if t.index != nil {
		i, ok := t.index[task]
		return i, ok
	}
	if task.Vertex < 0 || task.Vertex >= len(t.rows) || task.Subtask < 0 || task.Subtask >= len(t.rows[task.Vertex]) {
		return 0, false
	}
	i := t.rows[task.Vertex][task.Subtask]
	return i, i >= 0
}

// taskStatus is where a task stands in one pending checkpoint.
type taskStatus uint8

const (
	notRequired   taskStatus = iota // had finished at trigger time
	waiting                         // required, not acknowledged yet
	ackedTask                       // required and acknowledged
	finishedEarly                   // required, finished without acknowledging
)

type pendingCheckpoint struct {
	id      int64
	trigger time.Time
	// pause is the longest SyncDuration+AlignmentDuration acknowledged.
	pause time.Duration
	// table are the tasks at trigger time; status and acks are indexed
	// like table.tasks. The required tasks are those whose status is not
	// notRequired.
	table  *taskTable
	status []taskStatus
	acks   []any
	// nWaiting and nAcked count the tasks waiting and ackedTask.
	nWaiting, nAcked int
	// done are the tasks that had finished at trigger time (sorted).
	done  []TaskID
	phase phase
	stats *Stats
	// written are the acknowledgements of a checkpoint being written, in
	// task order (WriteManifestAction.Acks); acks is nil then.
	written []Ack
	// subs are the acknowledgements' SubtaskStats, as they came (shared
	// with Coordinator.subtasks).
	subs *ackLog
	// orphaned: Reset came while the manifest was being written; the tasks
	// that took the checkpoint are gone.
	orphaned bool
}

type completedCheckpoint struct {
	id   int64
	acks []Ack // by task
}

// Coordinator is the checkpoint coordinator of one job. It is not safe for
// concurrent use: the shell calls it from one goroutine (or under a lock).
type Coordinator struct {
	cfg     Config
	table   *taskTable
	sources []TaskID // sorted
	// sourceIndex are the sources' indexes in table.tasks (-1: not a
	// task); finished is indexed like table.tasks.
	sourceIndex []int32
	finished    []bool

	firstID     int64
	nextID      int64
	pending     []*pendingCheckpoint // ascending id
	lastTrigger time.Time
	lastEnd     time.Time
	ended       bool // lastEnd is set
	consecutive int  // consecutive failures
	stopped     bool

	completed []completedCheckpoint // retained, ascending id
	history   []*Stats              // oldest first, at most HistorySize
	// subtasks are the acknowledgements of the checkpoints in history, by
	// id, in the order they came.
	subtasks   map[int64]*ackLog
	nCompleted int
	nFailed    int
	aborts     [len(causeNames)]int // by cause
	ignored    int
	// interval is the current periodic interval: cfg.Interval, adapted
	// after each completed periodic checkpoint when cfg.Adaptive is set.
	interval time.Duration

	actions []Action
}

// New returns a coordinator for a job whose running task executions are
// tasks (every one of them must acknowledge a checkpoint), of which sources
// receive the triggers. Checkpoint ids start at firstID (at least 1) and
// strictly increase, also across Reset. The first periodic trigger comes
// Interval after now.
func New(cfg Config, tasks []TaskID, sources []TaskID, firstID int64, now time.Time) *Coordinator {
	if firstID < 1 {
		firstID = 1
	}
	c := &Coordinator{cfg: cfg.normalized(), firstID: firstID, nextID: firstID}
	c.interval = c.cfg.Interval
	c.setTasks(tasks, sources)
	c.lastTrigger = now
	return c
}

func sortedSet(ts []TaskID) []TaskID {
	out := slices.Clone(ts)
	slices.SortFunc(out, compareTasks)
	return slices.Compact(out)
}

// setTasks takes a new set of tasks, none finished.
func (c *Coordinator) setTasks(tasks, sources []TaskID) {
	c.table = newTaskTable(tasks)
	c.sources = sortedSet(sources)
	c.sourceIndex = make([]int32, len(c.sources))
	for k, s := range c.sources {
		i, ok := c.table.indexOf(s)
		if !ok {
			i = -1
		}
		c.sourceIndex[k] = i
	}
	c.finished = make([]bool, len(c.table.tasks))
}

// Ready returns the actions accumulated since the previous call, in the
// order the shell must carry them out, and forgets them.
func (c *Coordinator) Ready() []Action {
	a := c.actions
	c.actions = nil
	return a
}

// Tick aborts checkpoints that have timed out and triggers a periodic
// checkpoint when one is due. The shell calls it regularly (its period bounds
// the precision of Interval, MinPause and Timeout).
func (c *Coordinator) Tick(now time.Time) {
	if c.stopped {
		return
	}
	for _, p := range slices.Clone(c.pending) {
		if p.phase != collecting || now.Before(p.trigger.Add(c.cfg.Timeout)) {
			continue
		}
		reason := fmt.Sprintf("expired: not acknowledged by all tasks within the timeout of %v (%d of %d acked)",
			c.cfg.Timeout, p.stats.Acked, p.stats.Total)
		c.endFailed(now, p, CauseExpired, reason)
		if c.failure(now, p.id, CauseExpired, reason) {
			return
		}
	}
	if c.periodicDue(now) {
		_, _ = c.trigger(now, false, c.cfg.MaxConcurrent)
	}
}

func (c *Coordinator) periodicDue(now time.Time) bool {
	switch {
	case c.interval <= 0,
		len(c.pending) >= c.cfg.MaxConcurrent,
		now.Before(c.lastTrigger.Add(c.interval)):
		return false
	case c.cfg.MinPause > 0 && (len(c.pending) > 0 || c.ended && now.Before(c.lastEnd.Add(c.cfg.MinPause))):
		return false
	}
	return len(c.runningSources()) > 0
}

// TriggerNow triggers a checkpoint at once (a manual trigger) and returns its
// id. It ignores Interval and MinPause but respects MaxConcurrent. It fails
// with ErrStopped after Stop or FailJobAction (until Reset), with
// ErrTooManyPending when MaxConcurrent checkpoints are pending, and with
// ErrNoSources when every source task has finished.
func (c *Coordinator) TriggerNow(now time.Time) (int64, error) {
	return c.trigger(now, true, c.cfg.MaxConcurrent)
}

// TriggerSavepoint is TriggerNow for a savepoint's checkpoint, which does
// not wait behind the periodic ones: one more than MaxConcurrent may be
// pending.
func (c *Coordinator) TriggerSavepoint(now time.Time) (int64, error) {
	return c.trigger(now, true, c.cfg.MaxConcurrent+1)
}

func (c *Coordinator) trigger(now time.Time, manual bool, maxPending int) (int64, error) {
	if c.stopped {
		return 0, fmt.Errorf("cannot trigger a checkpoint: the job is not running (checkpointing stopped); retry once it runs again: %w", ErrStopped)
	}
	if n := len(c.pending); n >= maxPending {
		return 0, fmt.Errorf("cannot trigger a checkpoint: checkpoint %d is still in progress and at most %d may be pending (checkpointing maxConcurrent); wait for it to end or raise maxConcurrent: %w",
			c.pending[n-1].id, maxPending, ErrTooManyPending)
	}
	sources := c.runningSources()
	if len(sources) == 0 {
		return 0, fmt.Errorf("cannot trigger a checkpoint: every source task has finished: %w", ErrNoSources)
	}
	id := c.nextID
	c.nextID++
	// Sized for every task up front: acknowledgements then allocate
	// nothing.
	n := len(c.table.tasks)
	p := &pendingCheckpoint{
		id:      id,
		trigger: now,
		table:   c.table,
		status:  make([]taskStatus, n),
		acks:    make([]any, n),
	}
	for i, t := range c.table.tasks {
		if c.finished[i] {
			p.done = append(p.done, t)
		} else {
			p.status[i] = waiting
			p.nWaiting++
		}
	}
	p.stats = &Stats{ID: id, Status: InProgress, Manual: manual, TriggerTime: now, Total: p.nWaiting}
	p.subs = &ackLog{trigger: now, recs: make([]ackRecord, 0, p.nWaiting)}
	if c.subtasks == nil {
		c.subtasks = make(map[int64]*ackLog)
	}
	c.subtasks[id] = p.subs
	c.pending = append(c.pending, p)
	c.history = append(c.history, p.stats)
	if n := len(c.history) - HistorySize; n > 0 {
		for _, old := range c.history[:n] {
			delete(c.subtasks, old.ID)
		}
		c.history = slices.Delete(c.history, 0, n)
	}
	c.lastTrigger = now
	c.emit(TriggerAction{ID: id, Timestamp: now, Sources: sources})
	return id, nil
}

func (c *Coordinator) runningSources() []TaskID {
	var out []TaskID
	for k, i := range c.sourceIndex {
		if i < 0 || !c.finished[i] {
			if out == nil {
				out = make([]TaskID, 0, len(c.sources))
			}
			out = append(out, c.sources[k])
		}
	}
	return out
}

// waitingFor returns the index of task in p's table when p waits for its
// acknowledgement.
func (p *pendingCheckpoint) waitingFor(task TaskID) (int32, bool) {
	i, ok := p.table.indexOf(task)
	if !ok || p.status[i] != waiting {
		return 0, false
	}
	return i, true
}

// Ack records task's acknowledgement of checkpoint id with payload, the
// opaque state handles that WriteManifestAction and Latest give back.
// Acknowledgements for unknown, aborted or completed checkpoints, from tasks
// the checkpoint does not wait for, and duplicates are ignored (and counted
// by Ignored).
func (c *Coordinator) Ack(now time.Time, task TaskID, id int64, payload any, stats AckStats) {
	p := c.find(id)
	if p == nil || p.phase != collecting {
		c.ignored++
		return
	}
	i, ok := p.waitingFor(task)
	if !ok {
		c.ignored++
		return
	}
	p.status[i] = ackedTask
	p.nWaiting--
	p.acks[i] = payload
	p.nAcked++
	s := p.stats
	s.Acked++
	s.Bytes += stats.Bytes
	if d := now.Sub(p.trigger); d >= s.SlowestAck {
		s.SlowestTask, s.SlowestAck = task, d
	}
	s.MaxSync = max(s.MaxSync, stats.SyncDuration)
	s.MaxAsync = max(s.MaxAsync, stats.AsyncDuration)
	s.MaxAlignment = max(s.MaxAlignment, stats.AlignmentDuration)
	p.pause = max(p.pause, stats.SyncDuration+stats.AlignmentDuration)
	s.ChannelStateBytes += stats.ChannelStateBytes
	s.Storage = s.Storage.Add(stats.Storage)
	sub := SubtaskStats{Task: task, AckTime: now, AckStats: stats}
	s.MaxStartDelay = max(s.MaxStartDelay, sub.StartDelay(p.trigger))
	p.subs.add(sub)
	c.maybeAcked(now, p)
}

// Decline records that task could not take checkpoint id: the checkpoint is
// aborted and counts as a failure. Declines the checkpoint does not wait for
// are ignored like acknowledgements.
func (c *Coordinator) Decline(now time.Time, task TaskID, id int64, reason string) {
	p := c.find(id)
	if p == nil || p.phase != collecting {
		c.ignored++
		return
	}
	if _, ok := p.waitingFor(task); !ok {
		c.ignored++
		return
	}
	why := fmt.Sprintf("declined by task %v: %s", task, reason)
	c.endFailed(now, p, CauseDeclined, why)
	if !c.failure(now, id, CauseDeclined, why) {
		c.advanceWrites()
	}
}

// TaskFinished records that task ended normally: it gets no more triggers,
// and pending checkpoints that it has not acknowledged stop waiting for it.
// A checkpoint left with no acknowledgement at all is aborted (not counted as
// a failure).
func (c *Coordinator) TaskFinished(now time.Time, task TaskID) {
	i, ok := c.table.indexOf(task)
	if !ok || c.finished[i] {
		return
	}
	c.finished[i] = true
	for _, p := range slices.Clone(c.pending) {
		if p.phase != collecting {
			continue
		}
		if j, ok := p.waitingFor(task); ok {
			p.status[j] = finishedEarly
			p.nWaiting--
			p.stats.Total--
			c.maybeAcked(now, p)
		}
	}
}

// maybeAcked moves p on when it waits for no more tasks.
func (c *Coordinator) maybeAcked(now time.Time, p *pendingCheckpoint) {
	if p.nWaiting > 0 {
		return
	}
	if p.nAcked == 0 {
		c.endFailed(now, p, CauseTasksFinished, "every task finished before acknowledging")
		return
	}
	p.phase = acked
	c.advanceWrites()
}

// advanceWrites emits WriteManifestAction for the lowest fully acknowledged
// checkpoint when no manifest is being written: manifests (and the completed
// pointer) are written one at a time in increasing id order, so the pointer
// never moves back.
func (c *Coordinator) advanceWrites() {
	var next *pendingCheckpoint
	for _, p := range c.pending {
		switch p.phase {
		case writing:
			return
		case acked:
			if next == nil {
				next = p
			}
		}
	}
	if next == nil {
		return
	}
	next.phase = writing
	a := WriteManifestAction{ID: next.id, Timestamp: next.trigger, Acks: make([]Ack, 0, next.nAcked)}
	a.Finished = slices.Clone(next.done)
	for _, cc := range c.completed[max(0, len(c.completed)-(c.cfg.Retained-1)):] {
		a.Retained = append(a.Retained, cc.id)
	}
	a.Retained = append(a.Retained, next.id)
	for i, st := range next.status {
		switch st {
		case ackedTask:
			a.Acks = append(a.Acks, Ack{Task: next.table.tasks[i], Payload: next.acks[i]})
		case waiting, finishedEarly:
			a.Finished = append(a.Finished, next.table.tasks[i])
		}
	}
	// The payloads now live in a.Acks (which completion keeps), in task
	// order.
	next.acks = nil
	slices.SortFunc(a.Finished, compareTasks)
	next.written = a.Acks
	c.emit(a)
}

// ManifestWritten reports the outcome of a WriteManifestAction. On success
// the checkpoint is complete: NotifyCompleteAction, then AbortAction
// (CauseSubsumed) for every pending checkpoint with a lower id, then
// DiscardAction for completed checkpoints beyond Retained. On failure the
// checkpoint is aborted (CauseWriteFailed) and counts as a failure, unless
// Stop or Reset came while it was being written. Reports for checkpoints
// whose manifest is not being written are ignored.
func (c *Coordinator) ManifestWritten(now time.Time, id int64, err error) {
	c.ManifestWrittenWith(now, id, err, StorageRequests{})
}

// ManifestWrittenWith is ManifestWritten that also counts the storage
// requests the write made (the manifest, the pointer) in the checkpoint's
// Stats.Storage.
func (c *Coordinator) ManifestWrittenWith(now time.Time, id int64, err error, storage StorageRequests) {
	p := c.find(id)
	if p == nil || p.phase != writing {
		c.ignored++
		return
	}
	p.stats.Storage = p.stats.Storage.Add(storage)
	if err != nil {
		why := fmt.Sprintf("writing the manifest failed: %v", err)
		c.endFailed(now, p, CauseWriteFailed, why)
		if c.stopped || p.orphaned || !c.failure(now, id, CauseWriteFailed, why) {
			c.advanceWrites()
		}
		return
	}
	c.remove(p)
	p.stats.Status = Completed
	p.stats.EndTime = now
	c.nCompleted++
	c.consecutive = 0
	c.lastEnd, c.ended = now, true
	c.completed = append(c.completed, completedCheckpoint{id: id, acks: p.written})
	if c.cfg.Adaptive != nil && !p.stats.Manual && !p.orphaned {
		c.interval = c.cfg.Adaptive.next(c.interval, p.pause)
	}
	notify := NotifyCompleteAction{ID: id, Tasks: []TaskID{}}
	if !p.orphaned {
		notify.Tasks = c.live(p)
	}
	c.emit(notify)
	for _, q := range slices.Clone(c.pending) {
		if q.id < id {
			c.endFailed(now, q, CauseSubsumed, "subsumed")
		}
	}
	c.discardBeyondRetained()
	c.advanceWrites()
}

// Stop stops triggering until Reset and aborts every pending checkpoint
// with cause, which must be CauseFailover or CauseJobEnded (Stop panics
// otherwise), and reason, except the one whose manifest is being written:
// the write may already have moved the completed pointer, so that
// checkpoint ends when ManifestWritten reports (NotifyCompleteAction or
// AbortAction with CauseWriteFailed). Stop emits no FailJobAction and
// counts no failure, also for that write.
func (c *Coordinator) Stop(now time.Time, cause AbortCause, reason string) {
	if !cause.stopCause() {
		panic(fmt.Sprintf("coordinator: Stop with cause %v; want %v or %v", cause, CauseFailover, CauseJobEnded))
	}
	c.stop(now, cause, reason)
}

func (c *Coordinator) stop(now time.Time, cause AbortCause, reason string) {
	c.stopped = true
	c.abortAll(now, cause, reason)
}

// Reset starts over with new task executions after a restart: pending
// checkpoints (if Stop was not called) are aborted with CauseFailover, the
// consecutive-failure count is cleared and triggering resumes, the next
// periodic trigger coming Interval after now. Checkpoint ids keep
// increasing; completed checkpoints and the history are kept. As with Stop,
// a checkpoint whose manifest is being written stays pending until
// ManifestWritten; its NotifyCompleteAction or AbortAction names no task
// (those that took it were replaced) and its failure counts no failure. A shell that restores the
// new executions from the latest checkpoint waits for that write (Writing)
// before it restarts them and calls Reset.
func (c *Coordinator) Reset(now time.Time, tasks, sources []TaskID) {
	c.abortAll(now, CauseFailover, "reset: the tasks were restarted")
	for _, p := range c.pending {
		p.orphaned = true
	}
	c.setTasks(tasks, sources)
	c.stopped = false
	c.consecutive = 0
	c.lastTrigger = now
}

// abortAll aborts every pending checkpoint whose manifest is not being
// written.
func (c *Coordinator) abortAll(now time.Time, cause AbortCause, reason string) {
	for _, p := range slices.Clone(c.pending) {
		if p.phase != writing {
			c.endFailed(now, p, cause, reason)
		}
	}
}

// failure counts a failed checkpoint and, when the consecutive failures
// exceed TolerableFailures, emits FailJobAction and stops. It reports whether
// it stopped.
func (c *Coordinator) failure(now time.Time, id int64, cause AbortCause, why string) bool {
	c.consecutive++
	if c.consecutive <= c.cfg.TolerableFailures {
		return false
	}
	c.emit(FailJobAction{ID: id, Cause: cause, Reason: fmt.Sprintf(
		"checkpoint %d failed (%s): %d consecutive checkpoint failures exceed the %d tolerated; raise checkpointing tolerableFailures to tolerate more",
		id, why, c.consecutive, c.cfg.TolerableFailures)})
	c.stop(now, CauseTooManyFailures, "job failing: too many consecutive checkpoint failures")
	return true
}

// endFailed ends p without completing it and emits its AbortAction.
func (c *Coordinator) endFailed(now time.Time, p *pendingCheckpoint, cause AbortCause, reason string) {
	c.remove(p)
	p.stats.Status = Failed
	p.stats.EndTime = now
	p.stats.Cause = cause
	p.stats.Failure = reason
	c.nFailed++
	c.aborts[cause]++
	c.lastEnd, c.ended = now, true
	a := AbortAction{ID: p.id, Cause: cause, Reason: reason, Tasks: []TaskID{}}
	if !p.orphaned {
		a.Tasks = c.live(p)
	}
	c.emit(a)
}

// live returns the tasks p required that are current tasks and have not
// finished, in order.
func (c *Coordinator) live(p *pendingCheckpoint) []TaskID {
	out := make([]TaskID, 0, len(p.status)-len(p.done))
	for i, st := range p.status {
		if st == notRequired {
			continue
		}
		t := p.table.tasks[i]
		j := int32(i)
		if p.table != c.table { // only for a checkpoint triggered before Reset
			var ok bool
			if j, ok = c.table.indexOf(t); !ok {
				continue
			}
		}
		if !c.finished[j] {
			out = append(out, t)
		}
	}
	return out
}

func (c *Coordinator) find(id int64) *pendingCheckpoint {
	for _, p := range c.pending {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (c *Coordinator) remove(p *pendingCheckpoint) {
	c.pending = slices.DeleteFunc(c.pending, func(q *pendingCheckpoint) bool { return q == p })
}

func (c *Coordinator) emit(a Action) { c.actions = append(c.actions, a) }

// Latest returns the latest completed checkpoint, for restore. The map is a
// copy; the payloads are those passed to Ack.
func (c *Coordinator) Latest() (id int64, payloads map[TaskID]any, ok bool) {
	if len(c.completed) == 0 {
		return 0, nil, false
	}
	l := c.completed[len(c.completed)-1]
	payloads = make(map[TaskID]any, len(l.acks))
	for _, a := range l.acks {
		payloads[a.Task] = a.Payload
	}
	return l.id, payloads, true
}

// LatestID returns the id of the latest completed checkpoint, as Latest
// does, without copying its payloads.
func (c *Coordinator) LatestID() (id int64, ok bool) {
	if len(c.completed) == 0 {
		return 0, false
	}
	return c.completed[len(c.completed)-1].id, true
}

// DropCompleted forgets completed checkpoint id because it must never be
// restored (an object of it does not verify): Latest and Retained no longer
// report it, so the next older one is the latest again, and retention no
// longer counts it. No DiscardAction names it: its files stay in storage.
// It reports whether id was retained; pending checkpoints are not affected.
func (c *Coordinator) DropCompleted(id int64) bool {
	i := slices.IndexFunc(c.completed, func(cc completedCheckpoint) bool { return cc.id == id })
	if i < 0 {
		return false
	}
	c.completed = slices.Delete(c.completed, i, i+1)
	return true
}

// AdoptCompleted records completed checkpoint id, taken before this
// coordinator existed (by an earlier leader, say), with payloads as the
// latest completed checkpoint: Latest reports it, and Retained includes it
// until retention discards it (DiscardAction) like any other. It is not part
// of History or Counts. Call it right after New; it is ignored once a
// checkpoint has completed or when id is not below New's firstID.
func (c *Coordinator) AdoptCompleted(id int64, payloads map[TaskID]any) {
	if len(c.completed) > 0 || id < 1 || id >= c.firstID {
		return
	}
	acks := make([]Ack, 0, len(payloads))
	for t, v := range payloads {
		acks = append(acks, Ack{Task: t, Payload: v})
	}
	slices.SortFunc(acks, func(a, b Ack) int { return compareTasks(a.Task, b.Task) })
	c.completed = append(c.completed, completedCheckpoint{id: id, acks: acks})
}

// discardBeyondRetained discards the oldest completed checkpoints beyond
// Retained (DiscardAction).
func (c *Coordinator) discardBeyondRetained() {
	if n := len(c.completed) - c.cfg.Retained; n > 0 {
		d := DiscardAction{}
		for _, cc := range c.completed[:n] {
			d.IDs = append(d.IDs, cc.id)
		}
		c.completed = slices.Delete(c.completed, 0, n)
		c.emit(d)
	}
}

// AdoptOlder records older, completed checkpoints taken before this
// coordinator existed (those an earlier leader retained along with the one
// AdoptCompleted recorded) as retained, without payloads: Retained includes
// them until retention discards them, oldest first, as later checkpoints
// complete. Ids not below the oldest retained one are ignored; call it right
// after AdoptCompleted. Those beyond Retained are discarded at once
// (DiscardAction).
func (c *Coordinator) AdoptOlder(ids []int64) {
	if len(c.completed) != 1 || c.nCompleted > 0 {
		return
	}
	var older []completedCheckpoint
	for _, id := range slices.Sorted(slices.Values(ids)) {
		if id >= 1 && id < c.completed[0].id && (len(older) == 0 || older[len(older)-1].id < id) {
			older = append(older, completedCheckpoint{id: id})
		}
	}
	c.completed = append(older, c.completed...)
	c.discardBeyondRetained()
}

// PendingPayloads calls fn with the payload of every acknowledgement of
// the pending checkpoints (those being written included) and returns the
// trigger time of the oldest pending one; zero when none is pending.
func (c *Coordinator) PendingPayloads(fn func(any)) (oldest time.Time) {
	for _, p := range c.pending {
		if oldest.IsZero() || p.trigger.Before(oldest) {
			oldest = p.trigger
		}
		if p.acks == nil { // being written: the payloads moved to written
			for _, a := range p.written {
				fn(a.Payload)
			}
			continue
		}
		for i, st := range p.status {
			if st == ackedTask {
				fn(p.acks[i])
			}
		}
	}
	return oldest
}

// Writing returns the checkpoint whose manifest is being written: the one
// of the latest WriteManifestAction not yet answered by ManifestWritten.
func (c *Coordinator) Writing() (id int64, ok bool) {
	for _, p := range c.pending {
		if p.phase == writing {
			return p.id, true
		}
	}
	return 0, false
}

// Retained returns the ids of the completed checkpoints still retained, in
// increasing order.
func (c *Coordinator) Retained() []int64 {
	ids := make([]int64, len(c.completed))
	for i, cc := range c.completed {
		ids[i] = cc.id
	}
	return ids
}

// NextID is the id the next checkpoint will have.
func (c *Coordinator) NextID() int64 { return c.nextID }

// Pending returns the ids of the pending checkpoints, in increasing order.
func (c *Coordinator) Pending() []int64 {
	ids := make([]int64, len(c.pending))
	for i, p := range c.pending {
		ids[i] = p.id
	}
	return ids
}

// Stopped reports whether triggering is stopped (after Stop or
// FailJobAction, until Reset).
func (c *Coordinator) Stopped() bool { return c.stopped }

// Counts returns how many checkpoints are in progress, and how many have
// completed and failed since New. Failed includes every checkpoint that ended
// without completing: declined, timed out, manifest failures, subsumed and
// aborted by Stop or Reset.
func (c *Coordinator) Counts() (inProgress, completed, failed int) {
	return len(c.pending), c.nCompleted, c.nFailed
}

// AbortCounts returns, by cause, how many checkpoints ended without
// completing since New (their sum is Counts' failed). The map is a copy and
// lists only causes that occurred.
func (c *Coordinator) AbortCounts() map[AbortCause]int {
	out := make(map[AbortCause]int)
	for cause, n := range c.aborts {
		if n > 0 {
			out[AbortCause(cause)] = n
		}
	}
	return out
}

// Ignored returns how many acknowledgements, declines and manifest reports
// were ignored because they were late, duplicated or unexpected.
func (c *Coordinator) Ignored() int { return c.ignored }

// ConsecutiveFailures returns the current count of consecutive checkpoint
// failures (cleared by a completed checkpoint and by Reset).
func (c *Coordinator) ConsecutiveFailures() int { return c.consecutive }

// History returns the most recent checkpoints (at most HistorySize), newest
// first. The values are copies.
func (c *Coordinator) History() []Stats {
	out := make([]Stats, len(c.history))
	for i, s := range c.history {
		out[len(out)-1-i] = *s
	}
	return out
}
