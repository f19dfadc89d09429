package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// recorder writes every call as a line, so that tests compare what Parse
// handed over with what was written.
type recorder struct{ calls []string }

func (r *recorder) KeyGroup(kg int) {
	r.calls = append(r.calls, fmt.Sprintf("kg %d", kg))
}
func (r *recorder) Table(name string, kind statebackend.Kind, keys int) {
	r.calls = append(r.calls, fmt.Sprintf("table %s %d %d", name, kind, keys))
}
func (r *recorder) Value(key, value []byte) {
	r.calls = append(r.calls, fmt.Sprintf("value %q %q", key, value))
}
func (r *recorder) MapKey(key []byte, userKeys int) {
	r.calls = append(r.calls, fmt.Sprintf("mapkey %q %d", key, userKeys))
}
func (r *recorder) MapValue(userKey, value []byte) {
	r.calls = append(r.calls, fmt.Sprintf("mapvalue %q %q", userKey, value))
}
func (r *recorder) Timer(ts int64, key []byte) {
	r.calls = append(r.calls, fmt.Sprintf("timer %d %q", ts, key))
}

// sample writes a chunk of key group 7 with a value table, a map table and
// two timers, and returns it with the calls Parse must make.
func sample() ([]byte, []string) {
	dst := AppendHeader(nil, 7, 2)
	dst = AppendTable(dst, "v", statebackend.KindValue, 2)
	dst = AppendField(dst, "a")
	dst = AppendField(dst, []byte{1, 2})
	dst = AppendField(dst, []byte{})
	dst = AppendField(dst, "")
	dst = AppendTable(dst, []byte("m"), statebackend.KindMap, 1)
	dst = AppendField(dst, "k")
	dst = AppendCount(dst, 2)
	dst = AppendField(dst, "u1")
	dst = AppendField(dst, "x")
	dst = AppendField(dst, "u2")
	dst = AppendField(dst, "yy")
	dst = AppendCount(dst, 2)
	dst = AppendTimer(dst, -5, "a")
	dst = AppendTimer(dst, 1<<40, []byte("k"))
	return AppendChecksum(dst), []string{
		"kg 7",
		fmt.Sprintf("table v %d 2", statebackend.KindValue),
		`value "a" "\x01\x02"`,
		`value "" ""`,
		fmt.Sprintf("table m %d 1", statebackend.KindMap),
		`mapkey "k" 2`,
		`mapvalue "u1" "x"`,
		`mapvalue "u2" "yy"`,
		`timer -5 "a"`,
		fmt.Sprintf("timer %d %q", int64(1)<<40, "k"),
	}
}

func TestRoundTrip(t *testing.T) {
	data, want := sample()
	var r recorder
	kg, err := Parse(data, &r)
	if err != nil {
		t.Fatal(err)
	}
	if kg != 7 {
		t.Errorf("key group %d, want 7", kg)
	}
	if !reflect.DeepEqual(r.calls, want) {
		t.Errorf("calls\n%s\nwant\n%s", strings.Join(r.calls, "\n"), strings.Join(want, "\n"))
	}
}

// TestLayout checks the bytes against the documented format, written by
// hand, so that a change of the format cannot go unnoticed.
func TestLayout(t *testing.T) {
	body := []byte{'W', 'K', 'G', 1, 3, 1, 1, 't', byte(statebackend.KindList), 1, 1, 'k', 2, 9, 9, 1, 3, 1, 'k'}
	want := binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	got := AppendHeader(nil, 3, 1)
	got = AppendTable(got, "t", statebackend.KindList, 1)
	got = AppendField(got, "k")
	got = AppendField(got, []byte{9, 9})
	got = AppendCount(got, 1)
	got = AppendTimer(got, -2, "k")
	got = AppendChecksum(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chunk %x, want %x", got, want)
	}
}

// withCRC returns body with a valid checksum, so that the decoder gets
// past it.
func withCRC(body []byte) []byte { return AppendChecksum(append([]byte(nil), body...)) }

