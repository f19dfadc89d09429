package postgres

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// plainSink is the upsert and at_least_once modes: rows go into a plain
// transaction, batchRows per statement, committed at every checkpoint
// (SnapshotState) and at Finish; without checkpointing, after every
// statement.
type plainSink struct {
	s      *settings
	upsert bool
	ctx    context.Context // the task's, from Open: ProcessBatch has none
	log    *slog.Logger
	srv    endpoint
	conn   *pgx.Conn
	w      *writer
	inTxn  bool
	// commitEach: the job does not checkpoint, so every statement commits.
	commitEach bool
}

var (
	_ stream.Operator           = (*plainSink)(nil)
	_ stream.Checkpointed       = (*plainSink)(nil)
	_ stream.CheckpointListener = (*plainSink)(nil)
)

func newPlainSink(s *settings, upsert bool) *plainSink { return &plainSink{s: s, upsert: upsert} }

// Open connects, checks the table (and for upserts its unique key), and
// ends the sessions an earlier attempt of this subtask left open, whose
// transactions would hold locks on the rows replayed.
func (p *plainSink) Open(ctx context.Context, octx *stream.OperatorContext) error {
	p.ctx, p.log, p.commitEach = ctx, logger(octx), !octx.Checkpointing
	cc, err := connConfig(p.s, octx.Paths)
	if err != nil {
		return err
	}
	p.srv = endpointOf(cc)
	prefix := subtaskPrefix(octx.JobID, octx.OperatorUID, octx.Subtask)
	if p.conn, err = dial(ctx, cc, sessionName(prefix, octx.Attempt)); err != nil {
		return err
	}
	tbl, err := readTable(ctx, p.conn, p.srv, p.s)
	if err != nil {
		return err
	}
	if p.upsert {
		if err := tbl.checkUniqueKey(ctx, p.conn, p.srv, p.s.keys); err != nil {
			return err
		}
	}
	p.w = newWriter(p.s, p.srv, tbl, p.upsert)
	sessions := map[string]int64{prefix: octx.Attempt}
	if octx.RestoreJobID != "" && octx.RestoreJobID != octx.JobID {
		sessions[subtaskPrefix(octx.RestoreJobID, octx.OperatorUID, octx.Subtask)] = 0
	}
	n, err := endSessions(ctx, p.conn, sessions)
	if err != nil {
		return fail(p.srv, tbl.name, "end the sessions of earlier attempts", err)
	}
	if n > 0 {
		p.log.Info("postgres sink: ended sessions of an earlier run", "server", p.srv.String(), "table", displayName(tbl.name), "sessions", n)
	}
	return nil
}

// ProcessBatch buffers b's rows, writing them batchRows at a time.
func (p *plainSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	for from := 0; from < b.Len(); {
		to := min(b.Len(), from+max(1, p.s.batchRows-p.w.n))
		if err := p.w.append(b, from, to); err != nil {
			return err
		}
		from = to
		if p.w.full() {
			if err := p.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// write writes the buffered rows in the open transaction, beginning one
// if none is open.
func (p *plainSink) write() error {
	if p.w.n == 0 {
		return nil
	}
	if !p.inTxn {
		if _, err := p.conn.Exec(p.ctx, "BEGIN"); err != nil {
			return fail(p.srv, p.w.tbl.name, "begin a transaction", err)
		}
		p.inTxn = true
	}
	return p.w.flush(p.ctx, p.conn)
}

// flush writes the buffered rows; without checkpointing it commits them.
func (p *plainSink) flush() error {
	if p.commitEach {
		return p.commit()
	}
	return p.write()
}

// commit writes the buffered rows and commits the open transaction.
func (p *plainSink) commit() error {
	if err := p.write(); err != nil {
		return err
	}
	if !p.inTxn {
		return nil
	}
	p.inTxn = false
	tag, err := p.conn.Exec(p.ctx, "COMMIT")
	if err != nil {
		return fail(p.srv, p.w.tbl.name, "commit", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("postgres sink: table %s, %s: commit: the server answered %q: the transaction had failed and was rolled back",
			displayName(p.w.tbl.name), p.srv, tag.String())
	}
	return nil
}

// SnapshotState commits everything received before the barrier. The
// sink keeps no state.
func (p *plainSink) SnapshotState(*stream.SnapshotContext) error { return p.commit() }

// RestoreState refuses a checkpoint holding exactly_once transactions
// that this mode would leave uncommitted.
func (p *plainSink) RestoreState(c *stream.RestoreContext) error {
	if c.State != nil && (len(c.State.List[twophase.PendingState]) > 0 || len(c.State.Union[twophase.WritersState]) > 0) {
		return fmt.Errorf("postgres sink: checkpoint %d was taken in mode exactly_once and holds its transactions; restore it with mode exactly_once (a later checkpoint may then switch modes)", c.CheckpointID)
	}
	return nil
}

func (p *plainSink) NotifyCheckpointComplete(int64) error { return nil }
func (p *plainSink) NotifyCheckpointAborted(int64) error  { return nil }

// ProcessWatermark forwards nothing: a sink has no output.
func (p *plainSink) ProcessWatermark(int64, stream.Collector) error { return nil }

// Finish commits the rest.
func (p *plainSink) Finish(stream.Collector) error { return p.commit() }

// Close closes the connection; an open transaction is rolled back.
func (p *plainSink) Close() error {
	closeConn(p.conn)
	p.conn = nil
	return nil
}
