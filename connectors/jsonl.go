package connectors

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// jsonDecoder decodes JSON-object lines into the declared columns of a
// batch. It is a small hand-written scanner: declared keys are found with one
// map lookup, other values are skipped without being decoded, and strings are
// copied into an arena, so a line costs no allocation.
type jsonDecoder struct {
	schema  *stream.Schema
	index   map[string]int
	seen    []bool
	scratch []byte // unescaped strings and keys
}

func newJSONDecoder(schema *stream.Schema) *jsonDecoder {
	d := &jsonDecoder{schema: schema, index: make(map[string]int), seen: make([]bool, schema.Len())}
	for i, f := range schema.Fields {
		d.index[f.Name] = i
	}
	return d
}

type jsonScanner struct {
	b []byte
	i int
}

var errJSONEnd = errors.New("unexpected end of line")

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) syntax(what string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("invalid JSON: %v, want %s", errJSONEnd, what)
	}
	return fmt.Errorf("invalid JSON at column %d: found %q, want %s", s.i+1, s.b[s.i], what)
}

// decode appends row row of b from line.
func (d *jsonDecoder) decode(line []byte, b *stream.Batch, row int, a *arena) error {
	for i := range b.Cols { // append a zero value to every column
		c := &b.Cols[i]
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			c.Ints = append(c.Ints, 0)
		case stream.TypeFloat64:
			c.Floats = append(c.Floats, 0)
		case stream.TypeString:
			c.Strs = append(c.Strs, "")
		case stream.TypeBool:
			c.Bools = append(c.Bools, false)
		}
		d.seen[i] = false
	}
	if err := d.object(line, b, row, a); err != nil {
		for i := range b.Cols { // leave the batch consistent
			truncate(&b.Cols[i], row)
		}
		return err
	}
	for i, ok := range d.seen {
		if !ok {
			b.Cols[i].SetNull(row, max(row+1, cap(b.Cols[i].Ints), cap(b.Cols[i].Floats), cap(b.Cols[i].Strs), cap(b.Cols[i].Bools)))
		}
	}
	return nil
}

func truncate(c *stream.Column, n int) {
	switch c.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		c.Ints = c.Ints[:n]
	case stream.TypeFloat64:
		c.Floats = c.Floats[:n]
	case stream.TypeString:
		c.Strs = c.Strs[:n]
	case stream.TypeBool:
		c.Bools = c.Bools[:n]
	}
}

func (d *jsonDecoder) object(line []byte, b *stream.Batch, row int, a *arena) error {
	s := jsonScanner{b: line}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.syntax("a JSON object '{'")
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return s.end()
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.syntax("a key string")
		}
		key, err := s.str(&d.scratch)
		if err != nil {
			return err
		}
		col, declared := d.index[string(key)]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.syntax("':'")
		}
		s.i++
		s.ws()
		if declared {
			err = d.value(&s, &b.Cols[col], col, row, a)
		} else {
			err = s.skip(0)
		}
		if err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.syntax("',' or '}'")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return s.end()
		default:
			return s.syntax("',' or '}'")
		}
	}
}

func (s *jsonScanner) end() error {
	s.ws()
	if s.i < len(s.b) {
		return s.syntax("end of line after the object")
	}
	return nil
}

func jsonKind(c byte) string {
	switch {
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a bool"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	}
	return fmt.Sprintf("%q", c)
}

func unsafeStr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// value decodes the value at s into row of column c (field number col).
func (d *jsonDecoder) value(s *jsonScanner, c *stream.Column, col, row int, a *arena) error {
	if s.i >= len(s.b) {
		return s.syntax("a value")
	}
	f := d.schema.Fields[col]
	ch := s.b[s.i]
	mismatch := func(got string) error {
		hint := ""
		if f.Type == stream.TypeTimestamp {
			hint = " (an RFC3339 string or integer milliseconds)"
		}
		return fmt.Errorf("field %q: want %s%s, got %s; fix the data or declare the field's type to match", f.Name, f.Type, hint, got)
	}
	if ch == 'n' {
		if err := s.lit("null"); err != nil {
			return err
		}
		d.seen[col] = false
		truncate(c, row)
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			c.Ints = append(c.Ints, 0)
		case stream.TypeFloat64:
			c.Floats = append(c.Floats, 0)
		case stream.TypeString:
			c.Strs = append(c.Strs, "")
		case stream.TypeBool:
			c.Bools = append(c.Bools, false)
		}
		return nil
	}
	d.seen[col] = true
	switch ch {
	case '"':
		v, err := s.str(&d.scratch)
		if err != nil {
			return err
		}
		switch c.Type {
		case stream.TypeString:
			c.Strs[row] = a.str(v)
		case stream.TypeTimestamp:
			t, err := time.Parse(time.RFC3339Nano, unsafeStr(v))
			if err != nil {
				return mismatch("a string that is not an RFC3339 time")
			}
			c.Ints[row] = t.UnixMilli()
		default:
			return mismatch("a string")
		}
	case 't', 'f':
		lit := "true"
		if ch == 'f' {
			lit = "false"
		}
		if err := s.lit(lit); err != nil {
			return err
		}
		if c.Type != stream.TypeBool {
			return mismatch("a bool")
		}
		c.Bools[row] = ch == 't'
	case '{', '[':
		return mismatch(jsonKind(ch))
	default:
		num, err := s.number()
		if err != nil {
			return err
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			v, err := strconv.ParseInt(unsafeStr(num), 10, 64)
			if err != nil {
				return mismatch("a number that is not a whole number within int64's range")
			}
			c.Ints[row] = v
		case stream.TypeFloat64:
			v, err := strconv.ParseFloat(unsafeStr(num), 64)
			if err != nil {
				return mismatch("a number beyond float64's range")
			}
			c.Floats[row] = v
		default:
			return mismatch("a number")
		}
	}
	return nil
}

