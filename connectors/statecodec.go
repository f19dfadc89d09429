package connectors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The connectors' checkpoint state is a few small items of operator list or
// union state. Every item starts with a format version byte, then varint
// fields; stateReader decodes them and remembers the first error so that a
// decoder checks once at the end.

// stateVersion is the format version of the sources' state items and of
// the file sink's counters. An item whose format changed gets its own newer
// version (the file sink's pending transactions: sinkPendingVersion), and
// its decoder keeps reading the older ones so that old checkpoints restore.
const stateVersion = 1

// Restore failures, for errors.Is in this package. The decoding errors
// errTruncated and errStateVersion mark corrupt state; the text of
// errStateVersion begins the message of the error that wraps it.
var (
	errTruncated    = errors.New("truncated")
	errStateVersion = errors.New("unknown format version")
	// errRescale marks state that another subtask, or the job at another
	// parallelism, wrote, restored into a connector that cannot be
	// rescaled.
	errRescale = errors.New("connectors: state cannot be rescaled")
	// errMisrouted marks a subtask that did not get back exactly its own
	// state although the parallelism is unchanged.
	errMisrouted = errors.New("connectors: state restored into the wrong subtask")
)

type stateReader struct {
	b       []byte
	version byte // the item's format version
	err     error
}

// newStateReader reads an item of format version stateVersion.
func newStateReader(item []byte) *stateReader { return newVersionedStateReader(item, stateVersion) }

// newVersionedStateReader reads an item of any format version from 1 to
// newest; the caller decodes the fields by r.version.
func newVersionedStateReader(item []byte, newest byte) *stateReader {
	r := &stateReader{b: item}
	r.version = r.byte()
	if r.err == nil && (r.version == 0 || r.version > newest) {
		if newest == 1 {
			r.err = fmt.Errorf("%w %d (this build reads version 1)", errStateVersion, r.version)
		} else {
			r.err = fmt.Errorf("%w %d (this build reads versions 1 to %d)", errStateVersion, r.version, newest)
		}
	}
	return r
}

func (r *stateReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errTruncated
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *stateReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) int() int { return int(r.varint()) }

// uint32 reads a uvarint that must fit in 32 bits.
func (r *stateReader) uint32() uint32 {
	v := r.uvarint()
	if r.err == nil && v > math.MaxUint32 {
		r.err = fmt.Errorf("value %d does not fit in 32 bits", v)
	}
	return uint32(v)
}

func (r *stateReader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if uint64(len(r.b)) < n {
		r.err = errTruncated
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// done returns the first decoding error, or an error if bytes are left over.
func (r *stateReader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d unexpected trailing bytes", len(r.b))
	}
	return r.err
}

func appendInt(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendUint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
