package join

import (
	"encoding/binary"
	"fmt"

	"github.com/weirstream/weir/operators/join/keyrows"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state.
//
// Both joins write one chunk of keyed state per key group that holds rows
// (SnapshotContext.WriteKeyGroup); varint and uvarint as in encoding/binary:
//
//	byte    version = 1
//	uvarint key group
//	uvarint number of entries, then per entry:
//	    window_join only: varint window start (ms)
//	    the key: per key field a null byte (1 = null) and the value
//	        (integers varint, float64 8 bytes little-endian, strings
//	        uvarint length and bytes, bools one byte)
//	    per input (0, then 1): uvarint number of rows, then per row its
//	        event time (varint) and per field a value as for keys
//
// Rows are written in arrival order and restored in it. window_join also
// writes one item of union state "watermark" (byte version = 1, varint
// watermark); a restore takes the smallest, so no window that has not fired
// is lost when key groups move between subtasks.
const (
	stateVersion       = 1
	watermarkStateName = "watermark"
)

// chunker collects entries per key group.
type chunker struct {
	chunks map[int32][]byte
	counts map[int32]int
	ranges stream.KeyGroupRange
	name   string
}

func newChunker(c *stream.SnapshotContext, name string) *chunker {
	return &chunker{chunks: make(map[int32][]byte), counts: make(map[int32]int), ranges: c.KeyGroups, name: name}
}

// entry returns the buffer for a new entry of key group g.
func (ch *chunker) entry(g int32) ([]byte, error) {
	if !ch.ranges.Contains(int(g)) {
		return nil, fmt.Errorf("%s: holds a key of key group %d, outside this subtask's range %v; records were routed to the wrong subtask (are the inputs keyed by the join fields?)", ch.name, g, ch.ranges)
	}
	ch.counts[g]++
	return ch.chunks[g], nil
}

func (ch *chunker) write(c *stream.SnapshotContext) {
	for g, body := range ch.chunks {
		buf := make([]byte, 0, len(body)+12)
		buf = append(buf, stateVersion)
		buf = binary.AppendUvarint(buf, uint64(g))
		buf = binary.AppendUvarint(buf, uint64(ch.counts[g]))
		c.WriteKeyGroup(int(g), append(buf, body...))
	}
}

// appendKeyRows appends key id and its rows of both sides.
func appendKeyRows(buf []byte, keys *keyrows.Keys, sides *[2]side, id int32) []byte {
	buf = keys.AppendKey(buf, id)
	for s := range sides {
		sd := &sides[s]
		buf = binary.AppendUvarint(buf, uint64(sd.count(id)))
		for r := sd.first(id); r >= 0; r = sd.next[r] {
			buf = sd.rows.AppendRow(buf, r)
		}
	}
	return buf
}

// readKeyRows reads one key and its rows into keys and sides.
func readKeyRows(r *keyrows.Reader, keys *keyrows.Keys, sides *[2]side) {
	id := keys.ReadKey(r)
	for s := range sides {
		n := r.Count()
		for range n {
			row := sides[s].rows.ReadRow(r)
			if r.Err != nil {
				return
			}
			sides[s].link(row, id)
		}
	}
}

// readChunks calls entry for every entry of the chunks of this subtask's
// key groups.
func readChunks(c *stream.RestoreContext, name string, entry func(r *keyrows.Reader)) error {
	for g, chunks := range c.State.Keyed {
		if !c.KeyGroups.Contains(g) {
			continue
		}
		for _, chunk := range chunks {
			r := &keyrows.Reader{B: chunk}
			if v := r.Byte(); r.Err == nil && v != stateVersion {
				return fmt.Errorf("%s: restoring checkpoint %d: key group %d: unknown state format version %d (this build reads %d)", name, c.CheckpointID, g, v, stateVersion)
			}
			if cg := r.Uvarint(); r.Err == nil && int(cg) != g {
				return fmt.Errorf("%s: restoring checkpoint %d: the chunk of key group %d says it holds key group %d", name, c.CheckpointID, g, cg)
			}
			n := r.Count()
			for i := 0; i < n && r.Err == nil; i++ {
				entry(r)
			}
			if err := r.Done(); err != nil {
				return fmt.Errorf("%s: restoring checkpoint %d: key group %d: corrupt state: %v", name, c.CheckpointID, g, err)
			}
		}
	}
	return nil
}

// SnapshotState writes every stored row per key group.
func (o *StreamJoin) SnapshotState(c *stream.SnapshotContext) error {
	ch := newChunker(c, o.name)
	for id, g := range o.keys.Groups(o.maxPar) {
		buf, err := ch.entry(g)
		if err != nil {
			return err
		}
		ch.chunks[g] = appendKeyRows(buf, o.keys, &o.sides, int32(id))
	}
	ch.write(c)
	return nil
}

// RestoreState loads the rows of this subtask's key groups.
func (o *StreamJoin) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	return readChunks(c, o.name, func(r *keyrows.Reader) { readKeyRows(r, o.keys, &o.sides) })
}

// SnapshotState writes every window's rows per key group, and the
// watermark.
func (o *WindowJoin) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(watermarkStateName, binary.AppendVarint([]byte{stateVersion}, o.wm))
	ch := newChunker(c, o.name)
	for _, start := range o.starts {
		p := o.panes[start]
		for id, g := range p.keys.Groups(o.maxPar) {
			buf, err := ch.entry(g)
			if err != nil {
				return err
			}
			buf = binary.AppendVarint(buf, start)
			ch.chunks[g] = appendKeyRows(buf, p.keys, &p.sides, int32(id))
		}
	}
	ch.write(c)
	return nil
}

// RestoreState loads the windows of this subtask's key groups and the
// smallest watermark of the checkpoint.
func (o *WindowJoin) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	for i, item := range c.State.Union[watermarkStateName] {
		r := &keyrows.Reader{B: item}
		if v := r.Byte(); r.Err == nil && v != stateVersion {
			return fmt.Errorf("%s: restoring checkpoint %d: unknown watermark state version %d", o.name, c.CheckpointID, v)
		}
		wm := r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: restoring checkpoint %d: corrupt watermark state: %v", o.name, c.CheckpointID, err)
		}
		if i == 0 || wm < o.wm {
			o.wm = wm
		}
	}
	return readChunks(c, o.name, func(r *keyrows.Reader) {
		start := r.Varint()
		if r.Err != nil {
			return
		}
		p := o.pane(start)
		readKeyRows(r, p.keys, &p.sides)
	})
}
