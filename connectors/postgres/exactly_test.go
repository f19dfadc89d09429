package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
	"github.com/weirstream/weir/test/polltest"
)

// eoConfig is an exactly-once config for table: mode unset, which is
// exactly_once when the job checkpoints, and small statements so that a
// transaction spans several COPYs.
func eoConfig(table string) Config {
	return Config{DSN: srv.DSN(), Table: table, BatchRows: 64}
}

// TestExactlyOnceThroughFailure: a sink writes rows in transactions,
// pre-commits at checkpoint 2 and is abandoned before it commits (no
// Close), with a transaction prepared at checkpoint 3, which never
// completes, and one still open. A new attempt restored from checkpoint 2
// commits checkpoint 2's rows, rolls back the prepared leftover, ends the
// abandoned sessions, and gets the rows after checkpoint 2 again: the
// table then holds every input row exactly once. The abandoned sink's
// connections are either killed (its process died) or left open (it
// hangs somewhere).
func TestExactlyOnceThroughFailure(t *testing.T) {
	for _, variant := range []string{"connection-killed", "connection-left-open"} {
		t.Run(variant, func(t *testing.T) {
			server(t)
			table := newTable(t, eventCols)
			job, uid := newJob("job-"+variant), "pg-sink"
			prefix := twophase.SubtaskPrefix(job, uid, 0)
			oldApp := sessionName(prefix, 1)

			a := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 1, true, eventSchema), 0, nil, "")
			if a.Mode() != ModeExactlyOnce {
				t.Fatalf("mode %q with checkpointing, want %s", a.Mode(), ModeExactlyOnce)
			}
			write(t, a, 0, 100)
			if n := len(counts(t, table)); n != 0 {
				t.Fatalf("%d rows visible before any checkpoint", n)
			}
			snapshot(t, a, 1)
			must(t, a.NotifyCheckpointComplete(1))
			checkExactlyOnce(t, table, keys(0, 100))

			write(t, a, 100, 200)
			snap2 := snapshot(t, a, 2)
			write(t, a, 200, 250)
			snapshot(t, a, 3) // checkpoint 3 never completes
			write(t, a, 250, 300)
			pend := names(a.Pending())
			if len(pend) != 2 || !slices.Equal(prepared(t, prefix), pend) {
				t.Fatalf("pending %v, prepared %v; want the transactions of checkpoints 2 and 3 prepared", pend, prepared(t, prefix))
			}
			checkExactlyOnce(t, table, keys(0, 100)) // prepared rows are invisible
			if variant == "connection-killed" {
				mustExec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", oldApp)
			} else if n := sessions(t, oldApp); n != 2 {
				t.Fatalf("%d sessions of the abandoned sink, want 2 (control and transaction)", n)
			}
			// a is abandoned: never notified, never closed.

			b := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 2, true, eventSchema), 2, snap2, "")
			checkExactlyOnce(t, table, keys(0, 200))
			if left := prepared(t, prefix); len(left) != 0 {
				t.Fatalf("prepared after the restore: %v; want checkpoint 2's committed and checkpoint 3's rolled back", left)
			}
			if n := sessions(t, oldApp); n != 0 {
				t.Fatalf("%d sessions of the abandoned attempt remain after the restore; want them ended", n)
			}
			write(t, b, 200, 300) // the source replays everything after checkpoint 2
			snapshot(t, b, 3)
			must(t, b.NotifyCheckpointComplete(3))
			checkExactlyOnce(t, table, keys(0, 300))
			if left := prepared(t, prefix); len(left) != 0 {
				t.Fatalf("prepared at the end: %v", left)
			}
			must(t, b.Close())
		})
	}
}

