package connectors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/internal/statecodec"
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
//
// In continuous mode (FileSourceConfig.MonitorInterval) file writes one item
// of list state "splits" per file the subtask is reading, in a format of
// its own, version 2 (continuous files have no index):
//
//	version=2 | varint byte offset | string path
//
// and, instead of "listing", one item of union state "seen" holding the
// files the subtask has taken up (see filesource_continuous.go):
//
//	version=1 | flags byte | uvarint count | count * (uvarint shared | string rest)
//
// The paths are in strictly increasing byte order, each written as the
// length of the prefix it shares with the one before and the rest. Flag 1
// says that the job had made its first listing (processOnlyNew skips the
// files of that listing only). A bounded checkpoint does not restore into
// a continuous source, nor the reverse: the bounded state lacks the files
// of the subtasks that had finished.
const (
	datagenStateName    = "positions"
	datagenSplitVersion = 2
	datagenMarkerState  = "splitCount"
	fileSplitsState     = "splits"
	fileListingMarker   = "listing"
	fileSeenState       = "seen"
	// fileContinuousSplitVersion is the version of continuous mode's
	// "splits" items; bounded mode writes version 1.
	fileContinuousSplitVersion = 2
	seenListed                 = 1 // flag of a "seen" item
	// maxPathLen bounds a path read from a checkpoint.
	maxPathLen = 4096
)

// stateVersion is the format version of the sources' state items and of
// the file sink's counters. Every item starts with its format version
// byte, then fields written with the Append functions of
// internal/statecodec. An item whose format changed gets its own newer
// version (the file sink's pending transactions: sinkPendingVersion), and
// its decoder keeps reading the older ones so that old checkpoints
// restore.
const stateVersion = 1

// Restore failures, for errors.Is in this package. Corrupt state is
// statecodec.ErrTruncated or statecodec.ErrVersion.
var (
	// errRescale marks state that another subtask, or the job at another
	// parallelism, wrote, restored into a connector that cannot be
	// rescaled.
	errRescale = errors.New("connectors: state cannot be rescaled")
	// errMisrouted marks a subtask that did not get back exactly its own
	// state although the parallelism is unchanged.
	errMisrouted = errors.New("connectors: state restored into the wrong subtask")
	// errFileSourceMode marks a file source checkpoint restored into a
	// file source of the other mode (bounded or continuous).
	errFileSourceMode = errors.New("connectors: file source checkpoint of the other mode")
)

var (
	_ stream.Checkpointed = (*Datagen)(nil)
	_ stream.Checkpointed = (*FileSource)(nil)
)

