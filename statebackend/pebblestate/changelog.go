package pebblestate

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weirstream/weir/statebackend"
)

// Changelog: between materializations, a snapshot is the last materialized
// Pebble checkpoint plus the ordered segments of the changelog written
// since (see "Incremental checkpoints" in the package doc).
//
// A segment file (changelog-<seq>.wcl, seq from 1 in chain order, 8
// digits) is the header "WEIRCL" + version byte, then records:
//
//	kind byte (clSet, clDelete) | uvarint key length | key | [uvarint value length | value]   (value for clSet only)
//
// A snapshot directory with segments also holds ChainFile, which lists
// them in order, one "name size sha256" line each; a snapshot without it
// is a plain Pebble checkpoint.
const (
	clMagic   = "WEIRCL"
	clVersion = 1
	clSet     = 1
	clDelete  = 2

	// ChainFile names the changelog segments of a snapshot, in order.
	ChainFile = "WEIR-CHANGELOG"
	// workDirName is the backend's changelog working directory inside
	// Options.Dir: the open segment, closed segments of the current chain
	// and the materialized checkpoint.
	workDirName = "weir-changelog"
	// DefaultMaterializeFactor is Options.MaterializeFactor's default.
	DefaultMaterializeFactor = 2
)

// IsChangelogSegment reports whether a snapshot file name is a changelog
// segment.
func IsChangelogSegment(name string) bool {
	return strings.HasPrefix(name, "changelog-") && strings.HasSuffix(name, ".wcl")
}

func segmentName(seq int) string { return fmt.Sprintf("changelog-%08d.wcl", seq) }

// segment is a closed changelog segment of the current chain, or of a
// snapshot being restored: a file at path, or, with fetch, an object in
// storage that fetch reads.
type segment struct {
	name, path string
	size       int64
	sha256     string
	fetch      func(path string, w io.Writer) (int64, error)
}

// changelog records the writes the backend makes to Pebble since the last
// checkpoint. It is off until the first SnapshotFiles (a backend that only
// takes full snapshots never writes one).
type changelog struct {
	on   bool
	dir  string // Options.Dir/weir-changelog
	f    *os.File
	w    *bufio.Writer
	h    hash.Hash
	n    int64 // bytes in the open segment
	recs int64 // records in the open segment

	seq      int       // sequence number of the open segment in the chain
	segs     []segment // closed segments since the materialization
	sinceMat int64     // bytes of segs

	matDir   string    // materialized Pebble checkpoint ("" before the first)
	matFiles []SSTFile // its files
	matSeq   int       // number of materializations

	buf []byte
}

// write sets k to v (kind clSet) or deletes k (clDelete) in b.batch and,
// while the changelog is on, appends the write to it: every write to
// b.batch goes through it. The caller makes the write visible to get,
// which does not read the batch: batchSet and batchDelete record it in
// b.pending; the value cache's write-backs are committed before the next
// read instead.
func (b *Backend) write(kind byte, k, v []byte) error {
	var err error
	if kind == clSet {
		if b.filter.on && isStateKey(k) {
			b.filter.add(k)
		}
		err = b.batch.Set(k, v, nil)
	} else {
		err = b.batch.Delete(k, nil)
	}
	if err != nil {
		return err
	}
	if b.cl.on {
		b.logRecord(kind, k, v)
	}
	return nil
}

// batchSet and batchDelete write to b.batch and record the write in
// b.pending.
func (b *Backend) batchSet(k, v []byte) error {
	if err := b.write(clSet, k, v); err != nil {
		return err
	}
	n := len(b.pendingBuf)
	b.pendingBuf = append(b.pendingBuf, v...)
	b.pending[string(k)] = pendingValue{v: b.pendingBuf[n:len(b.pendingBuf):len(b.pendingBuf)], ok: true}
	return nil
}

func (b *Backend) batchDelete(k []byte) error {
	if err := b.write(clDelete, k, nil); err != nil {
		return err
	}
	b.pending[string(k)] = pendingValue{}
	return nil
}

func (b *Backend) logRecord(kind byte, k, v []byte) {
	c := &b.cl
	c.buf = append(c.buf[:0], kind)
	c.buf = binary.AppendUvarint(c.buf, uint64(len(k)))
	c.buf = append(c.buf, k...)
	if kind == clSet {
		c.buf = binary.AppendUvarint(c.buf, uint64(len(v)))
		c.buf = append(c.buf, v...)
	}
	if _, err := c.w.Write(c.buf); err != nil {
		b.fail(fmt.Errorf("pebble state backend: changelog %s: %w; check free space in %s", c.f.Name(), err, c.dir))
		return
	}
	c.n += int64(len(c.buf))
	c.recs++
}

