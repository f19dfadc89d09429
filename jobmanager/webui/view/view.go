// Package view is the read model of the jobmanager's HTTP interfaces: the
// documents that the REST API serves as JSON and the web UI (package
// webui) renders as HTML. The jobmanager builds each document once, from
// its scheduler's state, in one function per document; both interfaces
// call that function, so that they never disagree.
//
// Field names are lowerCamel in JSON. Times are Unix milliseconds (0: not
// yet), durations milliseconds. States are the upper-case names of the
// gRPC enums without prefix ("RUNNING"), plus RESTARTING (which gRPC shows
// as FAILING).
//
// view imports the standard library only.
package view

// Job is a job's summary.
type Job struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	State        string `json:"state"`
	StartTimeMs  int64  `json:"startTimeMs"`
	EndTimeMs    int64  `json:"endTimeMs"`
	TasksTotal   int    `json:"tasksTotal"`
	TasksRunning int    `json:"tasksRunning"`
	// Error is the job's error, or why it or some of its regions restart.
	Error string `json:"error,omitempty"`
	// Attempt is the highest execution attempt of the job: LeaderTerm ×
	// 65536 + Deployment, where LeaderTerm counts the runs (or
	// leaderships) of jobmanagers with a job store and Deployment the
	// job's deployments within it (1 for the first, one more with every
	// restart).
	Attempt     int64  `json:"attempt"`
	Deployment  int64  `json:"deployment"`
	LeaderTerm  int64  `json:"leaderTerm"`
	Restarts    int64  `json:"restarts"`
	LastFailure string `json:"lastFailure,omitempty"`
	// StopFailed says why the last stop with a savepoint did not happen.
	StopFailed string `json:"stopFailed,omitempty"`
	// Checkpointing says whether the job takes checkpoints.
	Checkpointing bool `json:"checkpointing"`
	// Regions is the number of pipelined failover regions (1: a failure
	// restarts the whole job).
	Regions int `json:"regions"`
	// RestartingRegions are the regions that restart while the rest of
	// the job runs on (empty while the job restarts as a whole).
	RestartingRegions []Region `json:"restartingRegions"`
}

// Region is a failover region that restarts.
type Region struct {
	ID int `json:"id"` // 1-based
	// Phase: CANCELING, WAITING (the restart delay), WAITING_FOR_SLOTS or
	// DEPLOYING.
	Phase string `json:"phase"`
	// Attempt is the attempt its executions are (to be) deployed with.
	Attempt        int64    `json:"attempt"`
	Deployment     int64    `json:"deployment"` // Attempt within its leader term (see Job)
	Cause          string   `json:"cause"`
	RestartDueMs   int64    `json:"restartDueMs"`
	SlotDeadlineMs int64    `json:"slotDeadlineMs,omitempty"`
	Tasks          []string `json:"tasks"`
}

// Task is one execution of a subtask of a job.
type Task struct {
	VertexID int   `json:"vertexId"`
	Subtask  int   `json:"subtask"`
	Attempt  int64 `json:"attempt"`
	// Deployment is Attempt within its leader term (see Job).
	Deployment    int64  `json:"deployment"`
	Name          string `json:"name"`
	State         string `json:"state"`
	TaskManagerID string `json:"taskmanagerId,omitempty"`
	Error         string `json:"error,omitempty"`
	RecordsIn     int64  `json:"recordsIn"`
	RecordsOut    int64  `json:"recordsOut"`
	// RecordsInPerSec, RecordsOutPerSec and Backpressure (the fraction
	// of time the task waited for credit to send downstream, 0 to 1) are
	// measured by the jobmanager between the task's two latest reports
	// (heartbeats) at least 500 ms apart; 0 unless RUNNING. A chain
	// counts records in at its head and out at its end.
	RecordsInPerSec  float64 `json:"recordsInPerSec"`
	RecordsOutPerSec float64 `json:"recordsOutPerSec"`
	Backpressure     float64 `json:"backpressure"`
}

