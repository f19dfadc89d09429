package jobmanager

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// Errors of the core; the gRPC adapter (toGRPCError) maps them to status
// codes.
var (
	ErrJobNotFound      = errors.New("jobmanager: job not found")
	ErrJobNotCancelable = errors.New("jobmanager: job cannot be cancelled")
	ErrInvalidArgument  = errors.New("jobmanager: invalid argument")
	// ErrCheckpointingOff: the job takes no checkpoints.
	ErrCheckpointingOff = errors.New("jobmanager: checkpointing is off")
	// ErrJobNotRunning: the operation needs a RUNNING job.
	ErrJobNotRunning = errors.New("jobmanager: job not running")
	// ErrCheckpointNotTriggered: a manual trigger was refused (another
	// checkpoint is pending, or every source finished); retry later.
	ErrCheckpointNotTriggered = errors.New("jobmanager: checkpoint not triggered")
	// ErrCheckpointNotFound: no such checkpoint of the job.
	ErrCheckpointNotFound = errors.New("jobmanager: checkpoint not found")
	// ErrStorage: checkpoint storage cannot be opened or read.
	ErrStorage = errors.New("jobmanager: checkpoint storage")
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
	// jobRestarting has no protobuf value: the gRPC adapter shows it as
	// FAILING with an explanation in the error field.
	jobRestarting
)

var jobStateNames = [...]string{"UNSPECIFIED", "CREATED", "SCHEDULED", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILING", "FAILED", "RESTARTING"}

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

// execution is one subtask of one task of a job in its current attempt.
type execution struct {
	spec    *taskSpec
	subtask int
	region  *region
	// attempt is the execution's attempt number: 1 at the first
	// deployment, one more at each redeployment (of its region, or of the
	// whole job). Reports, acknowledgements, declines and cancels of other
	// attempts are stale.
	attempt int64
	state   taskState
	tm      *tmEntry
	// restoredFinished: the checkpoint this attempt restored recorded the
	// execution as finished; it runs only to end its outputs, and later
	// checkpoints must record it as finished too, or a restore from such a
	// checkpoint would replay its input.
	restoredFinished bool
	// deployed: SubmitTask returned successfully, so a cancel can reach it.
	deployed              bool
	err                   string
	recordsIn, recordsOut int64
	// alignment is the barrier alignment time of its latest checkpoint
	// acknowledgement.
	alignment time.Duration
}

func (ex *execution) taskID() coordinator.TaskID {
	return coordinator.TaskID{Vertex: ex.spec.Head, Subtask: ex.subtask}
}

type execKey struct{ vertex, subtask int }

// restartStrategy decides whether and when a job whose task failed is
// restarted; failover.Strategy implements it. It is called by the core
// only, under the shell's lock.
type restartStrategy interface {
	OnFailure(now time.Time, cause string) (restart bool, delay time.Duration)
	Name() string
}

// jobOptions are a job's settings besides its graph.
type jobOptions struct {
	// SlotWait bounds how long a deployment (the first or a restart's) waits
	// for free slots.
	SlotWait time.Duration
	// Restart decides about restarts; nil never restarts.
	Restart restartStrategy
	// Checkpoint has the defaults applied; checkpointing is off unless
	// Checkpoint.Enabled().
	Checkpoint stream.CheckpointConfig
	// Storage is the resolved checkpoint storage URI.
	Storage string
}

type job struct {
	id    string
	graph *stream.JobGraph // planned; immutable
	opts  jobOptions
	tasks []*taskSpec
	execs []*execution // by task, then subtask
	byKey map[execKey]*execution
	// regions are the pipelined failover regions (pipelinedRegions);
	// every execution is in exactly one.
	regions        []*region
	need           int // shared slots
	state          jobState
	submitted      time.Time
	ended          time.Time
	slotDeadline   time.Time
	cancelDeadline time.Time
	slots          []*tmEntry // slot i → taskmanager; nil while waiting
	err            string
	waitLogged     bool

	// Restarts. A whole-job restart uses the job's state (RESTARTING) and
	// these fields; a restart of some of its regions keeps the job's state
	// and uses the regions' fields.
	restarts     int64     // redeployments after failures, of the job or of a region
	restartDue   time.Time // RESTARTING: redeploy once tasks stopped and now ≥ restartDue
	restartCause string    // RESTARTING: the failure being recovered from
	lastFailure  string    // the latest failure that caused a restart

	// Checkpointing (nil coord: off, or the job has not run yet).
	coord *coordinator.Coordinator
	// latest is the latest completed checkpoint's manifest, restored on
	// restart; immutable once stored.
	latest *weirpb.Manifest
	restoredFrom int64   // checkpoint the latest (re)deployment restored, 0: none
	retained     []int64 // completed checkpoints whose files exist
	// writing is the checkpoint whose manifest the shell is writing (0:
	// none); stopReason a coordinator Stop deferred until that write
	// returns, so that a completed write is never deleted.
	writing    int64
	stopReason string
	// Counters for metrics: checkpoints that failed (declined, expired,
	// manifest write failed) and that were aborted (subsumed, or stopped
	// by a failover, a cancel or the end of the job).
	ckFailed, ckAborted int64
}

// action is something the shell must do for the core.
type action interface{ isAction() }

// taskCheckpointing is what a deployment says about checkpoints.
type taskCheckpointing struct {
	Enabled bool
	Mode    stream.CheckpointMode
	Storage string
}

// deployAction asks the shell to submit one execution to a taskmanager.
type deployAction struct {
	JobID         string
	Graph         *stream.JobGraph
	Task          *taskSpec
	Subtask       int
	Attempt       int64
	TaskManager   string
	Addr          string
	SlotAddrs     []string
	Checkpointing taskCheckpointing
	// Restore is the checkpoint to restore (nil: start fresh); immutable.
	Restore *weirpb.Manifest
}

// cancelAction asks the shell to cancel one execution.
type cancelAction struct {
	JobID       string
	Vertex      int
	Subtask     int
	Attempt     int64
	TaskManager string
	Addr        string
	// Stale: the execution attempt is not the current one (a live
	// taskmanager still reported it running); its outcome changes nothing.
	Stale bool
}

// triggerAction asks the shell to tell a source execution to take
// checkpoint CheckpointID; the shell reports failure with triggerFailed.
type triggerAction struct {
	JobID        string
	Vertex       int
	Subtask      int
	Attempt      int64
	TaskManager  string
	Addr         string
	CheckpointID int64
	Timestamp    time.Time
}

// notifyAction tells an execution that a checkpoint completed or was
// aborted (best effort).
type notifyAction struct {
	JobID        string
	Vertex       int
	Subtask      int
	Attempt      int64
	TaskManager  string
	Addr         string
	CheckpointID int64
	Complete     bool
}

// writeManifestAction asks the shell to write a checkpoint's manifest and
// then the completed pointer, off the core's lock, and to report with
// manifestWritten.
type writeManifestAction struct {
	JobID    string
	Manifest *weirpb.Manifest
}

// deleteCheckpointsAction asks the shell to delete checkpoints' files in
// the background.
type deleteCheckpointsAction struct {
	JobID string
	IDs   []int64
}

func (deployAction) isAction()            {}
func (cancelAction) isAction()            {}
func (triggerAction) isAction()           {}
func (notifyAction) isAction()            {}
func (writeManifestAction) isAction()     {}
func (deleteCheckpointsAction) isAction() {}

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
	// CancelTimeout bounds how long a cancelling, failing or restarting job
	// waits for its tasks to confirm; then the rest are taken as cancelled.
	CancelTimeout time.Duration
	Logger        *slog.Logger
}