// SnapshotState records the position of every split of this subtask.
func (d *Datagen) SnapshotState(c *stream.SnapshotContext) error {
	for _, sp := range d.splits {
		item := []byte{datagenSplitVersion}
		item = statecodec.AppendVarint(item, sp.start)
		item = statecodec.AppendVarint(item, sp.stride)
		item = statecodec.AppendVarint(item, sp.next)
		c.AddListState(datagenStateName, item)
	}
	c.AddUnionState(datagenMarkerState, statecodec.AppendVarint([]byte{stateVersion}, d.nsplits))
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
		r := statecodec.NewReader(m)
		r.Version(stateVersion)
		n := r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, datagenMarkerState, err)
		}
		if n <= 0 || nsplits >= 0 && n != nsplits {
			return fmt.Errorf("%s: corrupt %s state: the number of splits is not positive or not the same in every item", where, datagenMarkerState)
		}
		nsplits = n
	}
	splits := make([]datagenSplit, 0, len(items))
	for _, item := range items {
		r := statecodec.NewReader(item)
		version := r.Version(datagenSplitVersion)
		start, stride, next := r.Varint(), r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt position state: %w", where, err)
		}
		if nsplits < 0 {
			if version != 1 {
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

// SnapshotState records the read position of every file of this subtask,
// and in continuous mode the files it has taken up.
func (s *FileSource) SnapshotState(c *stream.SnapshotContext) error {
	if s.mon != nil {
		for _, sp := range s.splits[s.cur:] {
			if sp.Done {
				continue
			}
			item := []byte{fileContinuousSplitVersion}
			item = statecodec.AppendVarint(item, sp.Offset)
			item = statecodec.AppendString(item, sp.Path)
			c.AddListState(fileSplitsState, item)
		}
		c.AddUnionState(fileSeenState, s.mon.seenItem())
		return nil
	}
	for _, sp := range s.Splits() {
		item := []byte{stateVersion}
		item = statecodec.AppendVarint(item, int64(sp.File))
		item = statecodec.AppendVarint(item, sp.Offset)
		item = statecodec.AppendBool(item, sp.Done)
		item = statecodec.AppendString(item, sp.Path)
		c.AddListState(fileSplitsState, item)
	}
	c.AddUnionState(fileListingMarker, statecodec.AppendVarint([]byte{stateVersion}, int64(s.files)))
	return nil
}

// RestoreState makes this subtask read exactly the splits it received, each
// from its recorded byte offset: none, its own or others'. It is called
// after Open and before Poll.
func (s *FileSource) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	if s.mon != nil {
		return s.restoreContinuous(c)
	}
	items := c.State.List[fileSplitsState]
	if len(c.State.Union[fileSeenState]) > 0 {
		return s.modeMismatch(c, true)
	}
	if len(c.State.Union[fileListingMarker]) == 0 && len(items) == 0 {
		return nil // no state for this source in the checkpoint: start afresh
	}
	splits := make([]FileSplit, 0, len(items))
	for _, item := range items {
		r := statecodec.NewReader(item)
		if r.Version(fileContinuousSplitVersion) == fileContinuousSplitVersion {
			return s.modeMismatch(c, true)
		}
		file, off := r.Int(), r.Varint()
		done := r.Bool()
		path := r.String(statecodec.MaxString)
		if err := r.Done(); err != nil {
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

// restoreContinuous restores a continuous source: the files this subtask
// is to read, and the files taken up that it now owns.
func (s *FileSource) restoreContinuous(c *stream.RestoreContext) error {
	m := s.mon
	items, seenItems := c.State.List[fileSplitsState], c.State.Union[fileSeenState]
	if len(c.State.Union[fileListingMarker]) > 0 {
		return s.modeMismatch(c, false)
	}
	if len(items) == 0 && len(seenItems) == 0 {
		return nil // no state for this source in the checkpoint: start afresh
	}
	where := fmt.Sprintf("file source subtask %d: checkpoint %d", s.subtask, c.CheckpointID)
	splits := make([]FileSplit, 0, len(items))
	for _, item := range items {
		r := statecodec.NewReader(item)
		if v := r.Version(fileContinuousSplitVersion); r.Err() == nil && v != fileContinuousSplitVersion {
			return s.modeMismatch(c, false)
		}
		off, path := r.Varint(), r.String(statecodec.MaxString)
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt split state: %w", where, err)
		}
		if off < 0 || path == "" || len(path) > maxPathLen {
			return fmt.Errorf("%s: corrupt split state: offset %d of a path of %d bytes", where, off, len(path))
		}
		splits = append(splits, FileSplit{File: -1, Path: path, Offset: off})
	}
	if len(seenItems) == 0 {
		return fmt.Errorf("%s: the checkpoint holds continuous file splits but no %s item; the checkpoint is damaged", where, fileSeenState)
	}
	slices.SortFunc(splits, func(a, b FileSplit) int { return cmp.Compare(a.Path, b.Path) })
	for i := 1; i < len(splits); i++ {
		if splits[i].Path == splits[i-1].Path {
			return errkind.Mark(fmt.Errorf("%s: got the split of %s twice, so the runtime distributed the list state wrongly", where, splits[i].Path), errMisrouted)
		}
	}
	var own []string
	listed := false
	for _, item := range seenItems {
		flags, err := decodeSeen(item, m.maxFiles, func(p []byte) {
			if fileOwner(string(p), m.parallelism) == m.subtask {
				own = append(own, string(p))
			}
		})
		if err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, fileSeenState, err)
		}
		listed = listed || flags&seenListed != 0
	}
	slices.Sort(own)
	own = slices.Compact(own)
	if len(own) > m.maxFiles {
		return fmt.Errorf("%s: the checkpoint remembers %d files of this subtask, more than the limit of %d; move processed files out of the directory, or start a new job on another directory", where, len(own), m.maxFiles)
	}
	var b pathSetBuilder
	for _, p := range own {
		b.add([]byte(p))
	}
	s.closeSplit()
	m.close()
	s.splits, s.cur = splits, 0
	m.seen, m.listed, m.item = b.finish(), listed, nil
	m.pending, m.list, m.nextList = nil, nil, time.Time{}
	return nil
}

// seenItem returns the "seen" item of m. Snapshots share it until seen
// changes, as neither they nor m modify it.
func (m *monitor) seenItem() []byte {
	if m.item == nil {
		var flags byte
		if m.listed {
			flags |= seenListed
		}
		item := make([]byte, 0, 2+binary.MaxVarintLen64+len(m.seen.data))
		item = append(item, stateVersion, flags)
		item = statecodec.AppendUvarint(item, uint64(m.seen.n))
		m.item = append(item, m.seen.data...)
	}
	return m.item
}

// decodeSeen decodes a "seen" item of at most limit paths, calling fn with
// each path (valid during the call), and returns its flags.
func decodeSeen(item []byte, limit int, fn func(path []byte)) (byte, error) {
	r := statecodec.NewReader(item)
	r.Version(stateVersion)
	flags := r.Byte()
	n := r.Uvarint()
	switch {
	case r.Err() != nil:
		return 0, r.Err()
	case flags&^seenListed != 0:
		return 0, fmt.Errorf("unknown flags %#x", flags)
	case n > uint64(limit):
		return 0, fmt.Errorf("%d paths, more than the limit of %d", n, limit)
	}
	var prev, cur []byte
	for i := uint64(0); i < n; i++ {
		shared, rest := r.Uvarint(), r.String(statecodec.MaxString)
		if r.Err() != nil {
			break
		}
		if shared > uint64(len(prev)) || int(shared)+len(rest) > maxPathLen {
			return 0, fmt.Errorf("path %d: %d bytes shared with a path of %d and %d more: corrupt or longer than %d bytes", i, shared, len(prev), len(rest), maxPathLen)
		}
		cur = append(append(cur[:0], prev[:shared]...), rest...)
		if len(cur) == 0 || i > 0 && bytes.Compare(cur, prev) <= 0 {
			return 0, fmt.Errorf("path %d is empty or not after the one before", i)
		}
		fn(cur)
		prev, cur = cur, prev
	}
	return flags, r.Done()
}

// modeMismatch is the error of a checkpoint of a file source of the other
// mode; continuous says that the checkpoint's source was continuous.
func (s *FileSource) modeMismatch(c *stream.RestoreContext, continuous bool) error {
	where := fmt.Sprintf("file source subtask %d: checkpoint %d", s.subtask, c.CheckpointID)
	if continuous {
		return fmt.Errorf("%s was taken by a continuous file source (monitorInterval set) and this one is bounded: %w; restore it with monitorInterval set, or start the job without this checkpoint",
			where, errFileSourceMode)
	}
	return fmt.Errorf("%s was taken by a bounded file source (no monitorInterval) and this one is continuous: %w; the bounded state does not say which files its finished subtasks read, so restore it without monitorInterval, or start the job without this checkpoint",
		where, errFileSourceMode)
}

// declareSplitState declares the state of a source whose splits are list
// state (splits) with their count as union state (marker).
func declareSplitState(p *stream.PlanContext, splits, marker string) {
	p.DeclareState(stream.StateDecl{Name: splits, Kind: stream.StateOperatorList})
	p.DeclareState(stream.StateDecl{Name: marker, Kind: stream.StateUnion})
}
