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
func (r *recorder) ProcessingTimer(ts int64, key []byte) {
	r.calls = append(r.calls, fmt.Sprintf("ptimer %d %q", ts, key))
}

// sample writes a chunk of key group 7 with a value table, a map table and
// two timers, and returns it with the calls Parse must make.
func sample() ([]byte, []string) {
	dst := AppendHeader(nil, 7, 2, 0)
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

// sampleV2 writes the chunk of sample with two processing-time timers, in
// version 2, and returns it with the calls Parse must make.
func sampleV2() ([]byte, []string) {
	v1, want := sample()
	body := v1[:len(v1)-4]
	dst := AppendHeader(nil, 7, 2, 2)
	dst = append(dst, body[len(dst):]...)
	dst = AppendCount(dst, 2)
	dst = AppendTimer(dst, -5, "a") // the same as an event-time timer: another timer
	dst = AppendTimer(dst, 1<<41, []byte{})
	return AppendChecksum(dst), append(want, `ptimer -5 "a"`, fmt.Sprintf("ptimer %d %q", int64(1)<<41, ""))
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name    string
		chunk   func() ([]byte, []string)
		version byte
	}{
		{"event-time timers only", sample, 1},
		{"processing-time timers", sampleV2, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data, want := tt.chunk()
			if data[3] != tt.version {
				t.Errorf("written in version %d, want %d", data[3], tt.version)
			}
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
		})
	}
}

// TestLayout checks the bytes against the documented format, written by
// hand, so that a change of the format cannot go unnoticed: version 1
// without processing-time timers, version 2 with them.
func TestLayout(t *testing.T) {
	crc := func(body []byte) []byte {
		return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	}
	write := func(ptimers int) []byte {
		got := AppendHeader(nil, 3, 1, ptimers)
		got = AppendTable(got, "t", statebackend.KindList, 1)
		got = AppendField(got, "k")
		got = AppendField(got, []byte{9, 9})
		got = AppendCount(got, 1)
		got = AppendTimer(got, -2, "k")
		if ptimers > 0 {
			got = AppendCount(got, 1)
			got = AppendTimer(got, 2, "p")
		}
		return AppendChecksum(got)
	}
	v1 := []byte{'W', 'K', 'G', 1, 3, 1, 1, 't', byte(statebackend.KindList), 1, 1, 'k', 2, 9, 9, 1, 3, 1, 'k'}
	if got, want := write(0), crc(v1); !reflect.DeepEqual(got, want) {
		t.Errorf("version 1 chunk %x, want %x", got, want)
	}
	v2 := append([]byte{'W', 'K', 'G', 2}, v1[4:]...)
	v2 = append(v2, 1, 4, 1, 'p')
	if got, want := write(1), crc(v2); !reflect.DeepEqual(got, want) {
		t.Errorf("version 2 chunk %x, want %x", got, want)
	}
}

// withCRC returns body with a valid checksum, so that the decoder gets
// past it.
func withCRC(body []byte) []byte { return AppendChecksum(append([]byte(nil), body...)) }

