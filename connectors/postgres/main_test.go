package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// srv is the package's PostgreSQL server (nil when WEIR_SKIP_POSTGRES=1).
// Tests share it and do not run in parallel: some kill and restart it.
var srv *pgtest.Server

func TestMain(m *testing.M) {
	s, stop, err := pgtest.StartMain()
	if err != nil && !errors.Is(err, pgtest.ErrSkip) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	stop()
	if code == 0 {
		// Closed sinks and connections leave no goroutines behind.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server returns the shared server, skipping t without one.
func server(t testing.TB) *pgtest.Server {
	t.Helper()
	if srv == nil {
		t.Skip(pgtest.ErrSkip.Error())
	}
	return srv
}

// testTimeout bounds every test's database work, so that a sink blocked
// on a lock fails the test instead of hanging it.
const testTimeout = 2 * time.Minute

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// eventSchema is the input of most tests; eventCols the matching table.
var eventSchema = stream.MustSchema(
	stream.Field{Name: "seq", Type: stream.TypeInt64},
	stream.Field{Name: "name", Type: stream.TypeString},
	stream.Field{Name: "price", Type: stream.TypeFloat64},
	stream.Field{Name: "ok", Type: stream.TypeBool},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
)

const eventCols = "seq bigint, name text, price double precision, ok boolean, ts timestamptz"

// eventRow is the row of key seq, computed independently of the sink: a
// null name every 7th row, and a name with quotes, tabs and non-ASCII
// text every 5th, which COPY must carry unchanged.
func eventRow(seq int64) []any {
	var name any = fmt.Sprintf("n%d", seq)
	switch {
	case seq%7 == 0:
		name = nil
	case seq%5 == 0:
		name = fmt.Sprintf("it's \"%d\"\t\\ é", seq)
	}
	return []any{seq, name, float64(seq) * 1.25, seq%3 == 0, 1_700_000_000_000 + seq*1001}
}

// events returns the rows of keys [from, to) in one batch.
func events(from, to int64) *stream.Batch {
	b := stream.NewBatch(eventSchema, int(to-from))
	for seq := from; seq < to; seq++ {
		b.AppendRow(eventRow(seq)...)
	}
	return b
}

// write passes the rows of keys in [from, to) to op in batches of 37.
func write(t testing.TB, op stream.Operator, from, to int64) {
	t.Helper()
	if err := tryWrite(op, from, to); err != nil {
		t.Fatal(err)
	}
}

func tryWrite(op stream.Operator, from, to int64) error {
	for lo := from; lo < to; lo += 37 {
		if err := op.ProcessBatch(0, events(lo, min(lo+37, to)), nil); err != nil {
			return err
		}
	}
	return nil
}

var tableSeq atomic.Int64

// newJob returns a job id starting with name that no other test of this
// process uses: transaction names must never repeat on the server.
func newJob(name string) string { return fmt.Sprintf("%s-%d", name, tableSeq.Add(1)) }

// newTable creates a table with cols and returns its name.
func newTable(t testing.TB, cols string) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", time.Now().UnixNano()%1_000_000, tableSeq.Add(1))
	mustExec(t, "CREATE TABLE "+name+" ("+cols+")")
	return name
}

// dbConn opens a connection of the test's own.
func dbConn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, server(t).DSN())
	if err != nil {
		t.Fatalf("test connection: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(t testing.TB, sql string, args ...any) {
	t.Helper()
	c := dbConn(t)
	if _, err := c.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	c.Close(context.Background())
}

// octx is the context of subtask sub of par of the sink uid of job.
func octx(job, uid string, sub, par int, attempt int64, checkpointing bool, in *stream.Schema) *stream.OperatorContext {
	return &stream.OperatorContext{
		JobID: job, OperatorUID: uid, Subtask: sub, Parallelism: par, Attempt: attempt,
		Checkpointing: checkpointing, InputSchemas: []*stream.Schema{in},
	}
}

// openSink opens a sink for cfg and, if snap is not nil, restores it
// from checkpoint ckp of job restoreJob ("" for its own job). It closes
// the sink at t's cleanup unless the test closed it.
func openSink(t testing.TB, cfg Config, oc *stream.OperatorContext, ckp int64, snap *stream.OperatorSnapshot, restoreJob string) *Sink {
	t.Helper()
	k, err := tryOpen(t, cfg, oc, ckp, snap, restoreJob)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func tryOpen(t testing.TB, cfg Config, oc *stream.OperatorContext, ckp int64, snap *stream.OperatorSnapshot, restoreJob string) (*Sink, error) {
	k, err := NewSink(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { k.Close() })
	if snap != nil {
		oc.RestoreJobID = restoreJob
		if restoreJob == "" {
			oc.RestoreJobID = oc.JobID
		}
	}
	if err := k.Open(testCtx(t), oc); err != nil {
		return nil, err
	}
	if snap != nil {
		if err := k.RestoreState(&stream.RestoreContext{CheckpointID: ckp, JobID: oc.RestoreJobID, State: snap}); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// snapshot takes k's snapshot for checkpoint id.
func snapshot(t testing.TB, k *Sink, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id}
	if err := k.SnapshotState(c); err != nil {
		t.Fatalf("snapshot %d: %v", id, err)
	}
	return &c.State
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// counts returns how often each seq is in table.
func counts(t testing.TB, table string) map[int64]int {
	t.Helper()
	c := dbConn(t)
	rows, err := c.Query(testCtx(t), "SELECT seq FROM "+table)
	must(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	must(t, err)
	out := make(map[int64]int)
	for _, s := range seqs {
		out[s]++
	}
	return out
}

// tally compares the keys in table with want: how many of want are
// missing, how many rows are extra copies of a wanted key, and how many
// keys are not wanted at all.
func tally(t testing.TB, table string, want []int64) (lost, duplicated, unexpected int) {
	t.Helper()
	got := counts(t, table)
	wanted := make(map[int64]bool)
	for _, k := range want {
		wanted[k] = true
		switch n := got[k]; {
		case n == 0:
			lost++
		case n > 1:
			duplicated += n - 1
		}
	}
	for k, n := range got {
		if !wanted[k] {
			unexpected += n
		}
	}
	return lost, duplicated, unexpected
}

// keys returns the keys in [from, to).
func keys(from, to int64) []int64 {
	var out []int64
	for k := from; k < to; k++ {
		out = append(out, k)
	}
	return out
}

// checkExactlyOnce fails unless table holds the rows of want, each once,
// with the values eventRow gives.
func checkExactlyOnce(t testing.TB, table string, want []int64) {
	t.Helper()
	lost, dup, extra := tally(t, table, want)
	if lost+dup+extra > 0 {
		t.Fatalf("table %s: %d of %d rows lost, %d duplicated, %d unexpected; want each exactly once", table, lost, len(want), dup, extra)
	}
	checkValues(t, table)
}

// checkValues fails unless every row of table holds eventRow(seq).
func checkValues(t testing.TB, table string) {
	t.Helper()
	c := dbConn(t)
	rows, err := c.Query(testCtx(t), "SELECT seq, name, price, ok, ts FROM "+table)
	must(t, err)
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var name *string
		var price float64
		var ok bool
		var ts time.Time
		must(t, rows.Scan(&seq, &name, &price, &ok, &ts))
		want := eventRow(seq)
		var gotName any
		if name != nil {
			gotName = *name
		}
		got := []any{seq, gotName, price, ok, ts.UnixMilli()}
		if !slices.Equal(got, want) {
			t.Fatalf("table %s: row %v, want %v", table, got, want)
		}
	}
	must(t, rows.Err())
}

// prepared returns the prepared transactions whose names start with
// prefix.
func prepared(t testing.TB, prefix string) []string {
	t.Helper()
	c := dbConn(t)
	rows, err := c.Query(testCtx(t), "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1) ORDER BY gid", prefix)
	must(t, err)
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	return gids
}

// sessions counts the sessions named app.
func sessions(t testing.TB, app string) int {
	t.Helper()
	var n int
	must(t, dbConn(t).QueryRow(testCtx(t), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n))
	return n
}

// names returns the transaction names of ps.
func names(ps []twophase.Pending) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID.Name())
	}
	return out
}

// checkSafeError fails unless err names what it should and holds no
// password.
func checkSafeError(t testing.TB, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %q", wants)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	if srv != nil && strings.Contains(msg, srv.Password()) {
		t.Fatalf("error quotes the password: %s", msg)
	}
	if strings.Contains(msg, "postgres://") {
		t.Fatalf("error quotes the DSN: %s", msg)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Fatalf("error %q does not mention %q", msg, w)
		}
	}
}

