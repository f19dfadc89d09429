package batchcodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var allTypes = []stream.Type{stream.TypeInt64, stream.TypeFloat64, stream.TypeString, stream.TypeBool, stream.TypeTimestamp}

// randomBatch builds a batch of a random schema through AppendRow, the slow
// reference path, so the codec is checked against an independent writer.
func randomBatch(r *rand.Rand) *stream.Batch {
	nf := r.IntN(6)
	fields := make([]stream.Field, nf)
	for i := range fields {
		fields[i] = stream.Field{Name: "f" + string(rune('a'+i)), Type: allTypes[r.IntN(len(allTypes))]}
	}
	schema := stream.MustSchema(fields...)
	rows := r.IntN(300)
	if r.IntN(8) == 0 {
		rows = 0
	}
	b := stream.NewBatch(schema, rows)
	nullRate := []int{0, 0, 2, 10}[r.IntN(4)]
	// Each integer column spans a range of its own, so that every packed
	// width occurs; each string column draws from a pool of its own
	// (strings sharing their bytes, as a source's value pool) or makes
	// every value anew.
	spans := make([]int64, nf)
	bases := make([]int64, nf)
	pools := make([][]string, nf)
	for j := range fields {
		spans[j] = []int64{0, 1, 255, 256, 1 << 20, 1 << 30, 1 << 35, 1 << 40, 1 << 56, math.MaxInt64}[r.IntN(10)]
		bases[j] = r.Int64() - math.MaxInt64/2
		if r.IntN(2) == 0 {
			pools[j] = make([]string, 1+r.IntN(300))
			for k := range pools[j] {
				pools[j][k] = strings.Repeat([]string{"", "a", "héllo", "\x00\xff", "ünïcødé-✓"}[r.IntN(5)], r.IntN(40))
			}
		}
	}
	for i := 0; i < rows; i++ {
		vals := make([]any, nf)
		for j, f := range fields {
			if nullRate > 0 && r.IntN(nullRate) == 0 {
				continue // nil: null
			}
			switch f.Type {
			case stream.TypeInt64, stream.TypeTimestamp:
				if spans[j] == math.MaxInt64 {
					vals[j] = r.Int64() - math.MaxInt64/2
				} else {
					vals[j] = bases[j] + r.Int64N(spans[j]+1)
				}
			case stream.TypeFloat64:
				vals[j] = []float64{r.NormFloat64(), math.Inf(1), math.Copysign(0, -1), math.MaxFloat64}[r.IntN(4)]
			case stream.TypeString:
				if p := pools[j]; p != nil {
					vals[j] = p[r.IntN(len(p))]
					continue
				}
				vals[j] = strings.Repeat([]string{"", "a", "héllo", "\x00\xff", "ünïcødé-✓"}[r.IntN(5)], r.IntN(40))
			case stream.TypeBool:
				vals[j] = r.IntN(2) == 0
			}
		}
		b.AppendRow(vals...)
	}
	// AppendRow leaves a null bitmap shorter than the column when the last
	// null is not in the last word, and Column.IsNull does not accept that;
	// pad so the reference batch can be read.
	for j := range b.Cols {
		if c := &b.Cols[j]; c.Nulls != nil {
			for len(c.Nulls) < (rows+63)>>6 {
				c.Nulls = append(c.Nulls, 0)
			}
		}
	}
	if rows > 0 && r.IntN(2) == 0 {
		for i := 0; i < rows; i++ {
			b.Times = append(b.Times, r.Int64N(1<<45))
		}
	}
	return b
}