func TestParseErrors(t *testing.T) {
	good, _ := sample()
	body := good[:len(good)-4]
	good2, _ := sampleV2()
	body2 := good2[:len(good2)-4]
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-5] ^= 0x40 // in the last timer's key
	flippedName := append([]byte(nil), good...)
	flippedName[7] ^= 0x40 // table v's name, which becomes "6"
	tests := []struct {
		name   string
		chunk  []byte
		class  error
		table  string   // FormatError.Table
		tables []string // FormatError.Tables
		what   string
		found  string
	}{
		{"empty", nil, statebackend.ErrCorrupt, "", nil, "length", "0 bytes"},
		{"bad magic", withCRC(append([]byte("XKG"), body[3:]...)), statebackend.ErrCorrupt, "", nil, "magic", `"XKG"`},
		{"bad version", withCRC(append([]byte("WKG\x03"), body[4:]...)), ErrVersion, "", nil, "format version", "3"},
		{"version 0", withCRC(append([]byte("WKG\x00"), body[4:]...)), ErrVersion, "", nil, "format version", "0"},
		{"bad checksum", flipped, statebackend.ErrCorrupt, "", []string{"v", "m"}, "checksum mismatch", ""},
		{"bad checksum in a name", flippedName, statebackend.ErrCorrupt, "", []string{"6", "m"}, "checksum mismatch", ""},
		{"bad checksum in a length", withCRC(body)[:len(body)-2], statebackend.ErrCorrupt, "", nil, "checksum mismatch", ""},
		{"trailing bytes", withCRC(append(append([]byte(nil), body...), 0)), statebackend.ErrCorrupt, "", nil, "bytes after the timers", "1"},
		{"trailing bytes in version 2", withCRC(append(append([]byte(nil), body2...), 0, 0)), statebackend.ErrCorrupt, "", nil, "bytes after the processing-time timers", "2"},
		{"version 2 without processing-time timers", withCRC(append([]byte("WKG\x02"), body[4:]...)), statebackend.ErrCorrupt, "", nil, "varint at byte", "the end of the data"},
		{"version 1 with processing-time timers", withCRC(append([]byte("WKG\x01"), body2[4:]...)), statebackend.ErrCorrupt, "", nil, "bytes after the timers", "12"},
		{"unknown kind", withCRC(AppendTable(AppendHeader(nil, 0, 1, 0), "t", statebackend.Kind(200), 0)), statebackend.ErrCorrupt, "t", nil, "kind", "200"},
		{"map key without user keys", withCRC(AppendCount(AppendField(AppendTable(AppendHeader(nil, 0, 1, 0), "m", statebackend.KindMap, 1), "k"), 0)), statebackend.ErrCorrupt, "m", nil, `user keys of key "k"`, "0"},
		{"huge key count", withCRC(AppendCount(AppendField(AppendHeader(nil, 0, 1, 0), "t"), 1)[:8]), statebackend.ErrCorrupt, "", nil, "byte 8", ""},
		{"huge table count", withCRC(AppendCount(AppendHeader(nil, 0, 0, 0)[:5], 1<<20)), statebackend.ErrCorrupt, "", nil, "table count at byte 5", "1048576"},
		{"huge key group", withCRC(append([]byte("WKG\x01"), binary.AppendUvarint(nil, 1<<31)...)), statebackend.ErrCorrupt, "", nil, "key group at byte 4", "2147483648"},
		{"field longer than the chunk", withCRC(AppendCount(AppendTable(AppendHeader(nil, 0, 1, 0), "t", statebackend.KindValue, 1), 9)), statebackend.ErrCorrupt, "t", nil, "length of the field at byte 10", "9 bytes"},
	}
	// Every truncation of the body is an error, not a panic.
	for n := 4; n < len(body2); n++ {
		tests = append(tests, struct {
			name   string
			chunk  []byte
			class  error
			table  string
			tables []string
			what   string
			found  string
		}{fmt.Sprintf("truncated to %d", n), withCRC(body2[:n]), statebackend.ErrCorrupt, "?", nil, "", ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.chunk, &recorder{})
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FormatError", err, err)
			}
			if !errors.Is(err, tt.class) || !errors.Is(err, statebackend.ErrCorrupt) {
				t.Errorf("error %v does not wrap %v and statebackend.ErrCorrupt", err, tt.class)
			}
			if fe.Chunks != 0 {
				t.Errorf("Parse placed the chunk: %+v", fe)
			}
			if fe.What == "" || fe.Found == "" || fe.Expected == "" {
				t.Errorf("error %+v does not say what, found and expected", fe)
			}
			if tt.table != "?" && (fe.Table != tt.table || !reflect.DeepEqual(fe.Tables, tt.tables)) {
				t.Errorf("Table %q, Tables %q; want %q, %q", fe.Table, fe.Tables, tt.table, tt.tables)
			}
			if !strings.Contains(fe.What, tt.what) || !strings.HasPrefix(fe.Found, tt.found) {
				t.Errorf("What %q, Found %q; want %q, %q", fe.What, fe.Found, tt.what, tt.found)
			}
			if tt.table != "?" && tt.table != "" && !strings.Contains(err.Error(), fmt.Sprintf("state %q", tt.table)) {
				t.Errorf("error %q does not name state %q", err, tt.table)
			}
		})
	}
}

