package batchcodec

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// chanSource makes batches whose string columns are of the kinds a channel
// dictionary meets: a few values shared by every row (pooled), a larger
// pool, values new on every row, values over one buffer that the source
// writes anew for every batch (the same data addresses hold other values
// from batch to batch, as memory the garbage collector freed does), and
// empty strings and nulls.
type chanSource struct {
	r      *rand.Rand
	few    []string
	urls   []string
	buf    []byte // reused: the "reused" column's values point into it
	serial int
	// collections stands in for the runtime's count of garbage
	// collections (Encoder.gcCycles): it goes up whenever buf gets new
	// contents, as one must before freed memory is used again.
	collections uint64
}

// newEncoder returns an Encoder like NewEncoder's that counts s's
// collections.
func (s *chanSource) newEncoder(limitBytes int) *Encoder {
	e := NewEncoder(limitBytes)
	e.gcCycles = func() uint64 { return s.collections }
	return e
}

var chanSchema = stream.MustSchema(
	stream.Field{Name: "k", Type: stream.TypeInt64},
	stream.Field{Name: "few", Type: stream.TypeString},
	stream.Field{Name: "url", Type: stream.TypeString},
	stream.Field{Name: "unique", Type: stream.TypeString},
	stream.Field{Name: "reused", Type: stream.TypeString},
	stream.Field{Name: "sparse", Type: stream.TypeString},
)

func newChanSource(seed uint64) *chanSource {
	s := &chanSource{r: rand.New(rand.NewPCG(seed, 99)), buf: make([]byte, 64)}
	for i := range 8 {
		s.few = append(s.few, "few-"+strconv.Itoa(i))
	}
	for i := range 1024 {
		s.urls = append(s.urls, "https://www.example.com/"+strings.Repeat(string(rune('a'+i%26)), 5+i%7)+"/item?id="+strconv.Itoa(i))
	}
	return s
}

// batch returns a batch of n rows and its rows as copies, which stay as
// they are when the source overwrites its buffer.
func (s *chanSource) batch(n int) (*stream.Batch, [][]any) {
	// The reused buffer gets new contents; the "reused" column's values
	// are 4-byte windows of it at a few offsets.
	for i := range s.buf {
		s.buf[i] = byte('A' + s.r.IntN(4))
	}
	s.collections++
	b := stream.NewBatch(chanSchema, n)
	for i := 0; i < n; i++ {
		s.serial++
		off := 4 * s.r.IntN(8)
		reused := unsafe.String(&s.buf[off], 4)
		var sparse any
		switch s.r.IntN(4) {
		case 0:
			sparse = nil
		case 1:
			sparse = ""
		default:
			sparse = s.few[s.r.IntN(2)]
		}
		b.AppendRow(int64(i), s.few[s.r.IntN(len(s.few))], s.urls[s.r.IntN(len(s.urls))],
			"u"+strconv.Itoa(s.serial), reused, sparse)
	}
	want := rows(b)
	for _, row := range want {
		for j, v := range row {
			if str, ok := v.(string); ok {
				row[j] = strings.Clone(str)
			}
		}
	}
	return b, want
}