// Input is an edge into an operator.
type Input struct {
	From         int      `json:"from"` // the upstream vertex id
	Input        int      `json:"input"`
	Partitioning string   `json:"partitioning"`
	KeyFields    []string `json:"keyFields,omitempty"`
	// SideOutput is the upstream operator's side output the input reads;
	// absent for its main output.
	SideOutput string `json:"sideOutput,omitempty"`
}

// Vertex is an operator of a job's graph.
type Vertex struct {
	ID          int     `json:"id"`
	UID         string  `json:"uid"`
	Name        string  `json:"name"`
	Type        string  `json:"type"`
	Parallelism int     `json:"parallelism"`
	TaskID      int     `json:"taskId"` // vertex id of its chain's head
	Inputs      []Input `json:"inputs"`
}

// JobDetail is a job with its tasks and graph.
type JobDetail struct {
	Job      Job      `json:"job"`
	Tasks    []Task   `json:"tasks"`
	Vertices []Vertex `json:"vertices"`
}

// TaskManager is one taskmanager registration.
type TaskManager struct {
	ID        string `json:"id"`
	Address   string `json:"address"`
	Live      bool   `json:"live"`
	Suspected bool   `json:"suspected"`
	// Reason says why it is suspected or lost.
	Reason          string   `json:"reason,omitempty"`
	SlotsTotal      int      `json:"slotsTotal"`
	SlotsFree       int      `json:"slotsFree"`
	LastHeartbeatMs int64    `json:"lastHeartbeatMs"`
	OperatorTypes   []string `json:"operatorTypes"`
	// Memory is what its latest heartbeat reported (nil: none yet).
	Memory *Memory `json:"memory,omitempty"`
}

// Memory is a taskmanager's memory: what it uses and its budgets.
type Memory struct {
	// RSSBytes is the process's resident set (0: not known).
	RSSBytes int64 `json:"rssBytes"`
	// HeapBytes is the Go heap in objects.
	HeapBytes int64 `json:"heapBytes"`
	// NetworkBufferedBytes is the exchange's network memory in use,
	// NetworkMemoryBytes its budget.
	NetworkBufferedBytes int64 `json:"networkBufferedBytes"`
	NetworkMemoryBytes   int64 `json:"networkMemoryBytes"`
	// StateCacheBytes is the configured memory of the keyed-state caches
	// (0: the backends' defaults).
	StateCacheBytes int64 `json:"stateCacheBytes"`
}

// Overview is the cluster at a glance. Slots count live taskmanagers only.
type Overview struct {
	TaskManagers     int            `json:"taskmanagers"`
	TaskManagersLive int            `json:"taskmanagersLive"`
	SlotsTotal       int            `json:"slotsTotal"`
	SlotsFree        int            `json:"slotsFree"`
	Jobs             map[string]int `json:"jobs"` // by state, every state present
	StaleReports     int64          `json:"staleReports"`
	StaleAcks        int64          `json:"staleCheckpointAcks"`
}

// Checkpoint is one checkpoint of a job's recent history.
type Checkpoint struct {
	ID     int64  `json:"id"`
	Status string `json:"status"` // IN_PROGRESS, COMPLETED, FAILED
	// Manual: triggered on request, not by the interval.
	Manual        bool  `json:"manual"`
	TriggerTimeMs int64 `json:"triggerTimeMs"`
	// DurationMs is the time to completion or failure; while in progress
	// the time since the trigger.
	DurationMs    int64  `json:"durationMs"`
	SizeBytes     int64  `json:"sizeBytes"`
	SlowestTask   string `json:"slowestTask,omitempty"`
	SlowestTaskMs int64  `json:"slowestTaskMs"`
	// The largest synchronous, asynchronous and alignment durations any
	// task reported.
	MaxSyncMs      int64  `json:"maxSyncMs"`
	MaxAsyncMs     int64  `json:"maxAsyncMs"`
	MaxAlignmentMs int64  `json:"maxAlignmentMs"`
	Acknowledged   int32  `json:"acknowledged"`
	TotalTasks     int32  `json:"totalTasks"`
	Failure        string `json:"failure,omitempty"`
	// StorageRequests are the requests made to checkpoint storage for
	// it: the acknowledged subtasks' uploads and the manifest's write.
	StorageRequests StorageRequests `json:"storageRequests"`
}