func rows(b *stream.Batch) [][]any {
	out := make([][]any, b.Len())
	for i := range out {
		out[i] = b.Row(i)
	}
	return out
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	for iter := 0; iter < 500; iter++ {
		b := randomBatch(r)
		if err := b.Validate(); err != nil {
			t.Fatalf("iteration %d: test generator built an invalid batch: %v", iter, err)
		}
		buf = Append(buf[:0], b)
		got, err := Decode(buf, b.Schema)
		if err != nil {
			t.Fatalf("iteration %d: decode %s: %v", iter, b.Schema, err)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("iteration %d: decoded batch invalid: %v", iter, err)
		}
		if !reflect.DeepEqual(rows(got), rows(b)) {
			t.Fatalf("iteration %d: rows differ\nwant %v\n got %v", iter, rows(b), rows(got))
		}
		wantTimes := b.Times
		if len(wantTimes) == 0 {
			wantTimes = nil
		}
		gotTimes := got.Times
		if len(gotTimes) == 0 {
			gotTimes = nil
		}
		if !reflect.DeepEqual(gotTimes, wantTimes) {
			t.Fatalf("iteration %d: times differ: want %v got %v", iter, wantTimes, gotTimes)
		}
		for j := range got.Cols {
			for i := 0; i < got.Len(); i++ {
				if got.Cols[j].IsNull(i) != b.Cols[j].IsNull(i) {
					t.Fatalf("iteration %d: column %d row %d null flag differs", iter, j, i)
				}
			}
		}
		got.Release()
		b.Release()
	}
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 200; iter++ {
		b := randomBatch(r)
		enc := Append(nil, b)
		step := 1 + len(enc)/400 // every prefix of small encodings, a sample of large ones
		for k := 0; k < len(enc); k += step {
			got, err := Decode(enc[:k], b.Schema)
			if err == nil {
				t.Fatalf("iteration %d: prefix %d/%d of the encoding of %d rows decoded without error", iter, k, len(enc), got.Len())
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("iteration %d: error %v does not wrap ErrCorrupt", iter, err)
			}
		}
		if _, err := Decode(append(enc, 0), b.Schema); err == nil {
			t.Fatalf("iteration %d: trailing byte accepted", iter)
		}
		b.Release()
	}
}

func TestDecodeSchemaMismatch(t *testing.T) {
	s1 := stream.MustSchema(stream.Field{Name: "a", Type: stream.TypeInt64})
	s2 := stream.MustSchema(stream.Field{Name: "a", Type: stream.TypeString})
	s3 := stream.MustSchema(stream.Field{Name: "a", Type: stream.TypeInt64}, stream.Field{Name: "b", Type: stream.TypeInt64})
	b := stream.NewBatch(s1, 1)
	b.AppendRow(int64(7))
	enc := Append(nil, b)
	for _, s := range []*stream.Schema{s2, s3} {
		if _, err := Decode(enc, s); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode as %s: got %v, want a schema mismatch error", s, err)
		}
	}
}

func TestDecodeAllocatesPerColumnNotPerRow(t *testing.T) {
	schema := stream.MustSchema(
		stream.Field{Name: "id", Type: stream.TypeInt64},
		stream.Field{Name: "name", Type: stream.TypeString},
		stream.Field{Name: "price", Type: stream.TypeFloat64},
	)
	b := stream.NewBatch(schema, 1024)
	for i := 0; i < 1024; i++ {
		b.AppendRow(int64(i), "bidder-"+strings.Repeat("x", i%13), float64(i)/3)
	}
	enc := Append(nil, b)
	// Warm the batch pool.
	for i := 0; i < 4; i++ {
		got, err := Decode(enc, schema)
		if err != nil {
			t.Fatal(err)
		}
		got.Release()
	}
	allocs := testing.AllocsPerRun(100, func() {
		got, err := Decode(enc, schema)
		if err != nil {
			t.Fatal(err)
		}
		got.Release()
	})
	if allocs > 4 {
		t.Fatalf("Decode of 1024 rows made %.1f allocations per call; want at most a few per column", allocs)
	}
}

func FuzzDecode(f *testing.F) {
	schema := stream.MustSchema(
		stream.Field{Name: "i", Type: stream.TypeInt64},
		stream.Field{Name: "s", Type: stream.TypeString},
		stream.Field{Name: "b", Type: stream.TypeBool},
	)
	b := stream.NewBatch(schema, 4)
	b.AppendRow(int64(1), "x", true)
	b.AppendRow(nil, "", nil)
	b.AppendRow(int64(-3), "yz", false)
	f.Add(Append(nil, b))
	f.Add(appendVersion1(nil, b))
	// A dictionary and packed integers of width 1.
	d := stream.NewBatch(schema, 16)
	for i := 0; i < 16; i++ {
		d.AppendRow(int64(100+i), []string{"red", "green"}[i%2], i%3 == 0)
	}
	f.Add(Append(nil, d))
	f.Add([]byte{})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f, 3, 0})
	lowDecodedFloor(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data, schema)
		if err != nil {
			return
		}
		checkAccepted(t, got, schema)
	})
}

// checkAccepted checks a batch a fuzz target's decoder accepted: it is
// valid, and, since encodings need not be canonical, it survives a second
// round trip unchanged. It releases got.
func checkAccepted(t *testing.T, got *stream.Batch, schema *stream.Schema) {
	t.Helper()
	if err := got.Validate(); err != nil {
		t.Fatalf("Decode accepted input and returned an invalid batch: %v", err)
	}
	again, err := Decode(Append(nil, got), schema)
	if err != nil {
		t.Fatalf("re-encoding a decoded batch: %v", err)
	}
	if !reflect.DeepEqual(rows(again), rows(got)) {
		t.Fatalf("second round trip changed the rows")
	}
	again.Release()
	got.Release()
}

