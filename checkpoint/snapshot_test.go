package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weirstream/weir/stream"
)

var allGroups = stream.KeyGroupRange{Start: 0, End: 1 << 30}

// normalize drops empty maps and turns empty slices into nil so that
// snapshots compare by content.
func normalize(s *stream.OperatorSnapshot) *stream.OperatorSnapshot {
	if s == nil {
		return &stream.OperatorSnapshot{}
	}
	out := &stream.OperatorSnapshot{}
	norm := func(items [][]byte) [][]byte {
		var o [][]byte
		for _, it := range items {
			o = append(o, append([]byte{}, it...))
		}
		return o
	}
	for k, v := range s.Keyed {
		if out.Keyed == nil {
			out.Keyed = map[int][][]byte{}
		}
		out.Keyed[k] = norm(v)
	}
	for k, v := range s.List {
		if out.List == nil {
			out.List = map[string][][]byte{}
		}
		out.List[k] = norm(v)
	}
	for k, v := range s.Union {
		if out.Union == nil {
			out.Union = map[string][][]byte{}
		}
		out.Union[k] = norm(v)
	}
	return out
}

func equalItems(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

func equalSnapshots(a, b *stream.OperatorSnapshot) bool {
	a, b = normalize(a), normalize(b)
	return maps.EqualFunc(a.Keyed, b.Keyed, equalItems) &&
		maps.EqualFunc(a.List, b.List, equalItems) &&
		maps.EqualFunc(a.Union, b.Union, equalItems)
}

func describe(s *stream.OperatorSnapshot) string {
	s = normalize(s)
	return fmt.Sprintf("keyed=%d groups %v list=%v union=%v", len(s.Keyed), slices.Sorted(maps.Keys(s.Keyed)), s.List, s.Union)
}

// randomSnapshot makes a snapshot with keyed state in the groups of kg.
func randomSnapshot(r *rand.Rand, kg stream.KeyGroupRange, tag string) *stream.OperatorSnapshot {
	s := &stream.OperatorSnapshot{Keyed: map[int][][]byte{}, List: map[string][][]byte{}, Union: map[string][][]byte{}}
	for g := kg.Start; g <= kg.End; g++ {
		if r.IntN(4) == 0 {
			continue
		}
		for c := range r.IntN(3) + 1 {
			s.Keyed[g] = append(s.Keyed[g], fmt.Appendf(nil, "%s/kg%d/chunk%d/%x", tag, g, c, r.Uint64()))
		}
	}
	for _, name := range []string{"offsets", "buffer"} {
		for i := range r.IntN(5) {
			s.List[name] = append(s.List[name], fmt.Appendf(nil, "%s/%s/%d", tag, name, i))
		}
	}
	s.Union["watermarks"] = [][]byte{fmt.Appendf(nil, "%s/wm", tag)}
	return s
}

func TestSnapshotRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	big := &stream.OperatorSnapshot{Keyed: map[int][][]byte{5: {bytes.Repeat([]byte{1}, 1<<20)}}}
	tests := []struct {
		name string
		snap *stream.OperatorSnapshot
	}{
		{"nil", nil},
		{"empty", &stream.OperatorSnapshot{}},
		{"keyed only", &stream.OperatorSnapshot{Keyed: map[int][][]byte{0: {[]byte("a")}, 127: {[]byte("b"), []byte("c")}}}},
		{"empty chunks and items", &stream.OperatorSnapshot{
			Keyed: map[int][][]byte{3: {{}, []byte("x"), nil}},
			List:  map[string][][]byte{"l": {{}, nil}},
			Union: map[string][][]byte{"": {[]byte("unnamed")}},
		}},
		{"list and union", &stream.OperatorSnapshot{
			List:  map[string][][]byte{"b": {[]byte("1"), []byte("2")}, "a": {[]byte("3")}},
			Union: map[string][][]byte{"u": {[]byte("4")}},
		}},
		{"random", randomSnapshot(r, stream.KeyGroupRange{Start: 0, End: 127}, "r")},
		{"one big chunk", big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := EncodeSnapshot(tt.snap)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := EncodeSnapshot(tt.snap)
			if !bytes.Equal(data, again) {
				t.Fatal("EncodeSnapshot is not deterministic")
			}
			if !bytes.HasPrefix(data, []byte("WEIRSNAP")) {
				t.Fatalf("blob starts %q, want the magic", data[:8])
			}
			got, err := DecodeSnapshot(data, allGroups)
			if err != nil {
				t.Fatal(err)
			}
			if !equalSnapshots(got, tt.snap) {
				t.Fatalf("round trip:\n got %s\nwant %s", describe(got), describe(tt.snap))
			}
			// Appending to a decoded item must not overwrite the next one.
			for _, chunks := range got.Keyed {
				for i := range chunks {
					chunks[i] = append(chunks[i], 0xEE)
				}
			}
			again2, _ := DecodeSnapshot(data, allGroups)
			if !equalSnapshots(again2, tt.snap) {
				t.Fatal("appending to decoded chunks changed the blob")
			}
		})
	}
}

