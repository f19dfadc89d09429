package postgres

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

// TestOpenChecksTable: Open fails, naming the table, the column and the
// types, when the table does not fit the input.
func TestOpenChecksTable(t *testing.T) {
	server(t)
	for _, tc := range []struct {
		name  string
		cols  string // "" for no table
		cfg   func(c *Config)
		wants []string
	}{
		{name: "missing table", wants: []string{"does not exist", "database weir_test", "create it first"}},
		{name: "type mismatch", cols: "seq bigint, name text, price text, ok boolean, ts timestamptz",
			wants: []string{`column price is text`, `stream field "price" is float64`, "double precision, real or numeric"}},
		{name: "int into smallint", cols: "seq smallint, name text, price float8, ok boolean, ts timestamptz",
			wants: []string{`column seq is smallint`, "int64", "bigint, integer or numeric"}},
		{name: "bool into text", cols: "seq bigint, name text, price float8, ok text, ts timestamptz",
			wants: []string{`column ok is text`, "bool", "boolean"}},
		{name: "timestamp into date", cols: "seq bigint, name text, price float8, ok boolean, ts date",
			wants: []string{`column ts is date`, "timestamp with time zone or timestamp"}},
		{name: "missing column", cols: "seq bigint, price float8, ok boolean, ts timestamptz",
			wants: []string{"no column name", `stream field "name"`, "the table has seq, price, ok, ts"}},
		{name: "mapped column missing", cols: eventCols, cfg: func(c *Config) { c.Columns = map[string]string{"name": "title"} },
			wants: []string{"no column title", `stream field "name"`}},
		{name: "not null unwritten", cols: eventCols + ", extra int NOT NULL",
			wants: []string{"column extra is NOT NULL without a default"}},
		{name: "generated column", cols: "seq bigint, name text, price float8 GENERATED ALWAYS AS (seq * 2) STORED, ok boolean, ts timestamptz",
			wants: []string{"column price is a generated column"}},
		{name: "upsert without unique index", cols: eventCols, cfg: func(c *Config) { c.Mode, c.KeyColumns = ModeUpsert, []string{"seq"} },
			wants: []string{"no primary key or unique index on exactly keyColumns (seq)", "CREATE UNIQUE INDEX ON"}},
		{name: "view", cols: "view", wants: []string{"is not a table"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := fmt.Sprintf("missing_%d", tableSeq.Add(1))
			switch tc.cols {
			case "":
			case "view":
				base := newTable(t, eventCols)
				table = base + "_v"
				mustExec(t, "CREATE VIEW "+table+" AS SELECT * FROM "+base)
			default:
				table = newTable(t, tc.cols)
			}
			cfg := Config{DSN: srv.DSN(), Table: table}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			_, err := tryOpen(t, cfg, octx(newJob("job-open"), "s", 0, 1, 1, true, eventSchema), 0, nil, "")
			checkSafeError(t, err, append(tc.wants, table)...)
			if tc.cols != "view" && !errors.Is(err, ErrTable) {
				t.Fatalf("error %v does not match ErrTable", err)
			}
		})
	}
}

// TestOpenCompatibleTypes: every documented pairing of stream and column
// types opens and round-trips values (mapped columns, domains,
// integer and numeric columns, timestamp without time zone as UTC).
func TestOpenCompatibleTypes(t *testing.T) {
	server(t)
	mustExec(t, "DO $$ BEGIN CREATE DOMAIN price_t AS numeric(12,4); EXCEPTION WHEN duplicate_object THEN NULL; END $$")
	table := newTable(t, `"Seq" integer, title varchar(50), price price_t, ok boolean, ts timestamp, extra int DEFAULT 7`)
	for _, mode := range []string{ModeExactlyOnce, ModeAtLeastOnce} {
		mustExec(t, "TRUNCATE "+table)
		cfg := Config{DSN: srv.DSN(), Table: table, Mode: mode, Columns: map[string]string{"seq": "Seq", "name": "title"}}
		k := openSink(t, cfg, octx(newJob("job-types-"+mode), "s", 0, 1, 1, true, eventSchema), 0, nil, "")
		write(t, k, 0, 20)
		snapshot(t, k, 1)
		must(t, k.NotifyCheckpointComplete(1))
		must(t, k.Close())
		rows, err := dbConn(t).Query(testCtx(t), `SELECT "Seq", title, price::float8, ok, (extract(epoch from ts) * 1000)::bigint, extra FROM `+table+` ORDER BY 1`)
		must(t, err)
		n := 0
		for rows.Next() {
			var seq, ms, extra int64
			var title *string
			var price float64
			var ok bool
			must(t, rows.Scan(&seq, &title, &price, &ok, &ms, &extra))
			want := eventRow(seq)
			if (title == nil) != (want[1] == nil) || title != nil && *title != want[1] || price != want[2] || ok != want[3] || ms != want[4] || extra != 7 {
				t.Fatalf("%s: row %d = %v %v %v %v %v, want %v", mode, seq, title, price, ok, ms, extra, want)
			}
			n++
		}
		must(t, rows.Err())
		if n != 20 {
			t.Fatalf("%s: %d rows, want 20", mode, n)
		}
	}
}