// core is the jobmanager's state machine: taskmanagers, jobs, their
// executions and their checkpoint coordinators. It is not safe for
// concurrent use (the shell holds a mutex), has no clock (every event
// carries now) and does no I/O: events return the actions to carry out.
type core struct {
	cfg      coreConfig
	log      *slog.Logger
	tms      map[string]*tmEntry // current entry per id, lost ones included
	jobs     map[string]*job
	jobOrder []*job
	// staleReports counts task reports ignored because they carried
	// another attempt than the execution's current one, an unknown job or
	// execution, or came from an old registration.
	staleReports int64
	// staleAcks counts checkpoint acknowledgements and declines ignored
	// because they carried another attempt than the execution's current
	// one, an unknown job or execution, or came while the job was not
	// running.
	staleAcks int64
	// staleCancels rate-limits the cancels of stale executions that a live
	// taskmanager still reports running: when each was last sent.
	staleCancels map[string]time.Time
}

func newCore(cfg coreConfig) *core {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &core{cfg: cfg, log: log, tms: make(map[string]*tmEntry), jobs: make(map[string]*job),
		staleCancels: make(map[string]time.Time)}
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
	var acts []action
	if ex.state == taskFinished && j.state == jobRunning && j.coord != nil {
		j.coord.TaskFinished(now, ex.taskID())
		acts = c.drainCoordinator(j, now)
	}
	switch {
	case allFinished:
		return append(acts, c.finalize(j, jobFinished, now)...)
	case allRunning && j.state != jobRunning:
		j.state = jobRunning
		c.log.Info("job running", "job", j.id, "name", j.graph.Name, "attempt", j.attempt)
		acts = append(acts, c.startCheckpointing(j, now)...)
	}
	return acts
}

