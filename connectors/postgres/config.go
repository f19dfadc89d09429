package postgres

import (
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirstream/weir/stream"
)

// The sink's modes (Config.Mode).
const (
	ModeExactlyOnce = "exactly_once"
	ModeUpsert      = "upsert"
	ModeAtLeastOnce = "at_least_once"
)

const (
	// DefaultBatchRows is the rows per COPY or INSERT when batchRows is
	// unset; MaxBatchRows bounds it.
	DefaultBatchRows = 1000
	MaxBatchRows     = 100_000
	// DefaultConnectTimeout bounds a connection attempt when neither
	// connectTimeout nor the DSN's connect_timeout says otherwise;
	// MaxConnectTimeout bounds connectTimeout.
	DefaultConnectTimeout = 10 * time.Second
	MaxConnectTimeout     = 5 * time.Minute
	// maxDSNFile bounds the size of dsnFile.
	maxDSNFile = 64 << 10
	// maxIdentifier is PostgreSQL's longest identifier in bytes
	// (NAMEDATALEN-1); longer ones would be truncated by the server.
	maxIdentifier = 63
)

// dsnKeys are the keys a DSN may hold. Keys that make the client read
// local files (passfile, service, servicefile, sslcert, sslkey,
// sslrootcert, sslcrl, ...) are refused: a job's config must not reach
// files of the taskmanager outside its path policy.
var dsnKeys = []string{
	"host", "hostaddr", "port", "dbname", "user", "password",
	"sslmode", "ssl", "sslnegotiation", "sslsni",
	"connect_timeout", "application_name", "target_session_attrs",
	"options", "search_path",
}

// Config configures the "postgres" sink. Keys are camelCase in JSON.
type Config struct {
	// DSN is the connection string: a postgres:// URL
	// (postgres://user:password@host:port/database?sslmode=require) or
	// key=value pairs. Exactly one of DSN and DSNFile is set. It may hold
	// only host, hostaddr, port, dbname, user, password, sslmode, ssl,
	// sslnegotiation, sslsni, connect_timeout, application_name,
	// target_session_attrs, options and search_path; certificate and
	// password files are not allowed (TLS verifies against the system's
	// roots). It is never logged nor quoted in errors.
	DSN string `json:"dsn,omitempty"`
	// DSNFile is an absolute path to a file holding the DSN (at most 64
	// KiB; surrounding white space is ignored), read on the taskmanager
	// when the sink opens and checked against the path policy, so that
	// the password stays out of the job spec.
	DSNFile string `json:"dsnFile,omitempty"`
	// Table is the table written to, as in SQL: name or schema.name;
	// unquoted parts are folded to lower case, "double-quoted" ones kept
	// as they are. Without a schema, the server's search_path finds it.
	// The sink never creates it.
	Table string `json:"table"`
	// Mode is exactly_once (the default when the job checkpoints), upsert
	// or at_least_once (the default without checkpointing); see the
	// package comment.
	Mode string `json:"mode,omitempty"`
	// KeyColumns are the table columns of the upsert's ON CONFLICT
	// target (upsert only, and required there): a unique index or
	// primary key on exactly these columns must exist.
	KeyColumns []string `json:"keyColumns,omitempty"`
	// Columns maps input field names to table column names; a field
	// mapped to "" is not written, and a field not in the map is written
	// to the column of its own name. Column names are matched exactly
	// (case-sensitive, as the catalog holds them).
	Columns map[string]string `json:"columns,omitempty"`
	// BatchRows is how many rows go into one COPY or INSERT statement
	// (default 1000, at most 100000); a statement also goes out once the
	// buffered strings reach 8 MiB.
	BatchRows int `json:"batchRows,omitempty"`
	// ConnectTimeout bounds each connection attempt, as a duration
	// ("10s"; default the DSN's connect_timeout, else 10s; at most 5m).
	ConnectTimeout string `json:"connectTimeout,omitempty"`
}

// settings is a checked Config against one input schema.
type settings struct {
	cfg   Config
	mode  string // "" means by checkpointing
	table pgx.Identifier
	// fields are the input field indexes written, cols their columns,
	// types their types.
	fields []int
	cols   []string
	types  []stream.Type
	keys   []string // upsert's conflict target
	// keyIdx are the positions in cols of keys.
	keyIdx         []int
	batchRows      int
	connectTimeout time.Duration // 0: the DSN's, else the default
}

