package connectors

import (
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state of the sources.
//
// datagen writes one item of operator list state "positions" per subtask:
//
//	version=1 | varint subtask | varint parallelism | varint position
//
// where position is Datagen.Position (the index of the next row of that
// subtask). With unchanged parallelism each subtask gets its own item back
// (the runtime redistributes list state round-robin); a restore with another
// parallelism fails, because subtask i of p generates rows i, i+p, ... and
// positions do not carry over to another stride.
//
// file writes one item of operator list state "splits" per file of the
// subtask:
//
//	version=1 | varint file index | varint byte offset | done byte | string path
//
// (strings are a uvarint length and the bytes), and subtask 0 writes one item
// of union state "listing" (version=1 | varint number of files) that tells a
// restored subtask it is restoring from a checkpoint even if it received no
// splits. After a restore a subtask reads exactly the splits it received,
// whichever subtask wrote them, so every file position is read once however
// the runtime distributes the items.
const (
	datagenStateName  = "positions"
	fileSplitsState   = "splits"
	fileListingMarker = "listing"
)

var (
	_ stream.Checkpointed = (*Datagen)(nil)
	_ stream.Checkpointed = (*FileSource)(nil)
)

// SnapshotState records this subtask's position.
func (d *Datagen) SnapshotState(c *stream.SnapshotContext) error {
	item := []byte{stateVersion}
	item = appendInt(item, d.subtask)
	item = appendInt(item, d.parallelism)
	item = appendInt(item, d.pos)
	c.AddListState(datagenStateName, item)
	return nil
}

// RestoreState continues from the position this subtask had in the
// checkpoint. It fails if the checkpoint was taken with another parallelism:
// rescaling datagen is not supported.
func (d *Datagen) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	items := c.State.List[datagenStateName]
	if len(items) == 0 {
		return nil // the checkpoint has no state for this source: start afresh
	}
	var pos int64
	for _, item := range items {
		r := newStateReader(item)
		subtask, par, p := r.varint(), r.varint(), r.varint()
		if err := r.done(); err != nil {
			return fmt.Errorf("datagen subtask %d: checkpoint %d: corrupt position state: %w", d.subtask, c.CheckpointID, err)
		}
		if par != d.parallelism {
			return errkind.Mark(fmt.Errorf("datagen subtask %d: checkpoint %d was taken with parallelism %d, the job now runs with %d: rescaling datagen is not supported; restore with parallelism %d or start the job without the checkpoint",
				d.subtask, c.CheckpointID, par, d.parallelism, par), errRescale)
		}
		if subtask != d.subtask || len(items) != 1 {
			return errkind.Mark(fmt.Errorf("datagen subtask %d: checkpoint %d gave it %d positions (one of subtask %d); with unchanged parallelism each subtask must get back exactly its own position, so the runtime distributed the list state wrongly",
				d.subtask, c.CheckpointID, len(items), subtask), errMisrouted)
		}
		pos = p
	}
	if pos < 0 || d.total >= 0 && pos > d.total {
		return fmt.Errorf("datagen subtask %d: checkpoint %d holds position %d, outside [0, %d] for rows %d; the checkpoint belongs to a different datagen config",
			d.subtask, c.CheckpointID, pos, d.total, d.cfg.Rows)
	}
	d.SetPosition(pos)
	d.rateStart, d.rateRows = time.Time{}, 0 // the rate limit restarts
	return nil
}

// SnapshotState records the read position of every file of this subtask.
func (s *FileSource) SnapshotState(c *stream.SnapshotContext) error {
	for _, sp := range s.Splits() {
		item := []byte{stateVersion}
		item = appendInt(item, int64(sp.File))
		item = appendInt(item, sp.Offset)
		item = appendBool(item, sp.Done)
		item = appendString(item, sp.Path)
		c.AddListState(fileSplitsState, item)
	}
	if s.subtask == 0 {
		c.AddUnionState(fileListingMarker, appendInt([]byte{stateVersion}, int64(s.files)))
	}
	return nil
}

// RestoreState makes this subtask read exactly the splits it received, each
// from its recorded byte offset. It is called after Open and before Poll.
func (s *FileSource) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil || len(c.State.Union[fileListingMarker]) == 0 {
		return nil // no state for this source in the checkpoint: start afresh
	}
	items := c.State.List[fileSplitsState]
	splits := make([]FileSplit, 0, len(items))
	for _, item := range items {
		r := newStateReader(item)
		file, off := r.int(), r.varint()
		done := r.byte() != 0
		path := r.string()
		if err := r.done(); err != nil {
			return fmt.Errorf("file source subtask %d: checkpoint %d: corrupt split state: %w", s.subtask, c.CheckpointID, err)
		}
		if off < 0 {
			return fmt.Errorf("file source subtask %d: checkpoint %d: split of %s has negative offset %d", s.subtask, c.CheckpointID, path, off)
		}
		splits = append(splits, FileSplit{File: file, Path: path, Offset: off, Done: done})
	}
	slices.SortFunc(splits, func(a, b FileSplit) int { return a.File - b.File })
	s.closeSplit()
	s.splits, s.cur = splits, 0
	return nil
}
