package pebblestate

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
)

// This file applies Descriptor.SnapshotFilter (TTL state: leave out expired
// values and list elements). Snapshot applies it to every value it writes
// of a table whose descriptor has one (snapshotValue), leaving the live
// state alone.
// SnapshotFiles and Checkpoint cannot leave anything out of the database's
// files, so before each of them sweepFiltered applies the filter to the
// live state itself, Options.SnapshotCleanupEntries entries per table at a
// time.

// filtered reports whether t's values pass through a SnapshotFilter: t has
// been asked for with a descriptor that has one.
func (t *table) filtered() bool { return t.registered && t.d.SnapshotFilter != nil }

// snapshotValue returns what a snapshot writes of t's stored value enc
// (of key, for error messages): enc itself if t has no filter, else what
// the filter keeps of it, encoded into *buf; keep is false if the filter
// drops it. The filter must not call the backend: Snapshot's iterator is
// open.
func (t *table) snapshotValue(key, enc []byte, buf *[]byte) (out []byte, keep bool, err error) {
	if !t.filtered() {
		return enc, true, nil
	}
	v, err := t.d.Codec.DecodeValue(enc)
	if err != nil {
		return nil, false, fmt.Errorf("%w: pebble state backend: %s state %q, key %s: stored value does not decode with codec %s: %v",
			statebackend.ErrCorrupt, t.kind, t.name, chunk.Printable(key), t.d.Codec.ID(), err)
	}
	v, keep = t.d.SnapshotFilter(v)
	if !keep {
		return nil, false, nil
	}
	if *buf, err = t.d.Codec.AppendValue((*buf)[:0], v); err != nil {
		return nil, false, fmt.Errorf("pebble state backend: %s state %q, key %s: filtered value does not encode with codec %s: %w",
			t.kind, t.name, chunk.Printable(key), t.d.Codec.ID(), err)
	}
	return *buf, true, nil
}

// sweepFiltered applies the SnapshotFilter of every table that has one to
// the next Options.SnapshotCleanupEntries entries of the table after its
// sweep cursor: it deletes the entries the filter drops and rewrites those
// whose encoding it changes. The writes go to the batch (and the
// changelog); the value cache is flushed first and loses the entries
// changed.
func (b *Backend) sweepFiltered() error {
	n := b.opts.SnapshotCleanupEntries
	if n <= 0 {
		return nil
	}
	for _, t := range b.tables {
		if !t.filtered() {
			continue
		}
		if err := b.sweepTable(t, n); err != nil {
			return err
		}
	}
	return b.err
}

// sweepPage is how many entries sweepTable reads per iterator, so that no
// iterator is open while the filter runs or the batch is written.
const sweepPage = 256

// sweepTable sweeps up to n entries of t from its cursor (t.sweep), key
// group by key group, and leaves the cursor after the last entry swept;
// after the backend's last key group, the next sweep starts over.
func (b *Backend) sweepTable(t *table, n int) error {
	b.flush()
	from := t.sweep
	kg := b.kg.Start
	if from != nil {
		kg = int(from[0])<<8 | int(from[1])
	}
	type entry struct{ k, v []byte }
	var (
		entries []entry
		arena   []byte
		lens    []int // key and value lengths, in pairs
		buf     []byte
	)
	for ; kg <= b.kg.End; kg++ {
		prefix := appendTablePrefix(nil, kg, t.id)
		lower := prefix
		if from != nil && bytes.HasPrefix(from, prefix) {
			lower = from
		}
		from = nil
		for {
			if n == 0 {
				t.sweep = bytes.Clone(lower)
				return nil
			}
			page := min(n, sweepPage)
			entries, arena, lens = entries[:0], arena[:0], lens[:0]
			it, err := b.newIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
			if err != nil {
				return err
			}
			for ok := it.First(); ok && len(lens) < 2*page; ok = it.Next() {
				arena = append(append(arena, it.Key()...), it.Value()...)
				lens = append(lens, len(it.Key()), len(it.Value()))
			}
			if err := errors.Join(it.Error(), it.Close()); err != nil {
				return err
			}
			for off, i := 0, 0; i < len(lens); i += 2 {
				nk, nv := lens[i], lens[i+1]
				entries = append(entries, entry{arena[off : off+nk : off+nk], arena[off+nk : off+nk+nv : off+nk+nv]})
				off += nk + nv
			}
			for _, e := range entries {
				key, _, ok := parseStateKey(e.k[len(prefix):])
				if !ok {
					return fmt.Errorf("%w: pebble state backend: table %q: a key of %d bytes does not parse as a state key", statebackend.ErrCorrupt, t.name, len(e.k))
				}
				out, keep, err := t.snapshotValue(key, e.v, &buf)
				switch {
				case err != nil:
					return err
				case !keep:
					b.dropKey(e.k)
					b.del(e.k, len(e.v))
				case !bytes.Equal(out, e.v):
					b.dropKey(e.k)
					b.set(e.k, out, len(e.v))
				}
			}
			n -= len(entries)
			if len(entries) < page {
				break // the key group's entries of t are done
			}
			lower = append(bytes.Clone(entries[len(entries)-1].k), 0)
		}
	}
	t.sweep = nil
	return nil
}
