// Package postgres owns the "postgres" sink: it writes the rows of a
// stream into a PostgreSQL table, exactly once through prepared
// transactions (two-phase commit), or by upserts or plain inserts
// committed at every checkpoint. Register adds it to a stream.Registry.
//
// # Modes
//
// exactly_once (the default when the job checkpoints) is a
// two-phase-commit sink built on stream/twophase. Each transaction is a
// PostgreSQL transaction on a connection of its own: rows go in with
// COPY, batchRows at a time; at a checkpoint barrier the sink inserts the
// transaction's name into the bookkeeping table weir_sink_commits (in the
// target table's schema, created on first use) and runs PREPARE
// TRANSACTION with that name (twophase.TxnID.Name, its gid), which makes
// the rows durable but invisible; when the checkpoint completes COMMIT
// PREPARED makes them visible. Commit is idempotent: a gid that is no
// longer prepared was committed exactly when its row is visible in
// weir_sink_commits (a committed transaction shows its own insert there,
// a rolled-back one never does); a gid neither prepared nor recorded
// means the rows were lost, and Commit fails with an error wrapping
// twophase.ErrNotFound. On start or restore the sink rolls back every
// prepared transaction that its subtask's predecessors left and that the
// restored checkpoint does not hold (pg_prepared_xacts, by name prefix,
// in the sink's database only), after terminating their sessions, so that
// a transaction they left open holds no locks against the rows replayed.
// Rows of weir_sink_commits older than 30 days are deleted by the sink
// that wrote them: a checkpoint older than that whose transactions were
// already committed cannot be restored into this sink.
//
// The server must allow prepared transactions (max_prepared_transactions
// at least the number of the sink's subtasks, better twice that; the
// default of 0 makes Open fail), and a prepared transaction holds its
// locks until it is committed or rolled back: while a checkpoint is in
// flight, DDL on the table (ALTER TABLE, TRUNCATE, DROP) waits, and so do
// writers of the same unique keys. A job that fails and is never
// restarted leaves its prepared transactions behind; list them in
// pg_prepared_xacts (their gids start with "weir.<job>.<operator uid>.")
// and roll them back by hand.
//
// upsert runs INSERT ... ON CONFLICT (keyColumns) DO UPDATE, batchRows
// rows per statement, in a plain transaction committed at every
// checkpoint and at the end of the input. Rows replayed after a failure
// update the same keys to the same values, so a table keyed by
// keyColumns ends up as if each row had been written once.
//
// at_least_once COPYs rows in a plain transaction committed at every
// checkpoint and at the end of the input: after a failure the rows since
// the last checkpoint are written again.
//
// Without checkpointing, upsert and at_least_once commit after every
// batchRows rows, and exactly_once commits everything at the end of the
// input.
//
// # Errors
//
// Errors name the table, the server's host, port and database and the
// column, and say what to do; they never hold the DSN, the password or a
// row's values (PostgreSQL's messages about values are replaced by the
// SQLSTATE's meaning). A server that goes away fails the task; the
// restart strategy retries.
//
// postgres imports the standard library, package stream, stream/twophase,
// internal/limitedfile (dsnFile) and pgx (github.com/jackc/pgx/v5). Its tests run against a real
// PostgreSQL server started by internal/pgtest, and also use connectors,
// jobspec and dataflow/dataflowtest (a job on the real task runtime),
// checkpoint, blobstore and proto/weirpb (state handed out on a rescaled
// restore as the runtime does) and test/polltest.
package postgres