// TestValueErrorsNameColumnNotValue: values a column cannot hold fail the
// sink with an error naming the column but not the value.
func TestValueErrorsNameColumnNotValue(t *testing.T) {
	server(t)
	schema := stream.MustSchema(stream.Field{Name: "n", Type: stream.TypeInt64}, stream.Field{Name: "s", Type: stream.TypeString})
	for _, tc := range []struct {
		name  string
		cols  string
		row   []any
		wants []string
	}{
		{"integer overflow", "n integer, s text", []any{int64(98765432101), "x"}, []string{"column n", "outside the range of integer"}},
		{"string too long", "n bigint, s varchar(3)", []any{int64(1), "secret-value"}, []string{"longer than its column allows", "22001"}},
		{"NUL byte", "n bigint, s text", []any{int64(1), "secret\x00value"}, []string{"not valid UTF-8 or holds a NUL byte"}},
		{"unique violation", "n bigint PRIMARY KEY, s text", []any{int64(424242), "secret-value"}, []string{"duplicate key value violates unique constraint", "23505"}},
		{"check violation", "n bigint CHECK (n < 0), s text", []any{int64(424242), "secret-value"}, []string{"violates check constraint", "23514"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := newTable(t, tc.cols)
			if tc.name == "unique violation" {
				mustExec(t, "INSERT INTO "+table+" VALUES (424242, 'x')")
			}
			for _, mode := range []string{ModeExactlyOnce, ModeAtLeastOnce} {
				k := openSink(t, Config{DSN: srv.DSN(), Table: table, Mode: mode}, octx(newJob("job-values"), "s", 0, 1, 1, true, schema), 0, nil, "")
				b := stream.NewBatch(schema, 1)
				b.AppendRow(tc.row...)
				err := k.ProcessBatch(0, b, nil)
				if err == nil {
					err = k.SnapshotState(&stream.SnapshotContext{CheckpointID: 1})
				}
				checkSafeError(t, err, tc.wants...)
				for _, v := range []string{"secret", "98765432101", "424242"} {
					if strings.Contains(err.Error(), v) {
						t.Fatalf("%s: error quotes a value (%s): %v", mode, v, err)
					}
				}
				must(t, k.Close())
			}
		})
	}
}

// TestUnreachableDatabase: a sink that cannot reach or log into the
// database fails its Open with one error naming the server and the
// fix, never the password.
func TestUnreachableDatabase(t *testing.T) {
	s := server(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	closedPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	for _, tc := range []struct {
		name  string
		dsn   string
		wants []string
	}{
		{"nothing listening", fmt.Sprintf("postgres://weir:%s@127.0.0.1:%d/weir_test?sslmode=disable", s.Password(), closedPort),
			[]string{fmt.Sprintf("cannot connect to PostgreSQL at 127.0.0.1:%d, database weir_test", closedPort), "connection refused", "check that the server runs"}},
		{"wrong password", fmt.Sprintf("postgres://weir:not-%s@127.0.0.1:%d/weir_test?sslmode=disable", s.Password(), s.Port()),
			[]string{"password authentication failed", "28P01"}},
		{"no such database", fmt.Sprintf("host=127.0.0.1 port=%d user=weir password='%s' dbname=nope sslmode=disable", s.Port(), s.Password()),
			[]string{"database nope", "3D000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tryOpen(t, Config{DSN: tc.dsn, Table: "t"}, octx(newJob("job-unreach"), "s", 0, 1, 1, true, eventSchema), 0, nil, "")
			checkSafeError(t, err, tc.wants...)
		})
	}
}

// TestDSNFile: the DSN may come from a file, checked against the path
// policy when the sink opens.
func TestDSNFile(t *testing.T) {
	server(t)
	table := newTable(t, eventCols)
	dir := t.TempDir()
	path := filepath.Join(dir, "dsn")
	must(t, os.WriteFile(path, []byte("\n"+srv.DSN()+"\n"), 0o600))
	policy, err := stream.NewPathPolicy([]string{dir})
	must(t, err)
	job := newJob("job-dsnfile")
	oc := octx(job, "s", 0, 1, 1, true, eventSchema)
	oc.Paths = policy
	k := openSink(t, Config{DSNFile: path, Table: table}, oc, 0, nil, "")
	write(t, k, 0, 10)
	snapshot(t, k, 1)
	must(t, k.NotifyCheckpointComplete(1))
	checkExactlyOnce(t, table, keys(0, 10))

	other, err := stream.NewPathPolicy([]string{t.TempDir()})
	must(t, err)
	oc = octx(job, "s", 0, 1, 2, true, eventSchema)
	oc.Paths = other
	_, err = tryOpen(t, Config{DSNFile: path, Table: table}, oc, 0, nil, "")
	if !errors.Is(err, stream.ErrPathNotAllowed) {
		t.Fatalf("dsnFile outside the policy: %v; want ErrPathNotAllowed", err)
	}
}