// openSegment starts a new changelog segment.
func (c *changelog) openSegment() error {
	f, err := os.OpenFile(filepath.Join(c.dir, "open.wcl"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pebble state backend: changelog: %w; check the state directory's permissions and free space", err)
	}
	c.f, c.h = f, sha256.New()
	c.w = bufio.NewWriterSize(io.MultiWriter(f, c.h), 1<<20)
	c.w.WriteString(clMagic)
	c.w.WriteByte(clVersion)
	c.n, c.recs = int64(len(clMagic)+1), 0
	return nil
}

// closeSegment closes the open segment: it becomes the next segment of the
// chain if it has records (keep) and is deleted otherwise.
func (c *changelog) closeSegment(keep bool) error {
	if c.f == nil {
		return nil
	}
	err := errors.Join(c.w.Flush(), c.f.Close())
	path := c.f.Name()
	c.f = nil
	if err != nil {
		return fmt.Errorf("pebble state backend: changelog %s: %w; check free space", path, err)
	}
	if !keep || c.recs == 0 {
		return os.Remove(path)
	}
	c.seq++
	s := segment{name: segmentName(c.seq), size: c.n, sha256: hex.EncodeToString(c.h.Sum(nil))}
	s.path = filepath.Join(c.dir, s.name)
	if err := os.Rename(path, s.path); err != nil {
		return fmt.Errorf("pebble state backend: changelog: %w", err)
	}
	c.segs = append(c.segs, s)
	c.sinceMat += s.size
	return nil
}

// dropChain deletes the closed segments (after a materialization).
func (c *changelog) dropChain() {
	for _, s := range c.segs {
		_ = os.Remove(s.path)
	}
	c.segs, c.sinceMat, c.seq = nil, 0, 0
}

// shouldMaterialize decides whether this snapshot takes a new Pebble
// checkpoint rather than extending the chain.
func (b *Backend) shouldMaterialize() bool {
	f := b.opts.MaterializeFactor
	if f < 0 || !b.cl.on || b.cl.matDir == "" {
		return true
	}
	return float64(b.cl.sinceMat+b.cl.n) >= f*float64(max(b.size, b.cl.matBytes(), 1))
}

// matBytes is the size of the materialized checkpoint's files: about what
// the next materialization uploads once compactions have rewritten the
// state (more than SizeBytes while overwritten values await compaction).
func (c *changelog) matBytes() int64 {
	var n int64
	for _, f := range c.matFiles {
		n += f.Size
	}
	return n
}

// SnapshotStats describes the snapshots a backend has taken.
type SnapshotStats struct {
	// Materializations counts the snapshots that took a new Pebble
	// checkpoint.
	Materializations int
	// ChainSegments is the number of changelog segments the last
	// snapshot listed after its materialized checkpoint.
	ChainSegments int
	// ChainBytes is their total size.
	ChainBytes int64
}

// SnapshotStats returns statistics of the snapshots taken by SnapshotFiles.
func (b *Backend) SnapshotStats() SnapshotStats {
	return SnapshotStats{Materializations: b.cl.matSeq, ChainSegments: len(b.cl.segs), ChainBytes: b.cl.sinceMat}
}

// SnapshotFiles implements statebackend.IncrementalSnapshotter. The first
// snapshot, and any after Options.MaterializeFactor × SizeBytes of
// changelog, materializes: it takes a Pebble checkpoint (kept locally,
// hard-linked, until the next materialization) and starts a new changelog
// chain. The others close the changelog segment written since the
// previous snapshot and list the materialized checkpoint's files plus the
// chain's segments, in order, named in ChainFile. Every file except
// ChainFile is immutable and Shared. As with Checkpoint, a bounded
// clean-up first applies the SnapshotFilter of tables that have one to
// part of the live state (Options.SnapshotCleanupEntries); its writes are
// part of this snapshot.
func (b *Backend) SnapshotFiles(dir string) ([]statebackend.SnapshotFile, error) {
	if b.closed {
		return nil, statebackend.ErrClosed
	}
	if err := b.sweepFiltered(); err != nil {
		return nil, err
	}
	b.flush()
	b.saveSizes()
	if b.err != nil {
		return nil, b.err
	}
	c := &b.cl
	if b.shouldMaterialize() {
		if err := b.materialize(); err != nil {
			return nil, err
		}
	} else if err := c.closeSegment(true); err != nil {
		return nil, err
	} else if err := c.openSegment(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble state backend: snapshot directory %s: %w", dir, err)
	}
	out := make([]statebackend.SnapshotFile, 0, len(c.matFiles)+len(c.segs)+1)
	link := func(src, name string, size int64, sum string) error {
		dst := filepath.Join(dir, name)
		if err := os.Link(src, dst); err != nil {
			if err := copyFile(src, dst); err != nil {
				return fmt.Errorf("pebble state backend: snapshot into %s: %w", dir, err)
			}
		}
		out = append(out, statebackend.SnapshotFile{Path: dst, Name: name, Size: size, SHA256: sum, Shared: true})
		return nil
	}
	for _, f := range c.matFiles {
		if err := link(filepath.Join(c.matDir, f.Name), f.Name, f.Size, f.SHA256); err != nil {
			return nil, err
		}
	}
	if len(c.segs) > 0 {
		var chain strings.Builder
		for _, s := range c.segs {
			if err := link(s.path, s.name, s.size, s.sha256); err != nil {
				return nil, err
			}
			fmt.Fprintf(&chain, "%s %d %s\n", s.name, s.size, s.sha256)
		}
		path := filepath.Join(dir, ChainFile)
		if err := os.WriteFile(path, []byte(chain.String()), 0o644); err != nil {
			return nil, fmt.Errorf("pebble state backend: snapshot into %s: %w", dir, err)
		}
		sum := sha256.Sum256([]byte(chain.String()))
		out = append(out, statebackend.SnapshotFile{Path: path, Name: ChainFile, Size: int64(chain.Len()), SHA256: hex.EncodeToString(sum[:])})
	}
	return out, nil
}

// materialize takes a Pebble checkpoint into the changelog working
// directory, drops the previous one and the chain, and starts recording.
func (b *Backend) materialize() error {
	c := &b.cl
	if err := c.closeSegment(false); err != nil {
		return err
	}
	wasOn := c.on
	c.on = false // the checkpoint holds everything written so far
	if !wasOn {
		c.dir = filepath.Join(b.opts.Dir, workDirName)
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("pebble state backend: changelog directory %s: %w", c.dir, err)
		}
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return fmt.Errorf("pebble state backend: changelog directory %s: %w; check the state directory's permissions", c.dir, err)
		}
	}
	matDir := filepath.Join(c.dir, "mat-"+strconv.Itoa(c.matSeq+1))
	_ = os.RemoveAll(matDir)
	files, err := b.checkpoint(matDir)
	if err != nil {
		return err
	}
	if c.matDir != "" {
		_ = os.RemoveAll(c.matDir)
	}
	c.matDir, c.matFiles = matDir, files
	c.matSeq++
	c.dropChain()
	if b.opts.MaterializeFactor < 0 {
		c.on = false
		return nil
	}
	c.on = true
	return c.openSegment()
}

