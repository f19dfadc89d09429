package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"

	"github.com/weirstream/weir/stream"
)

// SnapshotVersion is the snapshot format version EncodeSnapshot writes and
// DecodeSnapshot reads.
const SnapshotVersion = 1

const (
	snapMagic      = "WEIRSNAP"
	snapHeaderLen  = 8 + 4 + 4 + 8
	snapIndexEntry = 4 + 4 + 8 + 8
	snapTrailerLen = 4
)

// ErrCorrupt is wrapped by errors for stored objects whose bytes are not
// what was written: checksum or size mismatches and undecodable snapshots.
var ErrCorrupt = errors.New("checkpoint: corrupt object")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeSnapshot encodes s in the snapshot format (see the package
// documentation). It is deterministic. A nil s encodes as an empty snapshot.
func EncodeSnapshot(s *stream.OperatorSnapshot) ([]byte, error) {
	if s == nil {
		s = &stream.OperatorSnapshot{}
	}
	kgs := make([]int, 0, len(s.Keyed))
	dataLen := 0
	for kg, chunks := range s.Keyed {
		if kg < 0 || kg > math.MaxInt32 {
			return nil, fmt.Errorf("checkpoint: encode snapshot: key group %d out of range", kg)
		}
		if len(chunks) > math.MaxUint32 {
			return nil, fmt.Errorf("checkpoint: encode snapshot: key group %d has too many chunks (%d)", kg, len(chunks))
		}
		kgs = append(kgs, kg)
		for _, c := range chunks {
			dataLen += uvarintLen(uint64(len(c))) + len(c)
		}
	}
	slices.Sort(kgs)

	size := snapHeaderLen + len(kgs)*snapIndexEntry + dataLen +
		namedLen(s.List) + namedLen(s.Union) + snapTrailerLen
	buf := make([]byte, 0, size)
	buf = append(buf, snapMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, SnapshotVersion)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(kgs)))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(dataLen))
	off := 0
	for _, kg := range kgs {
		chunks := s.Keyed[kg]
		n := 0
		for _, c := range chunks {
			n += uvarintLen(uint64(len(c))) + len(c)
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(kg))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(chunks)))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(off))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(n))
		off += n
	}
	for _, kg := range kgs {
		for _, c := range s.Keyed[kg] {
			buf = binary.AppendUvarint(buf, uint64(len(c)))
			buf = append(buf, c...)
		}
	}
	buf = appendNamed(buf, s.List)
	buf = appendNamed(buf, s.Union)
	buf = binary.LittleEndian.AppendUint32(buf, crcOf(buf))
	return buf, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func namedLen(m map[string][][]byte) int {
	n := uvarintLen(uint64(len(m)))
	for name, items := range m {
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(items)))
		for _, it := range items {
			n += uvarintLen(uint64(len(it))) + len(it)
		}
	}
	return n
}

func appendNamed(buf []byte, m map[string][][]byte) []byte {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	buf = binary.AppendUvarint(buf, uint64(len(names)))
	for _, name := range names {
		buf = binary.AppendUvarint(buf, uint64(len(name)))
		buf = append(buf, name...)
		items := m[name]
		buf = binary.AppendUvarint(buf, uint64(len(items)))
		for _, it := range items {
			buf = binary.AppendUvarint(buf, uint64(len(it)))
			buf = append(buf, it...)
		}
	}
	return buf
}