// StorageRequests counts requests to checkpoint storage by the kind an
// object store bills for.
type StorageRequests struct {
	Put    int64 `json:"put"`
	Get    int64 `json:"get"`
	List   int64 `json:"list"`
	Delete int64 `json:"delete"`
}

// StorageCost is a job's checkpoint storage requests and what they cost.
type StorageCost struct {
	// Requests are all the job's requests to its checkpoint storage that
	// this jobmanager has seen: the tasks' uploads and the jobmanager's
	// manifests, deletions and savepoint copies.
	Requests StorageRequests `json:"requests"`
	// PerCheckpoint is the mean of the completed checkpoints in the
	// history, and CheckpointsPerMonth how many the current interval
	// makes in 30 days.
	PerCheckpoint       StorageRequestRates `json:"perCheckpoint"`
	CheckpointsPerMonth float64             `json:"checkpointsPerMonth"`
	// EstimatedMonthlyCost is PerCheckpoint × CheckpointsPerMonth at
	// Prices (per 1,000 requests, in Currency).
	EstimatedMonthlyCost float64       `json:"estimatedMonthlyCost"`
	Currency             string        `json:"currency"`
	Prices               StoragePrices `json:"pricesPer1000"`
}

// StorageRequestRates are mean request counts.
type StorageRequestRates struct {
	Put    float64 `json:"put"`
	Get    float64 `json:"get"`
	List   float64 `json:"list"`
	Delete float64 `json:"delete"`
}

// StoragePrices are prices per 1,000 requests of each kind.
type StoragePrices struct {
	Put    float64 `json:"put"`
	Get    float64 `json:"get"`
	List   float64 `json:"list"`
	Delete float64 `json:"delete"`
}

// CheckpointConfig is a job's checkpoint settings with the defaults
// filled in.
type CheckpointConfig struct {
	IntervalMs        int64  `json:"intervalMs"`
	TimeoutMs         int64  `json:"timeoutMs"`
	MinPauseMs        int64  `json:"minPauseMs"`
	MaxConcurrent     int    `json:"maxConcurrent"`
	Mode              string `json:"mode"` // exactly_once or at_least_once
	TolerableFailures int    `json:"tolerableFailures"`
	Retained          int    `json:"retained"`
	Retention         string `json:"retention"` // on cancel: delete or retain
	Storage           string `json:"storage"`
	OnCorruption      string `json:"onCorruption"` // fail or fallback
	// Unaligned: checkpoints (not savepoints) are unaligned.
	Unaligned bool `json:"unaligned"`
	// CurrentIntervalMs is the interval in force now: IntervalMs, or with
	// interval: adaptive (where IntervalMs is the starting interval) the
	// one the coordinator chose last.
	CurrentIntervalMs int64 `json:"currentIntervalMs"`
}

// Checkpoints is a job's checkpoint counts, recent history (newest
// first) and settings.
type Checkpoints struct {
	Checkpoints  []Checkpoint `json:"checkpoints"`
	Completed    int64        `json:"completed"`
	Failed       int64        `json:"failed"`
	InProgress   int64        `json:"inProgress"`
	RestoredFrom int64        `json:"restoredFrom"`
	// Latest is the newest completed checkpoint (0: none); Retained the
	// completed checkpoints kept in storage.
	Latest   int64            `json:"latest"`
	Retained []int64          `json:"retained"`
	Config   CheckpointConfig `json:"config"`
	// Summary sums up the completed checkpoints among Checkpoints.
	Summary CheckpointSummary `json:"summary"`
	// Storage is what the job's checkpoints cost in storage requests.
	Storage StorageCost `json:"storage"`
}

