package heap

import (
	"fmt"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
)

// The heap backend hosts statebackend.Slots (it implements
// statebackend.SlotHost): a Slots' index is the state of its table, so
// slots cost no map entries here and are encoded only by Snapshot, as the
// map-table entries (key, namespace → words) a Pebble backend stores too.

var _ statebackend.SlotHost = (*Backend)(nil)

// HostSlots implements statebackend.SlotHost.
func (b *Backend) HostSlots(d statebackend.Descriptor, src statebackend.SlotSource, load func(key []byte, group int, ns int64, words []int64) error) error {
	if b.closed {
		return statebackend.ErrClosed
	}
	if err := d.Validate(); err != nil {
		return err
	}
	if d.Kind != statebackend.KindMap {
		return fmt.Errorf("heap state backend: slot state %q must be a map table", d.Name)
	}
	t := b.tables[d.Name]
	switch {
	case t == nil:
	case t.hosted != nil || t.registered:
		return fmt.Errorf("%w: state %q is already in use; give the slot state another name", statebackend.ErrConflict, d.Name)
	case t.kind != statebackend.KindMap:
		return fmt.Errorf("%w: state %q was restored as %s state and is requested as slot state (map)", statebackend.ErrConflict, d.Name, t.kind)
	}
	h := &table{b: b, kind: statebackend.KindMap, d: d, registered: true, hosted: src, load: load}
	if t != nil {
		// Restored and not asked for yet: hand the slots over.
		for i, g := range t.maps {
			if err := h.loadGroup(b.kg.Start+i, g); err != nil {
				return err
			}
		}
		for _, g := range t.maps {
			for k, um := range g {
				b.entries -= int64(len(um)) + 1
				b.keyBytes -= int64(len(k))
				for uk := range um {
					b.keyBytes -= int64(len(uk))
				}
			}
		}
	}
	b.tables[d.Name] = h
	return nil
}

// loadGroup decodes restored entries of a hosted table (values as []byte)
// and loads them.
func (t *table) loadGroup(kg int, g map[string]map[string]*cell) error {
	for k, um := range g {
		for uk, c := range um {
			ns, err := t.d.UserKeyCodec.DecodeValue([]byte(uk))
			if err != nil {
				return fmt.Errorf("%w: heap state backend: restored slot state %q, key group %d, key %s: namespace does not decode: %v", statebackend.ErrCorrupt, t.d.Name, kg, chunk.Printable(k), err)
			}
			v, err := t.d.Codec.DecodeValue(c.v.([]byte))
			if err != nil {
				return fmt.Errorf("%w: heap state backend: restored slot state %q, key group %d, key %s: value does not decode with codec %s: %v; the state was written for other aggregates", statebackend.ErrCorrupt, t.d.Name, kg, chunk.Printable(k), t.d.Codec.ID(), err)
			}
			if err := t.load([]byte(k), kg, ns.(int64), v.([]int64)); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostedKeys is Backend.Keys for a hosted table.
func (t *table) hostedKeys(kg int, fn func(key []byte) bool) {
	t.hosted.BeginSnapshot()
	defer t.hosted.EndSnapshot()
	var last []byte
	for _, id := range t.hosted.GroupSlots(kg) {
		key, _, _ := t.hosted.SlotKey(id)
		if last != nil && string(key) == string(last) {
			continue
		}
		last = key
		if !fn(append([]byte(nil), key...)) {
			return
		}
	}
}

// appendHosted appends a hosted table's entries of key group kg, the slots
// ids (ordered by key and namespace), to a chunk, and returns the number
// of values it wrote and their encoded bytes.
func (t *table) appendHosted(dst []byte, kg int, ids []int32) ([]byte, int64, int64, error) {
	src := t.hosted
	keys := 0
	for i, id := range ids {
		if i == 0 || string(slotKey(src, id)) != string(slotKey(src, ids[i-1])) {
			keys++
		}
	}
	dst = chunk.AppendTable(dst, t.d.Name, statebackend.KindMap, keys)
	var values, valueBytes int64
	var nsb []byte
	for i := 0; i < len(ids); {
		key := slotKey(src, ids[i])
		j := i + 1
		for j < len(ids) && string(slotKey(src, ids[j])) == string(key) {
			j++
		}
		dst = chunk.AppendField(dst, key)
		dst = chunk.AppendCount(dst, j-i)
		for _, id := range ids[i:j] {
			_, _, ns := src.SlotKey(id)
			var err error
			if nsb, err = t.d.UserKeyCodec.AppendValue(nsb[:0], ns); err != nil {
				return dst, 0, 0, t.encodeError(kg-t.b.kg.Start, string(key), err)
			}
			dst = chunk.AppendField(dst, nsb)
			at := len(dst)
			if dst, err = t.appendValue(dst, src.Words(id)); err != nil {
				return dst, 0, 0, t.encodeError(kg-t.b.kg.Start, string(key), err)
			}
			values++
			valueBytes += int64(len(dst) - at)
		}
		i = j
	}
	return dst, values, valueBytes, nil
}

func slotKey(src statebackend.SlotSource, id int32) []byte {
	k, _, _ := src.SlotKey(id)
	return k
}
