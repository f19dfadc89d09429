// Package coordinator owns the checkpoint coordinator of one job: a
// deterministic state machine, in the shape of etcd-raft's Step/Ready, that
// decides when checkpoints are triggered, completed, aborted, subsumed and
// discarded, and when too many failures must fail the job over.
//
// It has no goroutines, clock, I/O or randomness. The jobmanager (the shell)
// feeds it events — Tick, TriggerNow, Ack, Decline, TaskFinished,
// ManifestWritten, Stop, Reset — each with the current time, then calls Ready
// and carries out the returned actions in order. It imports the standard
// library and package stream (for the configuration) only. Read-only
// queries (Writing, Latest, Retained, Pending, Counts, AbortCounts, History,
// SubtaskStats) answer what the shell would otherwise have to mirror.
// History keeps the last HistorySize checkpoints, SubtaskStats every
// acknowledgement of those (at most HistorySize × tasks).
//
// # Contract
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
//   - Adaptive interval. With Config.Adaptive the interval Tick uses
//     (Interval) changes after each completed periodic checkpoint, from the
//     sync and alignment durations in its acknowledgements, deterministically
//     (see AdaptiveConfig); manual and failed checkpoints leave it alone.
//   - Completion. When every required task has acknowledged (or finished),
//     the coordinator emits WriteManifestAction with the acks' opaque
//     payloads. Manifests are written one at a time, in increasing id order,
//     so the completed pointer never moves back. Only ManifestWritten(nil)
//     completes the checkpoint: NotifyCompleteAction, then AbortAction with
//     CauseSubsumed for every pending checkpoint with a lower id, then
//     DiscardAction for the completed checkpoints beyond Retained (never the
//     latest). A completion clears the consecutive-failure count.
//   - Manifest writes are asynchronous. The shell performs a
//     WriteManifestAction off the coordinator's goroutine (or lock) and
//     feeds the outcome back as the event ManifestWritten; meanwhile every
//     other event may arrive. Writing names the write in flight. Once every
//     task has acknowledged, a checkpoint no longer times out; once its
//     manifest is being written, nothing but ManifestWritten ends it — not
//     Stop, not Reset, since the write may already have moved the completed
//     pointer. The shell must therefore always answer with ManifestWritten,
//     bounding the write itself.
//   - Failure. Every AbortAction carries an AbortCause and a text for
//     people. A decline (CauseDeclined), a timeout (CauseExpired: the
//     checkpoint is still collecting acknowledgements Timeout after its
//     trigger) or a failed manifest write (CauseWriteFailed) is a failure
//     (AbortCause.IsFailure) and counts against TolerableFailures; other
//     aborts do not. When the consecutive failures exceed TolerableFailures
//     the coordinator emits FailJobAction and stops, aborting the other
//     pending checkpoints with CauseTooManyFailures.
//   - Noise. Acknowledgements and declines for unknown, aborted or completed
//     checkpoints, from tasks a checkpoint does not wait for, and duplicates
//     are ignored and counted (Ignored); so are ManifestWritten calls for a
//     checkpoint whose manifest is not being written.
//   - Finished tasks. TaskFinished removes a task from future triggers and
//     from the tasks pending checkpoints wait for (an acknowledgement it
//     already sent is kept). WriteManifestAction.Finished lists such tasks;
//     a checkpoint all of whose tasks finished without acknowledging is
//     aborted (CauseTasksFinished) without counting as a failure.
//   - Stop and Reset. Stop (the job is failing over, restarting or ending)
//     aborts every pending checkpoint but the one being written with the
//     given cause (CauseFailover or CauseJobEnded) and reason, counts no
//     failure, emits no FailJobAction and stops triggering. Reset (after a
//     restart) aborts what Stop would have (CauseFailover), takes the new
//     task executions, clears the consecutive-failure count and resumes
//     triggering; completed checkpoints and history stay. A write in flight
//     at Stop or Reset still completes or fails when ManifestWritten
//     reports, without counting a failure.
//   - Corrupt checkpoints. DropCompleted forgets a completed checkpoint
//     that must never be restored: the next older one becomes the latest,
//     retention no longer counts it, and no DiscardAction names it (its
//     files stay). Later checkpoints keep their increasing ids.
//
// Every pending checkpoint ends in exactly one NotifyCompleteAction or
// AbortAction. Counts, AbortCounts and History report the outcomes; Latest
// gives the latest completed checkpoint's payloads for restore (LatestID
// its id alone, without copying them), and AdoptCompleted hands a new
// coordinator the one an earlier one completed.
//
// # Cost
//
// An event costs O(pending checkpoints) apart from what it must touch: an
// acknowledgement or decline O(1) (no copying, sorting or rebuilding per
// acknowledgement, nor allocation: a trigger sizes everything for its
// tasks), a trigger and a completion O(tasks). Tasks are numbered once per
// New or Reset (a table indexed by vertex and subtask, no hashing), and a
// pending checkpoint keeps its acknowledgements in slices indexed by that
// number; WriteManifestAction hands them over in task order, and the
// completed checkpoint keeps that same slice. The acknowledgements of the
// checkpoints in History are kept without pointers, so that the garbage
// collector need not scan them. Nothing is logged here; the shell logs per
// checkpoint.
package coordinator
