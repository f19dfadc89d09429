// Package twophase is the two-phase-commit sink framework: it turns a sink
// that can write into transactions of an external system (a Kafka
// transactional producer, a PostgreSQL prepared transaction, a file renamed
// into place) into an exactly-once sink of a checkpointed job.
//
// A sink implements System, the part that talks to the external system.
// NewOperator wraps it in a stream.Operator that drives the protocol:
//
//   - Rows go into the current transaction, begun lazily on the first row
//     after a checkpoint (System.Begin), named by a TxnID that carries the
//     job, operator uid, subtask, execution attempt and the checkpoint the
//     transaction is expected to end in.
//   - At a checkpoint barrier the operator pre-commits the current
//     transaction (Txn.PreCommit): everything written becomes durable in
//     the external system without being visible, and the handle returned
//     (what is needed to commit it later from another process) goes into
//     the checkpoint as operator list state.
//   - When the checkpoint completes (stream.CheckpointListener) every
//     transaction pre-committed at or before it is committed
//     (System.Commit), oldest first. A commit that fails fails the task;
//     the restore that follows commits it again, so commits must be
//     idempotent and accept "already committed".
//   - An aborted checkpoint changes nothing: its transactions stay
//     pre-committed and are committed with the next checkpoint that
//     completes.
//   - On restore, every transaction pre-committed in the restored
//     checkpoint is committed (whichever subtask wrote it, at whatever
//     parallelism: operator list state gives each to exactly one subtask),
//     and then System.Recover aborts everything else this subtask's
//     predecessors may have left open or prepared: transactions begun after
//     that checkpoint, by this or any earlier attempt, whose rows will be
//     replayed. On a fresh start Recover runs too (a crashed first attempt
//     leaves transactions behind before any checkpoint).
//   - Without checkpointing the operator commits once, at the end of the
//     input (Finish): pre-commit, then commit.
//   - Close aborts the current transaction if it was not pre-committed;
//     pre-committed ones stay for recovery to decide.
//
// The checkpoint state is the list state "twophase-pending", one item per
// pre-committed, not yet committed transaction, and the union state
// "twophase-writers", one item per subtask (its index and the job's
// parallelism), so that after a rescale each subtask knows which old
// subtasks' leftovers it must clean up (Recovery.Subtasks). The format is
// in state.go.
//
// twophase imports the standard library, package stream and
// internal/statecodec (the encoding of its state) only.
package twophase