// TestChannelDictionaryModel encodes a long run of batches with one
// Encoder and decodes them in order with one Decoder, checking every row
// against a copy taken when it was encoded. Along the way it decodes ahead
// with clones of the Decoder (what an unaligned checkpoint does with the
// batches its barrier overtook) and decodes stretches encoded without
// resets with Encoder.Decoder (what it does with the batches a sender holds
// back). Small dictionary limits make the encoder forget its entries and
// keep columns out.
func TestChannelDictionaryModel(t *testing.T) {
	for _, limit := range []int{300, 4 << 10, 1 << 20} {
		t.Run("limit "+strconv.Itoa(limit), func(t *testing.T) {
			src := newChanSource(uint64(limit))
			r := rand.New(rand.NewPCG(uint64(limit), 5))
			enc := src.newEncoder(limit)
			dec := &Decoder{}
			type sent struct {
				data []byte
				want [][]any
			}
			var queue []sent // encoded, not yet decoded by dec
			check := func(what string, d *Decoder, s sent) {
				t.Helper()
				got, err := d.Decode(s.data, chanSchema)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if !reflect.DeepEqual(rows(got), s.want) {
					t.Fatalf("%s: rows differ after the round trip", what)
				}
				checkNoAlias(t, got, s.data)
				got.Release()
			}
			var channelBytes, plainBytes int
			resets := 0
			for iter := 0; iter < 400; iter++ {
				// A stretch held back: encoded without resets, decoded
				// from a copy of the encoder's dictionary.
				if r.IntN(20) == 0 {
					var held []sent
					for range 1 + r.IntN(5) {
						b, want := src.batch(1 + r.IntN(300))
						held = append(held, sent{enc.AppendBatches(nil, []*stream.Batch{b}, false), want})
						b.Release()
					}
					snap := enc.Decoder()
					for i, s := range held {
						check("held batch "+strconv.Itoa(i)+" from the encoder's dictionary", snap, s)
					}
					queue = append(queue, held...)
				}
				b, want := src.batch(1 + r.IntN(600))
				before, _ := enc.Len()
				data := enc.AppendBatches(nil, []*stream.Batch{b}, true)
				if after, _ := enc.Len(); after < before {
					resets++
				}
				channelBytes += len(data)
				plainBytes += len(Append(nil, b))
				b.Release()
				queue = append(queue, sent{data, want})
				// Decode ahead with a clone now and then.
				if r.IntN(10) == 0 {
					peek := dec.Clone()
					for i, s := range queue {
						check("batch "+strconv.Itoa(i)+" decoded ahead", peek, s)
					}
				}
				if r.IntN(3) == 0 {
					for _, s := range queue {
						check("batch "+strconv.Itoa(iter), dec, s)
					}
					queue = queue[:0]
				}
			}
			for _, s := range queue {
				check("last batches", dec, s)
			}
			entries, size := enc.Len()
			t.Logf("channel %d bytes, per batch %d bytes (%.2f); %d resets; dictionary %d entries, %d bytes",
				channelBytes, plainBytes, float64(channelBytes)/float64(plainBytes), resets, entries, size)
			if size > limit {
				t.Fatalf("the dictionary holds %d bytes, over its limit of %d", size, limit)
			}
			if limit == 1<<20 && channelBytes > plainBytes*3/4 {
				t.Fatalf("with room for every recurring value the channel dictionary took %d bytes, the per-batch forms %d: want at most three quarters", channelBytes, plainBytes)
			}
			if limit == 4<<10 && resets == 0 {
				t.Fatalf("a dictionary of 4 KiB never forgot its entries; the test does not test resets")
			}
		})
	}
}

// TestChannelDictionaryBidLike checks what the channel dictionary is for:
// after the first batch of a bid-like stream, a batch carries only entry
// numbers for its URLs and channels.
func TestChannelDictionaryBidLike(t *testing.T) {
	b := bidLikeBatchOf(4096)
	defer b.Release()
	enc := NewEncoder(1 << 20)
	dec := &Decoder{}
	var sizes []int
	for i := range 4 {
		data := enc.AppendBatches(nil, []*stream.Batch{b}, true)
		got, err := dec.Decode(data, b.Schema)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !reflect.DeepEqual(rows(got), rows(b)) {
			t.Fatalf("batch %d: rows differ after the round trip", i)
		}
		got.Release()
		sizes = append(sizes, len(data))
	}
	alone := len(Append(nil, b))
	t.Logf("per-batch encoding %d bytes; channel encoding %v", alone, sizes)
	if sizes[0] > alone+64 {
		t.Fatalf("the first batch took %d bytes, the per-batch encoding %d", sizes[0], alone)
	}
	for i, n := range sizes[1:] {
		if n > alone/2 {
			t.Fatalf("batch %d took %d bytes, the per-batch encoding %d: the URLs were sent again", i+1, n, alone)
		}
	}
}

