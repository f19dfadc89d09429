package postgres

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// updateSchema is the input of the upsert tests: updates of 23 keys.
var updateSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "label", Type: stream.TypeString},
	stream.Field{Name: "amount", Type: stream.TypeFloat64},
	stream.Field{Name: "flag", Type: stream.TypeBool},
	stream.Field{Name: "at", Type: stream.TypeTimestamp},
)

const updateCols = "id integer PRIMARY KEY, label varchar(40), amount numeric, flag boolean NOT NULL, at timestamp"

// update is the i-th update: key i*17 mod 23, so a key changes several
// times within one batch and across checkpoints.
func update(i int64) []any {
	var label any = fmt.Sprintf("v%d", i)
	if i%11 == 0 {
		label = nil
	}
	return []any{(i * 17) % 23, label, float64(i) / 4, i%2 == 0, 1_600_000_000_000 + i*60_000}
}

// writeUpdates passes updates [from, to) to op in batches of 25.
func writeUpdates(t *testing.T, op stream.Operator, from, to int64) {
	t.Helper()
	for lo := from; lo < to; lo += 25 {
		b := stream.NewBatch(updateSchema, 25)
		for i := lo; i < min(lo+25, to); i++ {
			b.AppendRow(update(i)...)
		}
		must(t, op.ProcessBatch(0, b, nil))
	}
}

// upsertModel is the table that updates [0, n) leave: the last update of
// each key, as the table's text.
func upsertModel(n int64) map[int64]string {
	out := make(map[int64]string)
	for i := range n {
		u := update(i)
		label := "NULL"
		if u[1] != nil {
			label = u[1].(string)
		}
		out[u[0].(int64)] = fmt.Sprintf("%s|%g|%v|%s", label, u[2], u[3], time.UnixMilli(u[4].(int64)).UTC().Format("2006-01-02 15:04:05"))
	}
	return out
}

// upsertTable reads an upsert test's table in upsertModel's form.
func upsertTable(t *testing.T, table string) map[int64]string {
	t.Helper()
	rows, err := dbConn(t).Query(testCtx(t), `SELECT id, coalesce(label, 'NULL'), amount::float8, flag, to_char(at, 'YYYY-MM-DD HH24:MI:SS') FROM `+table)
	must(t, err)
	defer rows.Close()
	out := make(map[int64]string)
	for rows.Next() {
		var id int64
		var label, at string
		var amount float64
		var flag bool
		must(t, rows.Scan(&id, &label, &amount, &flag, &at))
		out[id] = fmt.Sprintf("%s|%g|%v|%s", label, amount, flag, at)
	}
	must(t, rows.Err())
	return out
}

// TestUpsertReplayGivesSameTable: upserts through a failure (the rows
// after checkpoint 1 written and left uncommitted in an open transaction
// holding their keys' locks, the sink abandoned, a new attempt replaying
// them) leave the same table as a run without failure, and both equal
// the last update of each key. Batches hold several updates of a key.
func TestUpsertReplayGivesSameTable(t *testing.T) {
	server(t)
	const n = 400
	want := upsertModel(n)
	cfg := func(table string) Config {
		return Config{DSN: srv.DSN(), Table: table, Mode: ModeUpsert, KeyColumns: []string{"id"}, BatchRows: 30}
	}

	clean := newTable(t, updateCols)
	k := openSink(t, cfg(clean), octx(newJob("job-up"), "a", 0, 1, 1, true, updateSchema), 0, nil, "")
	writeUpdates(t, k, 0, 150)
	snapshot(t, k, 1)
	writeUpdates(t, k, 150, n)
	must(t, k.Finish(nil))
	must(t, k.Close())
	if got := upsertTable(t, clean); !maps.Equal(got, want) {
		t.Fatalf("table after a clean run:\n%v\nwant\n%v", got, want)
	}

	failed := newTable(t, updateCols)
	job := newJob("job-up-fail")
	a := openSink(t, cfg(failed), octx(job, "a", 0, 1, 1, true, updateSchema), 0, nil, "")
	writeUpdates(t, a, 0, 150)
	snap := snapshot(t, a, 1)
	writeUpdates(t, a, 150, 300) // written, uncommitted, locks held; abandoned
	if got := upsertTable(t, failed); !maps.Equal(got, upsertModel(150)) {
		t.Fatalf("table after checkpoint 1: %v, want %v", got, upsertModel(150))
	}
	b := openSink(t, cfg(failed), octx(job, "a", 0, 1, 2, true, updateSchema), 1, snap, "")
	if n := sessions(t, sessionName(twophase.SubtaskPrefix(job, "a", 0), 1)); n != 0 {
		t.Fatalf("%d sessions of the abandoned attempt after the new one opened", n)
	}
	writeUpdates(t, b, 150, n)
	snapshot(t, b, 2)
	must(t, b.Finish(nil))
	if got := upsertTable(t, failed); !maps.Equal(got, want) {
		t.Fatalf("table after a failure and replay:\n%v\nwant\n%v", got, want)
	}
}

