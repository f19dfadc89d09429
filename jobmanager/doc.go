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
// FINISHED, or → CANCELING → CANCELED, or → FAILING → FAILED. A job is
// RUNNING once every one of its subtasks has reported RUNNING (or already
// FINISHED), not merely when the deploy calls returned: RUNNING means all
// of it processes records. A failed task (reported, failed to deploy, or on
// a taskmanager that was lost or re-registered) fails the job: the other
// tasks are cancelled and the job is FAILED once they all confirmed, their
// taskmanager is gone, or HeartbeatTimeout passed; its error is the first
// failure, "task window -> sink (2/4) on taskmanager tm-1 failed: …". What
// happens on a task failure is decided by one failurePolicy function, where
// restart strategies plug in. Slots are freed when a job ends.
//
// Every task report carries an execution attempt; reports of another
// attempt, of unknown executions or from a replaced registration are
// ignored and counted (overview's staleReports).
//
// # REST
//
// GET /healthz, /v1/overview, /v1/jobs, /v1/jobs/{id}, /v1/taskmanagers:
// read-only JSON with lowerCamel fields, times in Unix milliseconds, errors
// as {"error": "..."} with 404 for unknown ids and paths.
//
// jobmanager imports stream and proto/weirpb (in the gRPC and REST adapters
// and the deployment builder) plus gRPC and the standard library. It never
// imports taskmanager.
package jobmanager
