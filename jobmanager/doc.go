// Package jobmanager is Weir's cluster master. It owns cluster membership
// (taskmanagers register, heartbeat and are declared lost), scheduling
// (a JobGraph is expanded into chained tasks and their subtasks are placed
// into shared slots), job and task state tracking, restarts after failures,
// driving each job's checkpoint coordinator, the gRPC services that
// taskmanagers (ClusterService) and clients (JobService) call, a JSON REST
// API for people and dashboards, and Prometheus metrics.
//
// The package is split into a pure core and a thin shell:
//
//   - executiongraph.go: operator chaining and slot placement, pure
//     functions of a planned stream.JobGraph.
//   - deployment.go: the TaskDeployment descriptor a taskmanager receives,
//     a pure function of a task, a subtask and the slot placement.
//   - manifest.go: the checkpoint manifest built from the tasks'
//     acknowledgements, and the state handles each task restores.
//   - core.go, corecheckpoint.go: the job and taskmanager state machine,
//     including restarts and one coordinator.Coordinator (itself pure) per
//     job that takes checkpoints. It has no goroutines, no clock (callers
//     pass now) and no I/O: each event (register, heartbeat, task report,
//     submit, cancel, tick, checkpoint ack/decline, manifest written)
//     returns the actions (deploy, cancel, trigger, notify, write manifest,
//     delete checkpoints) the shell must carry out, in the shape of
//     etcd-raft's Step/Ready. Restart decisions come from a
//     failover.Strategy.
//   - jobmanager.go, grpc.go, rest.go, taskexecutor.go, metrics.go,
//     wiring.go: the shell. It owns the listeners, the tick loop, the gRPC
//     client connections to taskmanagers, each job's checkpoint storage
//     and the goroutines that perform the core's actions (all I/O,
//     including manifest writes, happens there, off the core's lock).
//
// # Scheduling
//
// Operators are chained like Flink: B joins A's task when the edge A→B is
// forward, both have the same parallelism, A has no other output and B no
// other input. A task is named by its head vertex. Like Flink's default slot
// sharing group, a job needs max(task parallelism) slots and subtask i of
// every task runs in shared slot i; slots are spread round-robin over the
// live taskmanagers, most free slots first. A job that does not fit waits
// (SCHEDULED) until a taskmanager registers or another job frees slots, up
// to SlotWaitTimeout (or the request's slot_wait_ms), then FAILS.
//
// # States
//
// Jobs: CREATED → SCHEDULED (waiting for slots, or deploying) → RUNNING →
// FINISHED, or → CANCELING → CANCELED, or → RESTARTING → SCHEDULED → …,
// or → FAILING → FAILED. A job is RUNNING once every one of its subtasks
// has reported RUNNING (or already FINISHED), not merely when the deploy
// calls returned: RUNNING means all of it processes records.
//
// A failure — a task reported FAILED (or CANCELED by itself), a deploy
// failed, its taskmanager was lost or re-registered, a restart found no
// slots within SlotWaitTimeout, or too many consecutive checkpoints failed
// — stops the job's checkpointing and asks its restart strategy (the
// job's, else Config.DefaultRestart, else Flink's rule: exponential-delay
// with checkpointing, none without). If it gives up, the other tasks are
// cancelled and the job ends FAILED with the cause and "; restart strategy
// <name> gave up". Otherwise the job is RESTARTING: its tasks are
// cancelled, and once they all stopped (confirmed, taskmanager gone, or
// HeartbeatTimeout passed) and the strategy's delay passed, the slots are
// placed again and every task is deployed with the next attempt number,
// restoring the latest completed checkpoint (or fresh without one).
// RESTARTING has no protobuf value: gRPC shows it as FAILING with the
// error "restarting (attempt N) in Xs after: <cause>"; REST shows
// "RESTARTING". Cancelling a RESTARTING job ends it CANCELED. Slots are
// freed when a job ends.
//
// Every task report carries an execution attempt; reports of another
// attempt, of unknown executions or from a replaced registration are
// ignored and counted (overview's staleReports), and so are checkpoint
// acknowledgements and declines (staleCheckpointAcks), which are also
// ignored while the job is not RUNNING.
//
// # Checkpoints
//
// A job takes checkpoints when its checkpoint interval is set. Its storage
// (its own URI, else Config.CheckpointStorage) is opened at submission; a
// submission whose storage cannot be opened fails. When the job reaches
// RUNNING its coordinator starts (or is reset after a restart): every
// execution must acknowledge, the executions of source tasks get the
// triggers (TriggerCheckpoint; an undeliverable trigger is a decline).
// Acknowledgements carry the state handles. When all acknowledged, the
// shell writes the manifest (<root>/<job>/chk-<n>/_manifest) and then the
// completed pointer (<root>/<job>/_completed); only then is the checkpoint
// complete and the tasks notified (NotifyCheckpoint, best effort). Aborted
// checkpoints and those beyond the retained count are deleted in the
// background. A failure while a manifest is being written waits for the
// write, so a checkpoint whose pointer was written is never deleted and is
// the one restored. A job that ends CANCELED or FINISHED deletes its
// retained checkpoints unless its retention is retain-on-cancel; a FAILED
// job keeps them.
//
// On restore, a task's deployment lists, for each operator of its chain,
// the handles the same subtask wrote when the operator's parallelism is
// unchanged, and every handle of the operator otherwise (the taskmanager's
// loader keeps its key groups and redistributes list state).
//
// # Metrics
//
// Prometheus metrics, read from the core at scrape time: per job (label
// job) weir_checkpoints_in_progress, weir_checkpoints_completed_total,
// weir_checkpoints_failed_total (declined, expired, manifest write failed),
// weir_checkpoints_aborted_total (subsumed, or stopped by a failover,
// cancel or the job's end), weir_checkpoint_last_duration_seconds,
// weir_checkpoint_last_size_bytes, weir_checkpoint_alignment_seconds
// (labels job, task) and weir_job_restarts_total; plus
// weir_taskmanagers_live and weir_jobs{state}.
//
// # REST
//
// GET /healthz, /v1/overview, /v1/jobs, /v1/jobs/{id},
// /v1/jobs/{id}/checkpoints (recent checkpoints, newest first, with
// counts and the checkpoint restored from), /v1/jobs/{id}/checkpoints/{cid}
// (the manifest as protojson), /v1/taskmanagers and /metrics (Prometheus
// text format); and one endpoint that changes something: POST
// /v1/jobs/{id}/checkpoints triggers a checkpoint at once (202 with
// {"checkpointId": n}; 409 when the job takes no checkpoints, is not
// running, or another checkpoint is in progress). JSON has lowerCamel
// fields, times in Unix milliseconds, errors as {"error": "..."} with 404
// for unknown ids and paths.
//
// jobmanager imports stream, coordinator, failover, checkpoint (and
// blobstore for its ErrNotFound), proto/weirpb (in the gRPC and REST
// adapters, the deployment and manifest builders, and as the opaque
// manifest the core keeps for restore), gRPC, the Prometheus client and the
// standard library. It never imports taskmanager.
package jobmanager
