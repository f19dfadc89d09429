package dataflow

import (
	"testing"

	"github.com/weirstream/weir/stream"
)

// TestScatterAndCloneKeepDictionary checks that a key partition's
// sub-batches and a clone name the dictionary of a string column they
// copy (stream.Column.Dict), so that an exchange behind them still encodes
// its rows by code, and name none for a column without.
func TestScatterAndCloneKeepDictionary(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString}, stream.Field{Name: "t", Type: stream.TypeString})
	d := stream.NewStringDict([]string{"p", "q", "r", "s", "t"})
	const n = 100
	b := stream.NewBatch(schema, n)
	for i := range n {
		v := d.Values[(i*7)%d.Len()]
		b.Cols[0].Strs = append(b.Cols[0].Strs, v)
		b.Cols[1].Strs = append(b.Cols[1].Strs, v)
	}
	b.Cols[0].Dict = d
	b.SetLen(n)
	check := func(what string, c *stream.Column, rows int) {
		t.Helper()
		if c.Dict != d || len(c.Strs) != rows {
			t.Fatalf("%s: %d rows, dictionary %p, want %p", what, len(c.Strs), c.Dict, d)
		}
		for i, v := range c.Strs {
			if x := d.Code(v); x < 0 || d.Values[x] != v {
				t.Fatalf("%s row %d: %q has no code", what, i, v)
			}
		}
	}
	clone := cloneBatch(b)
	check("clone", &clone.Cols[0], n)
	if clone.Cols[1].Dict != nil {
		t.Fatalf("clone: a column without a dictionary got one")
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
		if s.Cols[1].Dict != nil {
			t.Fatalf("sub-batch %d: a column without a dictionary got one", i)
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