// SavepointRequest is the progress or outcome of a savepoint, or of a stop
// with one, requested over HTTP.
type SavepointRequest struct {
	ID           string `json:"requestId"`
	JobID        string `json:"jobId"`
	Stop         bool   `json:"stop"`
	Drain        bool   `json:"drain,omitempty"`
	Status       string `json:"status"` // IN_PROGRESS, COMPLETED or FAILED
	Location     string `json:"location,omitempty"`
	CheckpointID int64  `json:"checkpointId,omitempty"`
	SizeBytes    int64  `json:"sizeBytes,omitempty"`
	Error        string `json:"error,omitempty"`
	// Copying: the checkpoint completed and its objects are being copied
	// (IN_PROGRESS); BytesCopied of BytesTotal are.
	Copying     bool  `json:"copying,omitempty"`
	BytesCopied int64 `json:"bytesCopied"`
	BytesTotal  int64 `json:"bytesTotal"`
}

// Dist sums up a set of values (milliseconds or bytes, as its field
// says): smallest, mean, largest, and the 50th and 99th percentiles
// (nearest rank). All are 0 when Count is.
type Dist struct {
	Count int   `json:"count"`
	Min   int64 `json:"min"`
	Avg   int64 `json:"avg"`
	Max   int64 `json:"max"`
	P50   int64 `json:"p50"`
	P99   int64 `json:"p99"`
}

// CheckpointSummary sums up the completed checkpoints of a job's recent
// history (the jobmanager keeps the last 50 checkpoints of a job). The
// phases of one checkpoint count with the slowest subtask's value.
type CheckpointSummary struct {
	EndToEndMs        Dist `json:"endToEndMs"`
	SizeBytes         Dist `json:"sizeBytes"`
	ChannelStateBytes Dist `json:"channelStateBytes"`
	StartDelayMs      Dist `json:"startDelayMs"`
	AlignmentMs       Dist `json:"alignmentMs"`
	SyncMs            Dist `json:"syncMs"`
	AsyncMs           Dist `json:"asyncMs"`
}

// SubtaskCheckpointStats is one subtask's part of a checkpoint. Times
// are measured from the checkpoint's trigger; a subtask that has not
// acknowledged has only Subtask.
type SubtaskCheckpointStats struct {
	Subtask      int   `json:"subtask"`
	Acknowledged bool  `json:"acknowledged"`
	AckTimeMs    int64 `json:"ackTimeMs"`
	EndToEndMs   int64 `json:"endToEndMs"`
	// StartDelayMs is from the trigger to the subtask's first barrier.
	StartDelayMs      int64 `json:"startDelayMs"`
	AlignmentMs       int64 `json:"alignmentMs"`
	SyncMs            int64 `json:"syncMs"`
	AsyncMs           int64 `json:"asyncMs"`
	StateBytes        int64 `json:"stateBytes"`
	ChannelStateBytes int64 `json:"channelStateBytes"`
	// StorageRequests are the requests its upload made.
	StorageRequests StorageRequests `json:"storageRequests"`
}

// TaskCheckpointStats is one task's (an operator chain's) part of a
// checkpoint: its subtasks, and the spread of their values.
type TaskCheckpointStats struct {
	// TaskID is the vertex id of the chain's head; Operators are the
	// chain's operator uids, head first.
	TaskID            int                      `json:"taskId"`
	Name              string                   `json:"name"`
	Operators         []string                 `json:"operators"`
	Parallelism       int                      `json:"parallelism"`
	Acknowledged      int                      `json:"acknowledged"`
	EndToEndMs        Dist                     `json:"endToEndMs"`
	StartDelayMs      Dist                     `json:"startDelayMs"`
	AlignmentMs       Dist                     `json:"alignmentMs"`
	SyncMs            Dist                     `json:"syncMs"`
	AsyncMs           Dist                     `json:"asyncMs"`
	StateBytes        Dist                     `json:"stateBytes"`
	ChannelStateBytes Dist                     `json:"channelStateBytes"`
	Subtasks          []SubtaskCheckpointStats `json:"subtasks"`
}

// CheckpointStats is one checkpoint of a job's recent history with every
// task's and subtask's measurements.
type CheckpointStats struct {
	Checkpoint
	ChannelStateBytes int64                 `json:"channelStateBytes"`
	Tasks             []TaskCheckpointStats `json:"tasks"`
}

