package jobmanager

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/stream"
)

// Errors of the core; the gRPC adapter (toGRPCError) maps them to status
// codes.
var (
	ErrJobNotFound      = errors.New("jobmanager: job not found")
	ErrJobNotCancelable = errors.New("jobmanager: job cannot be cancelled")
	ErrInvalidArgument  = errors.New("jobmanager: invalid argument")
)

// jobState mirrors weirpb.JobState value for value.
type jobState int32

const (
	jobCreated jobState = iota + 1
	jobScheduled
	jobRunning
	jobFinished
	jobCanceling
	jobCanceled
	jobFailing
	jobFailed
)

var jobStateNames = [...]string{"UNSPECIFIED", "CREATED", "SCHEDULED", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILING", "FAILED"}

func (s jobState) String() string {
	if s >= 0 && int(s) < len(jobStateNames) {
		return jobStateNames[s]
	}
	return fmt.Sprintf("JobState(%d)", int32(s))
}

func (s jobState) terminal() bool { return s == jobFinished || s == jobCanceled || s == jobFailed }

// active: the job runs or is about to, and a task failure fails it.
func (s jobState) active() bool { return s == jobCreated || s == jobScheduled || s == jobRunning }

// taskState mirrors weirpb.TaskState value for value.
type taskState int32

const (
	taskCreated taskState = iota + 1
	taskScheduled
	taskDeploying
	taskRunning
	taskFinished
	taskCanceling
	taskCanceled
	taskFailed
)

var taskStateNames = [...]string{"UNSPECIFIED", "CREATED", "SCHEDULED", "DEPLOYING", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILED"}

func (s taskState) String() string {
	if s >= 0 && int(s) < len(taskStateNames) {
		return taskStateNames[s]
	}
	return fmt.Sprintf("TaskState(%d)", int32(s))
}

func (s taskState) terminal() bool { return s == taskFinished || s == taskCanceled || s == taskFailed }

// tmEntry is one registration of a taskmanager. A re-registration with the
// same id makes a new entry; executions keep pointing at the entry they were
// deployed to, so the core can tell an old incarnation's reports apart.
type tmEntry struct {
	id, addr      string
	slots, used   int
	opTypes       []string
	registered    time.Time
	lastHeartbeat time.Time
	lost          bool
	lostReason    string
}

func (tm *tmEntry) free() int { return tm.slots - tm.used }

// execution is one subtask of one task of a job in the current attempt.
type execution struct {
	spec    *taskSpec
	subtask int
	state   taskState
	tm      *tmEntry
	// deployed: SubmitTask returned successfully, so a cancel can reach it.
	deployed              bool
	err                   string
	recordsIn, recordsOut int64
}

type execKey struct{ vertex, subtask int }

type job struct {
	id    string
	graph *stream.JobGraph // planned; immutable
	tasks []*taskSpec
	execs []*execution // by task, then subtask
	byKey map[execKey]*execution
	need  int // shared slots
	state jobState
	// attempt grows with every (re)deployment; reports of other attempts
	// are stale.
	attempt        int64
	submitted      time.Time
	ended          time.Time
	slotDeadline   time.Time
	cancelDeadline time.Time
	slots          []*tmEntry // slot i → taskmanager; nil while waiting
	err            string
	waitLogged     bool
}

// action is something the shell must do for the core.
type action interface{ isAction() }

// deployAction asks the shell to submit one execution to a taskmanager.
type deployAction struct {
	JobID       string
	Graph       *stream.JobGraph
	Task        *taskSpec
	Subtask     int
	Attempt     int64
	TaskManager string
	Addr        string
	SlotAddrs   []string
}

// cancelAction asks the shell to cancel one execution.
type cancelAction struct {
	JobID       string
	Vertex      int
	Subtask     int
	Attempt     int64
	TaskManager string
	Addr        string
}

func (deployAction) isAction() {}
func (cancelAction) isAction() {}

// failureDecision is what happens to a job when one of its tasks fails.
type failureDecision int

const (
	// failJob cancels the job's other tasks and ends it FAILED.
	failJob failureDecision = iota
	// Restart strategies (next milestone) add restartJob: cancel, wait,
	// bump the attempt and deploy again.
)

// failurePolicy decides what happens when a task of an active job fails.
// It is the single place a restart strategy plugs in.
type failurePolicy func(jobID string, attempt int64, cause string, now time.Time) failureDecision

func alwaysFailJob(string, int64, string, time.Time) failureDecision { return failJob }

// taskReport is a task status a taskmanager reported.
type taskReport struct {
	JobID                 string
	Vertex, Subtask       int
	Attempt               int64
	State                 taskState
	Err                   string
	RecordsIn, RecordsOut int64
}

type coreConfig struct {
	HeartbeatTimeout time.Duration
	// CancelTimeout bounds how long a cancelling or failing job waits for
	// its tasks to confirm; then the rest are taken as cancelled.
	CancelTimeout time.Duration
	Logger        *slog.Logger
}

// core is the jobmanager's state machine: taskmanagers, jobs and their
// executions. It is not safe for concurrent use (the shell holds a mutex),
// has no clock (every event carries now) and does no I/O: events return
// the actions to carry out.
type core struct {
	cfg       coreConfig
	log       *slog.Logger
	onFailure failurePolicy
	tms       map[string]*tmEntry // current entry per id, lost ones included
	jobs      map[string]*job
	jobOrder  []*job
	// staleReports counts task reports ignored because they carried an old
	// attempt, an unknown job or execution, or came from an old
	// registration.
	staleReports int64
}

func newCore(cfg coreConfig) *core {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &core{cfg: cfg, log: log, onFailure: alwaysFailJob, tms: make(map[string]*tmEntry), jobs: make(map[string]*job)}
}

// register adds a taskmanager, replacing an earlier registration with the
// same id (whose tasks are then gone).
func (c *core) register(id, addr string, slots int, opTypes []string, now time.Time) ([]action, error) {
	switch {
	case id == "":
		return nil, fmt.Errorf("%w: taskmanager registration has no id; give each taskmanager a unique id", ErrInvalidArgument)
	case addr == "":
		return nil, fmt.Errorf("%w: taskmanager %s registered without an address; it must send the host:port of its gRPC server", ErrInvalidArgument, id)
	case slots < 1:
		return nil, fmt.Errorf("%w: taskmanager %s offers %d slots; it must offer at least 1", ErrInvalidArgument, id, slots)
	}
	var acts []action
	if old := c.tms[id]; old != nil && !old.lost {
		old.lost = true
		old.lostReason = "re-registered"
		acts = c.tmGone(old, fmt.Sprintf("taskmanager %s re-registered (it restarted?); its tasks are gone", id), now)
	}
	c.tms[id] = &tmEntry{id: id, addr: addr, slots: slots, opTypes: slices.Clone(opTypes), registered: now, lastHeartbeat: now}
	c.log.Info("taskmanager registered", "taskmanager", id, "address", addr, "slots", slots)
	return append(acts, c.scheduleWaiting(now)...), nil
}

// heartbeat records a heartbeat; reregister is true when the taskmanager is
// unknown or was declared lost.
func (c *core) heartbeat(id string, reports []taskReport, now time.Time) (reregister bool, acts []action) {
	tm := c.tms[id]
	if tm == nil || tm.lost {
		return true, nil
	}
	tm.lastHeartbeat = now
	for _, r := range reports {
		acts = append(acts, c.report(id, r, now)...)
	}
	return false, acts
}

// report applies a task status reported by taskmanager tmID.
func (c *core) report(tmID string, r taskReport, now time.Time) []action {
	tm := c.tms[tmID]
	j := c.jobs[r.JobID]
	if tm == nil || tm.lost || j == nil || r.Attempt != j.attempt {
		c.staleReports++
		return nil
	}
	ex := j.byKey[execKey{r.Vertex, r.Subtask}]
	if ex == nil || ex.tm != tm {
		c.staleReports++
		return nil
	}
	ex.recordsIn, ex.recordsOut = max(ex.recordsIn, r.RecordsIn), max(ex.recordsOut, r.RecordsOut)
	if ex.state.terminal() || r.State == ex.state {
		return nil
	}
	switch r.State {
	case taskRunning:
		if ex.state == taskCanceling {
			return nil
		}
		ex.state = taskRunning
	case taskFinished, taskCanceled:
		ex.state = r.State
	case taskFailed:
		ex.state = taskFailed
		ex.err = r.Err
		if ex.err == "" {
			ex.err = "unknown error"
		}
	default: // earlier states and CANCELING say nothing new
		return nil
	}
	return c.execChanged(j, ex, now)
}

// execChanged moves the job on after ex reached a new state.
func (c *core) execChanged(j *job, ex *execution, now time.Time) []action {
	if !j.state.active() {
		return c.maybeFinalize(j, now)
	}
	switch ex.state {
	case taskFailed:
		return c.taskFailed(j, ex, now)
	case taskCanceled:
		ex.err = "cancelled by its taskmanager although the job was not cancelled"
		return c.taskFailed(j, ex, now)
	}
	allFinished, allRunning := true, true
	for _, e := range j.execs {
		allFinished = allFinished && e.state == taskFinished
		allRunning = allRunning && (e.state == taskRunning || e.state == taskFinished)
	}
	switch {
	case allFinished:
		return c.finalize(j, jobFinished, now)
	case allRunning && j.state != jobRunning:
		j.state = jobRunning
		c.log.Info("job running", "job", j.id, "name", j.graph.Name)
	}
	return nil
}

// taskFailed handles the failure of ex in an active job.
func (c *core) taskFailed(j *job, ex *execution, now time.Time) []action {
	tm := "(none)"
	if ex.tm != nil {
		tm = ex.tm.id
	}
	cause := fmt.Sprintf("task %s on taskmanager %s failed: %s", ex.spec.SubtaskName(ex.subtask), tm, ex.err)
	switch c.onFailure(j.id, j.attempt, cause, now) {
	default: // failJob
		return c.failJob(j, cause, now)
	}
}

// failJob cancels every task of j and ends it FAILED with cause.
func (c *core) failJob(j *job, cause string, now time.Time) []action {
	j.state = jobFailing
	j.err = cause
	c.log.Warn("job failing", "job", j.id, "name", j.graph.Name, "error", cause)
	acts := c.cancelExecs(j, now)
	return append(acts, c.maybeFinalize(j, now)...)
}

// cancelExecs asks every non-terminal execution of j to stop. Executions
// that never reached a taskmanager, or whose taskmanager is gone, are
// cancelled at once.
func (c *core) cancelExecs(j *job, now time.Time) []action {
	j.cancelDeadline = now.Add(c.cfg.CancelTimeout)
	var acts []action
	for _, ex := range j.execs {
		switch {
		case ex.state.terminal():
		case ex.tm == nil || ex.tm.lost || ex.state == taskCreated || ex.state == taskScheduled:
			ex.state = taskCanceled
		case !ex.deployed: // the deploy call is in flight; cancel when it returns
			ex.state = taskCanceling
		default:
			ex.state = taskCanceling
			acts = append(acts, c.cancelAction(j, ex))
		}
	}
	return acts
}

func (c *core) cancelAction(j *job, ex *execution) cancelAction {
	return cancelAction{JobID: j.id, Vertex: ex.spec.Head, Subtask: ex.subtask, Attempt: j.attempt, TaskManager: ex.tm.id, Addr: ex.tm.addr}
}

// maybeFinalize ends a cancelling or failing job whose executions have all
// stopped.
func (c *core) maybeFinalize(j *job, now time.Time) []action {
	for _, ex := range j.execs {
		if !ex.state.terminal() {
			return nil
		}
	}
	switch j.state {
	case jobCanceling:
		return c.finalize(j, jobCanceled, now)
	case jobFailing:
		return c.finalize(j, jobFailed, now)
	}
	return nil
}

// finalize puts j into terminal state s, frees its slots and lets waiting
// jobs use them.
func (c *core) finalize(j *job, s jobState, now time.Time) []action {
	j.state = s
	j.ended = now
	for _, tm := range j.slots {
		tm.used--
	}
	j.slots = nil
	c.log.Info("job ended", "job", j.id, "name", j.graph.Name, "state", s.String(), "error", j.err)
	return c.scheduleWaiting(now)
}

// submit adds a planned job graph under id and tries to schedule it.
func (c *core) submit(id string, g *stream.JobGraph, slotWait time.Duration, now time.Time) ([]action, error) {
	if _, dup := c.jobs[id]; dup {
		return nil, fmt.Errorf("jobmanager: job id %s is taken", id)
	}
	tasks, err := buildTasks(g)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	j := &job{id: id, graph: g, tasks: tasks, need: slotsNeeded(tasks), state: jobCreated, attempt: 1,
		submitted: now, slotDeadline: now.Add(slotWait), byKey: make(map[execKey]*execution)}
	for _, t := range tasks {
		for i := range t.Parallelism {
			ex := &execution{spec: t, subtask: i, state: taskCreated}
			j.execs = append(j.execs, ex)
			j.byKey[execKey{t.Head, i}] = ex
		}
	}
	c.jobs[id] = j
	c.jobOrder = append(c.jobOrder, j)
	c.log.Info("job submitted", "job", id, "name", g.Name, "tasks", len(tasks), "slots", j.need)
	return c.trySchedule(j, now), nil
}

func (c *core) liveOffers() []slotOffer {
	var offers []slotOffer
	for _, tm := range c.tms {
		if !tm.lost {
			offers = append(offers, slotOffer{TaskManager: tm.id, Free: tm.free()})
		}
	}
	return offers
}

// trySchedule places a waiting job into slots and deploys it, or leaves it
// waiting.
func (c *core) trySchedule(j *job, now time.Time) []action {
	j.state = jobScheduled
	owners, err := placeSlots(j.need, c.liveOffers())
	if err != nil {
		if !j.waitLogged {
			j.waitLogged = true
			c.log.Info("job waiting for slots", "job", j.id, "name", j.graph.Name, "reason", err.Error(),
				"deadline", j.slotDeadline)
		}
		return nil
	}
	j.slots = make([]*tmEntry, len(owners))
	addrs := make([]string, len(owners))
	for i, id := range owners {
		tm := c.tms[id]
		tm.used++
		j.slots[i] = tm
		addrs[i] = tm.addr
	}
	acts := make([]action, 0, len(j.execs))
	for _, ex := range j.execs {
		ex.tm = j.slots[ex.subtask]
		ex.state = taskDeploying
		acts = append(acts, deployAction{JobID: j.id, Graph: j.graph, Task: ex.spec, Subtask: ex.subtask, Attempt: j.attempt,
			TaskManager: ex.tm.id, Addr: ex.tm.addr, SlotAddrs: addrs})
	}
	c.log.Info("job deploying", "job", j.id, "name", j.graph.Name, "executions", len(acts))
	return acts
}

// scheduleWaiting tries every job waiting for slots, oldest first.
func (c *core) scheduleWaiting(now time.Time) []action {
	var acts []action
	for _, j := range c.jobOrder {
		if j.state == jobScheduled && j.slots == nil {
			acts = append(acts, c.trySchedule(j, now)...)
		}
	}
	return acts
}

// deployDone records the outcome of a deploy action.
func (c *core) deployDone(a deployAction, err error, now time.Time) []action {
	j := c.jobs[a.JobID]
	if j == nil || j.attempt != a.Attempt {
		return nil
	}
	ex := j.byKey[execKey{a.Task.Head, a.Subtask}]
	if ex == nil || ex.tm == nil || ex.tm.id != a.TaskManager || ex.state.terminal() {
		return nil
	}
	if err == nil {
		ex.deployed = true
		if ex.state == taskCanceling {
			return []action{c.cancelAction(j, ex)}
		}
		return nil
	}
	if !j.state.active() {
		ex.state = taskCanceled
		return c.maybeFinalize(j, now)
	}
	ex.state = taskFailed
	ex.err = fmt.Sprintf("deploying to %s failed: %v", a.Addr, err)
	return c.taskFailed(j, ex, now)
}

// cancelDone records the outcome of a cancel action. gone says the
// taskmanager does not know the execution (it already ended).
func (c *core) cancelDone(a cancelAction, err error, gone bool, now time.Time) []action {
	if err != nil && !gone {
		c.log.Warn("cancelling task failed; waiting for its taskmanager or the cancel timeout",
			"job", a.JobID, "vertex", a.Vertex, "subtask", a.Subtask, "taskmanager", a.TaskManager, "error", err)
		return nil
	}
	j := c.jobs[a.JobID]
	if !gone || j == nil || j.attempt != a.Attempt {
		return nil
	}
	ex := j.byKey[execKey{a.Vertex, a.Subtask}]
	if ex == nil || ex.state.terminal() {
		return nil
	}
	ex.state = taskCanceled
	return c.execChanged(j, ex, now)
}

// cancel starts cancelling job id.
func (c *core) cancel(id string, now time.Time) ([]action, error) {
	j := c.jobs[id]
	if j == nil {
		return nil, fmt.Errorf("%w: no job %q; list jobs to see their ids", ErrJobNotFound, id)
	}
	switch {
	case j.state.terminal():
		return nil, fmt.Errorf("%w: job %s is already %s", ErrJobNotCancelable, id, j.state)
	case !j.state.active(): // cancelling or failing already
		return nil, nil
	}
	j.state = jobCanceling
	c.log.Info("job cancelling", "job", id, "name", j.graph.Name)
	acts := c.cancelExecs(j, now)
	return append(acts, c.maybeFinalize(j, now)...), nil
}

// tmGone fails (in active jobs) or takes as cancelled (in stopping jobs)
// every execution on tm, whose tasks no longer run.
func (c *core) tmGone(tm *tmEntry, reason string, now time.Time) []action {
	var acts []action
	for _, j := range c.jobOrder {
		if j.state.terminal() {
			continue
		}
		var first *execution
		for _, ex := range j.execs {
			if ex.tm != tm || ex.state.terminal() {
				continue
			}
			if j.state.active() {
				ex.state = taskFailed
				ex.err = reason
				if first == nil {
					first = ex
				}
			} else {
				ex.state = taskCanceled
			}
		}
		if first != nil {
			acts = append(acts, c.taskFailed(j, first, now)...)
		} else if !j.state.active() {
			acts = append(acts, c.maybeFinalize(j, now)...)
		}
	}
	return acts
}

// tick checks the deadlines: heartbeat timeouts, slot waits and cancel
// confirmations.
func (c *core) tick(now time.Time) []action {
	var acts []action
	for _, tm := range c.tms {
		if tm.lost || now.Sub(tm.lastHeartbeat) < c.cfg.HeartbeatTimeout {
			continue
		}
		tm.lost = true
		tm.lostReason = fmt.Sprintf("no heartbeat for %s", c.cfg.HeartbeatTimeout)
		reason := fmt.Sprintf("taskmanager %s at %s lost: %s", tm.id, tm.addr, tm.lostReason)
		c.log.Warn("taskmanager lost", "taskmanager", tm.id, "address", tm.addr, "reason", tm.lostReason)
		acts = append(acts, c.tmGone(tm, reason, now)...)
	}
	for _, j := range c.jobOrder {
		switch {
		case j.state == jobScheduled && j.slots == nil && !now.Before(j.slotDeadline):
			_, err := placeSlots(j.need, c.liveOffers())
			if err == nil { // cannot happen: it would have been scheduled
				err = errors.New("not scheduled")
			}
			acts = append(acts, c.failJob(j, err.Error(), now)...)
		case (j.state == jobCanceling || j.state == jobFailing) && !now.Before(j.cancelDeadline):
			var left []string
			for _, ex := range j.execs {
				if !ex.state.terminal() {
					ex.state = taskCanceled
					ex.err = fmt.Sprintf("no confirmation of cancellation within %s", c.cfg.CancelTimeout)
					left = append(left, ex.spec.SubtaskName(ex.subtask))
				}
			}
			if len(left) > 0 {
				c.log.Warn("gave up waiting for tasks to stop", "job", j.id, "tasks", strings.Join(left, ", "))
			}
			acts = append(acts, c.maybeFinalize(j, now)...)
		}
	}
	return acts
}

// shutdown cancels every execution of every running job (best effort, when
// the jobmanager stops) and returns the cancel actions.
func (c *core) shutdown(now time.Time) []action {
	var acts []action
	for _, j := range c.jobOrder {
		if j.state.active() {
			j.state = jobCanceling
			acts = append(acts, c.cancelExecs(j, now)...)
			acts = append(acts, c.maybeFinalize(j, now)...)
		}
	}
	var cancels []action
	for _, a := range acts {
		if ca, ok := a.(cancelAction); ok {
			cancels = append(cancels, ca)
		}
	}
	return cancels
}

// Views: copies of the state for the adapters.

type taskView struct {
	Vertex, Subtask       int
	Attempt               int64
	Name                  string
	State                 taskState
	TaskManager           string
	Err                   string
	RecordsIn, RecordsOut int64
}

type jobView struct {
	ID, Name                 string
	State                    jobState
	Start, End               time.Time
	TasksTotal, TasksRunning int
	Err                      string
	Attempt                  int64
	Graph                    *stream.JobGraph // immutable; do not modify
	Tasks                    []taskView
	TaskOf                   map[int]int // vertex id → head of its task
}

type tmView struct {
	ID, Addr      string
	Live          bool
	Slots, Free   int
	LastHeartbeat time.Time
	OperatorTypes []string
}

func (c *core) view(j *job, withTasks bool) jobView {
	v := jobView{ID: j.id, Name: j.graph.Name, State: j.state, Start: j.submitted, End: j.ended,
		TasksTotal: len(j.execs), Err: j.err, Attempt: j.attempt, Graph: j.graph}
	for _, ex := range j.execs {
		if ex.state == taskRunning {
			v.TasksRunning++
		}
		if withTasks {
			tv := taskView{Vertex: ex.spec.Head, Subtask: ex.subtask, Attempt: j.attempt, Name: ex.spec.SubtaskName(ex.subtask),
				State: ex.state, Err: ex.err, RecordsIn: ex.recordsIn, RecordsOut: ex.recordsOut}
			if ex.tm != nil {
				tv.TaskManager = ex.tm.id
			}
			v.Tasks = append(v.Tasks, tv)
		}
	}
	if withTasks {
		v.TaskOf = make(map[int]int)
		for _, t := range j.tasks {
			for _, id := range t.Chain {
				v.TaskOf[id] = t.Head
			}
		}
	}
	return v
}

func (c *core) jobViews() []jobView {
	out := make([]jobView, 0, len(c.jobOrder))
	for _, j := range c.jobOrder {
		out = append(out, c.view(j, false))
	}
	return out
}

func (c *core) jobView(id string) (jobView, error) {
	j := c.jobs[id]
	if j == nil {
		return jobView{}, fmt.Errorf("%w: no job %q; list jobs to see their ids", ErrJobNotFound, id)
	}
	return c.view(j, true), nil
}

func (c *core) tmViews() []tmView {
	out := make([]tmView, 0, len(c.tms))
	for _, tm := range c.tms {
		free := tm.free()
		if tm.lost {
			free = 0
		}
		out = append(out, tmView{ID: tm.id, Addr: tm.addr, Live: !tm.lost, Slots: tm.slots, Free: free,
			LastHeartbeat: tm.lastHeartbeat, OperatorTypes: slices.Clone(tm.opTypes)})
	}
	slices.SortFunc(out, func(a, b tmView) int { return strings.Compare(a.ID, b.ID) })
	return out
}
