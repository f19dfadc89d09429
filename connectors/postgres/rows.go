package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirstream/weir/stream"
)

// maxBufferBytes bounds the string bytes buffered before a statement goes
// out, whatever batchRows says.
const maxBufferBytes = 8 << 20

// The range of PostgreSQL's timestamps in Unix milliseconds: from
// 4714-11-24 BC up to (not including) 294277-01-01.
const (
	minTimestampMillis = -210866803200000
	endTimestampMillis = 9224318016000000
)

// writer buffers rows of the written columns and sends them to the table
// in statements of up to batchRows rows: COPY, or for upserts an INSERT
// ... ON CONFLICT of arrays. It is used from one goroutine.
type writer struct {
	s      *settings
	srv    endpoint
	tbl    *table
	upsert bool
	sql    string   // the upsert statement
	colTyp []uint32 // each written column's type OID
	cols   []colBuf
	n      int // rows buffered
	bytes  int // string bytes buffered
}

// colBuf holds one written column's buffered values; only the slice of
// the column's stream type is used.
type colBuf struct {
	typ    stream.Type
	ints   []int64
	floats []float64
	strs   []string
	bools  []bool
	nulls  []bool
}

func newWriter(s *settings, srv endpoint, tbl *table, upsert bool) *writer {
	w := &writer{s: s, srv: srv, tbl: tbl, upsert: upsert, cols: make([]colBuf, len(s.cols))}
	for i, name := range s.cols {
		c, _ := tbl.column(name)
		w.colTyp = append(w.colTyp, c.typ)
		w.cols[i].typ = s.types[i]
	}
	if upsert {
		w.sql = upsertSQL(tbl.name, s)
	}
	return w
}