func TestParseErrors(t *testing.T) {
	good, _ := sample()
	body := good[:len(good)-4]
	flipped := append([]byte(nil), good...)
	flipped[10] ^= 0x40
	tests := []struct {
		name  string
		chunk []byte
		want  string
	}{
		{"empty", nil, "too short"},
		{"bad magic", withCRC(append([]byte("XKG"), body[3:]...)), "bad magic"},
		{"bad version", withCRC(append([]byte("WKG\x02"), body[4:]...)), "format version 2"},
		{"bad checksum", flipped, "checksum mismatch"},
		{"trailing bytes", withCRC(append(append([]byte(nil), body...), 0)), "1 unexpected bytes after the timers"},
		{"unknown kind", withCRC(AppendTable(AppendHeader(nil, 0, 1), "t", statebackend.Kind(200), 0)), "unknown kind 200"},
		{"map key without user keys", withCRC(AppendCount(AppendField(AppendTable(AppendHeader(nil, 0, 1), "m", statebackend.KindMap, 1), "k"), 0)), `key "k" without user keys`},
		{"huge table count", withCRC(AppendCount(AppendHeader(nil, 0, 0)[:5], 1<<20)), "exceeds its limit"},
		{"huge key group", withCRC(append([]byte("WKG\x01"), binary.AppendUvarint(nil, 1<<31)...)), "exceeds its limit"},
	}
	// Every truncation of the body is an error, not a panic.
	for n := 4; n < len(body); n++ {
		tests = append(tests, struct {
			name  string
			chunk []byte
			want  string
		}{fmt.Sprintf("truncated to %d", n), withCRC(body[:n]), ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.chunk, &recorder{})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestReader(t *testing.T) {
	buf := binary.AppendUvarint(nil, 300)
	buf = binary.AppendVarint(buf, -7)
	buf = append(buf, 0xab)
	buf = AppendField(buf, "xyz")
	r := NewReader(buf)
	if got := r.Uvarint(); got != 300 {
		t.Errorf("Uvarint %d", got)
	}
	if got := r.Varint(); got != -7 {
		t.Errorf("Varint %d", got)
	}
	if got := r.Byte(); got != 0xab {
		t.Errorf("Byte %x", got)
	}
	f := r.Bytes()
	if string(f) != "xyz" || cap(f) != 3 {
		t.Errorf("Bytes %q with capacity %d", f, cap(f))
	}
	if r.Left() != 0 || r.Err() != nil {
		t.Errorf("%d bytes left, error %v", r.Left(), r.Err())
	}
	// After the first error reads return zero values and the error stays.
	if r.Byte() != 0 || r.Err() == nil || r.Uvarint() != 0 || r.Bytes() != nil {
		t.Error("read past the end did not fail")
	}
	first := r.Err()
	r.Fail(fmt.Errorf("later"))
	if r.Err() != first {
		t.Errorf("error %v replaced the first one, %v", r.Err(), first)
	}
	if r := NewReader(binary.AppendUvarint(nil, 5)); r.Count(4) != 0 || r.Err() == nil {
		t.Error("Count above the limit did not fail")
	}
}

func TestPrintable(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		in   string
		want string
	}{
		{"abc", `"abc"`},
		{"", `""`},
		{"\x00\x01", "0x0001"},
		{long, fmt.Sprintf("%q…", long[:64])},
	}
	for _, tt := range tests {
		if got := Printable(tt.in); got != tt.want {
			t.Errorf("Printable(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if got := Printable([]byte(tt.in)); got != tt.want {
			t.Errorf("Printable([]byte(%q)) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// tableChunk returns a valid chunk of key group kg with one table of the
// given kind and one key.
func tableChunk(kg int, name string, kind statebackend.Kind) []byte {
	dst := AppendTable(AppendHeader(nil, kg, 1), name, kind, 1)
	dst = AppendField(dst, "k")
	if kind == statebackend.KindMap {
		dst = AppendField(AppendCount(dst, 1), "uk")
	}
	return AppendChecksum(AppendCount(AppendField(dst, "v"), 0))
}

func TestParseAll(t *testing.T) {
	owned := stream.KeyGroupRange{Start: 2, End: 5}
	held := func(name string) (statebackend.Kind, bool) {
		if name == "held" {
			return statebackend.KindList, true
		}
		return 0, false
	}
	tests := []struct {
		name   string
		keyed  map[int][][]byte
		chunks int   // parsed, on success
		want   error // or nil
		text   string
	}{
		{"owned and other key groups", map[int][][]byte{
			1: {tableChunk(1, "a", statebackend.KindValue)},
			2: {tableChunk(2, "a", statebackend.KindValue), tableChunk(2, "held", statebackend.KindList)},
			5: {tableChunk(5, "a", statebackend.KindValue)},
			6: {[]byte("garbage of a key group not owned")},
		}, 3, nil, ""},
		{"chunk filed under another key group", map[int][][]byte{3: {tableChunk(4, "a", statebackend.KindValue)}},
			0, statebackend.ErrCorrupt, "key group 3, chunk 1 of 1"},
		{"damaged chunk", map[int][][]byte{3: {tableChunk(3, "a", statebackend.KindValue)[1:]}},
			0, statebackend.ErrCorrupt, "bad magic"},
		{"kinds differ between chunks", map[int][][]byte{3: {tableChunk(3, "a", statebackend.KindValue), tableChunk(3, "a", statebackend.KindMap)}},
			0, statebackend.ErrConflict, `state "a"`},
		{"kind differs from the backend's", map[int][][]byte{4: {tableChunk(4, "held", statebackend.KindValue)}},
			0, statebackend.ErrConflict, `state "held"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &stream.RestoreContext{CheckpointID: 12, State: &stream.OperatorSnapshot{Keyed: tt.keyed}}
			got, err := ParseAll(c, Owner{KeyGroups: owned, Kind: held}, func() *recorder { return &recorder{} })
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), "checkpoint 12") || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("error %v, want %v naming checkpoint 12 and %q", err, tt.want, tt.text)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.chunks {
				t.Fatalf("%d chunks parsed, want %d", len(got), tt.chunks)
			}
			for _, r := range got {
				var kg int
				if _, err := fmt.Sscanf(r.calls[0], "kg %d", &kg); err != nil || !owned.Contains(kg) {
					t.Errorf("parsed a chunk of key group %q outside %v", r.calls[0], owned)
				}
			}
		})
	}
}

// TestParseAllKeepsBytes checks that with KeepsBytes the slices handed to
// handlers do not alias the restore's bytes.
func TestParseAllKeepsBytes(t *testing.T) {
	for _, keep := range []bool{false, true} {
		data := tableChunk(0, "a", statebackend.KindValue)
		var value []byte
		h := &valueGrabber{got: &value}
		c := &stream.RestoreContext{State: &stream.OperatorSnapshot{Keyed: map[int][][]byte{0: {data}}}}
		if _, err := ParseAll(c, Owner{KeyGroups: stream.KeyGroupRange{Start: 0, End: 0}, Kind: func(string) (statebackend.Kind, bool) { return 0, false }, KeepsBytes: keep}, func() *valueGrabber { return h }); err != nil {
			t.Fatal(err)
		}
		for i := range data {
			data[i] = 0
		}
		if aliased := string(value) != "v"; aliased == keep {
			t.Errorf("KeepsBytes %v: value %q after the chunk was cleared", keep, value)
		}
	}
}

type valueGrabber struct {
	recorder
	got *[]byte
}

func (g *valueGrabber) Value(_, value []byte) { *g.got = value }

func TestCheckSnapshot(t *testing.T) {
	owned := stream.KeyGroupRange{Start: 4, End: 7}
	tests := []struct {
		name   string
		asked  stream.KeyGroupRange
		owned  stream.KeyGroupRange
		wantOK bool
	}{
		{"same range", owned, owned, true},
		{"wider range", stream.KeyGroupRange{Start: 0, End: 127}, owned, true},
		{"misses the start", stream.KeyGroupRange{Start: 5, End: 9}, owned, false},
		{"misses the end", stream.KeyGroupRange{Start: 0, End: 6}, owned, false},
		{"backend without key groups", stream.KeyGroupRange{Start: 0, End: -1}, stream.KeyGroupRange{Start: 0, End: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSnapshot(&stream.SnapshotContext{KeyGroups: tt.asked}, tt.owned)
			if (err == nil) != tt.wantOK {
				t.Fatalf("error %v, want ok %v", err, tt.wantOK)
			}
		})
	}
}
