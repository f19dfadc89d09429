package pebblestate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// SSTFile is one file of a Pebble checkpoint directory.
type SSTFile struct {
	// Name is the file's base name in the checkpoint directory.
	Name string
	// Size in bytes.
	Size int64
	// SHA256 is the hex SHA-256 of the file's content.
	SHA256 string
	// Shared is true for immutable data files (sstables, *.sst, and blob
	// files, *.blob): Pebble never changes one once written, later
	// checkpoints of the same database name the same file while it lives,
	// and storage may keep one copy per content hash and reference-count
	// it. The other files (MANIFEST-*, OPTIONS-*, marker.*, WAL) belong to
	// this checkpoint only.
	Shared bool
}

// IsShared reports whether a checkpoint file name is an immutable data file.
func IsShared(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// Checkpoint writes a Pebble checkpoint of the backend's state into dir
// (which must not exist) and returns every file of it, sorted by name. It
// commits buffered writes and flushes the memtable first, so the checkpoint
// consists of sstables plus a few small per-checkpoint files (no WAL data:
// the backend runs without a WAL). Sstables are hard links to the live
// database's files where the file system allows.
//
// Hashes of shared files are remembered by name and size, so a checkpoint
// hashes only the sstables written since the previous one. Timers and the
// table registry are part of the checkpoint; the watermark is not. Values
// that a table's SnapshotFilter drops are not left out: a bounded clean-up
// before the checkpoint removes them from the live state over several
// checkpoints (see Options.SnapshotCleanupEntries).
func (b *Backend) Checkpoint(dir string) ([]SSTFile, error) {
	if b.closed {
		return nil, statebackend.ErrClosed
	}
	if err := b.sweepFiltered(); err != nil {
		return nil, err
	}
	return b.checkpoint(dir)
}

// checkpoint is Checkpoint without the clean-up.
func (b *Backend) checkpoint(dir string) ([]SSTFile, error) {
	b.flush()
	b.saveSizes()
	if err := b.commit(); err != nil {
		return nil, err
	}
	if err := b.db.Flush(); err != nil {
		return nil, fmt.Errorf("pebble state backend: checkpoint into %s: flush: %w", dir, err)
	}
	if err := b.db.Checkpoint(dir); err != nil {
		return nil, fmt.Errorf("pebble state backend: checkpoint into %s: %w; the directory must not exist yet", dir, err)
	}
	files, err := listCheckpoint(dir, b.hashes)
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: checkpoint into %s: %w", dir, err)
	}
	// Forget hashes of files that are gone (compacted away).
	live := make(map[string]bool, len(files))
	for _, f := range files {
		live[hashKey(f.Name, f.Size)] = true
	}
	for k := range b.hashes {
		if !live[k] {
			delete(b.hashes, k)
		}
	}
	return files, nil
}

func hashKey(name string, size int64) string { return fmt.Sprintf("%s/%d", name, size) }