// upsertSQL is INSERT INTO t (cols) SELECT * FROM unnest($1::type[], ...)
// ON CONFLICT (keys) DO UPDATE SET c = EXCLUDED.c for the other columns
// (DO NOTHING when every column is a key). The arrays have the stream
// types; PostgreSQL casts them to the columns' types.
func upsertSQL(name pgx.Identifier, s *settings) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + name.Sanitize() + " (")
	for i, c := range s.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c}.Sanitize())
	}
	b.WriteString(") SELECT * FROM unnest(")
	for i, t := range s.types {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d::%s[]", i+1, arrayType(t))
	}
	b.WriteString(") ON CONFLICT (")
	for i, k := range s.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{k}.Sanitize())
	}
	b.WriteString(") DO ")
	var set []string
	for i, c := range s.cols {
		isKey := false
		for _, k := range s.keyIdx {
			isKey = isKey || k == i
		}
		if !isKey {
			q := pgx.Identifier{c}.Sanitize()
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	if len(set) == 0 {
		b.WriteString("NOTHING")
	} else {
		b.WriteString("UPDATE SET " + strings.Join(set, ", "))
	}
	return b.String()
}

func arrayType(t stream.Type) string {
	switch t {
	case stream.TypeInt64:
		return "bigint"
	case stream.TypeFloat64:
		return "double precision"
	case stream.TypeBool:
		return "boolean"
	case stream.TypeTimestamp:
		return "timestamptz"
	}
	return "text"
}

// full reports whether a statement should go out.
func (w *writer) full() bool { return w.n >= w.s.batchRows || w.bytes >= maxBufferBytes }

// write buffers b's rows, sending a statement through conn whenever the
// buffer fills. The rows of b are copied; b stays the caller's.
func (w *writer) write(ctx context.Context, conn *pgx.Conn, b *stream.Batch) error {
	for from := 0; from < b.Len(); {
		to := min(b.Len(), from+max(1, w.s.batchRows-w.n))
		if err := w.append(b, from, to); err != nil {
			return err
		}
		from = to
		if w.full() {
			if err := w.flush(ctx, conn); err != nil {
				return err
			}
		}
	}
	return nil
}

// append buffers rows [from, to) of b, checking the values that the
// column types cannot hold.
func (w *writer) append(b *stream.Batch, from, to int) error {
	for j, f := range w.s.fields {
		src, dst := &b.Cols[f], &w.cols[j]
		for i := from; i < to; i++ {
			null := src.IsNull(i)
			dst.nulls = append(dst.nulls, null)
			switch dst.typ {
			case stream.TypeInt64, stream.TypeTimestamp:
				v := src.Ints[i]
				if !null {
					if err := w.checkInt(j, v); err != nil {
						w.truncate()
						return err
					}
				}
				dst.ints = append(dst.ints, v)
			case stream.TypeFloat64:
				dst.floats = append(dst.floats, src.Floats[i])
			case stream.TypeString:
				dst.strs = append(dst.strs, src.Strs[i])
				w.bytes += len(src.Strs[i])
			case stream.TypeBool:
				dst.bools = append(dst.bools, src.Bools[i])
			}
		}
	}
	w.n += to - from
	return nil
}

// checkInt fails for an int64 that column j's type cannot hold, without
// quoting the value.
func (w *writer) checkInt(j int, v int64) error {
	var bad string
	switch {
	case w.cols[j].typ == stream.TypeTimestamp && (v < minTimestampMillis || v >= endTimestampMillis):
		bad = "a timestamp outside PostgreSQL's range (4714 BC to 294276 AD)"
	case w.colTyp[j] == oidInt4 && (v < math.MinInt32 || v > math.MaxInt32):
		bad = "a value outside the range of integer; make the column bigint"
	}
	if bad == "" {
		return nil
	}
	return fmt.Errorf("postgres sink: table %s, %s: column %s: %s", displayName(w.tbl.name), w.srv, displayName(pgx.Identifier{w.s.cols[j]}), bad)
}

// truncate drops a partly appended row set, keeping the first n rows.
func (w *writer) truncate() {
	for j := range w.cols {
		c := &w.cols[j]
		c.nulls = c.nulls[:w.n]
		switch c.typ {
		case stream.TypeInt64, stream.TypeTimestamp:
			c.ints = c.ints[:min(len(c.ints), w.n)]
		case stream.TypeFloat64:
			c.floats = c.floats[:min(len(c.floats), w.n)]
		case stream.TypeString:
			clear(c.strs[min(len(c.strs), w.n):])
			c.strs = c.strs[:min(len(c.strs), w.n)]
		case stream.TypeBool:
			c.bools = c.bools[:min(len(c.bools), w.n)]
		}
	}
}

// reset empties the buffer.
func (w *writer) reset() {
	w.n, w.bytes = 0, 0
	w.truncate()
}

// flush sends the buffered rows through conn, inside whatever
// transaction conn is in.
func (w *writer) flush(ctx context.Context, conn *pgx.Conn) error {
	if w.n == 0 {
		return nil
	}
	n := w.n
	var err error
	if w.upsert {
		_, err = conn.Exec(ctx, w.sql, w.arrays(w.dedupe())...)
	} else {
		_, err = conn.CopyFrom(ctx, w.tbl.name, w.s.cols, &copySource{w: w, i: -1, vals: make([]any, len(w.cols))})
	}
	w.reset()
	if err != nil {
		return fail(w.srv, w.tbl.name, "write "+rowsText(n), err)
	}
	return nil
}

// copySource feeds the buffered rows to CopyFrom.
type copySource struct {
	w    *writer
	i    int
	vals []any
}

func (c *copySource) Next() bool { c.i++; return c.i < c.w.n }
func (c *copySource) Err() error { return nil }
func (c *copySource) Values() ([]any, error) {
	for j := range c.w.cols {
		c.vals[j] = c.w.cols[j].value(c.i)
	}
	return c.vals, nil
}

// value returns row i as the client encodes it (nil for null).
func (c *colBuf) value(i int) any {
	if c.nulls[i] {
		return nil
	}
	switch c.typ {
	case stream.TypeInt64:
		return c.ints[i]
	case stream.TypeTimestamp:
		return time.UnixMilli(c.ints[i]).UTC()
	case stream.TypeFloat64:
		return c.floats[i]
	case stream.TypeString:
		return c.strs[i]
	case stream.TypeBool:
		return c.bools[i]
	}
	return nil
}

// dedupe returns the rows to upsert: for rows with equal keys only the
// last, as one INSERT ... ON CONFLICT cannot change a row twice. Rows
// with a null key column never conflict and are all kept.
func (w *writer) dedupe() []int {
	last := make(map[string]int, w.n)
	keys := make([]string, w.n)
	var buf []byte
	for i := range w.n {
		buf = buf[:0]
		null := false
		for _, k := range w.s.keyIdx {
			c := &w.cols[k]
			if c.nulls[i] {
				null = true
				break
			}
			switch c.typ {
			case stream.TypeInt64, stream.TypeTimestamp:
				buf = binary.AppendVarint(buf, c.ints[i])
			case stream.TypeFloat64:
				f := c.floats[i]
				switch {
				case f == 0:
					f = 0 // -0 equals 0
				case math.IsNaN(f):
					f = math.NaN() // all NaNs are equal to PostgreSQL
				}
				buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(f))
			case stream.TypeString:
				buf = binary.AppendUvarint(buf, uint64(len(c.strs[i])))
				buf = append(buf, c.strs[i]...)
			case stream.TypeBool:
				if c.bools[i] {
					buf = append(buf, 1)
				} else {
					buf = append(buf, 0)
				}
			}
		}
		if null {
			continue
		}
		keys[i] = string(buf)
		last[keys[i]] = i
	}
	sel := make([]int, 0, len(last))
	for i := range w.n {
		if j, ok := last[keys[i]]; !ok || j == i {
			sel = append(sel, i)
		}
	}
	return sel
}

// arrays returns the upsert's parameters: one array per column holding
// rows sel.
func (w *writer) arrays(sel []int) []any {
	out := make([]any, len(w.cols))
	for j := range w.cols {
		c := &w.cols[j]
		switch c.typ {
		case stream.TypeInt64:
			a := make([]pgtype.Int8, len(sel))
			for k, i := range sel {
				a[k] = pgtype.Int8{Int64: c.ints[i], Valid: !c.nulls[i]}
			}
			out[j] = a
		case stream.TypeTimestamp:
			a := make([]pgtype.Timestamptz, len(sel))
			for k, i := range sel {
				a[k] = pgtype.Timestamptz{Time: time.UnixMilli(c.ints[i]).UTC(), Valid: !c.nulls[i]}
			}
			out[j] = a
		case stream.TypeFloat64:
			a := make([]pgtype.Float8, len(sel))
			for k, i := range sel {
				a[k] = pgtype.Float8{Float64: c.floats[i], Valid: !c.nulls[i]}
			}
			out[j] = a
		case stream.TypeString:
			a := make([]pgtype.Text, len(sel))
			for k, i := range sel {
				a[k] = pgtype.Text{String: c.strs[i], Valid: !c.nulls[i]}
			}
			out[j] = a
		case stream.TypeBool:
			a := make([]pgtype.Bool, len(sel))
			for k, i := range sel {
				a[k] = pgtype.Bool{Bool: c.bools[i], Valid: !c.nulls[i]}
			}
			out[j] = a
		}
	}
	return out
}

// rowsText is "1 row" or "n rows".
func rowsText(n int) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}
