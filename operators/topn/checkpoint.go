package topn

import (
	"encoding/binary"
	"fmt"

	"github.com/weirstream/weir/operators/join/keyrows"
	"github.com/weirstream/weir/stream"
)

// Checkpoint state.
//
// A keyed top-n writes one chunk of keyed state per key group that holds
// rows (SnapshotContext.WriteKeyGroup); varint and uvarint as in
// encoding/binary:
//
//	byte    version = 1
//	uvarint key group
//	uvarint number of entries, then per (pane, key) entry:
//	    varint pane start (ms)
//	    the key: per key field a null byte (1 = null) and the value
//	        (integers varint, float64 8 bytes little-endian, strings
//	        uvarint length and bytes, bools one byte)
//	    uvarint number of rows, best first, then per row: varint arrival
//	        number, varint event time, per field a value as for keys
//
// A top-n without keyBy writes the same chunk (key group 0, no key fields)
// as one item of operator list state "global". Every subtask writes one item
// of union state "state": byte version = 1, varint watermark, varint next
// arrival number; a restore takes the smallest watermark and the largest
// arrival number.
const (
	stateVersion    = 1
	globalStateName = "global"
	unionStateName  = "state"
)

// SnapshotState writes every pane's top rows per key group.
func (o *TopN) SnapshotState(c *stream.SnapshotContext) error {
	u := binary.AppendVarint([]byte{stateVersion}, o.wm)
	c.AddUnionState(unionStateName, binary.AppendVarint(u, o.seq))
	bodies := make(map[int32][]byte)
	counts := make(map[int32]int)
	var groups []int32
	if o.keys != nil {
		groups = o.keys.Groups(o.maxPar)
	}
	for _, s := range o.starts {
		p := o.panes[s]
		for _, id := range p.order {
			var g int32
			if o.keys != nil {
				g = groups[id]
				if !c.KeyGroups.Contains(int(g)) {
					return fmt.Errorf("%s: holds a key of key group %d, outside this subtask's range %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", o.name, g, c.KeyGroups)
				}
			}
			buf := binary.AppendVarint(bodies[g], s)
			if o.keys != nil {
				buf = o.keys.AppendKey(buf, id)
			}
			l := p.lists[id]
			buf = binary.AppendUvarint(buf, uint64(len(l.rows)))
			for _, r := range l.rows {
				buf = binary.AppendVarint(buf, p.seq[r])
				buf = p.rows.AppendRow(buf, r)
			}
			bodies[g] = buf
			counts[g]++
		}
	}
	for g, body := range bodies {
		buf := append(make([]byte, 0, len(body)+12), stateVersion)
		buf = binary.AppendUvarint(buf, uint64(g))
		buf = binary.AppendUvarint(buf, uint64(counts[g]))
		buf = append(buf, body...)
		if o.keys == nil {
			c.AddListState(globalStateName, buf)
		} else {
			c.WriteKeyGroup(int(g), buf)
		}
	}
	return nil
}

// RestoreState loads the panes of this subtask's key groups (or the global
// state), the smallest watermark and the largest arrival number.
func (o *TopN) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	where := fmt.Sprintf("%s: restoring checkpoint %d", o.name, c.CheckpointID)
	for i, item := range c.State.Union[unionStateName] {
		r := &keyrows.Reader{B: item}
		if v := r.Byte(); r.Err == nil && v != stateVersion {
			return fmt.Errorf("%s: unknown state version %d (this build reads %d)", where, v, stateVersion)
		}
		wm, seq := r.Varint(), r.Varint()
		if err := r.Done(); err != nil {
			return fmt.Errorf("%s: corrupt watermark state: %v", where, err)
		}
		if i == 0 || wm < o.wm {
			o.wm = wm
		}
		o.seq = max(o.seq, seq)
	}
	if o.keys == nil {
		for _, item := range c.State.List[globalStateName] {
			if err := o.restoreChunk(item, 0); err != nil {
				return fmt.Errorf("%s: global state: %w", where, err)
			}
		}
		return nil
	}
	for g, chunks := range c.State.Keyed {
		if !c.KeyGroups.Contains(g) {
			continue
		}
		for _, chunk := range chunks {
			if err := o.restoreChunk(chunk, g); err != nil {
				return fmt.Errorf("%s: key group %d: %w", where, g, err)
			}
		}
	}
	return nil
}

func (o *TopN) restoreChunk(chunk []byte, g int) error {
	r := &keyrows.Reader{B: chunk}
	if v := r.Byte(); r.Err == nil && v != stateVersion {
		return fmt.Errorf("unknown state version %d (this build reads %d)", v, stateVersion)
	}
	if cg := r.Uvarint(); r.Err == nil && int(cg) != g {
		return fmt.Errorf("the chunk says it holds key group %d", cg)
	}
	col := o.r.col
	n := r.Count()
	for e := 0; e < n && r.Err == nil; e++ {
		start := r.Varint()
		var id int32
		if o.keys != nil {
			id = o.keys.ReadKey(r)
		}
		rows := r.Count()
		if r.Err != nil {
			break
		}
		p := o.pane(start)
		l := p.list(id)
		for range rows {
			seq := r.Varint()
			row := p.rows.ReadRow(r)
			if r.Err != nil {
				break
			}
			p.sk = append(p.sk, o.sortKey(&p.rows.Cols[col], int(row)))
			p.seq = append(p.seq, seq)
			l.rows = append(l.rows, row)
		}
	}
	if err := r.Done(); err != nil {
		return fmt.Errorf("corrupt state: %v", err)
	}
	return nil
}
