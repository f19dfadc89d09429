package kafka

import (
	"fmt"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state of the source:
//
//	"kafka-splits"      operator list state, one item per partition this
//	                    subtask reads:
//	                    version=1 | string topic | varint partition |
//	                    varint next offset | varint end offset |
//	                    varint largest event time
//	"kafka-partitions"  union state, one item per subtask:
//	                    version=1 | uvarint n | n × (string topic |
//	                    varint partition)
//
// Strings are a uvarint length and the bytes. The next offset is the offset
// after the last record emitted, or -2 for a partition adopted at its
// earliest offset that has emitted nothing yet (it starts there again). The
// end offset is where a bounded source stops, -1 for an unbounded one. The
// largest event time (math.MinInt64 before any) lets the partition's
// watermark continue where it was.
//
// The union item of a subtask names the partitions it reads, so that every
// subtask of a restore knows the partitions that some subtask reads: the
// runtime gives each split to exactly one subtask, and a partition outside
// the union is new and goes to its Owner. A subtask writes its item even
// when it reads nothing, so that it can tell a restore from a fresh start.
const (
	splitsState     = "kafka-splits"
	partitionsState = "kafka-partitions"
	stateVersion    = 1
	// maxStateString bounds a string in the state and in a transaction
	// handle (topic names and transactional ids are far shorter).
	maxStateString = 4 << 10
)

func declareSourceState(p *stream.PlanContext) {
	p.DeclareState(stream.StateDecl{Name: splitsState, Kind: stream.StateOperatorList})
	p.DeclareState(stream.StateDecl{Name: partitionsState, Kind: stream.StateUnion})
}

// SnapshotState records the position of every split of this subtask, and
// the offsets to commit to the consumer group when the checkpoint
// completes.
func (s *Source) SnapshotState(c *stream.SnapshotContext) error {
	marker := statecodec.AppendUvarint([]byte{stateVersion}, uint64(len(s.splits)))
	var offs kadm.Offsets
	for _, sp := range s.splits {
		item := []byte{stateVersion}
		item = statecodec.AppendString(item, sp.topic)
		item = statecodec.AppendVarint(item, int64(sp.partition))
		item = statecodec.AppendVarint(item, sp.next)
		item = statecodec.AppendVarint(item, sp.end)
		item = statecodec.AppendVarint(item, sp.maxTs)
		c.AddListState(splitsState, item)
		marker = statecodec.AppendString(marker, sp.topic)
		marker = statecodec.AppendVarint(marker, int64(sp.partition))
		if s.spec.cfg.Group != "" && sp.next >= 0 {
			offs.AddOffset(sp.topic, sp.partition, sp.next, -1)
		}
	}
	c.AddUnionState(partitionsState, marker)
	if offs != nil {
		s.commits = append(s.commits, pendingCommit{checkpoint: c.CheckpointID, offsets: offs})
		if len(s.commits) > maxPendingCommits {
			s.commits = slices.Delete(s.commits, 0, len(s.commits)-maxPendingCommits)
		}
	}
	return nil
}

// RestoreState makes this subtask read exactly the splits it received,
// each from its recorded offset, and adopt (unless the source is bounded)
// the partitions that no subtask read at the checkpoint and that it owns.
// It is called after Open and before Poll.
func (s *Source) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	items, markers := c.State.List[splitsState], c.State.Union[partitionsState]
	if len(items) == 0 && len(markers) == 0 {
		return nil // the checkpoint has no state of this source: start afresh
	}
	where := fmt.Sprintf("%s: checkpoint %d", s.name, c.CheckpointID)
	if len(markers) == 0 {
		return fmt.Errorf("%s holds kafka splits but no %s state; the checkpoint is damaged", where, partitionsState)
	}
	known := make(map[tp]bool)
	for _, m := range markers {
		r := statecodec.NewReader(m)
		if v := r.Byte(); r.Err() == nil && v != stateVersion {
			return fmt.Errorf("%s: %s state of unknown version %d (this Weir reads version %d)", where, partitionsState, v, stateVersion)
		}
		for range r.Count(2) { // a topic and a partition
			p := tp{r.String(maxStateString), int32(r.Varint())}
			known[p] = true
		}
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, partitionsState, err)
		}
	}
	s.splits, s.byTP = nil, make(map[tp]*split)
	now := s.now()
	for _, item := range items {
		r := statecodec.NewReader(item)
		if v := r.Byte(); r.Err() == nil && v != stateVersion {
			return fmt.Errorf("%s: %s state of unknown version %d (this Weir reads version %d)", where, splitsState, v, stateVersion)
		}
		sp := &split{maxTs: math.MinInt64, active: now}
		sp.topic = r.String(maxStateString)
		part := r.Varint()
		sp.next, sp.end, sp.maxTs = r.Varint(), r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt %s state: %w", where, splitsState, err)
		}
		if part < 0 || part > math.MaxInt32 || sp.next < offsetEarliest || sp.end < noEnd || sp.topic == "" {
			return fmt.Errorf("%s: corrupt %s state: partition %d of %q at offset %d, end %d", where, splitsState, part, sp.topic, sp.next, sp.end)
		}
		sp.partition = int32(part)
		if !known[sp.tp] {
			return fmt.Errorf("%s: partition %s is in %s but not in %s; the checkpoint is damaged", where, sp.tp, splitsState, partitionsState)
		}
		if s.byTP[sp.tp] != nil {
			return fmt.Errorf("%s: got partition %s twice, so the runtime distributed the list state wrongly", where, sp.tp)
		}
		if !s.wanted(sp.topic) {
			s.log.Warn(s.name+": the restored checkpoint reads a topic the config no longer names; it is not read", "topic", sp.topic, "partition", sp.partition)
			continue
		}
		if s.spec.bounded && sp.end == noEnd {
			return fmt.Errorf("%s: the checkpoint was taken by an unbounded kafka source, and this one is bounded (stopAtEnd or endOffsets); restore it with the config it was taken with", where)
		}
		if !s.spec.bounded {
			sp.end = noEnd // an unbounded source restored from a bounded one reads on
		}
		s.add(sp)
	}
	if s.spec.bounded {
		return nil // a bounded source reads what it started with
	}
	// Partitions seen at Open that no subtask read are new.
	var fresh []tp
	for p := range s.known {
		if !known[p] {
			fresh = append(fresh, p)
		}
	}
	slices.SortFunc(fresh, compareTP)
	s.known = known
	s.adopt(fresh)
	return nil
}

// NotifyCheckpointComplete commits the offsets of checkpoint id (or of
// the newest earlier one this subtask took) to the consumer group, in the
// background.
func (s *Source) NotifyCheckpointComplete(id int64) error {
	i := -1
	for j, p := range s.commits {
		if p.checkpoint <= id {
			i = j
		}
	}
	if i < 0 {
		return nil
	}
	offs := s.commits[i].offsets
	s.commits = slices.Delete(s.commits, 0, i+1)
	if s.bg != nil {
		s.bg.commit(offs)
	}
	return nil
}

// NotifyCheckpointAborted does nothing: the next completion commits.
func (s *Source) NotifyCheckpointAborted(int64) error { return nil }
