package nats

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/internal/statecodec"
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

// errMisrouted marks a restore that handed the stream's one split to more
// than one item of one subtask.
var errMisrouted = errors.New("nats: state restored into the wrong subtask")

// SnapshotState records the read position of the stream if this subtask
// owns it, and the split marker.
func (s *Source) SnapshotState(c *stream.SnapshotContext) error {
	if s.owns {
		item := []byte{stateVersion}
		item = statecodec.AppendString(item, s.cfg.Stream)
		item = statecodec.AppendUvarint(item, s.pos)
		item = statecodec.AppendUvarint(item, s.limit)
		c.AddListState(sourcePositionState, item)
	}
	c.AddUnionState(sourceSplitsMarker, statecodec.AppendUvarint([]byte{stateVersion}, 1))
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
		r := statecodec.NewReader(m)
		r.Version(stateVersion)
		if n := r.Uvarint(); r.Done() != nil || n != 1 {
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
	r := statecodec.NewReader(items[0])
	r.Version(stateVersion)
	name, next, limit := r.String(statecodec.MaxString), r.Uvarint(), r.Uvarint()
	if err := r.Done(); err != nil {
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
