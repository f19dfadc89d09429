package heap

import (
	"fmt"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
)

// The heap backend hosts statebackend.Slots (it implements
// statebackend.SlotHost): a Slots' index is the state of its table, so
// slots cost no entries here and are encoded only by Snapshot, as the
// value table (per key its slots, statebackend.SlotRecord) that a Pebble
// backend stores too.

var _ statebackend.SlotHost = (*Backend)(nil)

// HostSlots implements statebackend.SlotHost.
func (b *Backend) HostSlots(d statebackend.Descriptor, src statebackend.SlotSource, load func(key []byte, group int, ns int64, words []int64) error) error {
	if b.closed {
		return statebackend.ErrClosed
	}
	if err := d.Validate(); err != nil {
		return err
	}
	if d.Kind != statebackend.KindValue {
		return fmt.Errorf("heap state backend: slot state %q must be a value table", d.Name)
	}
	t := b.tables[d.Name]
	switch {
	case t == nil:
	case t.hosted != nil || t.registered:
		return fmt.Errorf("%w: state %q is already in use; give the slot state another name", statebackend.ErrConflict, d.Name)
	case t.kind != statebackend.KindValue:
		return fmt.Errorf("%w: state %q was restored as %s state and is requested as slot state (value)", statebackend.ErrConflict, d.Name, t.kind)
	}
	h := &table{b: b, kind: statebackend.KindValue, d: d, registered: true, hosted: src, load: load}
	if t != nil {
		// Restored and not asked for yet: hand the slots over.
		for i := range t.vals {
			if err := h.loadGroup(b.kg.Start+i, t.vals[i].slots); err != nil {
				return err
			}
		}
		for i := range t.vals {
			for _, sl := range t.vals[i].slots {
				b.entries--
				b.keyBytes -= int64(len(sl.key))
			}
		}
	}
	b.tables[d.Name] = h
	return nil
}

// loadGroup decodes restored values of a hosted table (as []byte) and
// loads their slots.
func (t *table) loadGroup(kg int, vals []slot) error {
	for _, sl := range vals {
		v, err := t.d.Codec.DecodeValue(sl.v.([]byte))
		if err != nil {
			return fmt.Errorf("%w: heap state backend: restored slot state %q, key group %d, key %s: value does not decode with codec %s: %v; the state was written for other aggregates", statebackend.ErrCorrupt, t.d.Name, kg, chunk.Printable(sl.key), t.d.Codec.ID(), err)
		}
		for _, r := range v.([]statebackend.SlotRecord) {
			if err := t.load([]byte(sl.key), kg, r.NS, r.Words); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostedKeys is Backend.Keys for a hosted table. It sorts the slots of every
// key group to list one: fine for scans after a restore or in tests, not for
// a per-record path (the windows on the heap never call it).
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
// ids (ordered by key and namespace), to a chunk: one value per key. It
// returns the number of values it wrote and their encoded bytes.
func (t *table) appendHosted(dst []byte, kg int, ids []int32) ([]byte, int64, int64, error) {
	src := t.hosted
	keys := 0
	for i, id := range ids {
		if i == 0 || string(slotKey(src, id)) != string(slotKey(src, ids[i-1])) {
			keys++
		}
	}
	dst = chunk.AppendTable(dst, t.d.Name, statebackend.KindValue, keys)
	var values, valueBytes int64
	var recs []statebackend.SlotRecord
	for i := 0; i < len(ids); {
		key := slotKey(src, ids[i])
		j := i + 1
		for j < len(ids) && string(slotKey(src, ids[j])) == string(key) {
			j++
		}
		recs = recs[:0]
		for _, id := range ids[i:j] {
			_, _, ns := src.SlotKey(id)
			recs = append(recs, statebackend.SlotRecord{NS: ns, Words: src.Words(id)})
		}
		dst = chunk.AppendField(dst, key)
		at := len(dst)
		var err error
		if dst, err = t.appendValue(dst, recs); err != nil {
			return dst, 0, 0, t.encodeError(kg-t.b.kg.Start, string(key), err)
		}
		values++
		valueBytes += int64(len(dst) - at)
		i = j
	}
	return dst, values, valueBytes, nil
}

func slotKey(src statebackend.SlotSource, id int32) []byte {
	k, _, _ := src.SlotKey(id)
	return k
}
