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
	Error       string `json:"error,omitempty"`
	Attempt     int64  `json:"attempt"`
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
	Cause          string   `json:"cause"`
	RestartDueMs   int64    `json:"restartDueMs"`
	SlotDeadlineMs int64    `json:"slotDeadlineMs,omitempty"`
	Tasks          []string `json:"tasks"`
}

// Task is one execution of a subtask of a job.
type Task struct {
	VertexID      int    `json:"vertexId"`
	Subtask       int    `json:"subtask"`
	Attempt       int64  `json:"attempt"`
	Name          string `json:"name"`
	State         string `json:"state"`
	TaskManagerID string `json:"taskmanagerId,omitempty"`
	Error         string `json:"error,omitempty"`
	RecordsIn     int64  `json:"recordsIn"`
	RecordsOut    int64  `json:"recordsOut"`
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
