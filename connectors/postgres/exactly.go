package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

const (
	// CommitsTable is the bookkeeping table of exactly_once mode, in the
	// target table's schema: one row per committed transaction, inserted
	// by the transaction itself. Its DDL is commitsDDL.
	CommitsTable = "weir_sink_commits"
	// markerRetention is how long rows of CommitsTable are kept.
	markerRetention = "30 days"
	// pruneEvery is how many commits pass between two prunings.
	pruneEvery = 1000
	// maxGID is the longest transaction name PostgreSQL accepts (GIDSIZE
	// is 200 with the terminating NUL).
	maxGID = 199
	// maxListed bounds the prepared transactions read from the server.
	maxListed = 100_000
	// closeTimeout bounds closing a connection.
	closeTimeout = 5 * time.Second
)

// commitsDDL creates CommitsTable (%s: its qualified name).
const commitsDDL = `CREATE TABLE IF NOT EXISTS %s (
	gid text PRIMARY KEY,
	committed_at timestamptz NOT NULL DEFAULT now()
)`

// txnSystem is the exactly_once mode of the sink: a twophase.System whose
// transactions are PostgreSQL transactions prepared with PREPARE
// TRANSACTION (see the package comment). It holds two connections: one
// for the open transaction and one for commits, recovery and the
// catalog, as COMMIT PREPARED cannot run inside a transaction.
type txnSystem struct {
	s      *settings
	octx   *stream.OperatorContext
	cc     *pgx.ConnConfig
	srv    endpoint
	tbl    *table
	log    *slog.Logger
	app    string         // application_name of the connections
	marks  pgx.Identifier // CommitsTable, qualified
	txConn *pgx.Conn      // the transactions' connection; nil until needed
	ctl    *pgx.Conn      // the control connection
	w      *writer
	// commits counts commits since the last pruning of CommitsTable.
	commits int
}

var (
	_ twophase.System = (*txnSystem)(nil)
	_ twophase.Txn    = (*txn)(nil)
)

func newSystem(s *settings) *txnSystem { return &txnSystem{s: s} }

// Open connects, checks the table against the input and that the server
// allows prepared transactions, and creates CommitsTable if missing.
func (y *txnSystem) Open(ctx context.Context, octx *stream.OperatorContext) error {
	y.octx, y.log = octx, logger(octx)
	cc, err := connConfig(y.s, octx.Paths)
	if err != nil {
		return err
	}
	y.cc, y.srv = cc, endpointOf(cc)
	y.app = sessionName(subtaskPrefix(octx.JobID, octx.OperatorUID, octx.Subtask), octx.Attempt)
	if y.ctl, err = dial(ctx, cc, y.app); err != nil {
		return err
	}
	var maxPrepared int
	if err := y.ctl.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&maxPrepared); err != nil {
		return fail(y.srv, y.s.table, "read max_prepared_transactions", err)
	}
	par := max(1, octx.Parallelism)
	switch {
	case maxPrepared == 0:
		return fmt.Errorf("postgres sink: %s has max_prepared_transactions = 0, and mode exactly_once needs prepared transactions; set max_prepared_transactions to at least %d (twice the sink's subtasks) in postgresql.conf and restart the server, or use mode upsert or at_least_once",
			y.srv, 2*par)
	case maxPrepared < 2*par:
		y.log.Warn("postgres sink: max_prepared_transactions is low for the sink's subtasks; prepares may fail while checkpoints overlap",
			"server", y.srv.String(), "max_prepared_transactions", maxPrepared, "subtasks", par)
	}
	if y.tbl, err = readTable(ctx, y.ctl, y.srv, y.s); err != nil {
		return err
	}
	y.marks = pgx.Identifier{y.tbl.name[0], CommitsTable}
	if err := y.ensureCommitsTable(ctx); err != nil {
		return err
	}
	y.w = newWriter(y.s, y.srv, y.tbl, false)
	return nil
}

// ensureCommitsTable creates CommitsTable unless it exists. Subtasks
// racing to create it all succeed.
func (y *txnSystem) ensureCommitsTable(ctx context.Context) error {
	var exists bool
	if err := y.ctl.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", y.marks.Sanitize()).Scan(&exists); err != nil {
		return fail(y.srv, y.marks, "look for the bookkeeping table", err)
	}
	if exists {
		return nil
	}
	_, err := y.ctl.Exec(ctx, fmt.Sprintf(commitsDDL, y.marks.Sanitize()))
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07") {
		return nil
	}
	return &sinkError{
		msg: fmt.Sprintf("postgres sink: %s: cannot create the bookkeeping table %s that exactly_once mode records its commits in: %s; create it once as a user allowed to: %s",
			y.srv, displayName(y.marks), reason(err), strings.Join(strings.Fields(fmt.Sprintf(commitsDDL, y.marks.Sanitize())), " ")),
		cause: err,
	}
}