func BenchmarkCodec(b *testing.B) {
	schema := stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "bidder", Type: stream.TypeString},
		stream.Field{Name: "price", Type: stream.TypeFloat64},
		stream.Field{Name: "ts", Type: stream.TypeTimestamp},
	)
	batch := stream.NewBatch(schema, 1024)
	for i := 0; i < 1024; i++ {
		batch.AppendRow(int64(i%1000), "bidder-12345", float64(i), int64(i))
	}
	buf := Append(nil, batch)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = Append(buf[:0], batch)
		got, err := Decode(buf, schema)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
	b.ReportMetric(float64(b.N)*1024/b.Elapsed().Seconds(), "rows/s")
}

// appendVersion1 is the version 1 encoding of b, as the taskmanagers
// before version 2 wrote it: integers as 8 bytes, strings as a plain
// block.
func appendVersion1(dst []byte, b *stream.Batch) []byte {
	n := b.Len()
	dst = append(dst, 1)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, uint64(len(b.Cols)))
	hasTimes := len(b.Times) == n && n > 0
	if hasTimes {
		dst = append(dst, flagTimes)
	} else {
		dst = append(dst, 0)
	}
	words := (n + 63) >> 6
	for i := range b.Cols {
		c := &b.Cols[i]
		dst = append(dst, byte(c.Type))
		if anySet(c.Nulls, words) {
			dst = append(dst, 1)
			for w := 0; w < words; w++ {
				var v uint64
				if w < len(c.Nulls) {
					v = c.Nulls[w]
				}
				dst = binary.LittleEndian.AppendUint64(dst, v)
			}
		} else {
			dst = append(dst, 0)
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			dst = appendInt64s(dst, c.Ints[:n])
		case stream.TypeFloat64:
			dst = appendFloat64s(dst, c.Floats[:n])
		case stream.TypeBool:
			one := [1]*stream.Batch{b}
			dst = appendBools(dst, one[:], i, n)
		case stream.TypeString:
			one := [1][]string{c.Strs[:n]}
			dst = appendStringBlock(dst, one[:])
		}
	}
	if hasTimes {
		dst = appendInt64s(dst, b.Times[:n])
	}
	return dst
}

func TestDecodeVersion1(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 200; iter++ {
		b := randomBatch(r)
		got, err := Decode(appendVersion1(nil, b), b.Schema)
		if err != nil {
			t.Fatalf("iteration %d: decode version 1 of %s: %v", iter, b.Schema, err)
		}
		if !reflect.DeepEqual(rows(got), rows(b)) {
			t.Fatalf("iteration %d: rows differ\nwant %v\n got %v", iter, rows(b), rows(got))
		}
		got.Release()
		b.Release()
	}
}

// bidLikeBatch is 1024 rows shaped like the datagen bid preset: integers
// of small ranges, strings from pools.
func bidLikeBatch() *stream.Batch { return bidLikeBatchOf(1024) }

// bidLikeBatchOf is a bid-like batch of n rows: URLs from a pool of 1024,
// four channels.
func bidLikeBatchOf(n int) *stream.Batch {
	schema := stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "channel", Type: stream.TypeString},
		stream.Field{Name: "url", Type: stream.TypeString},
		stream.Field{Name: "dateTime", Type: stream.TypeTimestamp},
	)
	r := rand.New(rand.NewPCG(7, 8))
	channels := []string{"Google", "Facebook", "Baidu", "Apple"}
	urls := make([]string, 1024)
	for i := range urls {
		urls[i] = "https://www.nexmark.com/" + strings.Repeat("x", 5+i%4) + "/item.htm?query=1&channel_id=" + string(rune('0'+i%10))
	}
	b := stream.NewBatch(schema, n)
	for i := 0; i < n; i++ {
		b.AppendRow(1000+r.Int64N(10000), channels[r.IntN(len(channels))], urls[r.IntN(len(urls))], 1767225600000+int64(2*i))
	}
	return b
}

