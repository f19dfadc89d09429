package stream

import (
	"strings"
	"testing"
)

// TestStringDictCode checks that Code finds exactly the strings stored
// where the dictionary keeps its values: each value by its position, and
// not an equal copy, a prefix, a piece from inside a value, or anything
// outside; that CodesOf agrees; that a list too sparse for a block finds
// nothing; and that a released batch's columns name no dictionary.
// Strings stored elsewhere lie below the block or beyond it.
func TestStringDictCode(t *testing.T) {
	values := []string{"", "a", "bb", "ccc", "dddd", "eeeee", "https://www.example.com/x", "z"}
	d := NewStringDict(values)
	if d.Len() != len(values) {
		t.Fatalf("Len %d, want %d", d.Len(), len(values))
	}
	var probe []string
	var want []int32
	for i, v := range d.Values {
		if v != values[i] {
			t.Fatalf("value %d is %q, want %q", i, v, values[i])
		}
		probe, want = append(probe, v), append(want, int32(i))
		if got := d.Code(v); got != i {
			t.Fatalf("Code of value %d = %d", i, got)
		}
		if v == "" {
			continue
		}
		for _, other := range []string{strings.Clone(v), v[:len(v)-1], v[1:]} {
			if got := d.Code(other); got != -1 && !(other == "" && d.Values[got] == "") {
				t.Fatalf("Code of %q (stored elsewhere or a piece of value %d) = %d, want -1", other, i, got)
			}
			probe, want = append(probe, other), append(want, int32(d.Code(other)))
		}
	}
	codes := make([]int32, len(probe))
	d.CodesOf(probe, codes)
	for i := range probe {
		if codes[i] != want[i] {
			t.Fatalf("CodesOf row %d = %d, Code says %d", i, codes[i], want[i])
		}
	}

	sparse := append([]string{strings.Repeat("x", 4<<20)}, values...)
	sd := NewStringDict(sparse)
	if sd.Len() != len(sparse) || sd.Values[0] != sparse[0] || sd.Values[3] != "bb" {
		t.Fatalf("a sparse dictionary lost its values")
	}
	for _, v := range sd.Values {
		if sd.Code(v) != -1 {
			t.Fatalf("a dictionary too sparse for a block found %q", v)
		}
	}
	sd.CodesOf(sd.Values, codes[:len(sd.Values)])
	for i, c := range codes[:len(sd.Values)] {
		if c != -1 {
			t.Fatalf("CodesOf of a sparse dictionary found row %d", i)
		}
	}

	s := MustSchema(Field{"a", TypeString})
	b := NewBatch(s, 4)
	b.Cols[0].Strs = append(b.Cols[0].Strs, d.Values[2])
	b.Cols[0].Dict = d
	b.SetLen(1)
	b.Release()
	for range 4 { // the pool may hand out another batch
		nb := NewBatch(s, 4)
		if nb.Cols[0].Dict != nil {
			t.Fatalf("a new batch's column names a dictionary")
		}
		defer nb.Release()
	}
}
