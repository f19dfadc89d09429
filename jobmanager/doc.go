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
//     a Step/Ready state machine. Restart decisions come from a
//     failover.Strategy.
//   - jobmanager.go, grpc.go, rest.go, taskexecutor.go, metrics.go,
//     wiring.go: the shell. It owns the listeners, the tick loop, the gRPC
//     client connections to taskmanagers, each job's checkpoint storage
//     and the goroutines that perform the core's actions (all I/O,
//     including manifest writes, happens there, off the core's lock).
//
// # Contract
//
// The core owns every decision: which taskmanager runs which execution
// (task × subtask) and in which attempt, when a job or one of its failover
// regions restarts and from which checkpoint, and when a checkpoint is
// triggered, completed or deleted. It never blocks and never does I/O; the
// shell carries out its actions, in the order given, and feeds every
// outcome back as an event. Messages of an older attempt, of an unknown
// execution or from a replaced taskmanager registration never change
// state (fencing). A checkpoint is complete only once its manifest and the
// completed pointer are written, and a restart restores only a complete
// one. A new attempt of an execution is deployed only once its earlier
// attempt is confirmed stopped, its taskmanager is gone, or the heartbeat
// timeout passed (the taskmanager then starts it only after the earlier
// one ended).
//
// What this means for users — scheduling and slot sharing, job states,
// failover regions, taskmanager loss, fencing, checkpoints, metrics and the
// REST API — is described in docs/jobmanager.md.
//
// jobmanager imports stream, coordinator, failover, checkpoint (and
// blobstore for its ErrNotFound), ha, proto/weirpb (in the gRPC and REST
// adapters, the deployment and manifest builders, and as the opaque
// manifest the core keeps for restore), internal/errkind, gRPC, the
// Prometheus client and the standard library. It never imports taskmanager.
package jobmanager