func TestSnapshotDeterministicAcrossMapOrder(t *testing.T) {
	// Build the same content twice with different insertion orders.
	a := &stream.OperatorSnapshot{Keyed: map[int][][]byte{}, List: map[string][][]byte{}}
	b := &stream.OperatorSnapshot{Keyed: map[int][][]byte{}, List: map[string][][]byte{}}
	for i := range 100 {
		a.Keyed[i] = [][]byte{{byte(i)}}
		b.Keyed[99-i] = [][]byte{{byte(99 - i)}}
		a.List[fmt.Sprint(i)] = [][]byte{{byte(i)}}
		b.List[fmt.Sprint(99-i)] = [][]byte{{byte(99 - i)}}
	}
	da, _ := EncodeSnapshot(a)
	db, _ := EncodeSnapshot(b)
	if !bytes.Equal(da, db) {
		t.Fatal("equal snapshots encode differently")
	}
}

func TestDecodeSnapshotKeyGroupFilter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	snap := randomSnapshot(r, stream.KeyGroupRange{Start: 0, End: 63}, "f")
	data, err := EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, kg := range []stream.KeyGroupRange{{Start: 0, End: 63}, {Start: 10, End: 20}, {Start: 63, End: 200}, {Start: 70, End: 80}, {Start: 5, End: 4}, {Start: 17, End: 17}} {
		t.Run(kg.String(), func(t *testing.T) {
			got, err := DecodeSnapshot(data, kg)
			if err != nil {
				t.Fatal(err)
			}
			want := &stream.OperatorSnapshot{List: snap.List, Union: snap.Union, Keyed: map[int][][]byte{}}
			for g, c := range snap.Keyed {
				if g >= kg.Start && g <= kg.End {
					want.Keyed[g] = c
				}
			}
			if !equalSnapshots(got, want) {
				t.Fatalf("got %s\nwant %s", describe(got), describe(want))
			}
		})
	}
}

func TestEncodeSnapshotRejectsNegativeKeyGroup(t *testing.T) {
	if _, err := EncodeSnapshot(&stream.OperatorSnapshot{Keyed: map[int][][]byte{-1: {nil}}}); err == nil {
		t.Fatal("negative key group encoded")
	}
}

func TestDecodeSnapshotCorruption(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	data, err := EncodeSnapshot(randomSnapshot(r, stream.KeyGroupRange{Start: 0, End: 15}, "c"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := slices.Clone(data)
			bad[i] ^= bit
			if _, err := DecodeSnapshot(bad, allGroups); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flipping bit %#x of byte %d: err = %v, want ErrCorrupt", bit, i, err)
			}
		}
	}
	for n := range len(data) {
		if _, err := DecodeSnapshot(data[:n], allGroups); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: err = %v, want ErrCorrupt", n, err)
		}
	}
	if _, err := DecodeSnapshot(append(slices.Clone(data), 0), allGroups); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: err = %v, want ErrCorrupt", err)
	}
}

// withCRC recomputes the trailer so that structural checks are reached.
func withCRC(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(slices.Clone(body), crcOf(body))
}

func TestDecodeSnapshotStructuralErrors(t *testing.T) {
	valid, _ := EncodeSnapshot(&stream.OperatorSnapshot{
		Keyed: map[int][][]byte{1: {[]byte("a")}, 2: {[]byte("b")}},
		List:  map[string][][]byte{"x": {[]byte("1")}, "y": {[]byte("2")}},
	})
	body := valid[:len(valid)-4]
	mut := func(f func(b []byte) []byte) []byte { return withCRC(f(slices.Clone(body))) }
	tests := []struct {
		name string
		data []byte
	}{
		{"version 2", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 2); return b })},
		{"huge key group count", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<31); return b })},
		{"huge keyed data length", mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<62); return b })},
		{"key groups out of order", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24+24:], 0); return b })},
		{"offset outside data", mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[24+8:], 1<<40); return b })},
		{"too many chunks", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24+4:], 1000); return b })},
		{"names out of order", mut(func(b []byte) []byte {
			i := bytes.Index(b, []byte("\x01x"))
			b[i+1], b[bytes.Index(b, []byte("\x01y"))+1] = 'y', 'x'
			return b
		})},
		{"bad magic", mut(func(b []byte) []byte { b[0] = 'X'; return b })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSnapshot(tt.data, allGroups)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, s := range []*stream.OperatorSnapshot{
		{},
		randomSnapshot(r, stream.KeyGroupRange{Start: 0, End: 7}, "z"),
		{List: map[string][][]byte{"a": {nil, []byte("b")}}, Union: map[string][][]byte{"u": {[]byte("c")}}},
	} {
		data, _ := EncodeSnapshot(s)
		f.Add(data, 0, 100, false)
		f.Add(data[:len(data)-4], 2, 5, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, start, end int, skipCRC bool) {
		kg := stream.KeyGroupRange{Start: start, End: end}
		var snap *stream.OperatorSnapshot
		var err error
		if skipCRC {
			// Reach the structural checks behind the CRC.
			snap, err = DecodeSnapshot(withCRC(data), kg)
		} else {
			snap, err = DecodeSnapshot(data, kg)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		re, err := EncodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeSnapshot(re, kg)
		if err != nil {
			t.Fatal(err)
		}
		if !equalSnapshots(snap, again) {
			t.Fatalf("re-encoding changed the snapshot: %s vs %s", describe(snap), describe(again))
		}
		for g := range snap.Keyed {
			if !kg.Contains(g) {
				t.Fatalf("key group %d outside the filter %v", g, kg)
			}
		}
	})
}
