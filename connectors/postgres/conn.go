package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirstream/weir/internal/limitedfile"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// ErrTable marks an Open that failed because the table does not fit the
// input: it is missing, lacks a column, or has a column of an
// incompatible type.
var ErrTable = errors.New("postgres sink: table does not fit the input")

// sinkError is an error whose text is the sink's own (never the DSN, a
// password or a row's values) while errors.Is and errors.As still see
// the cause.
type sinkError struct {
	msg   string
	cause error
}

func (e *sinkError) Error() string { return e.msg }
func (e *sinkError) Unwrap() error { return e.cause }

// server describes where the sink writes, for messages: host, port and
// database, never the user's password.
type endpoint struct {
	host     string
	port     uint16
	database string
}

func endpointOf(cc *pgx.ConnConfig) endpoint {
	return endpoint{host: cc.Host, port: cc.Port, database: cc.Database}
}

func (s endpoint) String() string {
	host := s.host
	if strings.HasPrefix(host, "/") {
		host = "socket " + host
	}
	return fmt.Sprintf("PostgreSQL at %s, database %s", net.JoinHostPort(host, strconv.Itoa(int(s.port))), s.database)
}

// connConfig returns the connection settings of the sink: the DSN, or
// dsnFile's contents, with the connect timeout and the session settings
// the sink relies on (UTC, so that timestamps into columns without a time
// zone hold UTC).
func connConfig(s *settings, paths *stream.PathPolicy) (*pgx.ConnConfig, error) {
	dsn := s.cfg.DSN
	if s.cfg.DSNFile != "" {
		if err := paths.Check("postgres sink dsnFile", s.cfg.DSNFile); err != nil {
			return nil, err
		}
		b, err := limitedfile.Read(s.cfg.DSNFile, maxDSNFile)
		if errors.Is(err, limitedfile.ErrTooLarge) {
			err = fmt.Errorf("%w; it should hold one connection string", err)
		}
		if err != nil {
			return nil, fmt.Errorf("postgres sink: dsnFile: %w", err)
		}
		dsn = strings.TrimSpace(string(b))
	}
	cc, err := parseDSN(dsn)
	if err != nil {
		what := "dsn"
		if s.cfg.DSNFile != "" {
			what = "dsnFile " + s.cfg.DSNFile
		}
		return nil, fmt.Errorf("postgres sink: %s: %w", what, err)
	}
	switch {
	case s.connectTimeout > 0:
		cc.ConnectTimeout = s.connectTimeout
	case cc.ConnectTimeout == 0:
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = make(map[string]string)
	}
	cc.RuntimeParams["timezone"] = "UTC"
	return cc, nil
}

// sessionName is the application_name of the sink's connections: it
// tells which subtask and attempt opened them (by a hash of the subtask's
// transaction name prefix, as application_name holds at most 63 bytes),
// so that a later attempt can end the sessions an earlier one left.
func sessionName(prefix string, attempt int64) string {
	return "weir:" + prefixHash(prefix) + ":" + strconv.FormatInt(attempt, 10)
}

func prefixHash(prefix string) string {
	h := sha256.Sum256([]byte(prefix))
	return hex.EncodeToString(h[:8])
}

// parseSessionName is the inverse of sessionName.
func parseSessionName(name string) (hash string, attempt int64, ok bool) {
	rest, found := strings.CutPrefix(name, "weir:")
	if !found {
		return "", 0, false
	}
	hash, a, found := strings.Cut(rest, ":")
	if !found || len(hash) != 16 {
		return "", 0, false
	}
	attempt, err := strconv.ParseInt(a, 10, 64)
	return hash, attempt, err == nil
}

// dial opens a connection named appName.
func dial(ctx context.Context, cc *pgx.ConnConfig, appName string) (*pgx.Conn, error) {
	c := cc.Copy()
	c.RuntimeParams["application_name"] = appName
	ctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return nil, &sinkError{
			msg: fmt.Sprintf("postgres sink: cannot connect to %s: %s; check that the server runs and accepts connections from this machine, and the dsn's host, port, user and password (the task fails and the restart strategy retries)",
				endpointOf(cc), connectReason(ctx, err, c.ConnectTimeout)),
			cause: err,
		}
	}
	return conn, nil
}

