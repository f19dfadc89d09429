// Package jobmanager is Weir's cluster master. It owns cluster membership
// (taskmanagers register, heartbeat and are declared lost), scheduling
// (a JobGraph is expanded into chained tasks and their subtasks are placed
// into shared slots), job and task state tracking, restarts after failures,
// driving each job's checkpoint coordinator, the gRPC services that
// taskmanagers (ClusterService) and clients (JobService) call, a JSON REST
// API for people and dashboards, and Prometheus metrics.
//
// The package is the shell around jobmanager/scheduler, the pure state
// machine that makes every decision (see its documentation):
//
//   - deployment.go: the TaskDeployment descriptor a taskmanager receives,
//     a pure function of a scheduler.DeployAction.
//   - manifest.go: the checkpoint manifest built from a
//     scheduler.WriteManifestAction, and the state handles each task
//     restores.
//   - jobmanager.go, grpc.go, rest.go, taskexecutor.go, metrics.go, ha.go,
//     gc.go, wiring.go: the shell. It owns the listeners, the tick loop,
//     the gRPC client connections to taskmanagers, each job's checkpoint
//     storage, leadership, and the goroutines that carry out the
//     scheduler's actions (all I/O, including manifest writes, happens
//     there, off the scheduler's lock). It logs what the scheduler noted
//     (Scheduler.Logs) after every event.
//
// # Contract
//
// The scheduler owns every decision: which taskmanager runs which execution
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
// jobmanager imports jobmanager/scheduler, jobmanager/jobstore,
// jobmanager/webui (the web UI's pages, fed from the same read model as
// REST), jobspec (REST submissions are YAML specs), stream, coordinator,
// failover, checkpoint (and blobstore, storeuri), ha, security,
// proto/weirpb, internal/errkind, gRPC, the Prometheus client and the
// standard library.
// It never imports taskmanager.
package jobmanager