// TestExactlyOnceCommitIsIdempotent: committing a transaction again, from
// the same sink or from a restore of a checkpoint whose transactions were
// committed already, succeeds and writes nothing twice; a transaction
// that was never prepared, or that someone rolled back, fails with
// twophase.ErrNotFound.
func TestExactlyOnceCommitIsIdempotent(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	job, uid := newJob("job-idem"), "pg-sink"
	a := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 1, true, eventSchema), 0, nil, "")
	write(t, a, 0, 50)
	snap1 := snapshot(t, a, 1)
	p := a.Pending()[0]
	must(t, a.NotifyCheckpointComplete(1))
	sys := a.impl.(*twophase.Operator).System()
	must(t, sys.Commit(testCtx(t), p)) // twice
	must(t, sys.Commit(testCtx(t), p)) // three times
	must(t, a.Close())

	b := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 2, true, eventSchema), 1, snap1, "")
	checkExactlyOnce(t, table, keys(0, 50))
	must(t, b.Close())

	lost := p
	lost.ID.Seq = 99
	lost.Handle = []byte(lost.ID.Name())
	err := sys.Commit(testCtx(t), lost)
	if !errors.Is(err, twophase.ErrNotFound) {
		t.Fatalf("commit of a transaction never prepared: %v; want twophase.ErrNotFound", err)
	}
	checkSafeError(t, err, lost.ID.Name(), "neither prepared nor recorded")

	// Prepared, then rolled back by hand before the commit.
	c := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 3, true, eventSchema), 0, nil, "")
	write(t, c, 50, 60)
	snapshot(t, c, 2)
	gid := c.Pending()[0].ID.Name()
	mustExec(t, "ROLLBACK PREPARED '"+gid+"'")
	err = c.NotifyCheckpointComplete(2)
	if !errors.Is(err, twophase.ErrNotFound) {
		t.Fatalf("commit of a transaction rolled back by hand: %v; want twophase.ErrNotFound", err)
	}
	checkExactlyOnce(t, table, keys(0, 50))
}

// TestExactlyOnceRescaleDown: three subtasks each pre-commit at
// checkpoints 1 and 2 (neither notified), prepare a third transaction at
// checkpoint 3 (never completed), and the last keeps one open; the job is
// restored from checkpoint 2 with two subtasks. The first new subtask to
// restore commits its share of the checkpoint's transactions and rolls
// back the leftovers of old subtasks 0 and 2, without touching the
// checkpoint's transactions that the other new subtask has yet to
// commit, nor old subtask 1's leftover; the second then commits its share
// and rolls back old subtask 1's leftover. With the rows after checkpoint
// 2 replayed, every row is in the table exactly once.
func TestExactlyOnceRescaleDown(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	job, uid := newJob("job-rescale"), "pg-sink"
	base := func(sub int) int64 { return int64(sub) * 1000 }
	var want []int64
	snaps := make([]*stream.OperatorSnapshot, 3)
	var pending []string         // the checkpoint's transactions
	leftover := map[int]string{} // old subtask -> its checkpoint-3 transaction
	for sub := range 3 {
		k := openSink(t, eoConfig(table), octx(job, uid, sub, 3, 1, true, eventSchema), 0, nil, "")
		b := base(sub)
		write(t, k, b, b+40)
		snapshot(t, k, 1)
		write(t, k, b+40, b+80)
		snaps[sub] = snapshot(t, k, 2)
		pending = append(pending, names(k.Pending())...)
		write(t, k, b+80, b+100)
		snapshot(t, k, 3)
		leftover[sub] = k.Pending()[2].ID.Name()
		if sub == 2 {
			write(t, k, b+100, b+110) // open, never prepared
		}
		want = append(want, keys(b, b+110)...)
	}
	if len(pending) != 6 {
		t.Fatalf("pending %v, want 2 per old subtask", pending)
	}
	restored := redistribute(t, 2, snaps, 2)

	n0 := openSink(t, eoConfig(table), octx(job, uid, 0, 2, 2, true, eventSchema), 2, restored[0], "")
	left := prepared(t, twophase.Prefix(job, uid))
	var keptForOther []string
	for _, gid := range pending {
		if slices.Contains(left, gid) {
			keptForOther = append(keptForOther, gid)
		}
	}
	if len(keptForOther) == 0 {
		t.Fatal("new subtask 0 committed every transaction of the checkpoint; the test needs some left to new subtask 1")
	}
	cleanedTouched := false
	for _, gid := range keptForOther {
		sub, _, _, _, _ := twophase.ParseName(gid, job, uid)
		cleanedTouched = cleanedTouched || sub == 0 || sub == 2
	}
	if !cleanedTouched {
		t.Fatalf("the transactions left to new subtask 1 (%v) are all old subtask 1's; the test needs one of an old subtask that new subtask 0 cleans", keptForOther)
	}
	wantLeft := slices.Sorted(slices.Values(append(slices.Clone(keptForOther), leftover[1])))
	if !slices.Equal(left, wantLeft) {
		t.Fatalf("prepared after new subtask 0 restored: %v; want the checkpoint's transactions of new subtask 1 and old subtask 1's leftover: %v", left, wantLeft)
	}

	n1 := openSink(t, eoConfig(table), octx(job, uid, 1, 2, 2, true, eventSchema), 2, restored[1], "")
	if left := prepared(t, twophase.Prefix(job, uid)); len(left) != 0 {
		t.Fatalf("prepared after both restored: %v", left)
	}
	// The replay of what came after checkpoint 2, split between the two.
	for sub := range 3 {
		k := n0
		if sub == 1 {
			k = n1
		}
		write(t, k, base(sub)+80, base(sub)+110)
	}
	snapshot(t, n0, 3)
	snapshot(t, n1, 3)
	must(t, n0.NotifyCheckpointComplete(3))
	must(t, n1.NotifyCheckpointComplete(3))
	checkExactlyOnce(t, table, want)
}

