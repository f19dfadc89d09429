// Package jobmanager is Weir's cluster master. It owns cluster membership
// (taskmanagers register, heartbeat and are declared lost), scheduling
// (a JobGraph is expanded into chained tasks and their subtasks are placed
// into shared slots), job and task state tracking, the gRPC services that
// taskmanagers (ClusterService) and clients (JobService) call, and a
// read-only JSON REST API for people and dashboards.
//
// The package is split into a pure core and a thin shell:
//
//   - executiongraph.go: operator chaining and slot placement, pure
//     functions of a planned stream.JobGraph.
//   - deployment.go: the TaskDeployment descriptor a taskmanager receives,
//     a pure function of a task, a subtask and the slot placement.
//   - core.go: the job and taskmanager state machine. It has no goroutines,
//     no clock (callers pass now) and no I/O: each event (register,
//     heartbeat, task report, submit, cancel, tick) returns the actions
//     (deploy, cancel) the shell must carry out, in the shape of etcd-raft's
//     Step/Ready.
//   - jobmanager.go, grpc.go, rest.go, taskexecutor.go: the shell. It owns
//     the listeners, the tick loop, the gRPC client connections to
//     taskmanagers and the goroutines that perform the core's actions.
//
// jobmanager imports stream and proto/weirpb (in the gRPC and REST adapters
// and the deployment builder) plus gRPC and the standard library. It never
// imports taskmanager.
package jobmanager