// TestChannelDictionaryRejects checks that a batch in form 2 fails to
// decode, with ErrCorrupt and no panic, without its channel's decoder, from
// a decoder that lacks the entries it names, and cut short anywhere.
func TestChannelDictionaryRejects(t *testing.T) {
	src := newChanSource(3)
	enc := src.newEncoder(1 << 20)
	b1, _ := src.batch(200)
	b2, _ := src.batch(200)
	first := enc.AppendBatches(nil, []*stream.Batch{b1}, true)
	second := enc.AppendBatches(nil, []*stream.Batch{b2}, true)
	b1.Release()
	b2.Release()
	if _, err := Decode(first, chanSchema); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "channel dictionary") {
		t.Fatalf("Decode without the channel's decoder: %v, want a corrupt batch naming the channel dictionary", err)
	}
	// The second batch names entries the first added.
	if _, err := (&Decoder{}).Decode(second, chanSchema); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decoding the second batch first: %v, want ErrCorrupt", err)
	}
	after := &Decoder{}
	if _, err := after.Decode(first, chanSchema); err != nil {
		t.Fatal(err)
	}
	for n := range len(second) {
		if _, err := after.Clone().Decode(second[:n], chanSchema); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("the second batch cut to %d of %d bytes: %v, want ErrCorrupt", n, len(second), err)
		}
	}
	if _, err := after.Decode(second, chanSchema); err != nil {
		t.Fatalf("the second batch after the first: %v", err)
	}
}

// TestChannelDictionaryLimit checks that a decoder refuses a dictionary
// beyond MaxDictBytes, whatever the sender's limit.
func TestChannelDictionaryLimit(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	big := strings.Repeat("x", 1<<20)
	dec := &Decoder{}
	for i := 0; ; i++ {
		b := stream.NewBatch(schema, 1)
		b.AppendRow(strconv.Itoa(i) + big)
		enc := NewEncoder(MaxDictBytes)
		enc.entries = append(enc.entries, dec.entries...) // as if it had sent them
		enc.keys = make([]uintptr, len(enc.entries))
		enc.size = dec.size
		enc.limit = 2 * MaxDictBytes // a sender that does not keep to the limit
		data := enc.AppendBatches(nil, []*stream.Batch{b}, false)
		b.Release()
		_, err := dec.Decode(data, schema)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "exceeds the limit") {
				t.Fatalf("batch %d: %v, want the limit named", i, err)
			}
			if i < MaxDictBytes>>20-1 {
				t.Fatalf("refused at %d MiB, under the limit", i)
			}
			return
		}
		if i > MaxDictBytes>>20 {
			t.Fatalf("the decoder took %d bytes of dictionary", dec.size)
		}
	}
}

func BenchmarkEncodeBidLike4096Channel(b *testing.B) {
	batch := bidLikeBatchOf(4096)
	enc := NewEncoder(1 << 20)
	var buf []byte
	for b.Loop() {
		buf = enc.AppendBatches(buf[:0], []*stream.Batch{batch}, true)
	}
	b.ReportMetric(float64(len(buf))/4096, "bytes/row")
}

// BenchmarkDecodeBidLike4096Channel decodes a batch whose strings the
// channel's dictionary holds already (the second batch on the channel).
func BenchmarkDecodeBidLike4096Channel(b *testing.B) {
	batch := bidLikeBatchOf(4096)
	enc := NewEncoder(1 << 20)
	first := enc.AppendBatches(nil, []*stream.Batch{batch}, true)
	second := enc.AppendBatches(nil, []*stream.Batch{batch}, true)
	dec := &Decoder{}
	got, err := dec.Decode(first, batch.Schema)
	if err != nil {
		b.Fatal(err)
	}
	got.Release()
	for b.Loop() {
		got, err := dec.Decode(second, batch.Schema)
		if err != nil {
			b.Fatal(err)
		}
		got.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4096, "ns/row")
}