// testMaxParallelism is the key-group count of the rescale tests.
const testMaxParallelism = 128

// redistribute hands the state that old subtasks snapshotted for
// checkpoint id (snaps[i] of old subtask i) to q new subtasks as a
// restore does: through the checkpoint storage, with union state in
// objects of its own as the taskmanager uploads it.
func redistribute(t testing.TB, id int64, snaps []*stream.OperatorSnapshot, q int) []*stream.OperatorSnapshot {
	t.Helper()
	st := checkpoint.NewStorage(blobstore.NewMem())
	p := len(snaps)
	var handles []*weirpb.StateHandle
	for sub, snap := range snaps {
		kg := stream.KeyGroupRangeFor(testMaxParallelism, p, sub)
		parts := []*stream.OperatorSnapshot{{List: snap.List}}
		if len(snap.Union) > 0 {
			parts = append(parts, &stream.OperatorSnapshot{Union: snap.Union})
		}
		for i, part := range parts {
			data, err := checkpoint.EncodeSnapshot(part)
			must(t, err)
			upload := st.UploadSnapshot
			if i > 0 {
				upload = st.UploadUnionSnapshot
			}
			h, err := upload(t.Context(), "job", id, "sink", sub, p, 1, kg, data)
			must(t, err)
			handles = append(handles, h)
		}
	}
	out := make([]*stream.OperatorSnapshot, q)
	for sub := range out {
		snap, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(testMaxParallelism, q, sub), sub, q)
		must(t, err)
		out[sub] = snap
	}
	return out
}
