package nats

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirstream/weir/stream"
)

// Checkpoint state. Every item starts with a format version byte; the
// fields that follow are uvarints, varints and strings (a uvarint length
// and the bytes).
//
// The source's stream is one split. Its owner writes one item of operator
// list state "nats-position":
//
//	version=1 | string stream | uvarint next | uvarint limit
//
// next is the stream sequence after the last message emitted, limit the
// first sequence a bounded source (stopAtEnd) does not read, 0 when it is
// unbounded. Every subtask also writes one item of union state
// "nats-splits" (version=1 | uvarint number of splits, 1), so that a
// subtask that receives no position after a restore knows that another
// one owns the stream (rather than starting afresh).
//
// The sink writes one item of operator list state "nats-msg-ids" per
// subtask:
//
//	version=1 | string job | varint checkpoint | varint parallelism | varint subtask | varint row
//
// job and checkpoint name the segment its message ids belong to (see
// Sink), parallelism and subtask say which subtask of which parallelism
// wrote it, and row is the number of rows published in the segment.
const (
	sourcePositionState = "nats-position"
	sourceSplitsMarker  = "nats-splits"
	sinkIDsState        = "nats-msg-ids"
	stateVersion        = 1
)

var (
	errTruncated = errors.New("truncated")
	// errMisrouted marks a restore that handed the stream's one split to
	// more than one item of one subtask.
	errMisrouted = errors.New("nats: state restored into the wrong subtask")
)

// SnapshotState records the read position of the stream if this subtask
// owns it, and the split marker.
func (s *Source) SnapshotState(c *stream.SnapshotContext) error {
	if s.owns {
		item := []byte{stateVersion}
		item = appendString(item, s.cfg.Stream)
		item = binary.AppendUvarint(item, s.pos)
		item = binary.AppendUvarint(item, s.limit)
		c.AddListState(sourcePositionState, item)
	}
	c.AddUnionState(sourceSplitsMarker, binary.AppendUvarint([]byte{stateVersion}, 1))
	return nil
}

// RestoreState makes this subtask read the stream from the checkpointed
// position if it received it, and read nothing otherwise. A checkpoint
// without state of this source leaves the fresh start that Open prepared.
func (s *Source) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	markers, items := c.State.Union[sourceSplitsMarker], c.State.List[sourcePositionState]
	if len(markers) == 0 && len(items) == 0 {
		return nil
	}
	where := fmt.Sprintf("%s subtask %d: checkpoint %d", sourceOp, s.octx.Subtask, c.CheckpointID)
	for _, m := range markers {
		r := newStateReader(m)
		if n := r.uvarint(); r.done() != nil || n != 1 {
			return fmt.Errorf("%s: corrupt %s state", where, sourceSplitsMarker)
		}
	}
	if len(items) > 1 {
		return fmt.Errorf("%s: got %d positions of the one stream: %w", where, len(items), errMisrouted)
	}
	s.owns, s.pos, s.limit = false, 0, 0
	if len(items) == 0 {
		return nil
	}
	r := newStateReader(items[0])
	name, next, limit := r.string(), r.uvarint(), r.uvarint()
	if err := r.done(); err != nil {
		return fmt.Errorf("%s: corrupt %s state: %w", where, sourcePositionState, err)
	}
	if name != s.cfg.Stream {
		return fmt.Errorf("%s: the checkpoint holds the position in stream %q, but the source reads stream %q; restore with the old stream, or give the source a new uid to start afresh",
			where, name, s.cfg.Stream)
	}
	if next == 0 {
		return fmt.Errorf("%s: corrupt %s state: position 0", where, sourcePositionState)
	}
	s.owns, s.pos = true, next
	if s.cfg.StopAtEnd {
		s.limit = limit // 0 (an unbounded run's checkpoint): found at the first Poll
	}
	return nil
}

type stateReader struct {
	b   []byte
	err error
}

func newStateReader(item []byte) *stateReader {
	r := &stateReader{b: item}
	if v := r.byte(); r.err == nil && v != stateVersion {
		r.err = fmt.Errorf("unknown format version %d (this build reads version %d)", v, stateVersion)
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

// done returns the first decoding error, or an error if bytes are left.
func (r *stateReader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d unexpected trailing bytes", len(r.b))
	}
	return r.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