// connectReason says why a connection attempt failed, without the DSN.
func connectReason(ctx context.Context, err error, timeout time.Duration) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgReason(pgErr)
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return netErr.Error()
	}
	if ctx.Err() != nil || pgconn.Timeout(err) {
		return fmt.Sprintf("no answer within %v", timeout)
	}
	for {
		var ce *pgconn.ConnectError
		if !errors.As(err, &ce) || ce.Unwrap() == nil {
			break
		}
		err = ce.Unwrap()
	}
	return err.Error()
}

// dataExceptions say in words what the SQLSTATEs of class 22 (data
// exception) mean, whose messages may quote a value.
var dataExceptions = map[string]string{
	"22001": "a string is longer than its column allows",
	"22003": "a number is out of its column's range",
	"22007": "a date or time value is invalid",
	"22008": "a date or time value is out of range",
	"22021": "a string is not valid UTF-8 or holds a NUL byte",
	"22P02": "a value is not valid for its column's type",
	"22P05": "a string holds a character the database's encoding lacks",
}

// pgReason describes a server error without the values it may quote.
func pgReason(e *pgconn.PgError) string {
	var b strings.Builder
	if strings.HasPrefix(e.Code, "22") {
		what, ok := dataExceptions[e.Code]
		if !ok {
			what = "a value was rejected (data exception)"
		}
		b.WriteString(what)
	} else {
		b.WriteString(e.Message)
	}
	if e.ColumnName != "" && !strings.Contains(b.String(), e.ColumnName) {
		fmt.Fprintf(&b, " (column %s)", pgx.Identifier{e.ColumnName}.Sanitize())
	}
	if e.ConstraintName != "" && !strings.Contains(b.String(), e.ConstraintName) {
		fmt.Fprintf(&b, " (constraint %s)", pgx.Identifier{e.ConstraintName}.Sanitize())
	}
	fmt.Fprintf(&b, " (SQLSTATE %s)", e.Code)
	if e.Hint != "" && !strings.HasPrefix(e.Code, "22") && !strings.HasPrefix(e.Code, "23") {
		// Hints of other classes say what to change, never a row's values.
		fmt.Fprintf(&b, "; PostgreSQL's hint: %s", e.Hint)
	}
	return b.String()
}

// connLost reports whether err means the connection to the server is
// gone: a network error, a closed connection, or the server shutting
// down or crashing.
func connLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || strings.Contains(err.Error(), "conn closed")
}

// reason describes err, from the server or the client, without values.
func reason(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		return pgReason(pgErr)
	case errors.Is(err, context.Canceled):
		return "canceled (the task is stopping)"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case strings.Contains(err.Error(), "unable to encode"):
		// pgx quotes the value it could not encode.
		return "the client could not encode a value for its column's type"
	}
	return err.Error()
}

// fail returns the error of operation op on table tbl at srv.
func fail(srv endpoint, tbl pgx.Identifier, op string, err error) error {
	msg := fmt.Sprintf("postgres sink: table %s, %s: %s: %s", displayName(tbl), srv, op, reason(err))
	if connLost(err) {
		msg += "; the connection to the server was lost (is it running and reachable?): the task fails and the restart strategy retries"
	}
	return &sinkError{msg: msg, cause: err}
}

// column is a column of the table, as the catalog describes it.
type column struct {
	name     string
	num      int16
	typ      uint32 // the type's OID (a domain's base type)
	typName  string // as format_type shows it
	notNull  bool
	defaults bool // has a default, or is an identity or generated column
	gen      bool // a generated column
}

// table is what Open learns of the table from the catalog.
type table struct {
	oid  uint32
	name pgx.Identifier // schema and name, as resolved by the server
	cols []column
}

func (t *table) column(name string) (column, bool) {
	for _, c := range t.cols {
		if c.name == name {
			return c, true
		}
	}
	return column{}, false
}

func (t *table) columnNames() string {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = displayName(pgx.Identifier{c.name})
	}
	return strings.Join(names, ", ")
}

