package connectors

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/weirstream/weir/stream"
)

// FuzzJSONDecoder checks the hand-written JSON-lines decoder against
// encoding/json: a line is accepted exactly when encoding/json finds one
// valid JSON object in it (and every declared field's value fits its
// column), and then every declared field holds what encoding/json read
// (the last of duplicate keys; missing and null are null).
func FuzzJSONDecoder(f *testing.F) {
	for _, seed := range []string{
		`{"i":1,"f":2.5,"s":"x","b":true,"t":"2024-01-02T03:04:05Z"}`,
		`{"i":-0,"f":1e300,"s":"\u00e9\ud83d\ude00","b":false,"t":1700000000000}`,
		`{"other":{"a":[1,2,{"b":null}]},"i":null,"s":"a\"b\\c\/d\b\f\n\r\t"}`,
		`{"i":1,"i":2}`, `{}`, ` {"s" : "x" } `, `[1]`, `{"i":01}`, `{"i":+1}`, `{"f":.5}`, `{"f":1.}`,
		`{"i":1e2}`, `{"s":"\ud800\u0041"}`, `{"s":"\ud800"}`, "{\"s\":\"\x01\"}", "{\"s\":\"\xff\"}",
		`{"x":-}`, `{"x":1-2}`, `{"b":tru}`, `{"i":1} x`, `{"i":1,}`, `{"i"1}`, `{"i":9223372036854775808}`,
	} {
		f.Add([]byte(seed))
	}
	schema := stream.MustSchema(
		stream.Field{Name: "i", Type: stream.TypeInt64},
		stream.Field{Name: "f", Type: stream.TypeFloat64},
		stream.Field{Name: "s", Type: stream.TypeString},
		stream.Field{Name: "b", Type: stream.TypeBool},
		stream.Field{Name: "t", Type: stream.TypeTimestamp},
	)
	f.Fuzz(func(t *testing.T, line []byte) {
		if nesting(line) > 1000 { // the decoder's documented limit; encoding/json allows 10000
			return
		}
		want, wantOK := referenceDecode(schema, line)
		d := newJSONDecoder(schema)
		b := stream.NewBatch(schema, 1)
		var a arena
		err := d.decode(line, b, 0, &a)
		if (err == nil) != wantOK {
			t.Fatalf("line %q: decoder error %v, encoding/json accepts it: %v", line, err, wantOK)
		}
		if err != nil {
			return
		}
		b.SetLen(1)
		for i, fld := range schema.Fields {
			c := &b.Cols[i]
			got := any(nil)
			if !c.IsNull(0) {
				got = c.Value(0)
			}
			if !sameValue(got, want[i]) {
				t.Fatalf("line %q: field %s = %#v, encoding/json gives %#v", line, fld.Name, got, want[i])
			}
		}
	})
}

// referenceDecode decodes line with encoding/json into the schema's
// columns as the decoder documents them; ok is false when the decoder must
// reject the line.
func referenceDecode(schema *stream.Schema, line []byte) (vals []any, ok bool) {
	if !json.Valid(line) || !bytes.HasPrefix(bytes.TrimLeft(line, " \t\r\n"), []byte("{")) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, false
	}
	vals = make([]any, schema.Len())
	for i, fld := range schema.Fields {
		v, present := m[fld.Name]
		if !present || v == nil {
			continue
		}
		switch x := v.(type) {
		case string:
			switch fld.Type {
			case stream.TypeString:
				vals[i] = x
			case stream.TypeTimestamp:
				ts, err := time.Parse(time.RFC3339Nano, x)
				if err != nil {
					return nil, false
				}
				vals[i] = ts.UnixMilli()
			default:
				return nil, false
			}
		case bool:
			if fld.Type != stream.TypeBool {
				return nil, false
			}
			vals[i] = x
		case json.Number:
			switch fld.Type {
			case stream.TypeInt64, stream.TypeTimestamp:
				n, err := strconv.ParseInt(x.String(), 10, 64)
				if err != nil {
					return nil, false
				}
				vals[i] = n
			case stream.TypeFloat64:
				n, err := strconv.ParseFloat(x.String(), 64)
				if err != nil {
					return nil, false
				}
				vals[i] = n
			default:
				return nil, false
			}
		default: // object or array
			return nil, false
		}
	}
	return vals, true
}

// sameValue compares decoded values, timestamps as Unix milliseconds.
func sameValue(got, want any) bool {
	if ts, ok := got.(time.Time); ok {
		got = ts.UnixMilli()
	}
	if g, ok := got.(float64); ok {
		w, ok := want.(float64)
		return ok && (g == w || math.IsNaN(g) && math.IsNaN(w))
	}
	return got == want
}

// nesting returns how deep brackets nest in line, outside strings.
func nesting(line []byte) int {
	depth, deepest, inStr, esc := 0, 0, false, false
	for _, c := range line {
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case inStr && c == '"':
			inStr = false
		case inStr:
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
