package pebblestate

import "encoding/binary"

// Key layout (see doc.go). Every key starts with the two-byte big-endian key
// group, except the metadata keys, which start with metaPrefix (a key group
// no backend may own).
const (
	timerMarker = 0x00 // after the key group: a timer; table ids are ≥ 1
	metaHi      = 0xff // metaPrefix = 0xff 0xff
	// MaxKeyGroup is the largest key group a backend may own.
	MaxKeyGroup = 0xfffe
	// layoutVersion is stored under metaVersionKey; Open refuses others.
	layoutVersion = 1
)

var (
	metaPrefix     = []byte{metaHi, metaHi}
	metaVersionKey = []byte{metaHi, metaHi, 'v'}
	metaTablePfx   = []byte{metaHi, metaHi, 't'} // + table name → tableRecord
	metaSizePfx    = []byte{metaHi, metaHi, 's'} // + key group (2 bytes) → uvarint live bytes
)

// appendKG appends key group kg as two big-endian bytes.
func appendKG(dst []byte, kg int) []byte { return append(dst, byte(kg>>8), byte(kg)) }

// kgPrefix is the first key of key group kg; kgPrefix(kg+1) bounds it.
func kgPrefix(kg int) []byte { return appendKG(nil, kg) }

// appendTablePrefix appends kg | table id.
func appendTablePrefix(dst []byte, kg int, id uint64) []byte {
	return binary.AppendUvarint(appendKG(dst, kg), id)
}

// appendStateKey appends kg | table id | len(key) | key; map state appends
// the user key after it.
func appendStateKey(dst []byte, kg int, id uint64, key []byte) []byte {
	dst = appendTablePrefix(dst, kg, id)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// appendTimerKey appends kg | 0x00 | ts (sign-flipped, big-endian) | key, so
// that a key group's timers iterate in (timestamp, key) order.
func appendTimerKey(dst []byte, kg int, ts int64, key []byte) []byte {
	dst = append(appendKG(dst, kg), timerMarker)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
	return append(dst, key...)
}

// timerPrefix is the first timer key of key group kg; timerEnd bounds them.
func timerPrefix(kg int) []byte { return append(appendKG(nil, kg), timerMarker) }
func timerEnd(kg int) []byte    { return append(appendKG(nil, kg), timerMarker+1) }

// parseTimerKey splits a timer key; ok is false if k is not one.
func parseTimerKey(k []byte) (kg int, ts int64, key []byte, ok bool) {
	if len(k) < 11 || k[2] != timerMarker {
		return 0, 0, nil, false
	}
	kg = int(k[0])<<8 | int(k[1])
	ts = int64(binary.BigEndian.Uint64(k[3:11]) ^ (1 << 63))
	return kg, ts, k[11:], true
}

// parseStateKey splits the part of a state key after kg | table id into the
// key and the user key (empty for non-map tables).
func parseStateKey(rest []byte) (key, userKey []byte, ok bool) {
	n, w := binary.Uvarint(rest)
	if w <= 0 || n > uint64(len(rest)-w) {
		return nil, nil, false
	}
	return rest[w : w+int(n)], rest[w+int(n):], true
}

// prefixEnd returns the smallest key greater than every key starting with p
// (nil if there is none: p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