// taskFailed handles the failure of ex in an active job.
func (c *core) taskFailed(j *job, ex *execution, now time.Time) []action {
	tm := "(none)"
	if ex.tm != nil {
		tm = ex.tm.id
	}
	return c.jobFailure(j, fmt.Sprintf("task %s on taskmanager %s failed: %s", ex.spec.SubtaskName(ex.subtask), tm, ex.err), now)
}

// jobFailure handles a failure of an active job (a task failed, slots ran
// out during a restart, or too many checkpoints failed): its checkpointing
// stops, its tasks are cancelled, and its restart strategy decides whether
// it is deployed again after a delay (RESTARTING) or ends FAILED.
func (c *core) jobFailure(j *job, cause string, now time.Time) []action {
	acts := c.stopCheckpointing(j, "job failing over: "+cause, now)
	restart, delay, name := false, time.Duration(0), "none"
	if j.opts.Restart != nil {
		restart, delay = j.opts.Restart.OnFailure(now, cause)
		name = j.opts.Restart.Name()
	}
	if !restart {
		return append(acts, c.failJob(j, fmt.Sprintf("%s; restart strategy %s gave up", cause, name), now)...)
	}
	j.state = jobRestarting
	j.restartCause = cause
	j.lastFailure = cause
	j.restartDue = now.Add(delay)
	c.log.Warn("job restarting", "job", j.id, "name", j.graph.Name, "attempt", j.attempt+1, "delay", delay, "cause", cause)
	acts = append(acts, c.cancelExecs(j, now)...)
	return append(acts, c.maybeRestart(j, now)...)
}

