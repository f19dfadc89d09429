package pebblestate

import (
	"bytes"
	"encoding/binary"
)

// Key layout (see doc.go). Every key starts with the two-byte big-endian key
// group, except the metadata keys, which start with metaPrefix (a key group
// no backend may own).
const (
	// timerMarker after the key group: an event-time timer; table ids are
	// ≥ 1, so their encodings start with a byte ≥ 0x01.
	timerMarker = 0x00
	// procTimerMarker, then 0x00, after the key group: a processing-time
	// timer. No table id's encoding starts with 0x80 0x00: AppendUvarint
	// writes the shortest encoding, in which a byte with the continuation
	// bit (0x80) set is followed by another such byte or by a last byte
	// that is not 0x00.
	procTimerMarker = 0x80
	metaHi          = 0xff // metaPrefix = 0xff 0xff
	// MaxKeyGroup is the largest key group a backend may own.
	MaxKeyGroup = 0xfffe
)

// Layout versions, stored under metaVersionKey; Open refuses others. A
// database starts at layoutV1 and moves to layoutV2 when it first holds a
// processing-time timer key, so that a database without any is still
// opened by builds that know only layoutV1 (the same layout without
// processing-time timers), and one with some is refused by them rather
// than read without its timers.
const (
	layoutV1 = 1
	layoutV2 = 2
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

// timerDomain is the part of the timer keys of one domain (event time or
// processing time) that follows the key group: kg | marker | ts | key.
type timerDomain struct {
	name   string // for errors
	marker []byte
	proc   bool // processing time
}

var (
	eventTimers = timerDomain{"event-time", []byte{timerMarker}, false}
	procTimers  = timerDomain{"processing-time", []byte{procTimerMarker, 0x00}, true}
)

// suffixAt is where the timestamp starts in the domain's timer keys.
func (d timerDomain) suffixAt() int { return 2 + len(d.marker) }

// appendKey appends kg | marker | ts (sign-flipped, big-endian) | key, so
// that a key group's timers iterate in (timestamp, key) order.
func (d timerDomain) appendKey(dst []byte, kg int, ts int64, key []byte) []byte {
	dst = append(appendKG(dst, kg), d.marker...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
	return append(dst, key...)
}

// prefix is the first timer key of the domain in key group kg; end bounds
// them.
func (d timerDomain) prefix(kg int) []byte { return append(appendKG(nil, kg), d.marker...) }
func (d timerDomain) end(kg int) []byte    { return prefixEnd(d.prefix(kg)) }

// parseTimerKey splits a timer key of either domain; ok is false if k is
// not one.
func parseTimerKey(k []byte) (d timerDomain, kg int, ts int64, key []byte, ok bool) {
	switch {
	case len(k) > 2 && k[2] == timerMarker:
		d = eventTimers
	case len(k) > 3 && bytes.Equal(k[2:4], procTimers.marker):
		d = procTimers
	default:
		return timerDomain{}, 0, 0, nil, false
	}
	at := d.suffixAt()
	if len(k) < at+8 {
		return timerDomain{}, 0, 0, nil, false
	}
	kg = int(k[0])<<8 | int(k[1])
	ts = int64(binary.BigEndian.Uint64(k[at:at+8]) ^ (1 << 63))
	return d, kg, ts, k[at+8:], true
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