// TestExactlyOnceRestoreFromOtherJob: a job submitted from another job's
// checkpoint commits that job's transactions of the checkpoint and rolls
// back that job's leftovers of every attempt.
func TestExactlyOnceRestoreFromOtherJob(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	uid, oldJob := "pg-sink", newJob("job-old")
	a := openSink(t, eoConfig(table), octx(oldJob, uid, 0, 1, 7, true, eventSchema), 0, nil, "")
	write(t, a, 0, 30)
	snap := snapshot(t, a, 1)
	write(t, a, 30, 60)
	snapshot(t, a, 2) // never completes
	b := openSink(t, eoConfig(table), octx(newJob("job-new"), uid, 0, 1, 1, true, eventSchema), 1, snap, oldJob)
	if left := prepared(t, twophase.Prefix(oldJob, uid)); len(left) != 0 {
		t.Fatalf("the old job's transactions still prepared: %v", left)
	}
	write(t, b, 30, 60)
	snapshot(t, b, 2)
	must(t, b.NotifyCheckpointComplete(2))
	checkExactlyOnce(t, table, keys(0, 60))
}

// TestExactlyOnceStaleAttemptLeavesNewerAlone: a recovering sink rolls
// back only what earlier attempts left: a transaction prepared by a later
// attempt (the recovering one is stale) stays.
func TestExactlyOnceStaleAttemptLeavesNewerAlone(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	job, uid := newJob("job-stale"), "pg-sink"
	newer := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 5, true, eventSchema), 0, nil, "")
	write(t, newer, 0, 10)
	snapshot(t, newer, 1)
	stale := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 4, true, eventSchema), 0, nil, "")
	write(t, stale, 100, 110) // a fresh start: Recover runs before the first Begin
	if got := prepared(t, twophase.SubtaskPrefix(job, uid, 0)); !slices.Equal(got, names(newer.Pending())) {
		t.Fatalf("prepared %v after a stale attempt started; want the newer attempt's %v", got, names(newer.Pending()))
	}
	if sessions(t, sessionName(twophase.SubtaskPrefix(job, uid, 0), 5)) == 0 {
		t.Fatal("the stale attempt ended the newer attempt's sessions")
	}
	must(t, newer.NotifyCheckpointComplete(1))
	must(t, stale.Close())
	checkExactlyOnce(t, table, keys(0, 10))
}

// TestExactlyOnceWithoutCheckpointing: mode exactly_once in a job
// without checkpoints commits everything at the end of the input.
func TestExactlyOnceWithoutCheckpointing(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	cfg := eoConfig(table)
	cfg.Mode = ModeExactlyOnce
	job := newJob("job-batch")
	k := openSink(t, cfg, octx(job, "pg-sink", 0, 1, 1, false, eventSchema), 0, nil, "")
	write(t, k, 0, 500)
	if n := len(counts(t, table)); n != 0 {
		t.Fatalf("%d rows visible before the end of the input", n)
	}
	must(t, k.Finish(nil))
	checkExactlyOnce(t, table, keys(0, 500))
	if left := prepared(t, twophase.Prefix(job, "pg-sink")); len(left) != 0 {
		t.Fatalf("prepared after Finish: %v", left)
	}
}