// FuzzChannelDecode decodes arbitrary input with a channel Decoder that
// holds the dictionary of an earlier batch: it must fail cleanly or return
// a valid batch that survives a round trip on its own, and the dictionary
// stays within its limit.
func FuzzChannelDecode(f *testing.F) {
	schema := stream.MustSchema(
		stream.Field{Name: "i", Type: stream.TypeInt64},
		stream.Field{Name: "s", Type: stream.TypeString},
		stream.Field{Name: "t", Type: stream.TypeString},
	)
	batch := func(off int) *stream.Batch {
		b := stream.NewBatch(schema, 16)
		for i := range 16 {
			b.AppendRow(int64(off+i), []string{"red", "green", "blue"}[(off+i)%3], []string{"", "x"}[i%2])
		}
		return b
	}
	enc := NewEncoder(1 << 10)
	b0, b1 := batch(0), batch(5)
	first := enc.AppendBatches(nil, []*stream.Batch{b0}, true)
	f.Add(enc.AppendBatches(nil, []*stream.Batch{b1}, true))
	f.Add(Append(nil, b1))
	f.Add([]byte{versionChannel, 1, 3, 0, 1, 0, formChannel, 9, 0})
	b0.Release()
	b1.Release()
	lowDecodedFloor(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := &Decoder{}
		if _, err := dec.Decode(first, schema); err != nil {
			t.Fatal(err)
		}
		got, err := dec.Decode(data, schema)
		if dec.size > MaxDictBytes || len(dec.entries) > maxDictEntries {
			t.Fatalf("the dictionary grew to %d entries, %d bytes", len(dec.entries), dec.size)
		}
		if err != nil {
			return
		}
		checkAccepted(t, got, schema)
	})
}

// TestChannelDictionaryAfterCollections encodes batches of strings made
// anew for each batch and dropped after it, with a garbage collection
// between batches, so that later strings take the addresses of earlier
// ones: the Encoder must not take them for the values it compared before
// the collection.
func TestChannelDictionaryAfterCollections(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	r := rand.New(rand.NewPCG(7, 7))
	enc := NewEncoder(1 << 20)
	dec := &Decoder{}
	seen := map[uintptr]string{} // data address → the last value there
	reused := 0
	for iter := range 40 {
		b := stream.NewBatch(schema, 256)
		for range 256 {
			// 24 bytes of 4 letters: an allocation of one size class,
			// whose freed slots the next batch's strings take.
			buf := make([]byte, 24)
			for i := range buf {
				buf[i] = byte('a' + r.IntN(4))
			}
			b.AppendRow(string(buf))
		}
		want := rows(b)
		for _, s := range b.Cols[0].Strs {
			p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			if old, ok := seen[p]; ok && old != s {
				reused++
			}
			seen[p] = strings.Clone(s)
		}
		data := enc.AppendBatches(nil, []*stream.Batch{b}, true)
		got, err := dec.Decode(data, schema)
		if err != nil {
			t.Fatalf("batch %d: %v", iter, err)
		}
		if !reflect.DeepEqual(rows(got), want) {
			t.Fatalf("batch %d: rows differ after the round trip", iter)
		}
		got.Release()
		b.Release()
		runtime.GC()
	}
	if reused == 0 {
		t.Fatalf("no string took the address of an earlier one: the test did not exercise reuse")
	}
	t.Logf("%d strings at the address of an earlier, other value", reused)
}

func TestGCCyclesDone(t *testing.T) {
	before := gcCyclesDone()
	runtime.GC()
	if after := gcCyclesDone(); after <= before {
		t.Fatalf("garbage collections finished: %d before runtime.GC, %d after", before, after)
	}
}