// checkConfig checks what can be checked without the input schema.
func checkConfig(cfg Config) (mode string, table pgx.Identifier, batchRows int, timeout time.Duration, err error) {
	switch {
	case cfg.DSN == "" && cfg.DSNFile == "":
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: missing dsn; set dsn to a connection string (postgres://user:password@host:5432/database) or dsnFile to a file holding one")
	case cfg.DSN != "" && cfg.DSNFile != "":
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: dsn and dsnFile are both set; set one of them")
	}
	if cfg.DSNFile != "" && !filepath.IsAbs(cfg.DSNFile) {
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: dsnFile %.200q is not an absolute path; give the absolute path of a file holding the connection string", cfg.DSNFile)
	}
	if cfg.DSN != "" {
		if _, err := parseDSN(cfg.DSN); err != nil {
			return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: dsn: %v", err)
		}
	}
	if cfg.Table == "" {
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: missing table; set table to the table to write to (name or schema.name)")
	}
	if table, err = parseTable(cfg.Table); err != nil {
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: table %.100q: %v", cfg.Table, err)
	}
	switch cfg.Mode {
	case "", ModeExactlyOnce, ModeUpsert, ModeAtLeastOnce:
	default:
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: mode %.40q: want %s, %s or %s (unset: %s when the job checkpoints, else %s)",
			cfg.Mode, ModeExactlyOnce, ModeUpsert, ModeAtLeastOnce, ModeExactlyOnce, ModeAtLeastOnce)
	}
	switch {
	case cfg.Mode == ModeUpsert && len(cfg.KeyColumns) == 0:
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: mode upsert needs keyColumns: the table columns of the unique index or primary key the upsert conflicts on")
	case cfg.Mode != ModeUpsert && len(cfg.KeyColumns) > 0:
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: keyColumns is for mode upsert only; remove it or set mode to upsert")
	}
	switch n := cfg.BatchRows; {
	case n < 0 || n > MaxBatchRows:
		return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: batchRows %d: must be between 1 and %d (unset means %d)", n, MaxBatchRows, DefaultBatchRows)
	case n == 0:
		batchRows = DefaultBatchRows
	default:
		batchRows = n
	}
	if cfg.ConnectTimeout != "" {
		d, err := time.ParseDuration(cfg.ConnectTimeout)
		if err != nil || d <= 0 || d > MaxConnectTimeout {
			return "", nil, 0, 0, stream.ConfigErrorf("postgres sink: connectTimeout %.40q: want a duration between 1ms and %v, such as \"10s\" (unset means the dsn's connect_timeout, else %v)",
				cfg.ConnectTimeout, MaxConnectTimeout, DefaultConnectTimeout)
		}
		timeout = d
	}
	return cfg.Mode, table, batchRows, timeout, nil
}

// newSettings checks cfg against the input schema in.
func newSettings(cfg Config, in *stream.Schema) (*settings, error) {
	mode, table, batchRows, timeout, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := &settings{cfg: cfg, mode: mode, table: table, batchRows: batchRows, connectTimeout: timeout}
	for _, field := range slices.Sorted(maps.Keys(cfg.Columns)) {
		if in.Index(field) < 0 {
			return nil, stream.ConfigErrorf("postgres sink: columns maps field %.100q, which the input lacks (it has %s)", field, strings.Join(in.Names(), ", "))
		}
	}
	seen := make(map[string]string)
	for i, f := range in.Fields {
		col, ok := cfg.Columns[f.Name]
		if !ok {
			col = f.Name
		}
		if col == "" {
			continue
		}
		if err := checkColumnName(col); err != nil {
			return nil, stream.ConfigErrorf("postgres sink: column %.100q for field %q: %v", col, f.Name, err)
		}
		if other, dup := seen[col]; dup {
			return nil, stream.ConfigErrorf("postgres sink: fields %q and %q both go to column %q; map one of them elsewhere with columns, or to \"\" to leave it out", other, f.Name, col)
		}
		seen[col] = f.Name
		s.fields, s.cols, s.types = append(s.fields, i), append(s.cols, col), append(s.types, f.Type)
	}
	if len(s.cols) == 0 {
		return nil, stream.ConfigErrorf("postgres sink: no field is written (columns maps every input field to \"\"); write at least one")
	}
	for _, k := range cfg.KeyColumns {
		i := slices.Index(s.cols, k)
		if i < 0 {
			return nil, stream.ConfigErrorf("postgres sink: keyColumns names %.100q, which is not a written column (they are %s)", k, strings.Join(s.cols, ", "))
		}
		if slices.Contains(s.keyIdx, i) {
			return nil, stream.ConfigErrorf("postgres sink: keyColumns names %q twice", k)
		}
		s.keys, s.keyIdx = append(s.keys, k), append(s.keyIdx, i)
	}
	return s, nil
}