// TestCompactForms checks that the packed integers and the dictionaries
// are used where they pay: a bid-like batch takes under 60% of its
// plain (version 1) size and survives the round trip.
func TestCompactForms(t *testing.T) {
	b := bidLikeBatch()
	defer b.Release()
	plain, enc := appendVersion1(nil, b), Append(nil, b)
	if len(enc)*5 > len(plain)*3 {
		t.Fatalf("encoding takes %d bytes, the plain one %d: want under 60%%", len(enc), len(plain))
	}
	got, err := Decode(enc, b.Schema)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if !reflect.DeepEqual(rows(got), rows(b)) {
		t.Fatal("rows differ after the round trip")
	}
}

// TestDictionaryEqualStringsApart checks that equal strings that do not
// share their bytes decode right (they become separate entries).
func TestDictionaryEqualStringsApart(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	b := stream.NewBatch(schema, 64)
	shared := strings.Repeat("ab", 10)
	for i := 0; i < 64; i++ {
		if i%2 == 0 {
			b.AppendRow(shared)
		} else {
			b.AppendRow(strings.Repeat("ab", 10)) // equal, stored apart
		}
	}
	defer b.Release()
	got, err := Decode(Append(nil, b), schema)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if !reflect.DeepEqual(rows(got), rows(b)) {
		t.Fatal("rows differ after the round trip")
	}
}

func TestDecodeRejectsBadDictionary(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	// version, 4 rows, 1 column, no flags; string column, no nulls,
	// dictionary of 2 entries "a", "b"; entry numbers of width 1, base 0.
	head := []byte{version, 4, 1, 0, byte(stream.TypeString), 0, formDict, 2, 2, 'a', 'b', 1, 1}
	base0 := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0}
	valid := append(append(slices.Clone(head), base0...), 0, 1, 1, 0)
	got, err := Decode(valid, schema)
	if err != nil {
		t.Fatalf("valid dictionary: %v", err)
	}
	if want := [][]any{{"a"}, {"b"}, {"b"}, {"a"}}; !reflect.DeepEqual(rows(got), want) {
		t.Fatalf("got %v, want %v", rows(got), want)
	}
	got.Release()
	// The same with entry numbers of width 2.
	width2 := []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}
	got, err = Decode(append(append(slices.Clone(head), width2...), 0, 0, 1, 0, 1, 0, 0, 0), schema)
	if err != nil {
		t.Fatalf("valid dictionary, width 2: %v", err)
	}
	if want := [][]any{{"a"}, {"b"}, {"b"}, {"a"}}; !reflect.DeepEqual(rows(got), want) {
		t.Fatalf("width 2: got %v, want %v", rows(got), want)
	}
	got.Release()
	for name, enc := range map[string][]byte{
		"width 1": append(append(slices.Clone(head), base0...), 0, 1, 2, 0),
		"width 2": append(append(slices.Clone(head), width2...), 0, 0, 1, 0, 2, 0, 0, 0),
		"width 4": append(append(slices.Clone(head), 4, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0),
	} {
		_, err := Decode(enc, schema)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "row 2 names dictionary entry 2 of 2") {
			t.Errorf("entry out of range, %s: got %v, want ErrCorrupt naming row 2", name, err)
		}
	}
	for name, enc := range map[string][]byte{
		"entry out of range": append(append(slices.Clone(head), base0...), 0, 1, 2, 0),
		"nonzero base":       append(append(slices.Clone(head), 1, 1, 0, 0, 0, 0, 0, 0, 0), 0, 1, 1, 0),
		"width over 4":       append(append(slices.Clone(head), 5, 0, 0, 0, 0, 0, 0, 0, 0), make([]byte, 20)...),
		"no entries":         {version, 4, 1, 0, byte(stream.TypeString), 0, formDict, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"more entries than rows": {version, 1, 1, 0, byte(stream.TypeString), 0, formDict, 2, 2, 'a', 'b', 1, 1,
			1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"unknown form": {version, 1, 1, 0, byte(stream.TypeString), 0, 7},
	} {
		if _, err := Decode(enc, schema); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", name, err)
		}
	}
}

func TestDecodeRejectsBadIntegerWidth(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "i", Type: stream.TypeInt64})
	enc := append([]byte{version, 1, 1, 0, byte(stream.TypeInt64), 0, 9}, make([]byte, 16)...)
	if _, err := Decode(enc, schema); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("width 9: got %v, want ErrCorrupt", err)
	}
}

