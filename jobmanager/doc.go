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
//   - region.go: the pipelined failover regions of a job, a pure function
//     of its graph and tasks, and a region's restart state.
//   - deployment.go: the TaskDeployment descriptor a taskmanager receives,
//     a pure function of a task, a subtask and the slot placement.
//   - manifest.go: the checkpoint manifest built from the tasks'
//     acknowledgements, and the state handles each task restores.
//   - core.go, coremembership.go, corecheckpoint.go: the job and
//     taskmanager state machine,
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
// calls returned. A job stays RUNNING (or SCHEDULED) while some of its
// failover regions restart; it is RUNNING with no restarting region when
// all of it processes records.
//
// # Failover regions
//
// A job's executions (task × subtask) fall into pipelined regions, the
// connected components of its data channels: a forward edge between two
// tasks links subtask i of one with subtask i of the other, a hash
// (keyBy), rebalance or broadcast edge links every subtask of one with
// every subtask of the other. Regions share no data, so one can be
// restarted and rewound to a checkpoint while the others run on. Which
// graphs get region failover:
//
//   - Parallel forward-only pipelines: one region per subtask index. A
//     chain (source -> map -> sink of equal parallelism) is one task, and
//     each of its subtasks is a region; so is subtask i of a fan-out
//     (one source feeding several forward consumers) or of a forward
//     fan-in, together with the subtasks i it is connected to.
//   - Independent parts of one graph (say two unconnected pipelines) are
//     separate regions, whatever their edges.
//   - Anything connected by a keyBy, rebalance or broadcast edge, or by a
//     forward edge between operators of different parallelism (which is
//     planned as rebalance), is one region: a typical keyed job restarts as
//     a whole.
//
// The REST job view gives the number of regions ("regions").
//
// A failure — a task reported FAILED (or CANCELED by itself), a deploy
// failed, its taskmanager was lost or re-registered — fails the regions of
// the failed executions; a failure of the whole job (too many consecutive
// checkpoints failed, or slots ran out during a whole-job restart) fails
// every region. One failure asks the job's restart strategy once (the
// job's, else Config.DefaultRestart, else Flink's rule: exponential-delay
// with checkpointing, none without), however many regions it hits: a lost
// taskmanager whose tasks were in three regions is one failure. Failures of
// different regions all count against the job's one strategy. If it gives
// up, every task is cancelled and the job ends FAILED with the cause and
// "; restart strategy <name> gave up". Otherwise:
//
//   - When the failed regions and the regions already down cover the whole
//     job (always for a job of one region), the job restarts as a whole:
//     it is RESTARTING, every task is cancelled, and once they all stopped
//     (confirmed, taskmanager gone, or HeartbeatTimeout passed) and the
//     strategy's delay passed, the slots are placed anew and every task is
//     deployed with one attempt number, one more than the job's highest,
//     restoring the latest completed checkpoint (or fresh without one).
//     RESTARTING has no protobuf value: gRPC shows it as FAILING with the
//     error "restarting (attempt N) in Xs after: <cause>"; REST shows
//     "RESTARTING". Cancelling a RESTARTING job ends it CANCELED.
//   - Otherwise only the failed regions restart, and the job keeps its
//     state: each region's other executions are cancelled; once they all
//     stopped (bounded by HeartbeatTimeout) and the delay passed, its
//     executions are deployed again, each with the region's next attempt
//     (one more than the region's highest), restoring from the latest
//     completed checkpoint the state handles of their own subtasks. Its
//     shared slots whose taskmanager is gone are placed anew (the others
//     stay); when too few slots are free the region waits up to the job's
//     slot wait (SlotWaitTimeout, or the request's slot_wait_ms) and is
//     deployed as soon as a taskmanager registers; a wait that times out is
//     another failure. The executions of the other regions are not
//     touched. REST lists the region under "restartingRegions" (id, phase
//     CANCELING, WAITING, WAITING_FOR_SLOTS or DEPLOYING, attempt, cause,
//     due time, tasks) and the error field of REST and gRPC says "region K
//     of N (T tasks) restarting (attempt A) in Xs after: <cause>"; the
//     region's restart ends when all its executions run again.
//
// Slots are freed when a job ends.
//
// # Taskmanager loss
//
// Taskmanagers heartbeat every HeartbeatInterval (default 1s; they are
// told at registration) and are declared lost after HeartbeatTimeout of
// silence (default 10s); a lost taskmanager's heartbeats are answered with
// "re-register". Its executions are taken as failed, which fails their
// regions as above; the other executions keep running. A taskmanager that
// registers again with the same id (restarted, at the same or a new
// address, or resumed after a pause) replaces its old registration: the
// executions of the old one fail likewise, and the new one offers all its
// slots. Later deployments use its new address; the channels of the
// regions that did not restart never pointed at it, since regions exchange
// no data.
//
// Every taskmanager process registers with a random instance id, new at
// each start; heartbeats and deployments carry it, so a process restarted
// at the same address is never mistaken for the old one (a deployment
// meant for the old one is refused as Unavailable), and a replaced process
// cannot register under the id again (AlreadyExists: two processes share
// one id). For every registration the shell opens a fresh connection (the
// old one may sit in gRPC's reconnect backoff from the process that died
// there; the backoff is capped at 1s anyway) and watches it
// (taskexecutor.go): when it leaves READY — the process died, or the
// network broke — the taskmanager is suspected at once and probed (Ping,
// answered with the instance id, within half the heartbeat timeout, 0.5s
// to 3s). A call that fails as Unavailable, and a task failure that names
// the peer whose data stream broke (TaskStatus.broken_peer), suspect the
// same way. A suspected taskmanager gets no new slots (a region whose
// slots are on it waits) until the probe answers (suspicion ends) or
// fails (the taskmanager is lost, as by the heartbeat timeout, which also
// ends a suspicion).
//
// Failed deployments in a row (until every execution of the job runs)
// count as one failure for the restart strategy: the first asks it, each
// later one restarts its region after a backoff of 100ms doubling up to 5s.
//
// # Fencing
//
// Every execution has its own attempt number: 1 at the first deployment,
// one more at each redeployment (of its region or of the whole job); all
// executions of a region share it, and so do the exchange channels between
// them. Task reports, checkpoint acknowledgements and declines, deploy and
// cancel outcomes of another attempt than the execution's current one, of
// unknown executions or from a replaced registration are dropped; reports
// are counted as staleReports, acknowledgements and declines as
// staleCheckpointAcks (REST overview; Prometheus
// weir_stale_messages_total{kind="task_report"|"checkpoint_ack"}), and
// logged at debug. Acknowledgements and declines are also dropped while the
// job is not RUNNING. A live taskmanager that still reports an older
// attempt running is told to cancel it (at most once per HeartbeatTimeout).
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
// background. Manifests are written off the core's lock and the outcome is
// fed back to the coordinator (manifestWritten), which decides: a failure
// while a manifest is being written stops checkpointing at once, but that
// checkpoint ends only with the write, and a restart waits for it — a
// checkpoint whose pointer was written is never deleted and is the one
// restored. The core reads checkpoint state (being written, retained, how
// checkpoints ended, by coordinator.AbortCause) from the coordinator
// rather than keeping copies. A job that ends CANCELED or FINISHED, unless its
// retention is retain, deletes every checkpoint and shared file of its own
// that storage holds — its retained checkpoints, and whatever deletes cut
// short by an outage or a leader change left — retrying while storage
// fails; a FAILED job keeps its retained checkpoints.
//
// A failure of any region stops the coordinator (pending checkpoints are
// aborted, counted as aborted, not failed); no checkpoint is triggered
// until every region runs again, when the coordinator is reset with every
// execution's current attempt. A region restored from checkpoint n is
// rewound to it while the others go on: that is consistent because regions
// share no data.
//
// On restore, an execution's deployment lists, for each operator of its
// chain, the handles the same subtask wrote when the operator's
// parallelism is unchanged, and every handle of the operator otherwise (the
// taskmanager's loader keeps its key groups and redistributes list state).
// An execution the checkpoint records as finished is deployed as finished;
// later manifests record it as finished too.
//
// # Metrics
//
// Prometheus metrics, read from the core at scrape time: per job (label
// job) weir_checkpoints_in_progress, weir_checkpoints_completed_total,
// weir_checkpoints_failed_total (declined, expired, manifest write failed),
// weir_checkpoints_aborted_total (subsumed, stopped by a failover, cancel
// or the job's end, or all their tasks finished first), weir_checkpoint_last_duration_seconds,
// weir_checkpoint_last_size_bytes, weir_checkpoint_alignment_seconds
// (labels job, task), weir_job_restarts_total (redeployments of the job
// or of one of its regions) and weir_job_restarting_regions; plus
// weir_taskmanagers_live, weir_jobs{state} and
// weir_stale_messages_total{kind}.
//
// # REST
//
// GET /healthz, /v1/overview, /v1/jobs, /v1/jobs/{id},
// /v1/jobs/{id}/checkpoints (recent checkpoints, newest first, with
// counts and the checkpoint restored from), /v1/jobs/{id}/checkpoints/{cid}
// (the manifest as protojson), /v1/taskmanagers (with "suspected" and the
// reason a taskmanager is suspected or lost) and /metrics (Prometheus text
// format, with the Go runtime's and the process's metrics); and one endpoint that changes something: POST
// /v1/jobs/{id}/checkpoints triggers a checkpoint at once (202 with
// {"checkpointId": n}; 409 when the job takes no checkpoints, is not
// running, or another checkpoint is in progress). JSON has lowerCamel
// fields, times in Unix milliseconds, errors as {"error": "..."} with 404
// for unknown ids and paths.
//
// jobmanager imports stream, coordinator, failover, checkpoint (and
// blobstore for its ErrNotFound), ha, proto/weirpb (in the gRPC and REST
// adapters, the deployment and manifest builders, and as the opaque
// manifest the core keeps for restore), gRPC, the Prometheus client and the
// standard library. It never imports taskmanager.
package jobmanager
