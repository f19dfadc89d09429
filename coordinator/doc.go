// Package coordinator owns the checkpoint coordinator of one job: a
// deterministic state machine, in the shape of etcd-raft's Step/Ready, that
// decides when checkpoints are triggered, completed, aborted, subsumed and
// discarded, and when too many failures must fail the job over.
//
// It has no goroutines, clock, I/O or randomness. The jobmanager (the shell)
// feeds it events — Tick, TriggerNow, Ack, Decline, TaskFinished,
// ManifestWritten, Stop, Reset — each with the current time, then calls Ready
// and carries out the returned actions in order. It imports the standard
// library and package stream (for the configuration) only.
//
// # Contract (Flink's semantics)
//
//   - Triggering. Tick triggers a checkpoint when Interval has passed since
//     the previous trigger (periodic or manual; the first is due Interval
//     after New or Reset), fewer than MaxConcurrent checkpoints are pending,
//     and — when MinPause is positive — none is pending and MinPause has
//     passed since the previous checkpoint ended (completed or aborted).
//     TriggerNow ignores Interval and MinPause but not MaxConcurrent. A
//     trigger emits TriggerAction to the running source tasks; the
//     checkpoint then waits for an acknowledgement from every task that was
//     running at trigger time. Ids start at New's firstID and strictly
//     increase, also across Reset.
//   - Completion. When every required task has acknowledged (or finished),
//     the coordinator emits WriteManifestAction with the acks' opaque
//     payloads. Manifests are written one at a time, in increasing id order,
//     so the completed pointer never moves back. Only ManifestWritten(nil)
//     completes the checkpoint: NotifyCompleteAction, then AbortAction with
//     reason "subsumed" for every pending checkpoint with a lower id, then
//     DiscardAction for the completed checkpoints beyond Retained (never the
//     latest). A completion clears the consecutive-failure count.
//   - Failure. A decline, a timeout (the checkpoint is still collecting
//     acknowledgements Timeout after its trigger) or a failed manifest write
//     aborts the checkpoint (AbortAction) and counts as a failure. When the
//     consecutive failures exceed TolerableFailures the coordinator emits
//     FailJobAction and stops as if by Stop. Once every task has
//     acknowledged, a checkpoint no longer times out: the shell must always
//     answer a WriteManifestAction with ManifestWritten, bounding the write
//     itself.
//   - Noise. Acknowledgements and declines for unknown, aborted or completed
//     checkpoints, from tasks a checkpoint does not wait for, and duplicates
//     are ignored and counted (Ignored); so are ManifestWritten calls for a
//     checkpoint whose manifest is not being written.
//   - Finished tasks. TaskFinished removes a task from future triggers and
//     from the tasks pending checkpoints wait for (an acknowledgement it
//     already sent is kept). WriteManifestAction.Finished lists such tasks;
//     a checkpoint all of whose tasks finished without acknowledging is
//     aborted without counting as a failure.
//   - Stop and Reset. Stop (the job is failing, restarting or cancelled)
//     aborts every pending checkpoint with the given reason, counts no
//     failure, emits no FailJobAction and stops triggering. Reset (after a
//     restart) takes the new task executions, clears the consecutive-failure
//     count and resumes triggering; completed checkpoints and history stay.
//     Stop also aborts a checkpoint whose manifest is being written; the
//     shell should therefore perform WriteManifestAction synchronously on the
//     goroutine that drives the coordinator (it is one small object and a
//     pointer), so no write is in flight when it calls Stop.
//
// Every pending checkpoint ends in exactly one NotifyCompleteAction or
// AbortAction. Counts and History report the outcomes; Latest gives the
// latest completed checkpoint's payloads for restore.
package coordinator