func BenchmarkCodecBidLike(b *testing.B) {
	batch := bidLikeBatch()
	buf := Append(nil, batch)
	b.SetBytes(int64(len(buf)))
	b.ReportMetric(float64(len(buf))/1024, "bytes/row")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = Append(buf[:0], batch)
		got, err := Decode(buf, batch.Schema)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
	b.ReportMetric(float64(b.N)*1024/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkEncodeBidLike4096 encodes a bid-like batch of 4096 rows (the
// exchange's coalesced batch), and BenchmarkDecodeBidLike4096 decodes it.
func BenchmarkEncodeBidLike4096(b *testing.B) {
	batch := bidLikeBatchOf(4096)
	buf := Append(nil, batch)
	b.ReportMetric(float64(len(buf))/4096, "bytes/row")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = Append(buf[:0], batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4096, "ns/row")
}

func BenchmarkDecodeBidLike4096(b *testing.B) {
	batch := bidLikeBatchOf(4096)
	buf := Append(nil, batch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := Decode(buf, batch.Schema)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4096, "ns/row")
}

func BenchmarkCodecBidLikeV1(b *testing.B) {
	batch := bidLikeBatch()
	buf := appendVersion1(nil, batch)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = appendVersion1(buf[:0], batch)
		got, err := Decode(buf, batch.Schema)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
}

// TestAppendBatches: the encoding of a batch's rows given as several
// batches is the encoding of the batch, byte for byte.
func TestAppendBatches(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for iter := 0; iter < 200; iter++ {
		b := randomBatch(r)
		n := b.Len()
		var parts []*stream.Batch
		for lo := 0; lo < n || len(parts) == 0; {
			hi := min(n, lo+1+r.IntN(max(n/3, 1)+70))
			p := stream.NewBatch(b.Schema, hi-lo)
			for i := lo; i < hi; i++ {
				p.AppendRow(b.Row(i)...)
			}
			if len(b.Times) == n {
				p.Times = append(p.Times, b.Times[lo:hi]...)
			}
			parts = append(parts, p)
			lo = hi
		}
		want, got := Append(nil, b), AppendBatches(nil, parts)
		if !bytes.Equal(got, want) {
			t.Fatalf("iteration %d: %d rows in %d batches of schema %s encode to %d bytes, the whole batch to %d (or they differ)",
				iter, n, len(parts), b.Schema, len(got), len(want))
		}
		for _, p := range parts {
			p.Release()
		}
		b.Release()
	}
}

// lowDecodedFloor lowers the decoder's floor on a batch's decoded size for
// the rest of tb's run, so that a fuzz input that claims millions of equal
// values costs a fuzz worker a megabyte, not 64.
func lowDecodedFloor(tb testing.TB) {
	old := decodedFloor
	decodedFloor = 1 << 20
	tb.Cleanup(func() { decodedFloor = old })
}

// A batch whose values of fixed size would take more decoded than its
// encoding allows (decodedFloor + decodedRatio × its bytes) is refused
// before anything is allocated for it; one of a million equal values, well
// within the bound, decodes.
func TestDecodeBoundsDecodedSize(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "i", Type: stream.TypeInt64}, stream.Field{Name: "s", Type: stream.TypeString})
	b := stream.NewBatch(schema, 1<<20)
	for range 1 << 20 {
		b.AppendRow(int64(7), "same")
	}
	defer b.Release()
	enc := Append(nil, b)
	if len(enc) > 100 {
		t.Fatalf("a million equal rows took %d bytes encoded; the test wants a tiny encoding", len(enc))
	}
	got, err := Decode(enc, schema)
	if err != nil {
		t.Fatalf("a million equal rows (24 MiB decoded): %v", err)
	}
	if got.Len() != 1<<20 || got.Cols[0].Ints[1<<20-1] != 7 || got.Cols[1].Strs[1<<20-1] != "same" {
		t.Fatalf("decoded %d rows, last %v", got.Len(), got.Row(got.Len()-1))
	}
	got.Release()

	// 2^26 rows (the most a batch may have) of the same two columns, in a
	// few dozen bytes: 1.5 GiB decoded.
	huge := []byte{version, 0x80, 0x80, 0x80, 0x20, 2, 0,
		byte(stream.TypeInt64), 0, 0, 7, 0, 0, 0, 0, 0, 0, 0,
		byte(stream.TypeString), 0, formDict, 1, 4, 's', 'a', 'm', 'e', 4, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Decode(huge, schema)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "67108864 rows of 2 columns take 1610612736 bytes decoded") {
		t.Fatalf("2^26 equal rows in %d bytes: got %v, want ErrCorrupt naming the decoded size", len(huge), err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("refusing the batch allocated %d bytes; want only its error's", n)
	}

	// With the floor lowered, the million rows are refused too.
	lowDecodedFloor(t)
	if _, err := Decode(enc, schema); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a million equal rows with a floor of 1 MiB: got %v, want ErrCorrupt", err)
	}
}