func checkColumnName(col string) error {
	switch {
	case len(col) > maxIdentifier:
		return fmt.Errorf("a column name is at most %d bytes", maxIdentifier)
	case strings.IndexByte(col, 0) >= 0:
		return fmt.Errorf("a column name cannot hold a NUL byte")
	}
	return nil
}

// parseTable parses a table name as SQL writes it: one or two
// dot-separated identifiers, each unquoted (letters, digits, '_' and '$',
// not starting with a digit or '$'; folded to lower case) or
// double-quoted ("" stands for a quote).
func parseTable(s string) (pgx.Identifier, error) {
	var parts pgx.Identifier
	for rest := s; ; {
		var part string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for ; ; i++ {
				if i >= len(rest) {
					return nil, fmt.Errorf("unterminated quoted identifier")
				}
				if rest[i] == '"' {
					if i+1 < len(rest) && rest[i+1] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					break
				}
				b.WriteByte(rest[i])
			}
			part, rest = b.String(), rest[i+1:]
			if part == "" {
				return nil, fmt.Errorf("empty quoted identifier")
			}
		} else {
			i := 0
			for i < len(rest) && rest[i] != '.' {
				c := rest[i]
				ok := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= 0x80 ||
					i > 0 && ('0' <= c && c <= '9' || c == '$')
				if !ok {
					return nil, fmt.Errorf("unexpected %q: an unquoted name has letters, digits, '_' and '$' and starts with a letter or '_'; quote other names with double quotes", string(c))
				}
				i++
			}
			if i == 0 {
				return nil, fmt.Errorf("empty name; want name or schema.name")
			}
			part, rest = strings.ToLower(rest[:i]), rest[i:]
		}
		if err := checkColumnName(part); err != nil {
			return nil, fmt.Errorf("%s", strings.Replace(err.Error(), "column name", "name", 1))
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		if rest[0] != '.' {
			return nil, fmt.Errorf("unexpected %q after a name; want name or schema.name", string(rest[0]))
		}
		rest = rest[1:]
	}
	if len(parts) > 2 {
		return nil, fmt.Errorf("%d dotted parts; want name or schema.name (the database comes from the dsn)", len(parts))
	}
	return parts, nil
}

// displayName is a table or column name as a message shows it: plain
// when that reads back the same, else quoted.
func displayName(id pgx.Identifier) string {
	var parts []string
	for _, p := range id {
		plain := p != ""
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c == '_' || 'a' <= c && c <= 'z' || i > 0 && ('0' <= c && c <= '9' || c == '$')) {
				plain = false
			}
		}
		if plain {
			parts = append(parts, p)
		} else {
			parts = append(parts, pgx.Identifier{p}.Sanitize())
		}
	}
	return strings.Join(parts, ".")
}

// parseDSN parses a connection string, refusing keys outside dsnKeys.
// Its errors never quote the string.
func parseDSN(dsn string) (*pgx.ConnConfig, error) {
	if k := disallowedKey(dsn); k != "" {
		return nil, fmt.Errorf("key %.40q is not allowed (allowed: %s); certificate and password files cannot be named in a job's config", k, strings.Join(dsnKeys, ", "))
	}
	cc, err := pgx.ParseConfigWithOptions(dsn, pgx.ParseConfigOptions{
		ParseConfigOptions: pgconn.ParseConfigOptions{ConnStringAllowedKeys: dsnKeys},
	})
	if err != nil {
		return nil, fmt.Errorf("not a valid PostgreSQL connection string; want postgres://user:password@host:port/database?sslmode=... or key=value pairs such as \"host=db port=5432 dbname=app user=weir\" (the string itself is not shown, as it may hold a password)")
	}
	return cc, nil
}

// disallowedKey returns the first key of dsn outside dsnKeys that a
// quick scan finds ("" if none). pgx rejects such keys too; this finds
// the key's name for the message.
func disallowedKey(dsn string) string {
	var keys []string
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return ""
		}
		for k := range u.Query() {
			keys = append(keys, k)
		}
	} else {
		inQuote := false
		start := 0
		for i := 0; i <= len(dsn); i++ {
			if i < len(dsn) {
				switch c := dsn[i]; {
				case c == '\\' && inQuote:
					i++
					continue
				case c == '\'':
					inQuote = !inQuote
					continue
				case c != ' ' && c != '\t' && c != '\n' || inQuote:
					continue
				}
			}
			if k, _, ok := strings.Cut(dsn[start:i], "="); ok && strings.TrimSpace(k) != "" {
				keys = append(keys, strings.TrimSpace(k))
			}
			start = i + 1
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "database" {
			k = "dbname"
		}
		if !slices.Contains(dsnKeys, k) {
			return k
		}
	}
	return ""
}