// failJob cancels every task of j and ends it FAILED with cause.
func (c *core) failJob(j *job, cause string, now time.Time) []action {
	acts := c.stopCheckpointing(j, "job failing: "+cause, now)
	j.state = jobFailing
	j.err = cause
	c.log.Warn("job failing", "job", j.id, "name", j.graph.Name, "error", cause)
	acts = append(acts, c.cancelExecs(j, now)...)
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

func allTerminal(j *job) bool {
	for _, ex := range j.execs {
		if !ex.state.terminal() {
			return false
		}
	}
	return true
}

// maybeFinalize ends a cancelling or failing job whose executions have all
// stopped, and restarts a restarting one that is due.
func (c *core) maybeFinalize(j *job, now time.Time) []action {
	if !allTerminal(j) {
		return nil
	}
	switch j.state {
	case jobCanceling:
		return c.finalize(j, jobCanceled, now)
	case jobFailing:
		return c.finalize(j, jobFailed, now)
	case jobRestarting:
		return c.maybeRestart(j, now)
	}
	return nil
}

// maybeRestart deploys a restarting job again once all its executions have
// stopped, its restart delay has passed and no manifest write is in flight
// (it may complete a newer checkpoint to restore).
func (c *core) maybeRestart(j *job, now time.Time) []action {
	if j.state != jobRestarting || now.Before(j.restartDue) || j.writing != 0 || !allTerminal(j) {
		return nil
	}
	for _, tm := range j.slots {
		tm.used--
	}
	j.slots = nil
	j.attempt++
	j.restarts++
	j.err = ""
	j.restartCause = ""
	j.waitLogged = false
	j.slotDeadline = now.Add(j.opts.SlotWait)
	j.restoredFrom = 0
	if j.latest != nil {
		j.restoredFrom = j.latest.CheckpointId
	}
	for _, ex := range j.execs {
		*ex = execution{spec: ex.spec, subtask: ex.subtask, state: taskCreated}
	}
	c.log.Info("job redeploying", "job", j.id, "name", j.graph.Name, "attempt", j.attempt, "restoreCheckpoint", j.restoredFrom)
	return c.trySchedule(j, now)
}

// finalize puts j into terminal state s, frees its slots and lets waiting
// jobs use them.
func (c *core) finalize(j *job, s jobState, now time.Time) []action {
	acts := c.stopCheckpointing(j, "job "+strings.ToLower(s.String()), now)
	j.state = s
	j.ended = now
	for _, tm := range j.slots {
		tm.used--
	}
	j.slots = nil
	c.log.Info("job ended", "job", j.id, "name", j.graph.Name, "state", s.String(), "error", j.err)
	acts = append(acts, c.retentionDeletes(j)...)
	return append(acts, c.scheduleWaiting(now)...)
}

// submit adds a planned job graph under id and tries to schedule it.
func (c *core) submit(id string, g *stream.JobGraph, opts jobOptions, now time.Time) ([]action, error) {
	if _, dup := c.jobs[id]; dup {
		return nil, fmt.Errorf("jobmanager: job id %s is taken", id)
	}
	tasks, err := buildTasks(g)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	j := &job{id: id, graph: g, opts: opts, tasks: tasks, need: slotsNeeded(tasks), state: jobCreated, attempt: 1,
		submitted: now, slotDeadline: now.Add(opts.SlotWait), byKey: make(map[execKey]*execution)}
	for _, t := range tasks {
		for i := range t.Parallelism {
			ex := &execution{spec: t, subtask: i, state: taskCreated}
			j.execs = append(j.execs, ex)
			j.byKey[execKey{t.Head, i}] = ex
		}
	}
	c.jobs[id] = j
	c.jobOrder = append(c.jobOrder, j)
	c.log.Info("job submitted", "job", id, "name", g.Name, "tasks", len(tasks), "slots", j.need,
		"checkpointing", opts.Checkpoint.Enabled())
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
	ckpt := taskCheckpointing{Enabled: j.opts.Checkpoint.Enabled(), Mode: j.opts.Checkpoint.Mode, Storage: j.opts.Storage}
	if !ckpt.Enabled {
		ckpt = taskCheckpointing{}
	}
	j.restoreFinished = nil
	acts := make([]action, 0, len(j.execs))
	for _, ex := range j.execs {
		if finishedIn(j.latest, j.graph.Vertices[ex.spec.Head].UID, ex.subtask) {
			j.restoreFinished = append(j.restoreFinished, ex.taskID())
		}
		ex.tm = j.slots[ex.subtask]
		ex.state = taskDeploying
		acts = append(acts, deployAction{JobID: j.id, Graph: j.graph, Task: ex.spec, Subtask: ex.subtask, Attempt: j.attempt,
			TaskManager: ex.tm.id, Addr: ex.tm.addr, SlotAddrs: addrs, Checkpointing: ckpt, Restore: j.latest})
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
	case j.state == jobCanceling || j.state == jobFailing:
		return nil, nil
	}
	acts := c.stopCheckpointing(j, "job cancelled", now)
	j.state = jobCanceling
	c.log.Info("job cancelling", "job", id, "name", j.graph.Name)
	acts = append(acts, c.cancelExecs(j, now)...)
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
			if j.restarts > 0 { // a restart that found no slots is another failure
				acts = append(acts, c.jobFailure(j, err.Error(), now)...)
			} else {
				acts = append(acts, c.failJob(j, err.Error(), now)...)
			}
		case (j.state == jobCanceling || j.state == jobFailing || j.state == jobRestarting) && !now.Before(j.cancelDeadline):
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
		case j.state == jobRestarting:
			acts = append(acts, c.maybeRestart(j, now)...)
		case j.state == jobRunning && j.coord != nil:
			j.coord.Tick(now)
			acts = append(acts, c.drainCoordinator(j, now)...)
		}
	}
	return acts
}

// shutdown cancels every execution of every running job (best effort, when
// the jobmanager stops) and returns the cancel actions.
func (c *core) shutdown(now time.Time) []action {
	var acts []action
	for _, j := range c.jobOrder {
		if j.state.active() || j.state == jobRestarting {
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
	Alignment             time.Duration
}

type jobView struct {
	ID, Name                 string
	State                    jobState
	Start, End               time.Time
	TasksTotal, TasksRunning int
	Err                      string
	Attempt                  int64
	Restarts                 int64
	RestartDue               time.Time // RESTARTING only
	LastFailure              string
	Checkpointing            bool
	RestoredFrom             int64
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
		TasksTotal: len(j.execs), Err: j.err, Attempt: j.attempt, Graph: j.graph, Restarts: j.restarts,
		LastFailure: j.lastFailure, Checkpointing: j.opts.Checkpoint.Enabled(), RestoredFrom: j.restoredFrom}
	if j.state == jobRestarting {
		v.RestartDue = j.restartDue
		v.Err = j.restartCause
	}
	for _, ex := range j.execs {
		if ex.state == taskRunning {
			v.TasksRunning++
		}
		if withTasks {
			tv := taskView{Vertex: ex.spec.Head, Subtask: ex.subtask, Attempt: j.attempt, Name: ex.spec.SubtaskName(ex.subtask),
				State: ex.state, Err: ex.err, RecordsIn: ex.recordsIn, RecordsOut: ex.recordsOut, Alignment: ex.alignment}
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