// TestAtLeastOnceReplayDuplicatesNothingLost: at_least_once commits at
// every checkpoint; a restore from checkpoint 1 after checkpoint 2 was
// committed by the sink but never completed writes checkpoint 2's rows
// again (exactly those are duplicated) and loses none, while rows
// written after the last commit and abandoned are not in the table.
func TestAtLeastOnceReplayDuplicatesNothingLost(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	cfg := Config{DSN: srv.DSN(), Table: table, Mode: ModeAtLeastOnce, BatchRows: 50}
	job := newJob("job-alo")
	a := openSink(t, cfg, octx(job, "s", 0, 1, 1, true, eventSchema), 0, nil, "")
	write(t, a, 0, 100)
	snap1 := snapshot(t, a, 1)
	checkExactlyOnce(t, table, keys(0, 100))
	write(t, a, 100, 200)
	snapshot(t, a, 2) // committed here; the checkpoint never completes
	write(t, a, 200, 260)
	b := openSink(t, cfg, octx(job, "s", 0, 1, 2, true, eventSchema), 1, snap1, "")
	if lost, dup, extra := tally(t, table, keys(0, 200)); lost != 0 || dup != 0 || extra != 0 {
		t.Fatalf("before the replay: %d lost, %d duplicated, %d unexpected; want rows 0-199 once (200-259 were never committed)", lost, dup, extra)
	}
	write(t, b, 100, 300)
	snapshot(t, b, 2)
	must(t, b.Finish(nil))
	lost, dup, extra := tally(t, table, keys(0, 300))
	if lost != 0 || dup != 100 || extra != 0 {
		t.Fatalf("%d lost, %d duplicated, %d unexpected; want none lost and exactly rows 100-199 twice", lost, dup, extra)
	}
	checkValues(t, table)
}

// TestPlainWithoutCheckpointing: without checkpointing the default mode
// is at_least_once, which commits after every statement.
func TestPlainWithoutCheckpointing(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	k := openSink(t, Config{DSN: srv.DSN(), Table: table, BatchRows: 40}, octx(newJob("job-nock"), "s", 0, 1, 1, false, eventSchema), 0, nil, "")
	if k.Mode() != ModeAtLeastOnce {
		t.Fatalf("mode %q without checkpointing, want %s", k.Mode(), ModeAtLeastOnce)
	}
	write(t, k, 0, 100)
	if got := len(counts(t, table)); got != 80 {
		t.Fatalf("%d rows visible after 100 rows in statements of 40, want 80", got)
	}
	must(t, k.Finish(nil))
	checkExactlyOnce(t, table, keys(0, 100))
}

// TestPlainRefusesExactlyOnceCheckpoint: a checkpoint with pending
// exactly_once transactions does not restore into another mode.
func TestPlainRefusesExactlyOnceCheckpoint(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	job := newJob("job-switch")
	a := openSink(t, eoConfig(table), octx(job, "s", 0, 1, 1, true, eventSchema), 0, nil, "")
	write(t, a, 0, 10)
	snap := snapshot(t, a, 1)
	cfg := Config{DSN: srv.DSN(), Table: table, Mode: ModeAtLeastOnce}
	_, err := tryOpen(t, cfg, octx(job, "s", 0, 1, 2, true, eventSchema), 1, snap, "")
	checkSafeError(t, err, "mode exactly_once")
}