// TestVersionError checks what a chunk of an unknown version says: the
// version found and the versions this build reads, as a FormatError that
// wraps ErrVersion and statebackend.ErrCorrupt.
func TestVersionError(t *testing.T) {
	good, _ := sample()
	bad := withCRC(append([]byte("WKG\x63"), good[4:len(good)-4]...))
	c := &stream.RestoreContext{CheckpointID: 8, State: &stream.OperatorSnapshot{Keyed: map[int][][]byte{7: {bad}}}}
	_, err := ParseAll(c, Owner{KeyGroups: stream.KeyGroupRange{Start: 0, End: 9}, Kind: noTables}, func() *recorder { return &recorder{} })
	var fe *FormatError
	if !errors.As(err, &fe) || !errors.Is(err, ErrVersion) || !errors.Is(err, statebackend.ErrCorrupt) {
		t.Fatalf("error %v, want a *FormatError wrapping ErrVersion and statebackend.ErrCorrupt", err)
	}
	if fe.Found != "99" || !strings.HasPrefix(fe.Expected, "1 ") || fe.CheckpointID != 8 || fe.KeyGroup != 7 || fe.Chunk != 1 || fe.Chunks != 1 || fe.Size != len(bad) {
		t.Errorf("error %+v", fe)
	}
	want := "statebackend: unknown state format version: checkpoint 8, key group 7, chunk 1 of 1 (" + fmt.Sprint(len(bad)) +
		" bytes): format version: found 99, expected 1 or 2 (the versions this build reads); restore with the Weir version that wrote the checkpoint or a newer one"
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
}

func noTables(string) (statebackend.Kind, bool) { return 0, false }

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
	dst := AppendTable(AppendHeader(nil, kg, 1, 0), name, kind, 1)
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
			0, statebackend.ErrCorrupt, `key group 3, chunk 1 of 1 (19 bytes), holding state "a": chunk holds key group: found 4, expected 3`},
		{"chunk of a key group outside the range", map[int][][]byte{3: {tableChunk(9, "a", statebackend.KindValue)}},
			0, statebackend.ErrCorrupt, "found 9 (outside this backend's key groups [2..5]), expected 3"},
		{"damaged chunk", map[int][][]byte{3: {tableChunk(3, "a", statebackend.KindValue)[1:]}},
			0, statebackend.ErrCorrupt, "magic"},
		{"kinds differ between chunks", map[int][][]byte{3: {tableChunk(3, "a", statebackend.KindValue), tableChunk(3, "a", statebackend.KindMap)}},
			0, statebackend.ErrConflict, `chunk 2 of 2 (23 bytes), state "a": kind: found map state, expected value state (its kind in key group 3)`},
		{"kinds differ between key groups", map[int][][]byte{
			2: {tableChunk(2, "a", statebackend.KindValue)}, 3: {tableChunk(3, "a", statebackend.KindValue)},
			4: {tableChunk(4, "a", statebackend.KindReducing)}, 5: {tableChunk(5, "a", statebackend.KindValue)}},
			0, statebackend.ErrConflict, `key group 4, chunk 1 of 1 (19 bytes), state "a": kind: found reducing state, expected value state (its kind in key group 2)`},
		{"kind differs from the backend's", map[int][][]byte{4: {tableChunk(4, "held", statebackend.KindValue)}},
			0, statebackend.ErrConflict, `state "held": kind: found value state, expected list state (as the backend holds it)`},
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