// control returns the control connection, reconnecting if it was lost.
func (y *txnSystem) control(ctx context.Context) (*pgx.Conn, error) {
	if y.ctl != nil && !y.ctl.IsClosed() {
		return y.ctl, nil
	}
	closeConn(y.ctl)
	y.ctl = nil
	c, err := dial(ctx, y.cc, y.app)
	if err != nil {
		return nil, err
	}
	y.ctl = c
	return c, nil
}

// withControl runs f on the control connection, once more on a new
// connection if the first was lost (f must be safe to repeat).
func (y *txnSystem) withControl(ctx context.Context, f func(*pgx.Conn) error) error {
	for try := 0; ; try++ {
		c, err := y.control(ctx)
		if err != nil {
			return err
		}
		err = f(c)
		if err == nil || try == 1 || !connLost(err) || ctx.Err() != nil {
			return err
		}
		closeConn(y.ctl)
		y.ctl = nil
	}
}

// checkGID checks that gid can be written as a string literal in PREPARE
// TRANSACTION and the statements after it.
func checkGID(gid string) error {
	if gid == "" || len(gid) > maxGID {
		return fmt.Errorf("postgres sink: transaction name of %d bytes; PostgreSQL takes 1 to %d", len(gid), maxGID)
	}
	for i := 0; i < len(gid); i++ {
		c := gid[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '~') {
			return fmt.Errorf("postgres sink: transaction name %.200q holds %q; want letters, digits, '.', '_', '-' and '~'", gid, string(c))
		}
	}
	return nil
}

// Begin opens transaction id on the transactions' connection.
func (y *txnSystem) Begin(ctx context.Context, id twophase.TxnID) (twophase.Txn, error) {
	gid := id.Name()
	if err := checkGID(gid); err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		if y.txConn == nil || y.txConn.IsClosed() {
			closeConn(y.txConn)
			y.txConn = nil
			c, err := dial(ctx, y.cc, y.app)
			if err != nil {
				return nil, err
			}
			y.txConn = c
		}
		_, err := y.txConn.Exec(ctx, "BEGIN")
		if err == nil {
			return &txn{y: y, conn: y.txConn, gid: gid}, nil
		}
		if try == 1 || !connLost(err) || ctx.Err() != nil {
			return nil, fail(y.srv, y.tbl.name, "begin a transaction", err)
		}
		closeConn(y.txConn)
		y.txConn = nil
	}
}

// txn is one open transaction.
type txn struct {
	y    *txnSystem
	conn *pgx.Conn
	gid  string
	done bool // pre-committed or aborted
}

// Write buffers b's rows and COPYs them batchRows at a time.
func (t *txn) Write(ctx context.Context, b *stream.Batch) error {
	if t.done {
		return fmt.Errorf("postgres sink: write to transaction %s after it ended", t.gid)
	}
	return t.y.w.write(ctx, t.conn, b)
}

// PreCommit writes the buffered rows, records the transaction in
// CommitsTable and prepares it. The handle is its name.
func (t *txn) PreCommit(ctx context.Context) ([]byte, error) {
	if t.done {
		return nil, fmt.Errorf("postgres sink: pre-commit of transaction %s after it ended", t.gid)
	}
	y := t.y
	if err := y.w.flush(ctx, t.conn); err != nil {
		return nil, err
	}
	if _, err := t.conn.Exec(ctx, "INSERT INTO "+y.marks.Sanitize()+" (gid) VALUES ($1)", t.gid); err != nil {
		return nil, fail(y.srv, y.tbl.name, "record transaction "+t.gid+" in "+displayName(y.marks), err)
	}
	tag, err := t.conn.Exec(ctx, "PREPARE TRANSACTION '"+t.gid+"'")
	if err != nil {
		return nil, fail(y.srv, y.tbl.name, "prepare transaction "+t.gid, err)
	}
	if tag.String() != "PREPARE TRANSACTION" {
		// PostgreSQL answers PREPARE in a failed transaction with a
		// rollback.
		return nil, fmt.Errorf("postgres sink: table %s, %s: prepare transaction %s: the server answered %q: the transaction had failed and was rolled back",
			displayName(y.tbl.name), y.srv, t.gid, tag.String())
	}
	t.done = true
	return []byte(t.gid), nil
}

// Abort rolls the transaction back. A lost connection has rolled it back
// already.
func (t *txn) Abort(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	y := t.y
	y.w.reset()
	if t.conn.IsClosed() {
		return nil
	}
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		// Closing the connection ends the transaction on the server.
		closeConn(t.conn)
		if y.txConn == t.conn {
			y.txConn = nil
		}
		if !connLost(err) && ctx.Err() == nil {
			return fail(y.srv, y.tbl.name, "roll back transaction "+t.gid, err)
		}
	}
	return nil
}