func (s *jsonScanner) lit(want string) error {
	if len(s.b)-s.i < len(want) || string(s.b[s.i:s.i+len(want)]) != want {
		return s.syntax(want)
	}
	s.i += len(want)
	return nil
}

// number scans a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) number() ([]byte, error) {
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digits() == 0:
		if s.i == start {
			return nil, s.syntax("a value")
		}
		return nil, s.syntax("a digit")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return nil, s.syntax("a digit after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return nil, s.syntax("a digit in the exponent")
		}
	}
	return s.b[start:s.i], nil
}

// str scans the string at s (which starts with '"') and returns its
// contents, unescaped into *scratch when it has escapes. The result is valid
// until the next call.
//
// As encoding/json does, it rejects control characters, replaces each byte
// of invalid UTF-8 and each unpaired surrogate escape with U+FFFD.
func (s *jsonScanner) str(scratch *[]byte) ([]byte, error) {
	s.i++ // opening quote
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			s.i++
			return s.b[start : s.i-1], nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			s.i += size
			continue
		}
		s.i++
	}
	out := append((*scratch)[:0], s.b[start:s.i]...)
	defer func() { *scratch = out[:0] }()
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out, nil
		case c < 0x20:
			return nil, s.syntax("no control character in a string")
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, s.b[s.i:s.i+size]...)
			}
			s.i += size
			continue
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.syntax("4 hex digits after \\u")
			}
			if utf16.IsSurrogate(r) {
				// A pair takes the next escape; anything else is U+FFFD
				// and the next escape stands on its own.
				r2 := utf8.RuneError
				if s.i+5 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					if r2, ok = s.hex4(); !ok {
						return nil, s.syntax("4 hex digits after \\u")
					}
					if utf16.DecodeRune(r, r2) == utf8.RuneError {
						s.i -= 6
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			s.i--
			return nil, s.syntax("a valid escape")
		}
	}
	return nil, s.syntax("closing '\"'")
}

func (s *jsonScanner) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(unsafeStr(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// skip passes over one value of any kind.
func (s *jsonScanner) skip(depth int) error {
	if depth > 1000 {
		return fmt.Errorf("invalid JSON: nested more than 1000 levels deep")
	}
	if s.i >= len(s.b) {
		return s.syntax("a value")
	}
	switch c := s.b[s.i]; c {
	case '"':
		var discard []byte
		_, err := s.str(&discard)
		return err
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == closer {
			s.i++
			return nil
		}
		for {
			s.ws()
			if c == '{' {
				if s.i >= len(s.b) || s.b[s.i] != '"' {
					return s.syntax("a key string")
				}
				var discard []byte
				if _, err := s.str(&discard); err != nil {
					return err
				}
				s.ws()
				if s.i >= len(s.b) || s.b[s.i] != ':' {
					return s.syntax("':'")
				}
				s.i++
				s.ws()
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			s.ws()
			if s.i >= len(s.b) {
				return s.syntax(fmt.Sprintf("',' or '%c'", closer))
			}
			if s.b[s.i] == closer {
				s.i++
				return nil
			}
			if s.b[s.i] != ',' {
				return s.syntax(fmt.Sprintf("',' or '%c'", closer))
			}
			s.i++
		}
	default:
		_, err := s.number()
		return err
	}
}
