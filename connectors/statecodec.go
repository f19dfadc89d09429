package connectors

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The connectors' checkpoint state is a few small items of operator list or
// union state. Every item starts with a format version byte, then varint
// fields; stateReader decodes them and remembers the first error so that a
// decoder checks once at the end.

// stateVersion is the format version of every state item written here.
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
	b   []byte
	err error
}

func newStateReader(item []byte) *stateReader {
	r := &stateReader{b: item}
	if v := r.byte(); r.err == nil && v != stateVersion {
		r.err = fmt.Errorf("%w %d (this build reads version %d)", errStateVersion, v, stateVersion)
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
