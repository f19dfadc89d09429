package batchcodec

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// dictCase is a string column drawn from a pool of distinct values, which
// the encoder stores as a dictionary when they repeat enough.
type dictCase struct {
	name  string
	pool  int // distinct values
	rows  int // at most, per batch
	lens  []int
	apart bool // values equal to pooled ones but stored apart
}

var dictCases = []dictCase{
	{name: "few", pool: 8, rows: 2048, lens: []int{3, 6, 10}},
	{name: "pooled urls", pool: 1024, rows: 2048, lens: []int{55, 60, 64}},
	{name: "empty to long", pool: 300, rows: 2048, lens: []int{0, 1, 127, 128, 129, 500}},
	{name: "many distinct", pool: 9000, rows: 8000, lens: []int{4, 12, 20}},
	{name: "equal values stored apart", pool: 64, rows: 2048, lens: []int{5, 40}, apart: true},
}

func (c dictCase) values(r *rand.Rand) []string {
	out := make([]string, c.pool)
	for i := range out {
		n := c.lens[r.IntN(len(c.lens))]
		tag := strconv.Itoa(i) + ":"
		if n < len(tag) {
			out[i] = tag[:n] // short values repeat: equal values, other entries
			continue
		}
		out[i] = tag + strings.Repeat(string(rune('a'+i%26)), n-len(tag))
	}
	return out
}

// dictBatch builds a batch of rows values drawn from pool, with nulls now
// and then, whose string column the encoder stores as a dictionary when its
// values repeat.
func dictBatch(r *rand.Rand, pool []string, rows int, apart bool) *stream.Batch {
	schema := stream.MustSchema(stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "s", Type: stream.TypeString})
	b := stream.NewBatch(schema, rows)
	for i := range rows {
		s := pool[r.IntN(len(pool))]
		if apart && i%2 == 0 {
			s = strings.Clone(s)
		}
		if r.IntN(50) == 0 {
			b.AppendRow(int64(i), nil)
			continue
		}
		b.AppendRow(int64(i), s)
	}
	return b
}

// checkNoAlias fails if a string of got points into data.
func checkNoAlias(t *testing.T, got *stream.Batch, data []byte) {
	t.Helper()
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	hi := lo + uintptr(len(data))
	for j := range got.Cols {
		if got.Cols[j].Type != stream.TypeString {
			continue
		}
		for i, s := range got.Cols[j].Strs[:got.Len()] {
			if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); len(s) > 0 && p >= lo && p < hi {
				t.Fatalf("column %d row %d: the decoded string points into the encoded input", j, i)
			}
		}
	}
}

// TestDictionariesDoNotAlias decodes many dictionary batches and checks
// every row against the batch encoded, that no decoded string points into
// the input, and that overwriting the input and decoding more batches
// changes nothing already decoded: the exchange reuses a payload's buffer
// once its batch is decoded.
func TestDictionariesDoNotAlias(t *testing.T) {
	for ci, c := range dictCases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, uint64(ci)))
			pool := c.values(r)
			type kept struct {
				got  *stream.Batch
				want [][]any
			}
			var keep []kept
			dicts := 0
			for iter := range 20 {
				b := dictBatch(r, pool, 1+r.IntN(c.rows), c.apart)
				want := rows(b)
				enc := Append(nil, b)
				if enc[dictFormOffset(b)] == formDict {
					dicts++
				}
				got, err := Decode(enc, b.Schema)
				if err != nil {
					t.Fatalf("batch %d: %v", iter, err)
				}
				if !reflect.DeepEqual(rows(got), want) {
					t.Fatalf("batch %d: rows differ after the round trip", iter)
				}
				checkNoAlias(t, got, enc)
				for i := range enc {
					enc[i] = 0xAA
				}
				keep = append(keep, kept{got, want})
				b.Release()
			}
			for i, k := range keep {
				if !reflect.DeepEqual(rows(k.got), k.want) {
					t.Fatalf("batch %d changed after its input was overwritten and later batches were decoded", i)
				}
				k.got.Release()
			}
			t.Logf("%d of 20 batches stored as a dictionary", dicts)
			if dicts == 0 {
				t.Fatalf("no batch was stored as a dictionary; the test does not test dictionaries")
			}
		})
	}
}

// dictFormOffset is the offset of the string column's form byte in the
// encoding of a dictBatch b (no times): the header, the int64 column, then
// the string column's type and null marker.
func dictFormOffset(b *stream.Batch) int {
	enc := Append(nil, b)
	d := decoder{buf: enc, packed: true}
	d.byte()
	d.uvarint()
	d.uvarint()
	d.byte()
	d.byte() // type
	if d.byte() == 1 {
		d.take(((b.Len() + 63) >> 6) * 8)
	}
	d.ints(nil, b.Len())
	d.byte() // type
	if d.byte() == 1 {
		d.take(((b.Len() + 63) >> 6) * 8)
	}
	return len(enc) - len(d.buf)
}

// TestDictionariesConcurrent decodes dictionary batches of shared pools on
// several goroutines at once, for the race detector: Decode is used by
// every consuming task of a taskmanager at once.
func TestDictionariesConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	pool := dictCases[1].values(r)
	type input struct {
		enc  []byte
		want [][]any
		s    *stream.Schema
	}
	var inputs []input
	for range 16 {
		b := dictBatch(r, pool, 1024, false)
		inputs = append(inputs, input{Append(nil, b), rows(b), b.Schema})
		b.Release()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 40 {
				in := inputs[(g*7+i)%len(inputs)]
				got, err := Decode(in.enc, in.s)
				if err != nil {
					errs <- err
					return
				}
				if !reflect.DeepEqual(rows(got), in.want) {
					errs <- errors.New("rows differ after a concurrent round trip")
					return
				}
				got.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestDecodeRejectsBadDictionaryBlock damages the string block of a
// dictionary: lengths that overrun the block, do not fill it, or are not
// varints, and a block longer than the input.
func TestDecodeRejectsBadDictionaryBlock(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	// version, 4 rows, 1 column, no flags; string column, no nulls,
	// dictionary form, 2 entries.
	head := []byte{version, 4, 1, 0, byte(stream.TypeString), 0, formDict, 2}
	tail := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0} // width 1, base 0, rows
	valid := append(append(append([]byte(nil), head...), 3, 'a', 'b', 'c', 1, 2), tail...)
	got, err := Decode(valid, schema)
	if err != nil {
		t.Fatalf("valid dictionary: %v", err)
	}
	if want := [][]any{{"a"}, {"bc"}, {"bc"}, {"a"}}; !reflect.DeepEqual(rows(got), want) {
		t.Fatalf("got %v, want %v", rows(got), want)
	}
	got.Release()
	for name, block := range map[string][]byte{
		"length beyond the block":    {3, 'a', 'b', 'c', 1, 3},
		"lengths short of the block": {3, 'a', 'b', 'c', 1, 1},
		"length not a varint":        {3, 'a', 'b', 'c', 1, 0x80},
		"block beyond the input":     {0x7f, 'a', 'b', 'c', 1, 2},
		"entries beyond the input":   {3, 'a', 'b', 'c'},
	} {
		enc := append(append(append([]byte(nil), head...), block...), tail...)
		if name == "entries beyond the input" {
			enc = append(append([]byte(nil), head...), block...)
		}
		if _, err := Decode(enc, schema); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", name, err)
		}
	}
}
