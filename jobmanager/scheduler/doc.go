// Package scheduler is the jobmanager's state machine: taskmanager
// membership, slot assignment, job and execution states, restarts of whole
// jobs and of pipelined failover regions, and the orchestration of each
// job's checkpoint coordinator.
//
// It is pure. A Scheduler has no goroutines, no clock (every event carries
// now), draws no random numbers (a restart strategy's jitter is its own),
// does no I/O and does not log. Each event — Register, Heartbeat, Report,
// Suspect, Probed, Submit, Cancel, Tick, DeployDone, CancelDone, Ack,
// Decline, TriggerFailed, ManifestWritten, SourceInputEnded — returns the
// actions the caller must carry out (DeployAction, CancelAction,
// TriggerAction, NotifyAction, WriteManifestAction,
// DeleteCheckpointsAction, ProbeAction), in order, feeding every outcome
// back as another event. What is worth logging is kept until Logs.
// What the APIs show is read with queries (Job, Jobs, Checkpoints,
// CheckpointSubtasks, Exceptions, TaskManagers): among them each job's
// last MaxExceptions failures and each execution's records rates and
// backpressure, measured between its reports (rates.go).
//
// Its types are its own: a checkpoint is the Checkpoint interface (the
// shell wraps its manifest), acknowledgement payloads are opaque, and the
// job and task states mirror the protocol's enums value for value without
// importing them.
//
// It is not safe for concurrent use; the jobmanager calls it under one
// mutex. The scenario files in testdata/ drive it event by event and list
// every action it returns (see scenario_test.go).
//
// scheduler imports stream, coordinator and the standard library.
package scheduler