// DecodeSnapshot decodes a blob written by EncodeSnapshot, keeping only the
// keyed state of the key groups in kg (an empty range keeps none) and all
// list and union state. The returned byte slices alias data (capacity-capped,
// so appending to one never overwrites another); the caller must not modify
// data afterwards. Corrupt input gives an error wrapping ErrCorrupt.
func DecodeSnapshot(data []byte, kg stream.KeyGroupRange) (*stream.OperatorSnapshot, error) {
	if len(data) < snapHeaderLen+snapTrailerLen {
		return nil, corruptf("%d bytes is shorter than the smallest snapshot", len(data))
	}
	if string(data[:8]) != snapMagic {
		return nil, corruptf("bad magic %q, want %q (not a Weir snapshot)", data[:8], snapMagic)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != SnapshotVersion {
		return nil, corruptf("format version %d; this Weir reads version %d only", v, SnapshotVersion)
	}
	body := data[:len(data)-snapTrailerLen]
	want := binary.LittleEndian.Uint32(data[len(data)-snapTrailerLen:])
	if got := crcOf(body); got != want {
		return nil, corruptf("CRC-32C mismatch (stored %08x, computed %08x)", want, got)
	}
	return decodeBody(body, kg)
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// decodeBody decodes everything but the trailer; the header's magic and
// version have been checked.
func decodeBody(body []byte, kg stream.KeyGroupRange) (*stream.OperatorSnapshot, error) {
	if len(body) < snapHeaderLen {
		return nil, corruptf("truncated header")
	}
	k := uint64(binary.LittleEndian.Uint32(body[12:]))
	d := binary.LittleEndian.Uint64(body[16:])
	rest := uint64(len(body) - snapHeaderLen)
	if k*snapIndexEntry > rest || d > rest-k*snapIndexEntry {
		return nil, corruptf("index of %d key groups and %d bytes of keyed data do not fit in %d bytes", k, d, rest)
	}
	index := body[snapHeaderLen : snapHeaderLen+k*snapIndexEntry]
	keyed := body[snapHeaderLen+k*snapIndexEntry : snapHeaderLen+k*snapIndexEntry+d]
	out := &stream.OperatorSnapshot{}
	prev := int64(-1)
	for i := uint64(0); i < k; i++ {
		e := index[i*snapIndexEntry:]
		group := int64(binary.LittleEndian.Uint32(e))
		count := uint64(binary.LittleEndian.Uint32(e[4:]))
		off := binary.LittleEndian.Uint64(e[8:])
		n := binary.LittleEndian.Uint64(e[16:])
		if group <= prev {
			return nil, corruptf("key index entry %d: key group %d not above %d", i, group, prev)
		}
		prev = group
		if off > d || n > d-off {
			return nil, corruptf("key group %d: region [%d, +%d) outside the %d-byte keyed data", group, off, n, d)
		}
		if !kg.Contains(int(group)) {
			continue
		}
		region := keyed[off : off+n]
		if count > uint64(len(region)) {
			return nil, corruptf("key group %d: %d chunks cannot fit in %d bytes", group, count, len(region))
		}
		chunks := make([][]byte, 0, count)
		for range count {
			c, r, err := readBytes(region)
			if err != nil {
				return nil, corruptf("key group %d: %v", group, err)
			}
			chunks = append(chunks, c)
			region = r
		}
		if len(region) != 0 {
			return nil, corruptf("key group %d: %d bytes after its %d chunks", group, len(region), count)
		}
		if out.Keyed == nil {
			out.Keyed = make(map[int][][]byte)
		}
		out.Keyed[int(group)] = chunks
	}
	rest2 := body[snapHeaderLen+k*snapIndexEntry+d:]
	var err error
	if out.List, rest2, err = readNamed(rest2); err != nil {
		return nil, corruptf("list state: %v", err)
	}
	if out.Union, rest2, err = readNamed(rest2); err != nil {
		return nil, corruptf("union state: %v", err)
	}
	if len(rest2) != 0 {
		return nil, corruptf("%d unexpected bytes after the union state", len(rest2))
	}
	return out, nil
}

func readUvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("truncated or overlong varint")
	}
	return v, b[n:], nil
}

// readBytes reads a uvarint length and that many bytes.
func readBytes(b []byte) (item, rest []byte, err error) {
	n, b, err := readUvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("item of %d bytes but only %d left", n, len(b))
	}
	return b[:n:n], b[n:], nil
}

func readNamed(b []byte) (map[string][][]byte, []byte, error) {
	count, b, err := readUvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if count > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%d names cannot fit in %d bytes", count, len(b))
	}
	if count == 0 {
		return nil, b, nil
	}
	m := make(map[string][][]byte, count)
	prev := ""
	for i := range count {
		var name []byte
		if name, b, err = readBytes(b); err != nil {
			return nil, nil, err
		}
		if i > 0 && strings.Compare(string(name), prev) <= 0 {
			return nil, nil, fmt.Errorf("name %q not after %q", name, prev)
		}
		prev = string(name)
		var n uint64
		if n, b, err = readUvarint(b); err != nil {
			return nil, nil, fmt.Errorf("%q: %v", prev, err)
		}
		if n > uint64(len(b)) {
			return nil, nil, fmt.Errorf("%q: %d items cannot fit in %d bytes", prev, n, len(b))
		}
		items := make([][]byte, 0, n)
		for range n {
			var it []byte
			if it, b, err = readBytes(b); err != nil {
				return nil, nil, fmt.Errorf("%q: %v", prev, err)
			}
			items = append(items, it)
		}
		m[prev] = items
	}
	return m, b, nil
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