// TestChannelDictionaryHints checks that dictionaries named by string
// columns (stream.Column.Dict) change nothing but the encoder's work: an
// Encoder given batches that name them writes the same bytes as one given
// the same batches without, also when some rows hold values stored
// elsewhere or pieces of the dictionary's values, when a column names a
// dictionary of copies, and while small limits make the dictionary forget
// entries and roll back.
func TestChannelDictionaryHints(t *testing.T) {
	for _, limit := range []int{300, 4 << 10, 1 << 20} {
		t.Run("limit "+strconv.Itoa(limit), func(t *testing.T) {
			src := newChanSource(uint64(limit) + 7)
			fewDict, urlDict := stream.NewStringDict(src.few), stream.NewStringDict(src.urls)
			copyDict := stream.NewStringDict(src.urls) // equal values, stored apart
			src.few, src.urls = fewDict.Values, urlDict.Values
			r := rand.New(rand.NewPCG(uint64(limit), 11))
			hinted, plain := src.newEncoder(limit), src.newEncoder(limit)
			dec := &Decoder{}
			var pieces, copied int
			for iter := range 300 {
				b, want := src.batch(1 + r.IntN(600))
				b.Cols[1].Dict = fewDict
				b.Cols[2].Dict = urlDict
				b.Cols[3].Dict = urlDict // values stored elsewhere
				b.Cols[5].Dict = fewDict // nulls and empty strings too
				switch r.IntN(6) {
				case 0: // some rows hold a piece of a value
					for range 1 + r.IntN(10) {
						i := r.IntN(b.Len())
						v := b.Cols[2].Strs[i]
						b.Cols[2].Strs[i] = v[:len(v)-1]
						want[i][2] = v[:len(v)-1]
					}
					pieces++
				case 1:
					b.Cols[2].Dict = copyDict
					copied++
				}
				mayReset := r.IntN(4) != 0
				got := hinted.AppendBatches(nil, []*stream.Batch{b}, mayReset)
				for j := range b.Cols {
					b.Cols[j].Dict = nil
				}
				if want := plain.AppendBatches(nil, []*stream.Batch{b}, mayReset); !reflect.DeepEqual(got, want) {
					t.Fatalf("batch %d: naming dictionaries the encoder wrote %d bytes, without %d, and they differ", iter, len(got), len(want))
				}
				b.Release()
				out, err := dec.Decode(got, chanSchema)
				if err != nil {
					t.Fatalf("batch %d: %v", iter, err)
				}
				if !reflect.DeepEqual(rows(out), want) {
					t.Fatalf("batch %d: rows differ after the round trip", iter)
				}
				out.Release()
			}
			used, mem := 0, 0
			for _, tr := range hinted.trans {
				mem += translationBytes(len(tr.entries))
				for _, x := range tr.entries {
					if x != 0 {
						used++
					}
				}
			}
			if mem > limit/4 {
				t.Fatalf("the translations take %d bytes, over a quarter of the limit of %d", mem, limit)
			}
			t.Logf("%d batches with pieces of values, %d naming copies; %d codes translated at the end", pieces, copied, used)
			if pieces == 0 || copied == 0 || (limit == 1<<20 && used < len(src.urls)/2) {
				t.Fatalf("the test did not try every kind of row")
			}
		})
	}
}

// TestChannelDictionaryHintsBounded checks that an Encoder keeps
// translations for at most maxHintDicts dictionaries and a quarter of its
// limit, dropping the oldest, and still writes what an Encoder without
// them writes.
func TestChannelDictionaryHintsBounded(t *testing.T) {
	schema := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	const limit = 2 << 10
	hinted, plain := NewEncoder(limit), NewEncoder(limit)
	var dicts []*stream.StringDict
	// Ten small ones (the count binds), then larger ones (the memory).
	for i, n := range []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 128, 128, 200} {
		vals := make([]string, n)
		for j := range vals {
			vals[j] = "d" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
		}
		dicts = append(dicts, stream.NewStringDict(vals))
	}
	dicts = append(dicts, stream.NewStringDict(make([]string, limit/4))) // too large to translate
	for round := range 3 {
		for i, d := range dicts {
			b := stream.NewBatch(schema, 64)
			for r := range 64 {
				b.Cols[0].Strs = append(b.Cols[0].Strs, d.Values[(r*7+round)%d.Len()])
			}
			b.SetLen(64)
			b.Cols[0].Dict = d
			got := hinted.AppendBatches(nil, []*stream.Batch{b}, true)
			b.Cols[0].Dict = nil
			if want := plain.AppendBatches(nil, []*stream.Batch{b}, true); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d dictionary %d: the encoder wrote other bytes naming it", round, i)
			}
			b.Release()
			mem := 0
			for _, tr := range hinted.trans {
				mem += translationBytes(len(tr.entries))
			}
			if len(hinted.trans) > maxHintDicts || mem > limit/4 {
				t.Fatalf("round %d dictionary %d: %d translations of %d bytes, want at most %d and %d", round, i, len(hinted.trans), mem, maxHintDicts, limit/4)
			}
		}
	}
	if hinted.trans[len(hinted.trans)-1].dict == dicts[len(dicts)-1] {
		t.Fatalf("the dictionary larger than a quarter of the limit got a translation")
	}
}
