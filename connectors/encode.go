package connectors

import (
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/weirstream/weir/stream"
)

// rowFormat is a textual row encoding shared by the print and file sinks.
type rowFormat int

const (
	formatText rowFormat = iota + 1 // "v1, v2, ..."
	formatCSV                       // RFC 4180, with a header line
	formatJSON                      // one {"field": value} object per line
)

// timeLayout is how every sink prints timestamps: RFC3339 in UTC with
// milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// rowEncoder appends rows of batches of one schema as text lines.
type rowEncoder struct {
	format rowFormat
	schema *stream.Schema
	prefix []byte   // written before every line (text format)
	keys   [][]byte // `"name":` per field (JSON format)
}

func newRowEncoder(format rowFormat, schema *stream.Schema, prefix string) *rowEncoder {
	e := &rowEncoder{format: format, schema: schema, prefix: []byte(prefix)}
	if format == formatJSON {
		for _, f := range schema.Fields {
			k := appendJSONString(nil, f.Name)
			e.keys = append(e.keys, append(k, ':'))
		}
	}
	return e
}

// appendHeader appends the CSV header line of field names.
func (e *rowEncoder) appendHeader(dst []byte) []byte {
	for i, f := range e.schema.Fields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCSVString(dst, f.Name)
	}
	return append(dst, '\n')
}

// appendBatch appends every row of b, each ending in '\n'.
func (e *rowEncoder) appendBatch(dst []byte, b *stream.Batch) []byte {
	for i := range b.Len() {
		dst = e.appendRow(dst, b, i)
	}
	return dst
}

func (e *rowEncoder) appendRow(dst []byte, b *stream.Batch, row int) []byte {
	dst = append(dst, e.prefix...)
	if e.format == formatJSON {
		dst = append(dst, '{')
	}
	for j := range b.Cols {
		c := &b.Cols[j]
		switch e.format {
		case formatJSON:
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, e.keys[j]...)
			dst = appendJSONValue(dst, c, row)
		case formatCSV:
			if j > 0 {
				dst = append(dst, ',')
			}
			if !c.IsNull(row) {
				if c.Type == stream.TypeString {
					dst = appendCSVString(dst, c.Strs[row])
				} else {
					dst = appendPlain(dst, c, row)
				}
			}
		default:
			if j > 0 {
				dst = append(dst, ", "...)
			}
			if c.IsNull(row) {
				dst = append(dst, "null"...)
			} else if c.Type == stream.TypeString {
				dst = append(dst, c.Strs[row]...)
			} else {
				dst = appendPlain(dst, c, row)
			}
		}
	}
	if e.format == formatJSON {
		dst = append(dst, '}')
	}
	return append(dst, '\n')
}

// appendPlain appends a non-null, non-string value.
func appendPlain(dst []byte, c *stream.Column, row int) []byte {
	switch c.Type {
	case stream.TypeInt64:
		return strconv.AppendInt(dst, c.Ints[row], 10)
	case stream.TypeTimestamp:
		return time.UnixMilli(c.Ints[row]).UTC().AppendFormat(dst, timeLayout)
	case stream.TypeFloat64:
		return strconv.AppendFloat(dst, c.Floats[row], 'g', -1, 64)
	case stream.TypeBool:
		return strconv.AppendBool(dst, c.Bools[row])
	case stream.TypeString:
		return append(dst, c.Strs[row]...)
	}
	return dst
}

func appendJSONValue(dst []byte, c *stream.Column, row int) []byte {
	if c.IsNull(row) {
		return append(dst, "null"...)
	}
	switch c.Type {
	case stream.TypeString:
		return appendJSONString(dst, c.Strs[row])
	case stream.TypeTimestamp:
		dst = append(dst, '"')
		dst = appendPlain(dst, c, row)
		return append(dst, '"')
	case stream.TypeFloat64:
		if f := c.Floats[row]; math.IsNaN(f) || math.IsInf(f, 0) {
			return append(dst, "null"...) // JSON has no NaN or infinity
		}
	}
	return appendPlain(dst, c, row)
}

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\ufffd`...)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendCSVString appends s, quoted if it holds a comma, quote, line break or
// leading or trailing space, or is empty (so that it differs from null).
func appendCSVString(dst []byte, s string) []byte {
	quote := s == "" || s[0] == ' ' || s[len(s)-1] == ' '
	for i := 0; i < len(s) && !quote; i++ {
		switch s[i] {
		case ',', '"', '\n', '\r':
			quote = true
		}
	}
	if !quote {
		return append(dst, s...)
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			dst = append(dst, '"')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// lineBuffer collects whole lines and writes them in large chunks, so that
// writers shared between subtasks never see a line split.
type lineBuffer struct {
	w   io.Writer
	buf []byte
}

// flushAt is the buffered size at which sinks write.
const flushAt = 64 << 10

func (l *lineBuffer) flushIfFull() error {
	if len(l.buf) >= flushAt {
		return l.flush()
	}
	return nil
}

func (l *lineBuffer) flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	return err
}