// Phase is one step of a checkpoint's critical path.
type Phase struct {
	// Name: start_delay, alignment, sync, async or ack (from the end of
	// the upload until the jobmanager had the acknowledgement).
	Name string `json:"name"`
	Ms   int64  `json:"ms"`
}

// CheckpointExplain says what made a checkpoint take as long as it did:
// the path of its slowest subtask, from the trigger to its
// acknowledgement, and the likely cause.
type CheckpointExplain struct {
	ID         int64  `json:"id"`
	Status     string `json:"status"`
	EndToEndMs int64  `json:"endToEndMs"`
	// SlowestTask acknowledged last (or has not yet); SlowestSubtask is
	// its subtask.
	SlowestTaskID  int    `json:"slowestTaskId"`
	SlowestTask    string `json:"slowestTask"`
	SlowestSubtask int    `json:"slowestSubtask"`
	// Path is the slowest subtask's phases, in order; their sum is its
	// end-to-end time.
	Path []Phase `json:"path"`
	// Dominant is the name of the longest phase.
	Dominant string `json:"dominant"`
	// DelayedTask is the task whose barrier came latest or waited longest
	// to align (start delay plus alignment), and SlowestInput its input
	// edge ("upstream → task"), when it has one.
	DelayedTask          string  `json:"delayedTask,omitempty"`
	DelayedSubtask       int     `json:"delayedSubtask"`
	DelayedMs            int64   `json:"delayedMs"`
	SlowestInput         string  `json:"slowestInput,omitempty"`
	UpstreamBackpressure float64 `json:"upstreamBackpressure"`
	ChannelStateBytes    int64   `json:"channelStateBytes"`
	// StorageRequests are the requests made to checkpoint storage for the
	// checkpoint, and EstimatedMonthlyCost what they cost a month at the
	// current interval and the configured prices (0: unknown).
	StorageRequests      StorageRequests `json:"storageRequests"`
	EstimatedMonthlyCost float64         `json:"estimatedMonthlyCost"`
	// Cause: backpressure, slow_upload, slow_snapshot, slow_ack or
	// none (nothing stands out, or nothing acknowledged yet).
	Cause string `json:"cause"`
	// Explanation says the same in sentences.
	Explanation []string `json:"explanation"`
}

// Exception is one failure of a job (the jobmanager keeps a job's last 32).
type Exception struct {
	TimeMs int64 `json:"timeMs"`
	// Cause is the error as the task or the jobmanager reported it.
	Cause string `json:"cause"`
	// Task, VertexID, Subtask, Attempt (with Deployment and LeaderTerm,
	// see Job) and TaskManagerID name the execution that failed; Task is
	// absent for a failure of the job as a whole.
	Task          string `json:"task,omitempty"`
	VertexID      int    `json:"vertexId"`
	Subtask       int    `json:"subtask"`
	Attempt       int64  `json:"attempt"`
	Deployment    int64  `json:"deployment"`
	LeaderTerm    int64  `json:"leaderTerm"`
	TaskManagerID string `json:"taskmanagerId,omitempty"`
	// Scope is what the failure made the job do: region (the failed
	// regions restarted), global (the whole job restarted) or job_failed.
	Scope string `json:"scope"`
	// Regions are the restarted regions (1-based) of a region failure.
	Regions []int `json:"regions"`
	// Concurrent are failures of other subtasks reported while this one
	// was being handled (often its consequences; sometimes its cause,
	// reported later than it happened): at most 8, concurrentDropped
	// counts the rest.
	Concurrent        []ConcurrentFailure `json:"concurrent"`
	ConcurrentDropped int                 `json:"concurrentDropped,omitempty"`
}

// ConcurrentFailure is a failure that joined another's handling.
type ConcurrentFailure struct {
	TimeMs        int64  `json:"timeMs"`
	Task          string `json:"task"`
	VertexID      int    `json:"vertexId"`
	Subtask       int    `json:"subtask"`
	Attempt       int64  `json:"attempt"`
	Deployment    int64  `json:"deployment"`
	TaskManagerID string `json:"taskmanagerId,omitempty"`
	Cause         string `json:"cause"`
}