// listCheckpoint lists and hashes the files of dir; cache (may be nil)
// holds and receives the hashes of shared files.
func listCheckpoint(dir string, cache map[string]string) ([]SSTFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []SSTFile
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		f := SSTFile{Name: e.Name(), Size: info.Size(), Shared: IsShared(e.Name())}
		if h, ok := cache[hashKey(f.Name, f.Size)]; ok && f.Shared {
			f.SHA256 = h
		} else {
			if f.SHA256, err = hashFile(filepath.Join(dir, f.Name)); err != nil {
				return nil, err
			}
			if f.Shared && cache != nil {
				cache[hashKey(f.Name, f.Size)] = f.SHA256
			}
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(x, y SSTFile) int { return strings.Compare(x.Name, y.Name) })
	return files, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// VerifyCheckpoint checks that dir holds exactly files, with their sizes and
// SHA-256 hashes: the check before local recovery reuses a directory left
// on disk, or after a download.
func VerifyCheckpoint(dir string, files []SSTFile) error {
	got, err := listCheckpoint(dir, nil)
	if err != nil {
		return fmt.Errorf("pebble state backend: checkpoint %s: %w", dir, err)
	}
	have := make(map[string]SSTFile, len(got))
	for _, f := range got {
		have[f.Name] = f
	}
	for _, want := range files {
		f, ok := have[want.Name]
		switch {
		case !ok:
			return fmt.Errorf("pebble state backend: checkpoint %s: file %s is missing; download the checkpoint again", dir, want.Name)
		case f.Size != want.Size || f.SHA256 != want.SHA256:
			return fmt.Errorf("pebble state backend: checkpoint %s: file %s: %d bytes with SHA-256 %s, want %d bytes with %s; the file was modified or truncated, download it again",
				dir, want.Name, f.Size, f.SHA256, want.Size, want.SHA256)
		}
		delete(have, want.Name)
	}
	for name := range have {
		return fmt.Errorf("pebble state backend: checkpoint %s: unexpected file %s; the directory holds another checkpoint", dir, name)
	}
	return nil
}

// OpenFromCheckpoint opens a backend for the key groups kg from the
// checkpoint directory dir (written by Checkpoint, possibly of a backend
// with another key-group range). If opts.Dir differs from dir, opts.Dir
// must not exist or be empty: sstables are hard-linked (copied if linking
// fails) and the other files copied into it, so dir stays a valid
// checkpoint; with opts.Dir == dir the checkpoint is opened in place and
// consumed.
//
// dir may also be a snapshot of SnapshotFiles: a materialized checkpoint
// plus a changelog chain (ChainFile), whose records are sorted and ingested
// on top of it (see replay.go); that takes memory up to
// opts.ReplayMemoryBytes and, for a longer chain, about its size in
// scratch files in opts.Dir.
//
// State of key groups outside kg is removed with DB.Excise (Pebble v2:
// virtual sstables, so no rewrite of the shared files), falling back to
// DeleteRange if excising fails, before the chain is ingested; the
// chain's records outside kg are not replayed. Tables come back as
// restored tables; ask for them with Table as after Restore.
func OpenFromCheckpoint(opts Options, dir string, kg stream.KeyGroupRange) (*Backend, error) {
	if err := checkRange(kg); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if filepath.Clean(opts.Dir) != filepath.Clean(dir) {
		if err := cloneDir(dir, opts.Dir); err != nil {
			return nil, fmt.Errorf("pebble state backend: local recovery from %s into %s: %w", dir, opts.Dir, err)
		}
	}
	segs, err := readChain(dir, opts.FetchSegment)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(filepath.Join(opts.Dir, workDirName)); err != nil {
		return nil, fmt.Errorf("pebble state backend: changelog directory in %s: %w", opts.Dir, err)
	}
	db, po, err := openDBWith(opts, false)
	if err != nil {
		return nil, err
	}
	// Trim first: the chain's records outside kg are not replayed, so the
	// ingested sstables need no excising.
	if err := trim(db, kg); err != nil {
		db.Close()
		return nil, err
	}
	if err := ingestChain(db, po, segs, kg, filepath.Join(opts.Dir, replayDirName), opts.ReplayMemoryBytes); err != nil {
		db.Close()
		return nil, err
	}
	tables, layout, err := loadTables(db, dir)
	if err != nil {
		db.Close()
		return nil, err
	}
	b := newBackend(opts, db, kg, layout)
	b.adoptTables(tables)
	if err := b.loadSizes(); err != nil {
		b.Close()
		return nil, err
	}
	b.timers.event.unknownAll()
	if layout >= layoutV2 {
		b.timers.proc.unknownAll() // else there are none
	}
	return b, nil
}

// FetchFrom returns an Options.FetchSegment that reads the files of files
// that have a Fetch (restored files left in storage), found by path, or nil
// if none has.
func FetchFrom(files []stream.SnapshotFile) func(path string, w io.Writer) (int64, error) {
	streamed := make(map[string]func(io.Writer) (int64, error))
	for _, f := range files {
		if f.Fetch != nil {
			streamed[filepath.Clean(f.Path)] = f.Fetch
		}
	}
	if len(streamed) == 0 {
		return nil
	}
	return func(path string, w io.Writer) (int64, error) {
		fetch := streamed[filepath.Clean(path)]
		if fetch == nil {
			return 0, fmt.Errorf("%s was neither downloaded nor is to be read from storage", path)
		}
		return fetch(w)
	}
}

// replayInto clones the snapshot directory dir into the new directory
// scratch and replays its changelog segments there, leaving a database
// that holds the snapshot's state of the key groups kg (and the metadata).
func replayInto(opts Options, dir, scratch string, segs []segment, kg stream.KeyGroupRange) error {
	if err := cloneDir(dir, scratch); err != nil {
		return err
	}
	o := opts
	o.Dir, o.Configure = scratch, nil
	db, po, err := openDBWith(o, false)
	if err != nil {
		return err
	}
	if err := ingestChain(db, po, segs, kg, filepath.Join(scratch, replayDirName), opts.ReplayMemoryBytes); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}

// trim removes the state of key groups outside kg from db, and their
// sizes.
func trim(db *pebble.DB, kg stream.KeyGroupRange) error {
	var spans [][2][]byte
	if kg.Start > 0 {
		spans = append(spans, [2][]byte{kgPrefix(0), kgPrefix(kg.Start)})
	}
	if kg.End+1 < MaxKeyGroup+1 {
		spans = append(spans, [2][]byte{kgPrefix(kg.End + 1), metaPrefix})
	}
	for _, s := range spans {
		if err := db.Excise(context.Background(), pebble.KeyRange{Start: s[0], End: s[1]}); err != nil {
			if err := db.DeleteRange(s[0], s[1], pebble.NoSync); err != nil {
				return fmt.Errorf("pebble state backend: removing key groups outside %v: %w", kg, err)
			}
		}
	}
	sizeKey := func(kg int) []byte { return appendKG(bytes.Clone(metaSizePfx), kg) }
	if err := db.DeleteRange(sizeKey(0), sizeKey(kg.Start), pebble.NoSync); err != nil {
		return err
	}
	return db.DeleteRange(sizeKey(kg.End+1), prefixEnd(metaSizePfx), pebble.NoSync)
}

// cloneDir fills the new or empty directory dst with src's files: shared
// files hard-linked (or copied), the others copied, since Pebble appends to
// its MANIFEST.
func cloneDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if existing, err := os.ReadDir(dst); err != nil {
		return err
	} else if len(existing) > 0 {
		return fmt.Errorf("%s is not empty; local recovery needs a fresh working directory", dst)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || IsChangelogSegment(e.Name()) || e.Name() == ChainFile {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if IsShared(e.Name()) && os.Link(from, to) == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// MergeInto copies into dst the state of dst's key groups held by the
// checkpoint directories srcDirs (each written by Checkpoint, for example by
// the subtasks whose ranges dst now covers): the scale-in path. Each source
// is opened read-only and left unchanged. Table ids differ between
// databases, so keys are rewritten with dst's ids (tables are matched by
// name; a kind mismatch fails with ErrConflict) and written through batches
// rather than ingested as files. Call it on a backend whose tables have not
// been asked for yet; on error dst holds part of the state and should be
// discarded.
func MergeInto(dst *Backend, srcDirs []string) error {
	if dst.closed {
		return statebackend.ErrClosed
	}
	dst.dropCache()
	for _, dir := range srcDirs {
		if err := dst.mergeFrom(dir); err != nil {
			return fmt.Errorf("pebble state backend: merging checkpoint %s into %s: %w", dir, dst.opts.Dir, err)
		}
	}
	return dst.commit()
}

func (b *Backend) mergeFrom(dir string) error {
	segs, err := readChain(dir, b.opts.FetchSegment)
	if err != nil {
		return err
	}
	if len(segs) > 0 {
		// Replay the source's chain into a scratch copy, then merge that.
		tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(b.opts.Dir)), "weir-merge-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := replayInto(b.opts, dir, tmp, segs, b.kg); err != nil {
			return err
		}
		dir = tmp
	}
	src, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, ErrorIfNotExists: true, Logger: b.opts.Logger, Cache: b.opts.Cache, CacheSize: 8 << 20})
	if err != nil {
		return err
	}
	defer src.Close()
	srcTables, _, err := loadTables(src, dir)
	if err != nil {
		return err
	}
	ids := make(map[uint64]*table, len(srcTables))
	for _, st := range srcTables {
		t := b.tables[st.name]
		switch {
		case t == nil:
			t = b.addTable(st.name, st.kind)
			t.codecID, t.ukCodecID = st.codecID, st.ukCodecID
			b.saveTable(t)
		case t.kind != st.kind:
			return fmt.Errorf("%w: state %q is %s state there and %s state here", statebackend.ErrConflict, st.name, st.kind, t.kind)
		case t.registered:
			if st.codecID != t.codecID || st.ukCodecID != t.ukCodecID {
				return fmt.Errorf("%w: state %q was written with codec %q (user keys %q) and is registered with %q; merge before asking for tables",
					statebackend.ErrConflict, st.name, st.codecID, st.ukCodecID, t.codecID)
			}
		case st.codecID != t.codecID || st.ukCodecID != t.ukCodecID:
			t.codecID, t.ukCodecID = "", ""
			b.saveTable(t)
		}
		ids[st.id] = t
	}
	fresh := make([]bool, b.kg.Len())
	for i := range fresh {
		fresh[i] = b.sizes[i] == 0
	}
	b.probe.ok = false
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: kgPrefix(b.kg.Start), UpperBound: kgPrefix(b.kg.End + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		i := b.kgIndex(k)
		old := func(k []byte) int {
			if fresh[i] {
				return -1
			}
			return b.oldLen(k)
		}
		if d, _, ts, _, isTimer := parseTimerKey(k); isTimer {
			if d.proc {
				b.holdProcTimers()
			}
			b.kbuf = append(b.kbuf[:0], k...)
			b.set(b.kbuf, nil, old(b.kbuf))
			b.timers.queue(d).lower(i, ts, b.kbuf)
			continue
		}
		id, w := binary.Uvarint(k[2:])
		t := ids[id]
		if w <= 0 || t == nil {
			return fmt.Errorf("%w: key %x of no known table", statebackend.ErrCorrupt, k)
		}
		b.kbuf = binary.AppendUvarint(append(b.kbuf[:0], k[:2]...), t.id)
		b.kbuf = append(b.kbuf, k[2+w:]...)
		b.set(b.kbuf, it.Value(), old(b.kbuf))
	}
	if err := it.Error(); err != nil {
		return err
	}
	return b.err
}

var _ statebackend.IncrementalSnapshotter = (*Backend)(nil)