// maxColumns bounds the columns read from the catalog (PostgreSQL allows
// 1600 per table).
const maxColumns = 1600

// Type OIDs of the column types the sink writes.
const (
	oidBool        = 16
	oidInt8        = 20
	oidInt4        = 23
	oidText        = 25
	oidFloat4      = 700
	oidFloat8      = 701
	oidVarchar     = 1043
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
)

// compatible lists the column types each stream type may be written to.
var compatible = map[stream.Type][]uint32{
	stream.TypeInt64:     {oidInt8, oidInt4, oidNumeric},
	stream.TypeFloat64:   {oidFloat8, oidFloat4, oidNumeric},
	stream.TypeString:    {oidText, oidVarchar},
	stream.TypeBool:      {oidBool},
	stream.TypeTimestamp: {oidTimestamptz, oidTimestamp},
}

var compatibleNames = map[stream.Type]string{
	stream.TypeInt64:     "bigint, integer or numeric",
	stream.TypeFloat64:   "double precision, real or numeric",
	stream.TypeString:    "text or character varying",
	stream.TypeBool:      "boolean",
	stream.TypeTimestamp: "timestamp with time zone or timestamp",
}

// readTable reads the table's columns from the catalog and checks the
// settings' columns against them.
func readTable(ctx context.Context, conn *pgx.Conn, srv endpoint, s *settings) (*table, error) {
	t := &table{}
	var schema, name string
	var kind string
	err := conn.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname, c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, s.table.Sanitize()).Scan(&t.oid, &schema, &name, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &sinkError{msg: fmt.Sprintf("postgres sink: table %s does not exist in %s (or this user cannot see it); create it first: the sink does not create tables", displayName(s.table), srv), cause: ErrTable}
	}
	if err != nil {
		return nil, fail(srv, s.table, "read the table from the catalog", err)
	}
	t.name = pgx.Identifier{schema, name}
	if kind != "r" && kind != "p" {
		return nil, &sinkError{msg: fmt.Sprintf("postgres sink: %s in %s is not a table (relkind %s: a view, sequence, index or foreign table); write to a table", displayName(t.name), srv, kind), cause: ErrTable}
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, a.attnum,
			CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE a.atttypid END,
			format_type(a.atttypid, a.atttypmod), a.attnotnull,
			a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '', a.attgenerated <> ''
		FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum LIMIT $2`, t.oid, maxColumns+1)
	if err != nil {
		return nil, fail(srv, t.name, "read the table's columns", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.num, &c.typ, &c.typName, &c.notNull, &c.defaults, &c.gen); err != nil {
			return nil, fail(srv, t.name, "read the table's columns", err)
		}
		t.cols = append(t.cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(srv, t.name, "read the table's columns", err)
	}
	if len(t.cols) > maxColumns {
		return nil, fmt.Errorf("postgres sink: table %s in %s has more than %d columns", displayName(t.name), srv, maxColumns)
	}
	return t, t.check(srv, s)
}

// check checks the settings' columns against the table.
func (t *table) check(srv endpoint, s *settings) error {
	tableErr := func(format string, args ...any) error {
		return &sinkError{msg: fmt.Sprintf("postgres sink: table %s in %s: ", displayName(t.name), srv) + fmt.Sprintf(format, args...), cause: ErrTable}
	}
	written := make(map[string]bool)
	for i, name := range s.cols {
		typ := s.types[i]
		c, ok := t.column(name)
		if !ok {
			return tableErr("no column %s for stream field %q (the table has %s); add the column, or map the field to another column with columns",
				displayName(pgx.Identifier{name}), s.cfg.fieldOf(name), t.columnNames())
		}
		if c.gen {
			return tableErr("column %s is a generated column and cannot be written; map field %q elsewhere, or to \"\" to leave it out", displayName(pgx.Identifier{name}), s.cfg.fieldOf(name))
		}
		ok = false
		for _, oid := range compatible[typ] {
			ok = ok || c.typ == oid
		}
		if !ok {
			return tableErr("column %s is %s, but stream field %q is %s, which needs %s; change the column's type, or map the field to another column with columns",
				displayName(pgx.Identifier{name}), c.typName, s.cfg.fieldOf(name), typ, compatibleNames[typ])
		}
		written[name] = true
	}
	for _, c := range t.cols {
		if c.notNull && !c.defaults && !written[c.name] {
			return tableErr("column %s is NOT NULL without a default, and no stream field is written to it; write a field to it (columns), or give it a default", displayName(pgx.Identifier{c.name}))
		}
	}
	return nil
}

// fieldOf returns the input field written to column col.
func (cfg *Config) fieldOf(col string) string {
	for f, c := range cfg.Columns {
		if c == col {
			return f
		}
	}
	return col
}

// checkUniqueKey checks that a unique index (or primary key) on exactly
// the upsert's key columns exists, as ON CONFLICT needs.
func (t *table) checkUniqueKey(ctx context.Context, conn *pgx.Conn, srv endpoint, keys []string) error {
	rows, err := conn.Query(ctx, `SELECT i.indkey::int2[] FROM pg_index i
		WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate
			AND i.indpred IS NULL AND i.indexprs IS NULL
		LIMIT 1000`, t.oid)
	if err != nil {
		return fail(srv, t.name, "read the table's unique indexes", err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[[]int16])
	if err != nil {
		return fail(srv, t.name, "read the table's unique indexes", err)
	}
	want := make(map[int16]bool)
	for _, k := range keys {
		c, _ := t.column(k)
		want[c.num] = true
	}
	for _, idx := range indexes {
		match := len(idx) == len(want)
		for _, n := range idx {
			match = match && want[n]
		}
		if match {
			return nil
		}
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = pgx.Identifier{k}.Sanitize()
	}
	return &sinkError{
		msg: fmt.Sprintf("postgres sink: table %s in %s has no primary key or unique index on exactly keyColumns (%s), which upsert's ON CONFLICT needs; add one (CREATE UNIQUE INDEX ON %s (%s)) or change keyColumns",
			displayName(t.name), srv, strings.Join(keys, ", "), t.name.Sanitize(), strings.Join(ids, ", ")),
		cause: ErrTable,
	}
}

// endSessions terminates the sessions that earlier attempts of the given
// subtasks left in this database, and waits (up to a deadline) until they
// are gone, so that their open transactions release their locks and
// nothing of theirs prepares after this returns. prefixes maps each
// subtask's transaction name prefix to the attempts whose sessions end:
// those below the given one (0 ends every attempt's). It returns how many
// sessions it ended.
func endSessions(ctx context.Context, conn *pgx.Conn, prefixes map[string]int64) (int, error) {
	hashes := make(map[string]int64, len(prefixes))
	for p, below := range prefixes {
		hashes[prefixHash(p)] = below
	}
	stale := func() ([]int32, error) {
		rows, err := conn.Query(ctx, `SELECT pid, application_name FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'weir:%'
			LIMIT 10000`)
		if err != nil {
			return nil, err
		}
		var pids []int32
		var pid int32
		var app string
		_, err = pgx.ForEachRow(rows, []any{&pid, &app}, func() error {
			hash, attempt, ok := parseSessionName(app)
			below, mine := hashes[hash]
			if ok && mine && (below == 0 || attempt < below) {
				pids = append(pids, pid)
			}
			return nil
		})
		return pids, err
	}
	pids, err := stale()
	if err != nil || len(pids) == 0 {
		return 0, err
	}
	for _, pid := range pids {
		if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			return 0, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for interval := time.Millisecond; ; interval = min(2*interval, 100*time.Millisecond) {
		left, err := stale()
		if err != nil {
			return 0, err
		}
		if len(left) == 0 {
			return len(pids), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d sessions of earlier attempts are still there 30s after they were terminated", len(left))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(interval): // polling the server, not synchronisation
		}
	}
}

// subtaskPrefix is the name prefix of a subtask's transactions (and, by
// its hash, of its sessions).
func subtaskPrefix(job, uid string, subtask int) string {
	return twophase.SubtaskPrefix(job, uid, subtask)
}
