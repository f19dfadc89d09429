package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// No ignores: a stopped server leaves no goroutine of ours behind.
	goleak.VerifyTestMain(m)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestServerSettingsAndAuth: the server listens on 127.0.0.1 at Port
// with the settings the sinks' tests rely on, and takes no connection
// without the password.
func TestServerSettingsAndAuth(t *testing.T) {
	s := Start(t)
	if !strings.Contains(s.DSN(), fmt.Sprintf("@127.0.0.1:%d/%s", s.Port(), Database)) {
		t.Fatalf("DSN does not name 127.0.0.1:%d/%s", s.Port(), Database)
	}
	conn := connect(t, s.DSN())
	for name, want := range map[string]string{
		"max_prepared_transactions": "64",
		"max_connections":           "100",
		"fsync":                     "off",
		"synchronous_commit":        "off",
		"full_page_writes":          "off",
		"listen_addresses":          "127.0.0.1",
		"password_encryption":       "scram-sha-256",
	} {
		var got string
		if err := conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	var db string
	if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil || db != Database {
		t.Fatalf("current_database() = %q, %v; want %s", db, err, Database)
	}

	for _, bad := range []string{
		fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.Port(), Database),
		fmt.Sprintf("postgres://%s:wrong@127.0.0.1:%d/%s?sslmode=disable", User, s.Port(), Database),
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		c, err := pgx.Connect(ctx, bad)
		cancel()
		if err == nil {
			c.Close(context.Background())
			t.Fatal("connected without the right password")
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
			// 28P01: invalid_password. A missing one fails before the
			// server says so, in pgx.
			if !strings.Contains(err.Error(), "password") {
				t.Fatalf("connect without the right password: %v; want an authentication failure", err)
			}
		}
	}
}

// TestKillRestartKeepsCommittedAndPrepared: after a crash (Kill) and a
// Restart on the same port, committed rows and a prepared transaction
// are there, and the prepared one commits.
func TestKillRestartKeepsCommittedAndPrepared(t *testing.T) {
	s := Start(t)
	port := s.Port()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	mustExec(t, conn, "CREATE TABLE t (x int)")
	mustExec(t, conn, "INSERT INTO t VALUES (1)")
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO t VALUES (2)")
	mustExec(t, conn, "PREPARE TRANSACTION 'pgtest-1'")
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO t VALUES (3)") // open: lost in the crash

	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection to the killed server still works")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Fatalf("port %d after Restart, want %d", s.Port(), port)
	}
	c2 := connect(t, s.DSN())
	var gids []string
	rows, err := c2.Query(ctx, "SELECT gid FROM pg_prepared_xacts")
	if err != nil {
		t.Fatal(err)
	}
	gids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(gids) != 1 || gids[0] != "pgtest-1" {
		t.Fatalf("prepared after the crash: %v, %v; want [pgtest-1]", gids, err)
	}
	mustExec(t, c2, "COMMIT PREPARED 'pgtest-1'")
	var sum, n int
	if err := c2.QueryRow(ctx, "SELECT coalesce(sum(x), 0), count(*) FROM t").Scan(&sum, &n); err != nil {
		t.Fatal(err)
	}
	if sum != 3 || n != 2 {
		t.Fatalf("t holds %d rows summing to %d; want rows 1 and 2", n, sum)
	}
}

// TestStopRestartClose: a clean Stop and Restart keep the data; Close
// removes the server's directory and a second Close does nothing.
func TestStopRestartClose(t *testing.T) {
	s, closeServer, err := StartMain()
	if errors.Is(err, ErrSkip) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closeServer()
	func() {
		conn := connect(t, s.DSN())
		defer conn.Close(context.Background())
		mustExec(t, conn, "CREATE TABLE kept (x int)")
	}()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("Running after Stop")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil { // a running server restarts too
		t.Fatal(err)
	}
	conn := connect(t, s.DSN())
	mustExec(t, conn, "SELECT count(*) FROM kept")
	conn.Close(context.Background())

	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s after Close: %v; want it removed", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

// TestBinDirMissingMessage: the error for missing binaries says what to
// run.
func TestBinDirMissingMessage(t *testing.T) {
	dir, err := BinDir()
	if err != nil {
		if !strings.Contains(err.Error(), "scripts/ensure-postgres.sh") || !strings.Contains(err.Error(), SkipEnv) {
			t.Fatalf("BinDir error %q does not say to run scripts/ensure-postgres.sh or set %s", err, SkipEnv)
		}
		return
	}
	if !strings.HasPrefix(dir, "/usr/lib/postgresql/") {
		t.Fatalf("BinDir = %s", dir)
	}
}
