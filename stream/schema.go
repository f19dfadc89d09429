package stream

import (
	"fmt"
	"strings"
)

// Type is the type of a field. Values of a field live in one typed column of a
// Batch: Int64 and Timestamp in Column.Ints, Float64 in Column.Floats, String
// in Column.Strs, Bool in Column.Bools.
type Type uint8

const (
	TypeInvalid Type = iota
	TypeInt64
	TypeFloat64
	TypeString
	TypeBool
	// TypeTimestamp is milliseconds since the Unix epoch, stored as int64.
	TypeTimestamp
)

var typeNames = [...]string{
	TypeInvalid:   "invalid",
	TypeInt64:     "int64",
	TypeFloat64:   "float64",
	TypeString:    "string",
	TypeBool:      "bool",
	TypeTimestamp: "timestamp",
}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", t)
}

// ParseType returns the Type named s ("int64", "float64", "string", "bool",
// "timestamp"; "int" and "double" are accepted as aliases).
func ParseType(s string) (Type, error) {
	switch strings.ToLower(s) {
	case "int64", "int", "long", "bigint":
		return TypeInt64, nil
	case "float64", "float", "double":
		return TypeFloat64, nil
	case "string", "str", "varchar":
		return TypeString, nil
	case "bool", "boolean":
		return TypeBool, nil
	case "timestamp", "time":
		return TypeTimestamp, nil
	}
	return TypeInvalid, fmt.Errorf("unknown type %q (want int64, float64, string, bool or timestamp)", s)
}

// IsNumeric reports whether values of t can take part in arithmetic.
func (t Type) IsNumeric() bool { return t == TypeInt64 || t == TypeFloat64 || t == TypeTimestamp }

// Field is a named, typed column.
type Field struct {
	Name string
	Type Type
}

// Schema is an ordered list of uniquely named fields. A Schema is immutable
// once built and may be shared by any number of batches and goroutines.
type Schema struct {
	Fields []Field
	index  map[string]int
}

// NewSchema returns a schema of fields, or an error naming a duplicate or
// empty field name or an invalid type.
func NewSchema(fields ...Field) (*Schema, error) {
	s := &Schema{Fields: append([]Field(nil), fields...), index: make(map[string]int, len(fields))}
	for i, f := range s.Fields {
		if f.Name == "" {
			return nil, fmt.Errorf("field %d has no name", i)
		}
		if f.Type == TypeInvalid || int(f.Type) >= len(typeNames) {
			return nil, fmt.Errorf("field %q has invalid type %v", f.Name, f.Type)
		}
		if _, dup := s.index[f.Name]; dup {
			return nil, fmt.Errorf("field %q appears twice", f.Name)
		}
		s.index[f.Name] = i
	}
	return s, nil
}

// MustSchema is NewSchema that panics on error, for schemas fixed in code.
func MustSchema(fields ...Field) *Schema {
	s, err := NewSchema(fields...)
	if err != nil {
		panic(err)
	}
	return s
}

// Index returns the position of the field called name, or -1.
func (s *Schema) Index(name string) int {
	if i, ok := s.index[name]; ok {
		return i
	}
	return -1
}

// Len returns the number of fields.
func (s *Schema) Len() int { return len(s.Fields) }

// Names returns the field names in order.
func (s *Schema) Names() []string {
	out := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		out[i] = f.Name
	}
	return out
}

// Equal reports whether s and o have the same fields in the same order.
func (s *Schema) Equal(o *Schema) bool {
	if s == o {
		return true
	}
	if s == nil || o == nil || len(s.Fields) != len(o.Fields) {
		return false
	}
	for i := range s.Fields {
		if s.Fields[i] != o.Fields[i] {
			return false
		}
	}
	return true
}

func (s *Schema) String() string {
	var b strings.Builder
	b.WriteByte('(')
	for i, f := range s.Fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Name)
		b.WriteByte(' ')
		b.WriteString(f.Type.String())
	}
	b.WriteByte(')')
	return b.String()
}

// Lookup returns the index of each named field, or an error naming the first
// field that s lacks and the fields it has.
func (s *Schema) Lookup(names ...string) ([]int, error) {
	idx := make([]int, len(names))
	for i, n := range names {
		j := s.Index(n)
		if j < 0 {
			return nil, fmt.Errorf("no field %q (the input has %s)", n, strings.Join(s.Names(), ", "))
		}
		idx[i] = j
	}
	return idx, nil
}