// TestServerKillWithPreparedTransactions: PostgreSQL crashes (SIGKILL)
// while a transaction is prepared; after its restart the transaction is
// still prepared and the same sink commits it when the checkpoint
// completes, reconnecting. A crash while a transaction is open fails the
// sink with an error naming the server; a sink that cannot connect fails
// its Open clearly; once the server is back a restore from the last
// checkpoint gets every row in exactly once.
func TestServerKillWithPreparedTransactions(t *testing.T) {
	s := server(t)
	table := newTable(t, eventCols)
	job, uid := newJob("job-kill"), "pg-sink"
	prefix := twophase.SubtaskPrefix(job, uid, 0)
	a := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 1, true, eventSchema), 0, nil, "")
	write(t, a, 0, 100)
	snapshot(t, a, 1)
	pend := names(a.Pending())

	s.Kill()
	must(t, s.Restart())
	if got := prepared(t, prefix); !slices.Equal(got, pend) {
		t.Fatalf("prepared after the crash: %v, want %v", got, pend)
	}
	must(t, a.NotifyCheckpointComplete(1))
	checkExactlyOnce(t, table, keys(0, 100))
	write(t, a, 100, 150) // a new transaction, on a new connection
	snap2 := snapshot(t, a, 2)
	must(t, a.NotifyCheckpointComplete(2))
	checkExactlyOnce(t, table, keys(0, 150))

	write(t, a, 150, 200)
	s.Kill()
	where := fmt.Sprintf("127.0.0.1:%d, database weir_test", s.Port())
	err := tryWrite(a, 200, 300)
	if err == nil {
		c := &stream.SnapshotContext{CheckpointID: 3}
		err = a.SnapshotState(c)
	}
	checkSafeError(t, err, where, "connection to the server was lost")
	_, err = tryOpen(t, eoConfig(table), octx(job, uid, 0, 1, 2, true, eventSchema), 2, snap2, "")
	checkSafeError(t, err, "cannot connect to PostgreSQL at "+where, "connection refused")

	must(t, s.Restart())
	b := openSink(t, eoConfig(table), octx(job, uid, 0, 1, 3, true, eventSchema), 2, snap2, "")
	write(t, b, 150, 300)
	snapshot(t, b, 3)
	must(t, b.NotifyCheckpointComplete(3))
	checkExactlyOnce(t, table, keys(0, 300))
	if left := prepared(t, prefix); len(left) != 0 {
		t.Fatalf("prepared at the end: %v", left)
	}
}

// TestCommitsTable: the bookkeeping table holds one row per committed
// transaction, in the target table's schema; a sink deletes its own rows
// older than 30 days when it starts, and nobody else's.
func TestCommitsTable(t *testing.T) {
	server(t)
	mustExec(t, `CREATE SCHEMA IF NOT EXISTS "Other Schema"`)
	table := newTable(t, eventCols)
	mustExec(t, `ALTER TABLE `+table+` SET SCHEMA "Other Schema"`)
	cfg := eoConfig(`"Other Schema".` + strings.ToUpper(table)) // unquoted parts fold to lower case
	job, other := newJob("job-marks"), newJob("job-other")
	k := openSink(t, cfg, octx(job, "pg-sink", 0, 1, 2, true, eventSchema), 0, nil, "")
	old := twophase.TxnID{JobID: job, OperatorUID: "pg-sink", Attempt: 1, Checkpoint: 1, Seq: 1}.Name()
	recent := twophase.TxnID{JobID: job, OperatorUID: "pg-sink", Attempt: 1, Checkpoint: 2, Seq: 2}.Name()
	others := twophase.TxnID{JobID: other, OperatorUID: "pg-sink", Attempt: 1, Checkpoint: 1, Seq: 1}.Name()
	mustExec(t, `INSERT INTO "Other Schema".weir_sink_commits VALUES ($1, now() - interval '31 days'), ($2, now() - interval '29 days'), ($3, now() - interval '31 days')`, old, recent, others)
	write(t, k, 0, 10) // the first batch runs Recover
	var kept []string
	rows, err := dbConn(t).Query(testCtx(t), `SELECT gid FROM "Other Schema".weir_sink_commits WHERE gid = ANY($1) ORDER BY gid`, []string{old, recent, others})
	must(t, err)
	kept, err = pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	if want := slices.Sorted(slices.Values([]string{recent, others})); !slices.Equal(kept, want) {
		t.Fatalf("commit records kept: %v, want %v (the sink's own older than 30 days deleted)", kept, want)
	}
	snapshot(t, k, 1)
	gid := k.Pending()[0].ID.Name()
	must(t, k.NotifyCheckpointComplete(1))
	var n int
	must(t, dbConn(t).QueryRow(testCtx(t), `SELECT count(*) FROM "Other Schema".weir_sink_commits WHERE gid = $1`, gid).Scan(&n))
	if n != 1 {
		t.Fatalf("%d rows for %s in the bookkeeping table, want 1", n, gid)
	}
	checkExactlyOnce(t, pgx.Identifier{"Other Schema", table}.Sanitize(), keys(0, 10))
}

// TestAbortRollsBack: closing a sink with an open transaction rolls it
// back.
func TestAbortRollsBack(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	job := newJob("job-abort")
	k := openSink(t, eoConfig(table), octx(job, "pg-sink", 0, 1, 1, true, eventSchema), 0, nil, "")
	write(t, k, 0, 100)
	must(t, k.Close())
	app := sessionName(twophase.SubtaskPrefix(job, "pg-sink", 0), 1)
	polltest.Eventually(t, 30*time.Second, "the closed sink's sessions to end", func() bool { return sessions(t, app) == 0 })
	if got := len(counts(t, table)); got != 0 {
		t.Fatalf("%d rows after an abort", got)
	}
}
