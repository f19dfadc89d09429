package connectors

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state of the sources. Both are split-based: their work is
// divided into splits, a subtask writes one item of operator list state per
// split it owns, and after a restore it works on exactly the splits it
// received, whichever subtasks wrote them and whatever the parallelism was.
// The runtime hands every item to exactly one subtask, so every split goes
// on exactly once. A subtask that receives no split has nothing to do; so
// that it can tell this from a fresh start (when it would take its own
// splits), every subtask also writes one item of union state, which every
// subtask receives. Every subtask writes it, not only subtask 0, because
// the state of a subtask that has finished is not in later checkpoints.
//
// datagen writes one item of list state "positions" per split (see
// DatagenConfig and Datagen):
//
//	version=2 | varint start | varint stride | varint position
//
// where the split's rows are seq = start + k*stride, position is the index
// k of its next row and stride is the number of splits of the job. Version
// 1, written before datagen could be rescaled, is one item per subtask,
//
//	version=1 | varint subtask | varint parallelism | varint position
//
// and is read as the split (subtask, parallelism, position). Its
// checkpoints have no union item, so a subtask that received no item could
// not tell a restore from a fresh start: they restore only with the
// parallelism they were taken with. The union item is "splitCount":
// version=1 | varint number of splits of the job.
//
// file writes one item of list state "splits" per file of the subtask:
//
//	version=1 | varint file index | varint byte offset | done byte | string path
//
// (strings are a uvarint length and the bytes), and one item of union state
// "listing" (version=1 | varint number of files). Checkpoints written before
// every subtask wrote "listing" have it from subtask 0 only, so a subtask
// that received splits restores them even without it.
const (
	datagenStateName    = "positions"
	datagenSplitVersion = 2
	datagenMarkerState  = "splitCount"
	fileSplitsState     = "splits"
	fileListingMarker   = "listing"
)

var (
	_ stream.Checkpointed = (*Datagen)(nil)
	_ stream.Checkpointed = (*FileSource)(nil)
)

// SnapshotState records the position of every split of this subtask.
func (d *Datagen) SnapshotState(c *stream.SnapshotContext) error {
	for _, sp := range d.splits {
		item := []byte{datagenSplitVersion}
		item = appendInt(item, sp.start)
		item = appendInt(item, sp.stride)
		item = appendInt(item, sp.next)
		c.AddListState(datagenStateName, item)
	}
	c.AddUnionState(datagenMarkerState, appendInt([]byte{stateVersion}, d.nsplits))
	return nil
}

// RestoreState makes this subtask generate exactly the splits it received,
// each from its recorded position: none, its own or others'. It is called
// after Open and before Poll.
func (d *Datagen) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	markers, items := c.State.Union[datagenMarkerState], c.State.List[datagenStateName]
	if len(markers) == 0 && len(items) == 0 {
		return nil // the checkpoint has no state for this source: start afresh
	}
	where := fmt.Sprintf("datagen subtask %d: checkpoint %d", d.subtask, c.CheckpointID)
	nsplits := int64(-1)
	for _, m := range markers {
		r := newStateReader(m)
		n := r.varint()
		if err := r.done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, datagenMarkerState, err)
		}
		if n <= 0 || nsplits >= 0 && n != nsplits {
			return fmt.Errorf("%s: corrupt %s state: the number of splits is not positive or not the same in every item", where, datagenMarkerState)
		}
		nsplits = n
	}
	splits := make([]datagenSplit, 0, len(items))
	for _, item := range items {
		r := newVersionedStateReader(item, datagenSplitVersion)
		start, stride, next := r.varint(), r.varint(), r.varint()
		if err := r.done(); err != nil {
			return fmt.Errorf("%s: corrupt position state: %w", where, err)
		}
		if nsplits < 0 {
			if r.version != 1 {
				return fmt.Errorf("%s: the checkpoint holds datagen splits but not their %s item; the checkpoint is damaged", where, datagenMarkerState)
			}
			// Version 1: start and stride are the writer's subtask and
			// parallelism, and every subtask must get its own item back.
			if stride != d.parallelism {
				return errkind.Mark(fmt.Errorf("%s was taken with parallelism %d by a Weir whose datagen state cannot be rescaled, and the job now runs with %d; restore it with parallelism %d, then take a checkpoint or savepoint and rescale from that",
					where, stride, d.parallelism, stride), errRescale)
			}
			if start != d.subtask || len(items) != 1 {
				return errkind.Mark(fmt.Errorf("%s: got %d positions (one of subtask %d); with unchanged parallelism each subtask must get back exactly its own position, so the runtime distributed the list state wrongly",
					where, len(items), start), errMisrouted)
			}
		} else if stride != nsplits {
			return fmt.Errorf("%s: corrupt position state: a split of stride %d in a job of %d splits", where, stride, nsplits)
		}
		if start < 0 || start >= stride {
			return fmt.Errorf("%s: corrupt position state: split %d of %d splits", where, start, stride)
		}
		sp := d.newSplit(start, stride, next)
		if next < 0 || sp.end >= 0 && next > sp.end {
			return fmt.Errorf("%s: split %d holds position %d, outside [0, %d] for rows %d; the checkpoint belongs to a different datagen config",
				where, start, next, sp.end, d.cfg.Rows)
		}
		if slices.ContainsFunc(splits, func(o datagenSplit) bool { return o.start == start }) {
			return errkind.Mark(fmt.Errorf("%s: got split %d twice, so the runtime distributed the list state wrongly", where, start), errMisrouted)
		}
		splits = append(splits, sp)
	}
	if nsplits < 0 {
		nsplits = d.parallelism // version 1, checked above
	}
	slices.SortFunc(splits, func(a, b datagenSplit) int { return cmp.Compare(a.start, b.start) })
	d.splits, d.nsplits = splits, nsplits
	d.resetRate()
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
	c.AddUnionState(fileListingMarker, appendInt([]byte{stateVersion}, int64(s.files)))
	return nil
}

// RestoreState makes this subtask read exactly the splits it received, each
// from its recorded byte offset: none, its own or others'. It is called
// after Open and before Poll.
func (s *FileSource) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	items := c.State.List[fileSplitsState]
	if len(c.State.Union[fileListingMarker]) == 0 && len(items) == 0 {
		return nil // no state for this source in the checkpoint: start afresh
	}
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
	for i := 1; i < len(splits); i++ {
		if splits[i].File == splits[i-1].File {
			return errkind.Mark(fmt.Errorf("file source subtask %d: checkpoint %d: got the split of file %d twice, so the runtime distributed the list state wrongly",
				s.subtask, c.CheckpointID, splits[i].File), errMisrouted)
		}
	}
	s.closeSplit()
	s.splits, s.cur = splits, 0
	return nil
}

// declareSplitState declares the state of a source whose splits are list
// state (splits) with their count as union state (marker).
func declareSplitState(p *stream.PlanContext, splits, marker string) {
	p.DeclareState(stream.StateDecl{Name: splits, Kind: stream.StateOperatorList})
	p.DeclareState(stream.StateDecl{Name: marker, Kind: stream.StateUnion})
}
