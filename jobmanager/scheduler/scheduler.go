package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/stream"
)

// Errors of the scheduler; the jobmanager's gRPC adapter maps them to
// status codes.
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
)

// JobState mirrors weirpb.JobState value for value.
type JobState int32

const (
	JobCreated JobState = iota + 1
	JobScheduled
	JobRunning
	JobFinished
	JobCanceling
	JobCanceled
	JobFailing
	JobFailed
	// JobRestarting has no protobuf value: the gRPC adapter shows it as
	// FAILING with an explanation in the error field.
	JobRestarting
)

var jobStateNames = [...]string{"UNSPECIFIED", "CREATED", "SCHEDULED", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILING", "FAILED", "RESTARTING"}

func (s JobState) String() string {
	if s >= 0 && int(s) < len(jobStateNames) {
		return jobStateNames[s]
	}
	return fmt.Sprintf("JobState(%d)", int32(s))
}

// Terminal reports whether the job has ended.
func (s JobState) Terminal() bool { return s == JobFinished || s == JobCanceled || s == JobFailed }

// JobStates lists every job state, in order.
func JobStates() []JobState {
	out := make([]JobState, 0, len(jobStateNames)-1)
	for s := JobCreated; int(s) < len(jobStateNames); s++ {
		out = append(out, s)
	}
	return out
}

// active: the job runs or is about to, and a task failure fails it.
func (s JobState) active() bool { return s == JobCreated || s == JobScheduled || s == JobRunning }

// TaskState mirrors weirpb.TaskState value for value.
type TaskState int32

const (
	TaskCreated TaskState = iota + 1
	TaskScheduled
	TaskDeploying
	TaskRunning
	TaskFinished
	TaskCanceling
	TaskCanceled
	TaskFailed
)

var taskStateNames = [...]string{"UNSPECIFIED", "CREATED", "SCHEDULED", "DEPLOYING", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILED"}

func (s TaskState) String() string {
	if s >= 0 && int(s) < len(taskStateNames) {
		return taskStateNames[s]
	}
	return fmt.Sprintf("TaskState(%d)", int32(s))
}

// Terminal reports whether the execution has ended.
func (s TaskState) Terminal() bool { return s == TaskFinished || s == TaskCanceled || s == TaskFailed }

// tmEntry is one registration of a taskmanager. A re-registration with the
// same id makes a new entry; executions keep pointing at the entry they were
// deployed to, so the scheduler can tell an old incarnation's reports apart.
type tmEntry struct {
	id, addr string
	// exchangeAddr is where other taskmanagers send it data.
	exchangeAddr string
	// instance is the process's instance id: new at every start of the
	// taskmanager process.
	instance      string
	slots, used   int
	opTypes       []string
	registered    time.Time
	lastHeartbeat time.Time
	lost          bool
	lostAt        time.Time
	lostReason    string
	// suspected: its connection broke, a call to it failed as
	// Unavailable, or a peer's data stream from it broke. It gets no new
	// slots until a probe answers (then it is live again) or fails (then
	// it is lost); the heartbeat timeout also ends a suspicion.
	suspected     bool
	suspectReason string
}

// usable reports whether new slots may be placed on tm.
func (tm *tmEntry) usable() bool { return !tm.lost && !tm.suspected }

func (tm *tmEntry) free() int { return tm.slots - tm.used }

// execution is one subtask of one task of a job in its current attempt.
type execution struct {
	spec    *Task
	subtask int
	region  *region
	// attempt is the execution's attempt number: 1 at the first
	// deployment, one more at each redeployment (of its region, or of the
	// whole job). Reports, acknowledgements, declines and cancels of other
	// attempts are stale.
	attempt int64
	state   TaskState
	tm      *tmEntry
	// restoredFinished: the checkpoint this attempt restored recorded the
	// execution as finished; it runs only to end its outputs, and later
	// checkpoints must record it as finished too, or a restore from such a
	// checkpoint would replay its input.
	restoredFinished bool
	// inputEnded: a source execution whose input is exhausted and that
	// waits for its final checkpoint.
	inputEnded bool
	// deployed: SubmitTask returned successfully, so a cancel can reach it.
	deployed bool
	// restored is the checkpoint this attempt restored (0: none).
	restored int64
	// corrupt: it failed because that checkpoint does not verify.
	corrupt               bool
	err                   string
	recordsIn, recordsOut int64
	// alignment is the barrier alignment time of its latest checkpoint
	// acknowledgement.
	alignment time.Duration
	// rates are its throughput and backpressure between two reports
	// (rates.go).
	rates rates
	// restoreBytes are the bytes of checkpoint state this attempt
	// restores (RestoreSizer), restoredBytes those its taskmanager
	// reported in place, restoreDone whether it reported its state loaded
	// (restoreprogress.go).
	restoreBytes, restoredBytes int64
	restoreDone                 bool
}

func (ex *execution) taskID() coordinator.TaskID {
	return coordinator.TaskID{Vertex: ex.spec.Head, Subtask: ex.subtask}
}

type execKey struct{ vertex, subtask int }

// RestartStrategy decides whether and when a job whose task failed is
// restarted; failover.Strategy implements it. It is called by the scheduler
// only, under the shell's lock.
type RestartStrategy interface {
	OnFailure(now time.Time, cause string) (restart bool, delay time.Duration)
	Name() string
}

// JobOptions are a job's settings besides its graph.
type JobOptions struct {
	// SlotWait bounds how long a deployment (the first or a restart's) waits
	// for free slots.
	SlotWait time.Duration
	// Restart decides about restarts; nil never restarts.
	Restart RestartStrategy
	// Checkpoint has the defaults applied; checkpointing is off unless
	// Checkpoint.Enabled().
	Checkpoint stream.CheckpointConfig
	// Storage is the resolved checkpoint storage URI.
	Storage string
	// Restore, when set, is the completed checkpoint a job recovered by a
	// new leader (ha: etcd) starts from; immutable.
	Restore Checkpoint
	// RestoreForeign: Restore is another job's checkpoint (submit --from).
	// The job restores it until it completes a checkpoint of its own, but
	// never retains or deletes it: it stays the other job's.
	RestoreForeign bool
	// RestoreRetained are the older completed checkpoints an earlier
	// leader retained along with Restore (ascending, below it): retained
	// until retention discards them, as if this leader had taken them.
	RestoreRetained []int64
	// FirstCheckpointID is the coordinator's first checkpoint id; 0 means 1.
	FirstCheckpointID int64
	// FirstAttempt is the attempt of the job's first deployment; 0 means 1.
	// In ha: etcd it starts above every attempt an earlier leader may have
	// used (see JobManager.attemptBase), so that execution ids, channel ids,
	// snapshot keys and sink transaction ids never repeat across leaders.
	FirstAttempt int64
}

type job struct {
	id    string
	graph *stream.JobGraph // planned; immutable
	opts  JobOptions
	tasks []*Task
	execs []*execution // by task, then subtask
	// byHead are the executions by head vertex, then subtask (exec).
	byHead [][]*execution
	// regions are the pipelined failover regions (pipelinedRegions);
	// every execution is in exactly one.
	regions        []*region
	need           int // shared slots
	state          JobState
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
	// deployFailures counts the failed deployments in a row, until every
	// execution runs (deployFailed).
	deployFailures int

	// Checkpointing (nil coord: off, or the job has not run yet). The
	// coordinator answers which checkpoints are pending, being written,
	// retained and how they ended; the scheduler keeps only what it does not
	// know.
	coord *coordinator.Coordinator
	// latest is the latest completed checkpoint's manifest, restored on
	// restart; immutable once stored.
	latest       Checkpoint
	restoredFrom int64 // checkpoint the latest (re)deployment restored, 0: none
	// restorable are the retained checkpoints of the job's own that it can
	// be restored from, by id: those completed under this scheduler and
	// the one it was recovered from (not one of another job's). Older
	// retained ones an earlier leader completed are known by id only. A
	// fallback from a corrupt checkpoint (onCorruption: fallback) picks
	// from them.
	restorable map[int64]Checkpoint
	// finalWanted: every source's input has ended, and the final
	// checkpoint is to be triggered as soon as the coordinator accepts it.
	finalWanted bool
	// swept: the final DeleteCheckpointsAction (All) was issued.
	swept bool
	// tidied: the job ended keeping its checkpoints and the
	// DeleteCheckpointsAction (Tidy) that removes the rest was issued.
	tidied bool
	// corrupt are the checkpoints that failed verification on restore;
	// they are never restored again.
	corrupt []int64
	// stopAt is the checkpoint a stop with a savepoint waits for (0:
	// none): once it completes the job stops and ends FINISHED (stopped).
	stopAt  int64
	stopped bool
	// savepoints are the checkpoints triggered for savepoints, whose
	// triggers ask for canonical snapshots; pruned as checkpoints end.
	savepoints map[int64]bool
	// stopFailed says why the last stop with a savepoint did not happen.
	stopFailed string
	// drainAt is the checkpoint whose triggers drain the sources (a stop
	// with --drain; 0: none); drainWait: the job stopped at a drained
	// checkpoint and waits, until cancelDeadline, for its tasks to finish
	// by themselves (checkpoint.go).
	drainAt   int64
	drainWait bool

	// exceptions are its latest failures, oldest first (exceptions.go).
	exceptions []ExceptionView
}

// Action is something the shell must do for the scheduler.
type Action interface{ isAction() }

// TaskCheckpointing is what a deployment says about checkpoints.
type TaskCheckpointing struct {
	Enabled bool
	Mode    stream.CheckpointMode
	Storage string
	// AlignedTimeout, for unaligned checkpoints, is how long a task aligns
	// a checkpoint before it switches it to unaligned (0: unaligned from
	// the start, or aligned checkpoints).
	AlignedTimeout time.Duration
}

// DeployAction asks the shell to submit one execution to a taskmanager.
type DeployAction struct {
	JobID         string
	Graph         *stream.JobGraph
	Task          *Task
	Subtask       int
	Attempt       int64
	TaskManager   string
	Instance      string
	Addr          string
	SlotAddrs     []string
	Checkpointing TaskCheckpointing
	// Restore is the checkpoint to restore (nil: start fresh); immutable.
	Restore Checkpoint
}

// Target is the execution attempt an action is about and the taskmanager
// process that runs it.
type Target struct {
	JobID           string
	Vertex, Subtask int
	Attempt         int64
	// TaskManager, Instance and Addr are the taskmanager's id, process
	// instance and address.
	TaskManager, Instance, Addr string
}

// targetOf is the current attempt of ex and where it runs.
func targetOf(j *job, ex *execution) Target {
	return Target{JobID: j.id, Vertex: ex.spec.Head, Subtask: ex.subtask, Attempt: ex.attempt,
		TaskManager: ex.tm.id, Instance: ex.tm.instance, Addr: ex.tm.addr}
}

// CancelAction asks the shell to cancel one execution.
type CancelAction struct {
	Target
	// Stale: the execution attempt is not the current one (a live
	// taskmanager still reported it running); its outcome changes nothing.
	Stale bool
}

// TriggerAction asks the shell to tell a source execution to take
// checkpoint CheckpointID; the shell reports failure with triggerFailed.
type TriggerAction struct {
	Target
	CheckpointID int64
	Timestamp    time.Time
	// Savepoint: the checkpoint is a savepoint's (TriggerSavepoint,
	// StopWithSavepoint): keyed state in the canonical format.
	Savepoint bool
	// Drain (with Savepoint): the checkpoint of a stop with --drain; the
	// source ends its input, maximum watermark included, before its
	// barrier.
	Drain bool
	// Unaligned (never with Savepoint): the checkpoint is unaligned
	// (stream.CheckpointConfig.Unaligned).
	Unaligned bool
}

// NotifyAction tells an execution that a checkpoint completed or was
// aborted (best effort).
type NotifyAction struct {
	Target
	CheckpointID int64
	Complete     bool
}

// WriteManifestAction asks the shell to build checkpoint ID's manifest
// from the acknowledgements, write it and then the completed pointer, off
// the scheduler's lock, and to report with ManifestWritten.
type WriteManifestAction struct {
	JobID string
	Graph *stream.JobGraph // immutable
	Mode  stream.CheckpointMode
	ID    int64
	// Triggered and Completed are when the checkpoint was triggered and
	// when its last acknowledgement arrived.
	Triggered, Completed time.Time
	// Acks are the tasks' acknowledgement payloads (what Ack was given),
	// one per task that acknowledged, ordered by task. The slice is the
	// checkpoint coordinator's and must not be modified.
	Acks []coordinator.Ack
	// Finished are the tasks the checkpoint records as finished: their
	// head operator's subtask must not run again after a restore.
	Finished []coordinator.TaskID
	// Retained are the completed checkpoints retained once this one
	// completes, ascending, ending with ID.
	Retained []int64
}

// Checkpoint is a completed checkpoint as the scheduler sees it. The shell
// implements it over its manifest and gets it back unchanged in
// DeployAction.Restore.
type Checkpoint interface {
	CheckpointID() int64
	// Finished reports whether the checkpoint records the subtask of the
	// operator with the uid, now at parallelism, as finished (with another
	// parallelism than the checkpoint's: every old subtask finished).
	Finished(operatorUID string, subtask, parallelism int) bool
}

// checkpointID is cp's id, or 0 for none.
func checkpointID(cp Checkpoint) int64 {
	if cp == nil {
		return 0
	}
	return cp.CheckpointID()
}

// ForgetJobAction tells the shell that the scheduler forgot an ended job
// (Config.JobRetention, Config.MaxEndedJobs): the shell drops what it keeps
// about the job and, in HA mode, makes sure its final State is recorded.
type ForgetJobAction struct {
	JobID string
	State JobState
}

// DeleteCheckpointsAction asks the shell to delete checkpoints' files in
// the background.
type DeleteCheckpointsAction struct {
	JobID string
	IDs   []int64
	// All: the job ended and keeps no checkpoint; delete every checkpoint
	// of the job found in storage (IDs and those whose deletion failed
	// before, under this leader or an earlier one) and every shared file,
	// retrying while storage is unavailable.
	All bool
	// Tidy: also sweep now for files of checkpoints neither retained nor
	// in progress (the job ended keeping its retained checkpoints).
	Tidy bool
}

// ProbeAction asks the shell to probe a suspected taskmanager process and
// to report with probed.
type ProbeAction struct {
	TaskManager string
	Instance    string
	Addr        string
}

func (DeployAction) isAction()            {}
func (ProbeAction) isAction()             {}
func (CancelAction) isAction()            {}
func (TriggerAction) isAction()           {}
func (NotifyAction) isAction()            {}
func (WriteManifestAction) isAction()     {}
func (DeleteCheckpointsAction) isAction() {}
func (ForgetJobAction) isAction()         {}

// TaskReport is a task status a taskmanager reported.
type TaskReport struct {
	JobID                 string
	Vertex, Subtask       int
	Attempt               int64
	State                 TaskState
	Err                   string
	RecordsIn, RecordsOut int64
	// Backpressured is the task's total time spent waiting for credit to
	// send downstream (0 when not reported).
	Backpressured time.Duration
	// BrokenPeer, on a failed task, is the exchange address of the
	// taskmanager whose data stream broke and failed it.
	BrokenPeer string
	// Corrupt, on a failed task, says that it failed because an object of
	// the checkpoint it restored does not verify.
	Corrupt bool
	// Restoring: the task is loading the state it restores;
	// RestoredBytes of it are in place.
	Restoring     bool
	RestoredBytes int64
}

// Config configures a Scheduler.
type Config struct {
	// HeartbeatTimeout is how long a taskmanager may stay silent before it
	// is declared lost.
	HeartbeatTimeout time.Duration
	// CancelTimeout bounds how long a cancelling, failing or restarting job
	// waits for its tasks to confirm; then the rest are taken as cancelled.
	CancelTimeout time.Duration
	// JobRetention is how long an ended job (FINISHED, CANCELED, FAILED)
	// and a lost taskmanager stay known (listed, with their details)
	// before the scheduler forgets them. Default DefaultJobRetention.
	JobRetention time.Duration
	// MaxEndedJobs bounds the ended jobs kept; beyond it the oldest ended
	// are forgotten first. Default DefaultMaxEndedJobs.
	MaxEndedJobs int
}

// Defaults of Config's retention settings.
const (
	DefaultJobRetention = time.Hour
	DefaultMaxEndedJobs = 1000
)

// Scheduler is the jobmanager's state machine: taskmanagers, jobs, their
// executions and their checkpoint coordinators. It is not safe for
// concurrent use (the shell holds a mutex), has no clock (every event
// carries now), draws no random numbers and does no I/O: events return the
// actions to carry out, and what is worth logging is kept for Logs.
type Scheduler struct {
	cfg      Config
	log      notes
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
	// replaced holds the instance ids of taskmanager processes that a
	// newer process with the same id replaced (instance → id), so that
	// the old one, should it come back, cannot take the id over again.
	// Bounded by maxReplaced.
	replaced map[string]string
}

// StaleCounts returns how many task reports and how many checkpoint
// acknowledgements and declines were dropped as stale: of another attempt
// than the execution's current one, of an unknown job or execution, from an
// old registration, or (acknowledgements) while the job was not running.
func (c *Scheduler) StaleCounts() (reports, acks int64) { return c.staleReports, c.staleAcks }

// New returns a scheduler with no taskmanagers and no jobs.
func New(cfg Config) *Scheduler {
	if cfg.JobRetention <= 0 {
		cfg.JobRetention = DefaultJobRetention
	}
	if cfg.MaxEndedJobs <= 0 {
		cfg.MaxEndedJobs = DefaultMaxEndedJobs
	}
	return &Scheduler{cfg: cfg, tms: make(map[string]*tmEntry), jobs: make(map[string]*job),
		staleCancels: make(map[string]time.Time), replaced: make(map[string]string)}
}

// Heartbeat records a heartbeat of process instance of taskmanager id;
// reregister is true when the taskmanager is unknown, was declared lost,
// or registered as another process.
func (c *Scheduler) Heartbeat(id, instance string, reports []TaskReport, now time.Time) (reregister bool, acts []Action) {
	tm := c.tms[id]
	if tm == nil || tm.lost || tm.instance != instance {
		return true, nil
	}
	tm.lastHeartbeat = now
	for _, r := range reports {
		acts = append(acts, c.Report(id, r, now)...)
	}
	return false, acts
}

// Report applies a task status reported by taskmanager tmID. A report of
// another attempt than the execution's current one, of an unknown job or
// execution, or from an old registration is stale: it is dropped and
// counted. When a live taskmanager reports an older attempt still running,
// that attempt is told to cancel (at most once per HeartbeatTimeout).
func (c *Scheduler) Report(tmID string, r TaskReport, now time.Time) []Action {
	tm := c.tms[tmID]
	var acts []Action
	if r.State == TaskFailed && r.BrokenPeer != "" && tm != nil && !tm.lost && r.BrokenPeer != tm.exchangeAddr {
		acts = c.SuspectPeer(r.BrokenPeer, fmt.Sprintf("a data stream between it and taskmanager %s broke", tmID), now)
	}
	return append(acts, c.applyReport(tmID, tm, r, now)...)
}

// applyReport is report after the broken peer was suspected; tm is
// c.tms[tmID].
func (c *Scheduler) applyReport(tmID string, tm *tmEntry, r TaskReport, now time.Time) []Action {
	j := c.jobs[r.JobID]
	var ex *execution
	if j != nil {
		ex = j.exec(r.Vertex, r.Subtask)
	}
	if tm == nil || tm.lost || ex == nil || r.Attempt != ex.attempt || ex.tm != tm {
		c.staleReports++
		current := int64(0)
		if ex != nil {
			current = ex.attempt
		}
		c.log.Debug("stale task report dropped", "job", r.JobID, "vertex", r.Vertex, "subtask", r.Subtask,
			"attempt", r.Attempt, "currentAttempt", current, "taskmanager", tmID, "state", r.State.String())
		if tm != nil && !tm.lost && ex != nil && r.Attempt < ex.attempt && !r.State.Terminal() {
			return c.cancelStale(tm, r, now)
		}
		return nil
	}
	ex.recordsIn, ex.recordsOut = max(ex.recordsIn, r.RecordsIn), max(ex.recordsOut, r.RecordsOut)
	ex.rates.observe(ex.attempt, r.RecordsIn, r.RecordsOut, r.Backpressured, now)
	ex.applyRestoreReport(r)
	if ex.state.Terminal() || r.State == ex.state {
		return nil
	}
	switch r.State {
	case TaskRunning:
		if ex.state == TaskCanceling {
			return nil
		}
		ex.state = TaskRunning
	case TaskFinished, TaskCanceled:
		ex.state = r.State
	case TaskFailed:
		ex.state = TaskFailed
		ex.corrupt = r.Corrupt
		ex.err = r.Err
		if ex.err == "" {
			ex.err = "unknown error"
		}
		if j.state == JobRestarting || j.state == JobFailing || j.state.active() && ex.region.down() {
			// A failure while the job or its region already fails over
			// joins the failure being handled (exceptions.go).
			c.recordConcurrent(j, ex, now)
		}
	default: // earlier states and CANCELING say nothing new
		return nil
	}
	return c.execChanged(j, ex, now)
}

// cancelStale asks live taskmanager tm to cancel an older attempt it still
// reports running, at most once per HeartbeatTimeout for each attempt.
func (c *Scheduler) cancelStale(tm *tmEntry, r TaskReport, now time.Time) []Action {
	key := fmt.Sprintf("%s/%d/%d/%d@%s", r.JobID, r.Vertex, r.Subtask, r.Attempt, tm.addr)
	if last, ok := c.staleCancels[key]; ok && now.Sub(last) < c.cfg.HeartbeatTimeout {
		return nil
	}
	c.staleCancels[key] = now
	c.log.Info("cancelling a stale task attempt that is still running", "job", r.JobID, "vertex", r.Vertex,
		"subtask", r.Subtask, "attempt", r.Attempt, "taskmanager", tm.id)
	return []Action{CancelAction{Target: Target{JobID: r.JobID, Vertex: r.Vertex, Subtask: r.Subtask, Attempt: r.Attempt,
		TaskManager: tm.id, Instance: tm.instance, Addr: tm.addr}, Stale: true}}
}

// execChanged moves the job on after ex reached a new state.
func (c *Scheduler) execChanged(j *job, ex *execution, now time.Time) []Action {
	if !j.state.active() {
		return c.maybeFinalize(j, now)
	}
	if ex.region.down() { // one of the executions the region is stopping
		return c.maybeRedeployRegion(j, ex.region, now)
	}
	switch ex.state {
	case TaskFailed:
		if ex.corrupt && ex.restored > 0 {
			return c.corruptCheckpoint(j, ex, now)
		}
		return c.TaskFailed(j, ex, now)
	case TaskCanceled:
		ex.err = "cancelled by its taskmanager although the job was not cancelled"
		return c.TaskFailed(j, ex, now)
	}
	var acts []Action
	if ex.state == TaskFinished && j.state == JobRunning && j.coord != nil {
		j.coord.TaskFinished(now, ex.taskID())
		acts = c.drainCoordinator(j, now)
		if !j.state.active() { // checkpointing failed the job over
			return acts
		}
	}
	return append(acts, c.progress(j, now)...)
}

// progress moves an active job on after an execution of a region that is
// not down started or finished: a redeployed region whose executions all
// run ends its restart, a job all of whose executions run is RUNNING and
// (again) takes checkpoints, and one all of whose executions finished is
// FINISHED.
func (c *Scheduler) progress(j *job, now time.Time) []Action {
	regionUp := false
	for _, r := range j.regions {
		if r.restarting && r.redeployed && allUp(r.execs) {
			c.log.Info("region running again", "job", j.id, "region", r.id, "attempt", maxAttempt(r.execs))
			r.clearRestart()
			regionUp = true
		}
	}
	allFinished, allRunning := true, true
	for _, e := range j.execs {
		allFinished = allFinished && e.state == TaskFinished
		allRunning = allRunning && (e.state == TaskRunning || e.state == TaskFinished)
	}
	if allRunning {
		j.deployFailures = 0
	}
	switch {
	case allFinished:
		return c.finalize(j, JobFinished, now)
	case allRunning && j.state != JobRunning:
		j.state = JobRunning
		c.log.Info("job running", "job", j.id, "name", j.graph.Name, "attempt", maxAttempt(j.execs))
		return c.startCheckpointing(j, now)
	case allRunning && regionUp:
		// Every region runs again: checkpointing resumes with the new
		// attempts.
		return c.startCheckpointing(j, now)
	}
	return nil
}

// allUp reports whether every execution runs or finished.
func allUp(execs []*execution) bool {
	for _, ex := range execs {
		if ex.state != TaskRunning && ex.state != TaskFinished {
			return false
		}
	}
	return true
}

// TaskFailed handles the failure of ex in an active job: its region fails
// over.
func (c *Scheduler) TaskFailed(j *job, ex *execution, now time.Time) []Action {
	return c.failRegions(j, []*region{ex.region}, failureCause(ex), now)
}

func failureCause(ex *execution) string {
	tm := "(none)"
	if ex.tm != nil {
		tm = ex.tm.id
	}
	return fmt.Sprintf("task %s on taskmanager %s failed: %s", ex.spec.SubtaskName(ex.subtask), tm, ex.err)
}

// jobFailure handles a failure of a whole active job (too many checkpoints
// failed, or slots ran out during a whole-job restart): every region fails
// over.
func (c *Scheduler) jobFailure(j *job, cause string, now time.Time) []Action {
	return c.failRegions(j, j.regions, cause, now)
}

// failRegions handles one failure of an active job that hit the regions
// failed: the job's checkpointing stops and its restart strategy is asked
// once. If it gives up, the job ends FAILED. Otherwise, when the failed
// regions and those already down cover the whole job, the job restarts as
// a whole (RESTARTING: every task cancelled, then deployed again);
// else only the failed regions restart: their executions are cancelled and
// deployed again after the delay, while the other regions run on.
func (c *Scheduler) failRegions(j *job, failed []*region, cause string, now time.Time) []Action {
	return c.failOver(j, failed, cause, true, 0, now)
}

// failOver is failRegions; counted says whether the restart strategy is
// asked (and the failure counted against its budget) or the regions restart
// regardless, and the restart waits at least minDelay.
func (c *Scheduler) failOver(j *job, failed []*region, cause string, counted bool, minDelay time.Duration, now time.Time) []Action {
	acts := c.stopCheckpointing(j, coordinator.CauseFailover, "job failing over: "+cause, now)
	restart, delay, name := false, time.Duration(0), "none"
	switch {
	case !counted:
		restart = true
	case j.opts.Restart != nil:
		restart, delay = j.opts.Restart.OnFailure(now, cause)
		name = j.opts.Restart.Name()
	}
	if !restart {
		return append(acts, c.failJob(j, fmt.Sprintf("%s; restart strategy %s gave up", cause, name), now)...)
	}
	delay = max(delay, minDelay)
	j.lastFailure = cause
	whole := true
	for _, r := range j.regions {
		whole = whole && (r.down() || slices.Contains(failed, r))
	}
	if whole {
		for _, r := range j.regions {
			r.clearRestart()
		}
		j.state = JobRestarting
		j.restartCause = cause
		j.restartDue = now.Add(delay)
		c.log.Warn("job restarting", "job", j.id, "name", j.graph.Name, "attempt", maxAttempt(j.execs)+1, "delay", delay, "cause", cause)
		c.recordException(j, cause, ScopeGlobal, nil, now)
		acts = append(acts, c.cancelJobExecs(j, now)...)
		return append(acts, c.maybeRestart(j, now)...)
	}
	for _, r := range failed {
		r.restarting, r.redeployed = true, false
		r.due = now.Add(delay)
		r.cause = cause
		r.cancelDeadline = now.Add(c.cfg.CancelTimeout)
		r.waitingSlots, r.waitErr = false, ""
		c.log.Warn("region restarting", "job", j.id, "name", j.graph.Name, "region", r.id, "of", len(j.regions),
			"executions", len(r.execs), "attempt", maxAttempt(r.execs)+1, "delay", delay, "cause", cause)
		acts = append(acts, c.cancelExecs(j, r.execs)...)
	}
	c.recordException(j, cause, ScopeRegion, failed, now)
	for _, r := range failed {
		acts = append(acts, c.maybeRedeployRegion(j, r, now)...)
	}
	return acts
}

// corruptCheckpoint handles ex failing because the checkpoint it restored
// does not verify. Restarting would restore the same checkpoint and fail
// again, so the checkpoint is marked corrupt and never restored again.
// Restoring an older one is unsafe when sinks committed the newer one, so
// by default (onCorruption: fail) the job fails; the user resubmits it
// from an older retained checkpoint, or cancels it. With onCorruption:
// fallback, see fallBack.
func (c *Scheduler) corruptCheckpoint(j *job, ex *execution, now time.Time) []Action {
	if !slices.Contains(j.corrupt, ex.restored) {
		j.corrupt = append(j.corrupt, ex.restored)
	}
	if j.opts.Checkpoint.OnCorruption == stream.FallbackOnCorruption {
		return c.fallBack(j, ex, now)
	}
	cause := fmt.Sprintf("checkpoint %d does not verify, so the job cannot be restored from it and is not restarted: %s; "+
		"the checkpoint is marked corrupt: resubmit the job from an older retained checkpoint (weir submit --from) or repair the object",
		ex.restored, failureCause(ex))
	return c.failJob(j, cause, now)
}

// fallBack handles a corrupt checkpoint under onCorruption: fallback: the
// job restarts as a whole, through its restart strategy, from the newest
// restorable checkpoint not marked corrupt, so that every region resumes
// from the same one, and the corrupt checkpoint leaves the retained ones
// (no DeleteCheckpointsAction names it). With none left the job fails as
// with onCorruption: fail, the corrupt checkpoint staying retained so that
// the user can repair it.
func (c *Scheduler) fallBack(j *job, ex *execution, now time.Time) []Action {
	bad := ex.restored
	var to Checkpoint
	retained := retainedCheckpoints(j)
	for id, cp := range j.restorable {
		if slices.Contains(retained, id) && !slices.Contains(j.corrupt, id) && (to == nil || id > to.CheckpointID()) {
			to = cp
		}
	}
	if to == nil {
		fix := fmt.Sprintf("repair the object and resubmit the job from checkpoint %d (weir submit --from), or submit it afresh", bad)
		if ids := knownByID(j, bad); len(ids) > 0 {
			fix = fmt.Sprintf("resubmit the job from retained checkpoint %s, which an earlier jobmanager leader completed and which "+
				"is not restored automatically (weir submit --from), or repair the object", idList(ids, " or "))
		}
		cause := fmt.Sprintf("checkpoint %d does not verify, so the job cannot be restored from it and is not restarted: %s; "+
			"the checkpoint is marked corrupt, and no older retained checkpoint was left to fall back to (checkpointing onCorruption: fallback; "+
			"marked corrupt: %s): %s", bad, failureCause(ex), idList(j.corrupt, ", "), fix)
		return c.failJob(j, cause, now)
	}
	if _, own := j.restorable[bad]; own {
		delete(j.restorable, bad)
		if j.coord != nil {
			j.coord.DropCompleted(bad)
		}
	}
	j.latest = to
	c.log.Warn("checkpoint does not verify; falling back to an older retained checkpoint", "job", j.id, "name", j.graph.Name,
		"corruptCheckpoint", bad, "fallbackCheckpoint", to.CheckpointID())
	cause := fmt.Sprintf("checkpoint %d does not verify: %s; it is marked corrupt and never restored again: falling back to "+
		"retained checkpoint %d (checkpointing onCorruption: fallback); output written since that checkpoint is written again",
		bad, failureCause(ex), to.CheckpointID())
	return c.jobFailure(j, cause, now)
}

// knownByID are the retained checkpoints older than bad, not marked
// corrupt, that the job cannot fall back to by itself: an earlier leader
// completed them, and only their ids are known.
func knownByID(j *job, bad int64) []int64 {
	var ids []int64
	for _, id := range retainedCheckpoints(j) {
		if _, ok := j.restorable[id]; !ok && id < bad && !slices.Contains(j.corrupt, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// idList prints checkpoint ids separated by sep.
func idList(ids []int64, sep string) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, sep)
}

// failJob cancels every task of j and ends it FAILED with cause.
func (c *Scheduler) failJob(j *job, cause string, now time.Time) []Action {
	acts := c.stopCheckpointing(j, coordinator.CauseJobEnded, "job failing: "+cause, now)
	j.state = JobFailing
	j.err = cause
	c.recordException(j, cause, ScopeJobFailed, nil, now)
	c.log.Warn("job failing", "job", j.id, "name", j.graph.Name, "error", cause)
	acts = append(acts, c.cancelJobExecs(j, now)...)
	return append(acts, c.maybeFinalize(j, now)...)
}

// cancelJobExecs asks every non-terminal execution of j to stop, for a
// job that is cancelled, fails or restarts as a whole; it forgets the
// regions' restarts.
func (c *Scheduler) cancelJobExecs(j *job, now time.Time) []Action {
	for _, r := range j.regions {
		r.clearRestart()
	}
	j.cancelDeadline = now.Add(c.cfg.CancelTimeout)
	return c.cancelExecs(j, j.execs)
}

// cancelExecs asks the non-terminal executions among execs to stop.
// Executions that never reached a taskmanager, or whose taskmanager is
// gone, are cancelled at once.
func (c *Scheduler) cancelExecs(j *job, execs []*execution) []Action {
	var acts []Action
	for _, ex := range execs {
		switch {
		case ex.state.Terminal():
		case ex.tm == nil || ex.tm.lost || ex.state == TaskCreated || ex.state == TaskScheduled:
			ex.state = TaskCanceled
		case !ex.deployed: // the deploy call is in flight; cancel when it returns
			ex.state = TaskCanceling
		default:
			ex.state = TaskCanceling
			acts = append(acts, c.cancelActionFor(j, ex))
		}
	}
	return acts
}

func (c *Scheduler) cancelActionFor(j *job, ex *execution) CancelAction {
	return CancelAction{Target: targetOf(j, ex)}
}

func allTerminal(execs []*execution) bool {
	for _, ex := range execs {
		if !ex.state.Terminal() {
			return false
		}
	}
	return true
}

// maybeFinalize ends a cancelling or failing job whose executions have all
// stopped, and restarts a restarting one that is due.
func (c *Scheduler) maybeFinalize(j *job, now time.Time) []Action {
	if !allTerminal(j.execs) {
		return nil
	}
	switch j.state {
	case JobCanceling:
		if j.stopped {
			return c.finalize(j, JobFinished, now)
		}
		return c.finalize(j, JobCanceled, now)
	case JobFailing:
		return c.finalize(j, JobFailed, now)
	case JobRestarting:
		return c.maybeRestart(j, now)
	}
	return nil
}

// maybeRestart deploys a job restarting as a whole again once all its
// executions have stopped, its restart delay has passed and no manifest
// write is in flight (it may complete a newer checkpoint to restore). Its
// slots are placed anew, and every execution gets the same new attempt,
// one more than the highest so far, so that the attempts of the exchange
// channels match.
func (c *Scheduler) maybeRestart(j *job, now time.Time) []Action {
	if j.state != JobRestarting || now.Before(j.restartDue) || writingManifest(j) || !allTerminal(j.execs) {
		return nil
	}
	for _, tm := range j.slots {
		tm.used--
	}
	j.slots = nil
	next := maxAttempt(j.execs) + 1
	j.restarts++
	j.err = ""
	j.restartCause = ""
	j.waitLogged = false
	j.slotDeadline = now.Add(j.opts.SlotWait)
	for _, ex := range j.execs {
		*ex = execution{spec: ex.spec, subtask: ex.subtask, region: ex.region, attempt: next, state: TaskCreated}
	}
	for _, r := range j.regions {
		r.clearRestart()
	}
	c.log.Info("job redeploying", "job", j.id, "name", j.graph.Name, "attempt", next, "restoreCheckpoint", checkpointID(j.latest))
	return c.trySchedule(j, now)
}

// maybeRedeployRegion deploys a region that is down again once all its
// executions have stopped, its restart delay has passed and no manifest
// write is in flight. Its shared slots whose taskmanager is gone are placed
// anew (the others stay); when too few slots are free the region waits for
// a taskmanager to register, up to the job's slot wait. Every execution of
// the region gets the same new attempt, one more than the region's highest,
// and restores its own state from the latest completed checkpoint.
func (c *Scheduler) maybeRedeployRegion(j *job, r *region, now time.Time) []Action {
	if !j.state.active() || !r.down() || now.Before(r.due) || writingManifest(j) || !allTerminal(r.execs) || j.slots == nil {
		return nil
	}
	var lost []int
	for _, i := range r.slots {
		switch tm := j.slots[i]; {
		case tm == nil || tm.lost:
			lost = append(lost, i)
		case tm.suspected:
			// Wait for the probe: it ends the suspicion (deploy there
			// again) or declares the taskmanager lost (place the slot
			// anew). The slot may be shared with regions still running
			// there, so it does not move while the taskmanager lives.
			return nil
		}
	}
	if len(lost) > 0 {
		owners, err := placeSlots(len(lost), c.liveOffers())
		if err != nil {
			var se *slotShortageError
			if errors.As(err, &se) {
				se.What = fmt.Sprintf("region %d of job %s", r.id, j.id)
			}
			r.waitErr = err.Error()
			if !r.waitingSlots {
				r.waitingSlots = true
				r.slotDeadline = now.Add(j.opts.SlotWait)
				c.log.Info("region waiting for slots", "job", j.id, "region", r.id, "reason", r.waitErr, "deadline", r.slotDeadline)
			}
			return nil
		}
		for k, i := range lost {
			tm := c.tms[owners[k]]
			tm.used++
			j.slots[i] = tm
		}
	}
	r.redeployed, r.waitingSlots, r.waitErr = true, false, ""
	next := maxAttempt(r.execs) + 1
	j.restarts++
	j.restoredFrom = checkpointID(j.latest)
	addrs := slotAddrs(j)
	ckpt := c.checkpointingOf(j)
	acts := make([]Action, 0, len(r.execs))
	for _, ex := range r.execs {
		*ex = execution{spec: ex.spec, subtask: ex.subtask, region: r, attempt: next, state: TaskCreated}
		acts = append(acts, c.deployExec(j, ex, addrs, ckpt))
	}
	c.log.Info("region redeploying", "job", j.id, "name", j.graph.Name, "region", r.id, "executions", len(r.execs),
		"attempt", next, "restoreCheckpoint", j.restoredFrom)
	return acts
}

// maybeRedeployRegions tries every region of j that is down.
func (c *Scheduler) maybeRedeployRegions(j *job, now time.Time) []Action {
	var acts []Action
	for _, r := range j.regions {
		if r.down() {
			acts = append(acts, c.maybeRedeployRegion(j, r, now)...)
		}
	}
	return acts
}

// finalize puts j into terminal state s, frees its slots and lets waiting
// jobs use them.
func (c *Scheduler) finalize(j *job, s JobState, now time.Time) []Action {
	acts := c.stopCheckpointing(j, coordinator.CauseJobEnded, "job "+strings.ToLower(s.String()), now)
	j.state = s
	j.ended = now
	for _, tm := range j.slots {
		tm.used--
	}
	j.slots = nil
	for _, r := range j.regions {
		r.clearRestart()
	}
	c.log.Info("job ended", "job", j.id, "name", j.graph.Name, "state", s.String(), "error", j.err)
	acts = append(acts, c.retentionDeletes(j)...)
	return append(acts, c.scheduleWaiting(now)...)
}

// Submit adds a planned job graph under id and tries to schedule it.
func (c *Scheduler) Submit(id string, g *stream.JobGraph, opts JobOptions, now time.Time) ([]Action, error) {
	if _, dup := c.jobs[id]; dup {
		return nil, fmt.Errorf("jobmanager: job id %s is taken", id)
	}
	tasks, err := BuildTasks(g)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	j := c.addJob(id, g, opts, tasks, now)
	c.log.Info("job submitted", "job", id, "name", g.Name, "tasks", len(tasks), "slots", j.need, "regions", len(j.regions),
		"checkpointing", opts.Checkpoint.Enabled())
	return c.trySchedule(j, now), nil
}

// AddEnded adds a job that is already over, in terminal state s since
// ended: one a restarted jobmanager finds ended in its job store, or a
// recovered job whose checkpoint does not verify (FAILED). It is listed
// with cause until the retention forgets it; nothing of it is deployed or
// deleted.
func (c *Scheduler) AddEnded(id string, g *stream.JobGraph, opts JobOptions, s JobState, cause string, ended, now time.Time) error {
	if _, dup := c.jobs[id]; dup {
		return fmt.Errorf("jobmanager: job id %s is taken", id)
	}
	if !s.Terminal() {
		return fmt.Errorf("jobmanager: job %s: state %s is not an end state", id, s)
	}
	tasks, err := BuildTasks(g)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	j := c.addJob(id, g, opts, tasks, now)
	j.state, j.err, j.ended, j.swept = s, cause, ended, true
	for _, ex := range j.execs {
		ex.state = TaskCanceled
	}
	c.log.Info("ended job listed", "job", id, "name", g.Name, "state", s.String(), "error", cause)
	return nil
}

// exec is the execution of subtask of the task headed by vertex, or nil
// when the job has none (the arguments may come from the network).
func (j *job) exec(vertex, subtask int) *execution {
	if vertex < 0 || vertex >= len(j.byHead) || subtask < 0 || subtask >= len(j.byHead[vertex]) {
		return nil
	}
	return j.byHead[vertex][subtask]
}

// addJob creates job id in state CREATED and adds it.
func (c *Scheduler) addJob(id string, g *stream.JobGraph, opts JobOptions, tasks []*Task, now time.Time) *job {
	j := &job{id: id, graph: g, opts: opts, tasks: tasks, need: slotsNeeded(tasks), state: JobCreated,
		submitted: now, slotDeadline: now.Add(opts.SlotWait)}
	for _, t := range tasks {
		if t.Head >= len(j.byHead) {
			j.byHead = append(j.byHead, make([][]*execution, t.Head+1-len(j.byHead))...)
		}
		j.byHead[t.Head] = make([]*execution, t.Parallelism)
		for i := range t.Parallelism {
			ex := &execution{spec: t, subtask: i, attempt: max(opts.FirstAttempt, 1), state: TaskCreated}
			j.execs = append(j.execs, ex)
			j.byHead[t.Head][i] = ex
		}
	}
	if opts.Restore != nil {
		j.latest = opts.Restore
		if !opts.RestoreForeign {
			j.restorable = map[int64]Checkpoint{opts.Restore.CheckpointID(): opts.Restore}
		}
	}
	buildRegions(j)
	c.jobs[id] = j
	c.jobOrder = append(c.jobOrder, j)
	return j
}

func (c *Scheduler) liveOffers() []slotOffer {
	var offers []slotOffer
	for _, tm := range c.tms {
		if tm.usable() {
			offers = append(offers, slotOffer{TaskManager: tm.id, Free: tm.free()})
		}
	}
	return offers
}

// slotAddrs are the exchange addresses of the taskmanagers hosting j's
// shared slots, "" for a slot whose taskmanager is gone (a region restarting
// later re-places it). A deployment uses the addresses of its own
// region's slots only: a forward output the one of its own subtask, other
// outputs those of every downstream subtask, all in its region.
func slotAddrs(j *job) []string {
	addrs := make([]string, len(j.slots))
	for i, tm := range j.slots {
		if tm != nil && !tm.lost {
			addrs[i] = tm.exchangeAddr
		}
	}
	return addrs
}

func (c *Scheduler) checkpointingOf(j *job) TaskCheckpointing {
	if !j.opts.Checkpoint.Enabled() {
		return TaskCheckpointing{}
	}
	tc := TaskCheckpointing{Enabled: true, Mode: j.opts.Checkpoint.Mode, Storage: j.opts.Storage}
	if j.opts.Checkpoint.Unaligned {
		tc.AlignedTimeout = j.opts.Checkpoint.AlignedCheckpointTimeout
	}
	return tc
}

// deployExec deploys ex (created, with its attempt set) into its shared
// slot, restoring the latest completed checkpoint.
func (c *Scheduler) deployExec(j *job, ex *execution, addrs []string, ckpt TaskCheckpointing) DeployAction {
	ex.restoredFinished = j.latest != nil && j.latest.Finished(j.graph.Vertices[ex.spec.Head].UID, ex.subtask, ex.spec.Parallelism)
	ex.restored, ex.corrupt = checkpointID(j.latest), false
	ex.restoreBytes, ex.restoredBytes, ex.restoreDone = restoreBytesOf(j, ex), 0, false
	ex.inputEnded = false
	ex.tm = j.slots[ex.subtask]
	ex.state = TaskDeploying
	return DeployAction{JobID: j.id, Graph: j.graph, Task: ex.spec, Subtask: ex.subtask, Attempt: ex.attempt,
		TaskManager: ex.tm.id, Instance: ex.tm.instance, Addr: ex.tm.addr, SlotAddrs: addrs, Checkpointing: ckpt, Restore: j.latest}
}

// trySchedule places a waiting job into slots and deploys all of it, or
// leaves it waiting.
func (c *Scheduler) trySchedule(j *job, now time.Time) []Action {
	j.state = JobScheduled
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
	for i, id := range owners {
		tm := c.tms[id]
		tm.used++
		j.slots[i] = tm
	}
	j.restoredFrom = checkpointID(j.latest)
	addrs := slotAddrs(j)
	ckpt := c.checkpointingOf(j)
	acts := make([]Action, 0, len(j.execs))
	for _, ex := range j.execs {
		acts = append(acts, c.deployExec(j, ex, addrs, ckpt))
	}
	c.log.Info("job deploying", "job", j.id, "name", j.graph.Name, "executions", len(acts))
	return acts
}

// scheduleWaiting tries every job waiting for slots and every region
// waiting for slots, oldest job first.
func (c *Scheduler) scheduleWaiting(now time.Time) []Action {
	var acts []Action
	for _, j := range c.jobOrder {
		switch {
		case j.state == JobScheduled && j.slots == nil:
			acts = append(acts, c.trySchedule(j, now)...)
		case j.state.active():
			for _, r := range j.regions {
				if r.down() && r.waitingSlots {
					acts = append(acts, c.maybeRedeployRegion(j, r, now)...)
				}
			}
		}
	}
	return acts
}

// DeployDone records the outcome of a deploy action.
func (c *Scheduler) DeployDone(a DeployAction, err error, now time.Time) []Action {
	j := c.jobs[a.JobID]
	if j == nil {
		return nil
	}
	ex := j.exec(a.Task.Head, a.Subtask)
	if ex == nil || ex.attempt != a.Attempt || ex.tm == nil || ex.tm.id != a.TaskManager || ex.state.Terminal() {
		return nil
	}
	if err == nil {
		ex.deployed = true
		if ex.state == TaskCanceling {
			return []Action{c.cancelActionFor(j, ex)}
		}
		return nil
	}
	// The submission may have reached the taskmanager even though it
	// failed here (a timeout, say): cancel that attempt there, so that it
	// cannot run on as an orphan nobody tracks. Its outcome changes
	// nothing.
	orphan := CancelAction{Target: targetOf(j, ex), Stale: true}
	if !j.state.active() || ex.region.down() {
		ex.state = TaskCanceled
		return append([]Action{orphan}, c.execChanged(j, ex, now)...)
	}
	ex.state = TaskFailed
	ex.err = fmt.Sprintf("deploying to %s failed: %v", a.Addr, err)
	return append([]Action{orphan}, c.deployFailed(j, ex, now)...)
}

// Deployment retries: the second failed deployment in a row waits
// deployRetryBase, and each further one twice as long, up to
// deployRetryMax.
const (
	deployRetryBase = 100 * time.Millisecond
	deployRetryMax  = 5 * time.Second
)

// deployFailed handles the failed deployment of ex in an active job. The
// deployment failures in a row (until every execution of the job runs)
// count as one failure for the restart strategy; each one after the first
// restarts its region after a backoff (deployRetryBase doubling up to
// deployRetryMax) instead, so that a taskmanager that cannot take tasks
// never causes a storm of restarts.
func (c *Scheduler) deployFailed(j *job, ex *execution, now time.Time) []Action {
	j.deployFailures++
	if j.deployFailures == 1 {
		return c.TaskFailed(j, ex, now)
	}
	delay := deployRetryMax
	if n := j.deployFailures - 2; n < 16 {
		delay = min(deployRetryBase<<n, deployRetryMax)
	}
	c.log.Warn("deployment failed again; retrying after a backoff, not counted by the restart strategy",
		"job", j.id, "failuresInARow", j.deployFailures, "delay", delay)
	return c.failOver(j, []*region{ex.region}, failureCause(ex), false, delay, now)
}

// CancelDone records the outcome of a cancel action. gone says the
// taskmanager does not know the execution (it already ended).
func (c *Scheduler) CancelDone(a CancelAction, err error, gone bool, now time.Time) []Action {
	if err != nil && !gone {
		c.log.Warn("cancelling task failed; waiting for its taskmanager or the cancel timeout",
			"job", a.JobID, "vertex", a.Vertex, "subtask", a.Subtask, "attempt", a.Attempt, "taskmanager", a.TaskManager, "error", err)
		return nil
	}
	j := c.jobs[a.JobID]
	if !gone || a.Stale || j == nil {
		return nil
	}
	ex := j.exec(a.Vertex, a.Subtask)
	if ex == nil || ex.attempt != a.Attempt || ex.state.Terminal() {
		return nil
	}
	ex.state = TaskCanceled
	return c.execChanged(j, ex, now)
}

// Cancel starts cancelling job id.
func (c *Scheduler) Cancel(id string, now time.Time) ([]Action, error) {
	j := c.jobs[id]
	if j == nil {
		return nil, notFound(id)
	}
	switch {
	case j.state.Terminal():
		return nil, fmt.Errorf("%w: job %s is already %s", ErrJobNotCancelable, id, j.state)
	case j.state == JobCanceling || j.state == JobFailing:
		return nil, nil
	}
	acts := c.stopCheckpointing(j, coordinator.CauseJobEnded, "job cancelled", now)
	j.state = JobCanceling
	c.log.Info("job cancelling", "job", id, "name", j.graph.Name)
	acts = append(acts, c.cancelJobExecs(j, now)...)
	return append(acts, c.maybeFinalize(j, now)...), nil
}

// tmGone fails (in active jobs) or takes as cancelled (in stopping jobs,
// and in regions that are down) every execution on tm, whose tasks no
// longer run. The regions of the failed executions of a job fail over
// together, as one failure.
func (c *Scheduler) tmGone(tm *tmEntry, reason string, now time.Time) []Action {
	var acts []Action
	for _, j := range c.jobOrder {
		if j.state.Terminal() {
			continue
		}
		var first *execution
		var failed []*region
		for _, ex := range j.execs {
			if ex.tm != tm || ex.state.Terminal() {
				continue
			}
			if j.state.active() && !ex.region.down() {
				ex.state = TaskFailed
				ex.err = reason
				if first == nil {
					first = ex
				}
				if !slices.Contains(failed, ex.region) {
					failed = append(failed, ex.region)
				}
			} else {
				ex.state = TaskCanceled
			}
		}
		if first != nil {
			acts = append(acts, c.failRegions(j, failed, failureCause(first), now)...)
		}
		if j.state.active() {
			acts = append(acts, c.maybeRedeployRegions(j, now)...)
		} else {
			acts = append(acts, c.maybeFinalize(j, now)...)
		}
	}
	return acts
}

// Tick checks the deadlines: heartbeat timeouts, slot waits, cancel
// confirmations, restart delays and checkpoint triggers and timeouts.
func (c *Scheduler) Tick(now time.Time) []Action {
	var acts []Action
	for _, id := range slices.Sorted(maps.Keys(c.tms)) { // in id order: the same events give the same actions
		tm := c.tms[id]
		if tm.lost && now.Sub(tm.lostAt) >= c.cfg.JobRetention {
			delete(c.tms, id) // executions that ran on it keep their own pointer
			c.log.Info("lost taskmanager forgotten", "taskmanager", id, "lost", tm.lostAt)
			continue
		}
		if tm.lost || now.Sub(tm.lastHeartbeat) < c.cfg.HeartbeatTimeout {
			continue
		}
		acts = append(acts, c.lose(tm, fmt.Sprintf("no heartbeat for %s", c.cfg.HeartbeatTimeout), now)...)
	}
	for k, t := range c.staleCancels {
		if now.Sub(t) >= c.cfg.HeartbeatTimeout {
			delete(c.staleCancels, k)
		}
	}
	for _, j := range c.jobOrder {
		switch {
		case j.state == JobScheduled && j.slots == nil && !now.Before(j.slotDeadline):
			_, err := placeSlots(j.need, c.liveOffers())
			if err == nil { // cannot happen: it would have been scheduled
				err = errors.New("not scheduled")
			}
			if j.restarts > 0 { // a restart that found no slots is another failure
				acts = append(acts, c.jobFailure(j, err.Error(), now)...)
			} else {
				acts = append(acts, c.failJob(j, err.Error(), now)...)
			}
		case j.drainWait && !now.Before(j.cancelDeadline):
			acts = append(acts, c.drainTimedOut(j, now)...)
		case (j.state == JobCanceling || j.state == JobFailing || j.state == JobRestarting) && !now.Before(j.cancelDeadline):
			c.giveUpCancels(j, j.execs)
			acts = append(acts, c.maybeFinalize(j, now)...)
		case j.state == JobRestarting:
			acts = append(acts, c.maybeRestart(j, now)...)
		case j.state.active():
			acts = append(acts, c.tickRegions(j, now)...)
			if j.state == JobRunning && j.coord != nil {
				j.coord.Tick(now)
				acts = append(acts, c.checkStop(j, now)...)
				if j.finalWanted {
					acts = append(acts, c.finalCheckpoint(j, now)...)
				}
				acts = append(acts, c.drainCoordinator(j, now)...)
			}
		}
	}
	return append(acts, c.forgetEnded(now)...)
}

// forgetEnded forgets the ended jobs past JobRetention and, beyond
// MaxEndedJobs, the oldest ended ones, but never one whose manifest is
// still being written (its outcome must still be handled).
func (c *Scheduler) forgetEnded(now time.Time) []Action {
	var ended []*job
	for _, j := range c.jobOrder {
		if j.state.Terminal() && !writingManifest(j) {
			ended = append(ended, j)
		}
	}
	slices.SortStableFunc(ended, func(a, b *job) int { return a.ended.Compare(b.ended) })
	excess := len(ended) - c.cfg.MaxEndedJobs
	forget := make(map[*job]bool)
	for i, j := range ended {
		if i < excess || now.Sub(j.ended) >= c.cfg.JobRetention {
			forget[j] = true
		}
	}
	if len(forget) == 0 {
		return nil
	}
	var acts []Action
	c.jobOrder = slices.DeleteFunc(c.jobOrder, func(j *job) bool {
		if !forget[j] {
			return false
		}
		delete(c.jobs, j.id)
		c.log.Info("ended job forgotten", "job", j.id, "name", j.graph.Name, "state", j.state.String(), "ended", j.ended)
		acts = append(acts, ForgetJobAction{JobID: j.id, State: j.state})
		return true
	})
	return acts
}

// giveUpCancels takes the executions among execs that did not confirm
// their cancellation in time as cancelled.
func (c *Scheduler) giveUpCancels(j *job, execs []*execution) {
	var left []string
	for _, ex := range execs {
		if !ex.state.Terminal() {
			ex.state = TaskCanceled
			ex.err = fmt.Sprintf("no confirmation of cancellation within %s", c.cfg.CancelTimeout)
			left = append(left, ex.spec.SubtaskName(ex.subtask))
		}
	}
	if len(left) > 0 {
		c.log.Warn("gave up waiting for tasks to stop", "job", j.id, "tasks", strings.Join(left, ", "))
	}
}

// tickRegions checks the deadlines of the regions of an active job that
// are down: cancel confirmations, restart delays and slot waits (a region
// that waited for slots in vain fails again).
func (c *Scheduler) tickRegions(j *job, now time.Time) []Action {
	var acts []Action
	for _, r := range j.regions {
		if !j.state.active() {
			break
		}
		if !r.down() {
			continue
		}
		if !allTerminal(r.execs) && !now.Before(r.cancelDeadline) {
			c.giveUpCancels(j, r.execs)
		}
		if r.waitingSlots && !now.Before(r.slotDeadline) {
			acts = append(acts, c.failRegions(j, []*region{r}, r.waitErr, now)...)
			continue
		}
		acts = append(acts, c.maybeRedeployRegion(j, r, now)...)
	}
	return acts
}

// Shutdown cancels every execution of every running job (best effort, when
// the jobmanager stops) and returns the cancel actions.
func (c *Scheduler) Shutdown(now time.Time) []Action {
	var acts []Action
	for _, j := range c.jobOrder {
		if j.state.active() || j.state == JobRestarting {
			j.state = JobCanceling
			acts = append(acts, c.cancelJobExecs(j, now)...)
			acts = append(acts, c.maybeFinalize(j, now)...)
		}
	}
	var cancels []Action
	for _, a := range acts {
		if ca, ok := a.(CancelAction); ok {
			cancels = append(cancels, ca)
		}
	}
	return cancels
}

// Views: copies of the state for the adapters.

// TaskView describes one execution of a job.
type TaskView struct {
	Vertex, Subtask       int
	Attempt               int64
	Name                  string
	State                 TaskState
	TaskManager           string
	Err                   string
	RecordsIn, RecordsOut int64
	// RecordsInPerSec, RecordsOutPerSec and Backpressure (the fraction
	// of time it waited for credit to send downstream, 0 to 1) are
	// measured between its two latest reports at least RateWindow apart;
	// 0 when it is not running.
	RecordsInPerSec, RecordsOutPerSec, Backpressure float64
	Alignment                                       time.Duration
	// Restoring: the execution is deploying or loading the state it
	// restores; RestoredBytes of its RestoreBytes are in place.
	Restoring                   bool
	RestoredBytes, RestoreBytes int64
}

// JobView is a copy of a job's state for the APIs.
type JobView struct {
	ID, Name                 string
	State                    JobState
	Start, End               time.Time
	TasksTotal, TasksRunning int
	Err                      string
	// Attempt is the highest execution attempt of the job.
	Attempt       int64
	Restarts      int64
	RestartDue    time.Time // RESTARTING only
	LastFailure   string
	Checkpointing bool
	RestoredFrom  int64
	// StoppedAt is the checkpoint a job stopped with a savepoint ended at
	// (0: not stopped); StopPending the one a stop waits for, and
	// StopFailed why the last stop did not happen.
	StoppedAt, StopPending int64
	StopFailed             string
	// Restore sums the restore of the job's current executions.
	Restore RestoreView
	// Regions is the number of pipelined failover regions.
	Regions int
	// RestartingRegions are the regions of an active job that restart.
	RestartingRegions []RegionView
	Graph             *stream.JobGraph // immutable; do not modify
	Tasks             []TaskView
	TaskOf            map[int]int // vertex id → head of its task
}

// RegionPhase is how far a region's restart got.
type RegionPhase int

const (
	// RegionCanceling: its executions are being cancelled.
	RegionCanceling RegionPhase = iota + 1
	// RegionWaiting: stopped; waiting for the restart delay (or a
	// manifest write in flight).
	RegionWaiting
	// RegionWaitingForSlots: due, but too few free slots.
	RegionWaitingForSlots
	// RegionDeploying: deployed again with the new attempt; not every
	// execution runs yet.
	RegionDeploying
)

var regionPhaseNames = [...]string{"UNSPECIFIED", "CANCELING", "WAITING", "WAITING_FOR_SLOTS", "DEPLOYING"}

func (p RegionPhase) String() string {
	if p >= 0 && int(p) < len(regionPhaseNames) {
		return regionPhaseNames[p]
	}
	return fmt.Sprintf("RegionPhase(%d)", int(p))
}

// RegionView describes a restarting region.
type RegionView struct {
	ID, Of int // region ID of Of regions, 1-based
	Phase  RegionPhase
	// Attempt is the attempt its executions are (to be) deployed with.
	Attempt      int64
	Cause        string
	Due          time.Time // the end of the restart delay
	SlotDeadline time.Time // RegionWaitingForSlots only
	Tasks        []string  // subtask names
}

// TaskManagerView describes one taskmanager registration.
type TaskManagerView struct {
	ID, Addr      string
	Live          bool
	Suspected     bool
	Reason        string // why suspected or lost
	Slots, Free   int
	LastHeartbeat time.Time
	OperatorTypes []string
}

func (c *Scheduler) view(j *job, withTasks bool) JobView {
	v := JobView{ID: j.id, Name: j.graph.Name, State: j.state, Start: j.submitted, End: j.ended,
		TasksTotal: len(j.execs), Err: j.err, Attempt: maxAttempt(j.execs), Graph: j.graph, Restarts: j.restarts,
		LastFailure: j.lastFailure, Checkpointing: j.opts.Checkpoint.Enabled(), RestoredFrom: j.restoredFrom,
		Regions: len(j.regions), StopFailed: j.stopFailed, Restore: restoreViewOf(j)}
	if j.stopped {
		v.StoppedAt = j.stopAt
	} else {
		v.StopPending = j.stopAt
	}
	if j.state == JobRestarting {
		v.RestartDue = j.restartDue
		v.Err = j.restartCause
	}
	if j.state.active() {
		for _, r := range j.regions {
			if r.restarting {
				v.RestartingRegions = append(v.RestartingRegions, regionViewOf(j, r))
			}
		}
	}
	for _, ex := range j.execs {
		if ex.state == TaskRunning {
			v.TasksRunning++
		}
		if withTasks {
			tv := TaskView{Vertex: ex.spec.Head, Subtask: ex.subtask, Attempt: ex.attempt, Name: ex.spec.SubtaskName(ex.subtask),
				State: ex.state, Err: ex.err, RecordsIn: ex.recordsIn, RecordsOut: ex.recordsOut, Alignment: ex.alignment,
				Restoring: ex.state == TaskDeploying || ex.state == TaskRunning && !ex.restoreDone, RestoredBytes: ex.restoredSoFar(), RestoreBytes: ex.restoreBytes}
			if ex.tm != nil {
				tv.TaskManager = ex.tm.id
			}
			if ex.state == TaskRunning && ex.rates.attempt == ex.attempt {
				tv.RecordsInPerSec, tv.RecordsOutPerSec, tv.Backpressure = ex.rates.inRate, ex.rates.outRate, ex.rates.backpressure
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

func regionViewOf(j *job, r *region) RegionView {
	v := RegionView{ID: r.id, Of: len(j.regions), Attempt: maxAttempt(r.execs), Cause: r.cause, Due: r.due}
	switch {
	case r.redeployed:
		v.Phase = RegionDeploying
	case !allTerminal(r.execs):
		v.Phase = RegionCanceling
	case r.waitingSlots:
		v.Phase = RegionWaitingForSlots
		v.SlotDeadline = r.slotDeadline
	default:
		v.Phase = RegionWaiting
	}
	if v.Phase != RegionDeploying {
		v.Attempt++
	}
	for _, ex := range r.execs {
		v.Tasks = append(v.Tasks, ex.spec.SubtaskName(ex.subtask))
	}
	return v
}

// Jobs describes every job, in submission order, without its tasks.
func (c *Scheduler) Jobs() []JobView {
	out := make([]JobView, 0, len(c.jobOrder))
	for _, j := range c.jobOrder {
		out = append(out, c.view(j, false))
	}
	return out
}

// Job describes job id with its tasks.
func (c *Scheduler) Job(id string) (JobView, error) {
	j := c.jobs[id]
	if j == nil {
		return JobView{}, notFound(id)
	}
	return c.view(j, true), nil
}

// TaskManagers describes every taskmanager, lost ones included, by id.
func (c *Scheduler) TaskManagers() []TaskManagerView {
	out := make([]TaskManagerView, 0, len(c.tms))
	for _, tm := range c.tms {
		free := tm.free()
		if tm.lost {
			free = 0
		}
		reason := tm.suspectReason
		if tm.lost {
			reason = tm.lostReason
		}
		out = append(out, TaskManagerView{ID: tm.id, Addr: tm.addr, Live: !tm.lost, Suspected: tm.suspected, Reason: reason,
			Slots: tm.slots, Free: free, LastHeartbeat: tm.lastHeartbeat, OperatorTypes: slices.Clone(tm.opTypes)})
	}
	slices.SortFunc(out, func(a, b TaskManagerView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// maxQuotedID bounds how much of a caller's job id an error repeats: the
// id may be anything a client sent.
const maxQuotedID = 64

// notFound is the error for an unknown job id.
func notFound(id string) error {
	if len(id) > maxQuotedID {
		return fmt.Errorf("%w: no job %q… (%d bytes); list jobs to see their ids", ErrJobNotFound, id[:maxQuotedID], len(id))
	}
	return fmt.Errorf("%w: no job %q; list jobs to see their ids", ErrJobNotFound, id)
}