// closeChangelog stops recording and removes the working directory.
func (b *Backend) closeChangelog() error {
	c := &b.cl
	if c.dir == "" {
		return nil
	}
	err := c.closeSegment(false)
	c.on = false
	return errors.Join(err, os.RemoveAll(c.dir))
}

// readChain returns the changelog segments a snapshot directory lists, in
// order (nil for a plain Pebble checkpoint), after checking that each
// exists with its size: as a file in dir or, if fetch is set, one that
// fetch reads from storage (Options.FetchSegment).
func readChain(dir string, fetch func(path string, w io.Writer) (int64, error)) ([]segment, error) {
	data, err := os.ReadFile(filepath.Join(dir, ChainFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: snapshot %s: %w", dir, err)
	}
	var segs []segment
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.Fields(line)
		var size int64
		if len(f) == 3 {
			size, err = strconv.ParseInt(f[1], 10, 64)
		}
		if len(f) != 3 || err != nil || !IsChangelogSegment(f[0]) || f[0] != segmentName(i+1) {
			return nil, fmt.Errorf("%w: pebble state backend: snapshot %s: %s line %d is %q, want \"%s <size> <sha256>\"; the snapshot is damaged, restore another checkpoint",
				statebackend.ErrCorrupt, dir, ChainFile, i+1, line, segmentName(i+1))
		}
		s := segment{name: f[0], path: filepath.Join(dir, f[0]), size: size, sha256: f[2]}
		info, err := os.Stat(s.path)
		switch {
		case errors.Is(err, os.ErrNotExist) && fetch != nil:
			s.fetch = fetch
		case err != nil:
			return nil, fmt.Errorf("pebble state backend: snapshot %s: changelog segment %s: %w; the snapshot is incomplete, download it again", dir, s.name, err)
		case info.Size() != s.size:
			return nil, fmt.Errorf("%w: pebble state backend: snapshot %s: changelog segment %s has %d bytes, want %d; the file was truncated or modified, download it again",
				statebackend.ErrCorrupt, dir, s.name, info.Size(), s.size)
		}
		segs = append(segs, s)
	}
	return segs, nil
}
