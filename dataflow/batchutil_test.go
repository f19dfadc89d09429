package dataflow

import (
	"testing"

	"github.com/weirstream/weir/stream"
)

// TestScatterAndCloneKeepDictionaryHint checks that a key partition's
// sub-batches and a clone keep a string column's dictionary hint
// (stream.Column.Dict, Codes) in step with its values, so that an exchange
// behind them still encodes by code, and that a column without a hint
// that covers its rows gives none.
func TestScatterAndCloneKeepDictionaryHint(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString}, stream.Field{Name: "t", Type: stream.TypeString})
	d := stream.NewStringDict([]string{"p", "q", "r", "s", "t"})
	const n = 100
	b := stream.NewBatch(schema, n)
	for i := range n {
		x := (i * 7) % len(d.Values)
		b.Cols[0].Strs = append(b.Cols[0].Strs, d.Values[x])
		b.Cols[0].Codes = append(b.Cols[0].Codes, uint32(x))
		b.Cols[1].Strs = append(b.Cols[1].Strs, d.Values[x])
	}
	b.Cols[0].Dict = d
	b.Cols[1].Dict = d // no codes: no hint
	b.SetLen(n)
	check := func(what string, c *stream.Column, rows int) {
		t.Helper()
		if !c.HasDict() || len(c.Strs) != rows {
			t.Fatalf("%s: %d rows, hint %v with %d codes", what, len(c.Strs), c.Dict != nil, len(c.Codes))
		}
		for i, v := range c.Strs {
			if d.Values[c.Codes[i]] != v {
				t.Fatalf("%s row %d: %q, its code names %q", what, i, v, d.Values[c.Codes[i]])
			}
		}
	}
	clone := cloneBatch(b)
	check("clone", &clone.Cols[0], n)
	if clone.Cols[1].Dict != nil {
		t.Fatalf("clone: a column without codes got a hint")
	}
	clone.Release()

	const k = 3
	dest, pos := make([]int32, n), make([]int32, n)
	counts := make([]int32, k)
	for i := range n {
		dest[i] = int32(i % k)
		pos[i] = counts[i%k]
		counts[i%k]++
	}
	subs := make([]*stream.Batch, k)
	for i := range subs {
		subs[i] = stream.NewBatch(schema, int(counts[i]))
		subs[i].SetLen(int(counts[i]))
	}
	scatter(b, dest, pos, subs, make([]*stream.Column, k))
	for i, s := range subs {
		check("sub-batch", &s.Cols[0], int(counts[i]))
		if s.Cols[1].HasDict() {
			t.Fatalf("sub-batch %d: a column without codes got a hint", i)
		}
		for r := range s.Len() {
			if want := b.Cols[0].Strs[r*k+i]; s.Cols[0].Strs[r] != want {
				t.Fatalf("sub-batch %d row %d: %q, want %q", i, r, s.Cols[0].Strs[r], want)
			}
		}
		s.Release()
	}
	b.Release()
}