// Commit commits a prepared transaction: COMMIT PREPARED, or, if it is
// no longer prepared, success only if CommitsTable shows it committed.
func (y *txnSystem) Commit(ctx context.Context, p twophase.Pending) error {
	gid := string(p.Handle)
	if err := checkGID(gid); err != nil {
		return fmt.Errorf("%w (a handle from the checkpoint)", err)
	}
	err := y.withControl(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
		return err
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		y.commits++
		if y.commits >= pruneEvery {
			y.commits = 0
			y.prune(ctx, []string{subtaskPrefix(y.octx.JobID, y.octx.OperatorUID, y.octx.Subtask)})
		}
		return nil
	case !errors.As(err, &pgErr) || pgErr.Code != "42704": // undefined_object: not prepared
		return fail(y.srv, y.tbl.name, "commit prepared transaction "+gid, err)
	}
	var committed bool
	err = y.withControl(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+y.marks.Sanitize()+" WHERE gid = $1)", gid).Scan(&committed)
	})
	if err != nil {
		return fail(y.srv, y.marks, "look up transaction "+gid, err)
	}
	if committed {
		return nil
	}
	return &sinkError{
		msg: fmt.Sprintf("postgres sink: table %s, %s: transaction %s of checkpoint %d is neither prepared nor recorded as committed in %s: it was rolled back by someone else (ROLLBACK PREPARED) or its record was deleted, and if it was rolled back its rows are lost; restore an earlier checkpoint, or check the table and restart from a new one",
			displayName(y.tbl.name), y.srv, gid, p.Checkpoint, displayName(y.marks)),
		cause: twophase.ErrNotFound,
	}
}

// Recover ends the sessions and rolls back the prepared transactions
// that the subtasks r.Subtasks of earlier attempts of this job, and of
// any attempt of r.RestoreJobID, left in the sink's database, except
// those r.KeepNames holds.
func (y *txnSystem) Recover(ctx context.Context, r twophase.Recovery) error {
	uid := y.octx.OperatorUID
	type owner struct {
		job   string
		below int64 // earlier attempts only; 0: every attempt
	}
	owners := []owner{{job: y.octx.JobID, below: r.Attempt}}
	if r.RestoreJobID != "" && r.RestoreJobID != y.octx.JobID {
		owners = append(owners, owner{job: r.RestoreJobID})
	}
	sessions := make(map[string]int64)
	var own []string
	for _, o := range owners {
		for _, sub := range r.Subtasks {
			p := subtaskPrefix(o.job, uid, sub)
			sessions[p] = o.below
			if o.job == y.octx.JobID {
				own = append(own, p)
			}
		}
	}
	var ended int
	err := y.withControl(ctx, func(c *pgx.Conn) error {
		n, err := endSessions(ctx, c, sessions)
		ended = n
		return err
	})
	if err != nil {
		return fail(y.srv, y.tbl.name, "end the sessions of earlier attempts", err)
	}
	var gids []string
	err = y.withControl(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT gid FROM pg_prepared_xacts
			WHERE database = current_database() AND gid LIKE 'weir.%' ORDER BY gid LIMIT $1`, maxListed)
		if err != nil {
			return err
		}
		gids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return fail(y.srv, y.tbl.name, "list prepared transactions", err)
	}
	var rolledBack []string
	for _, gid := range gids {
		if r.KeepNames[gid] || checkGID(gid) != nil {
			continue
		}
		leftover := false
		for _, o := range owners {
			sub, attempt, _, _, ok := twophase.ParseName(gid, o.job, uid)
			if ok && slices.Contains(r.Subtasks, sub) && (o.below == 0 || attempt < o.below) {
				leftover = true
			}
		}
		if !leftover {
			continue
		}
		err := y.withControl(ctx, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
			return err
		})
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42704") {
			return fail(y.srv, y.tbl.name, "roll back prepared transaction "+gid+" left by an earlier run", err)
		}
		rolledBack = append(rolledBack, gid)
	}
	if ended > 0 || len(rolledBack) > 0 {
		y.log.Info("postgres sink: cleaned up after an earlier run", "server", y.srv.String(), "table", displayName(y.tbl.name),
			"sessions_ended", ended, "prepared_rolled_back", len(rolledBack), "restored_checkpoint", r.CheckpointID)
	}
	y.prune(ctx, own)
	return nil
}

// prune deletes the rows of CommitsTable older than markerRetention of
// the transactions named with prefixes. A failure is logged: the rows
// are only kept longer.
func (y *txnSystem) prune(ctx context.Context, prefixes []string) {
	err := y.withControl(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, "DELETE FROM "+y.marks.Sanitize()+" AS m WHERE m.committed_at < now() - interval '"+markerRetention+"'"+
			" AND EXISTS (SELECT 1 FROM unnest($1::text[]) AS p(prefix) WHERE left(m.gid, length(p.prefix)) = p.prefix)", prefixes)
		return err
	})
	if err != nil {
		y.log.Warn("postgres sink: cannot delete old commit records", "table", displayName(y.marks), "server", y.srv.String(), "error", reason(err))
	}
}

// Close closes both connections; an open transaction is rolled back by
// the server, prepared ones stay.
func (y *txnSystem) Close() error {
	closeConn(y.txConn)
	closeConn(y.ctl)
	y.txConn, y.ctl = nil, nil
	return nil
}

func closeConn(c *pgx.Conn) {
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.Close(ctx)
}

func logger(octx *stream.OperatorContext) *slog.Logger {
	if octx.Logger != nil {
		return octx.Logger
	}
	return slog.New(slog.DiscardHandler)
}
