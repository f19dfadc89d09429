package pebblestate

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Replaying a changelog chain on restore (OpenFromCheckpoint, MergeInto).
//
// A chain holds up to MaterializeFactor × the state of records, most of
// them overwrites. Written through batches, every record costs a memtable
// insert, and the memtables flush into overlapping L0 files that compaction
// then merges into the checkpoint's levels while the replay waits: 66 s
// for 1.1 GB of state and 2.2 GB of changelog on a 2-core machine. Instead
// the chain is sorted outside Pebble and ingested:
//
//  1. Partition. The segments are read in chain order — from their files,
//     or streamed from storage (Options.FetchSegment) — each checked
//     against its size and SHA-256 before any of its records is used
//     (goroutines read and check the next segments meanwhile), and every
//     record of an owned key group, and every metadata record, is appended
//     as it is to the partition of its key group. Partitions are contiguous
//     key-group ranges of about replayPartBytes of records (less with a
//     small Options.ReplayMemoryBytes), small enough to sort in the CPU's
//     caches. If the chain is larger than Options.ReplayMemoryBytes,
//     partitions are spilled to files in a scratch directory next to the
//     database, past the page cache where the file system allows
//     (spill.go); otherwise they stay in memory.
//  2. Sort. Workers (one per CPU, at most replayWorkers) take contiguous
//     runs of partitions and sort each by key, keeping only the last record
//     of a key in chain order — what replaying the records one by one would
//     leave — and write the surviving sets and deletes to sstables of about
//     replaySSTBytes; a worker reads its next spilled partition back while
//     it sorts one. Partitions hold disjoint key ranges, so no two
//     sstables overlap.
//  3. Ingest. DB.Ingest adds all sstables in one step, equivalent to one
//     batch of their records: they get a sequence number above every key of
//     the checkpoint, so their sets and deletes shadow it. They go to the
//     level above the checkpoint data they overlap; compaction merges them
//     later, in the background.
//
// The state of key groups outside the owned range (and their sizes) is
// dropped in step 1; the checkpoint's own is trimmed before the ingestion
// (trim), so that no ingested sstable needs excising.

// DefaultReplayMemoryBytes is Options.ReplayMemoryBytes's default.
const DefaultReplayMemoryBytes = 256 << 20

const (
	// replayWorkers bounds the goroutines that sort partitions.
	replayWorkers = 4
	// replayPartBytes is the largest partition of the chain's records the
	// replay aims for; replayMaxParts bounds their number (and so the
	// files a spilling replay keeps open).
	replayPartBytes = 16 << 20
	replayMaxParts  = 128
	// replaySSTBytes is the size at which a replay sstable is closed and the
	// next one started.
	replaySSTBytes = 64 << 20
	// replayDirName is the scratch directory, inside the database directory
	// (Ingest links files, so they must be on its file system).
	replayDirName = "weir-replay"
)

// ingestChain replays the changelog segments segs, in order, into db (whose
// Pebble options are po): state of key groups outside kg is skipped, the
// rest is sorted and ingested (see above). scratch is a directory that
// does not exist, on db's file system; it is removed before returning.
func ingestChain(db *pebble.DB, po *pebble.Options, segs []segment, kg stream.KeyGroupRange, scratch string, memBytes int64) error {
	if len(segs) == 0 {
		return nil
	}
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return fmt.Errorf("pebble state backend: replay directory %s: %w", scratch, err)
	}
	defer os.RemoveAll(scratch)
	var total int64
	for _, s := range segs {
		total += s.size
	}
	workers := min(runtime.GOMAXPROCS(0), replayWorkers)
	// A worker holds a partition, the next one being read, and the sort
	// index of one (two slices of 32-byte entries, about the records' size
	// for ~60-byte records).
	partBytes := max(min(replayPartBytes, memBytes/int64(5*workers)), 1)
	n := int(min((total+partBytes-1)/partBytes, int64(kg.Len()), replayMaxParts))
	p := newPartitioner(kg, n, scratch, total > memBytes, memBytes)
	defer p.close()
	if err := p.addChain(segs); err != nil {
		return err
	}
	if err := p.finish(); err != nil {
		return err
	}
	wo := po.Clone()
	wo.EnsureDefaults()
	sorter := partSorter{writerOpts: wo.MakeWriterOptions(0, db.TableFormat()), dir: scratch, parts: p.parts}
	paths, err := sorter.run(min(workers, n))
	if err != nil || len(paths) == 0 {
		return err
	}
	if err := db.Ingest(context.Background(), paths); err != nil {
		return fmt.Errorf("pebble state backend: ingesting the replayed changelog: %w", err)
	}
	return nil
}

// readSegment reads segment s into buf (reallocated if too small) and
// checks its size and SHA-256 (a fetched segment's fetch checks its
// SHA-256). A fetch stops early once done is closed.
func readSegment(s segment, buf []byte, done <-chan struct{}) ([]byte, error) {
	if s.fetch != nil {
		return fetchSegment(s, buf, done)
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: changelog segment %s: %w", s.path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: changelog segment %s: %w", s.path, err)
	}
	if int64(cap(buf)) < info.Size() {
		buf = make([]byte, info.Size())
	}
	data := buf[:info.Size()]
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("pebble state backend: changelog segment %s: %w", s.path, err)
	}
	if sum := sha256.Sum256(data); int64(len(data)) != s.size || hex.EncodeToString(sum[:]) != s.sha256 {
		return nil, fmt.Errorf("%w: pebble state backend: changelog segment %s: %d bytes with SHA-256 %x, want %d bytes with %s; the file was modified or truncated, download it again",
			statebackend.ErrCorrupt, s.path, len(data), sum, s.size, s.sha256)
	}
	return data, nil
}

// fetchSegment reads segment s from storage into buf (reallocated if too
// small) and checks its size.
func fetchSegment(s segment, buf []byte, done <-chan struct{}) ([]byte, error) {
	if int64(cap(buf)) < s.size {
		buf = make([]byte, 0, s.size)
	}
	w := &segmentWriter{buf: buf[:0], left: s.size, done: done}
	n, err := s.fetch(s.path, w)
	const damaged = "the snapshot is damaged, restore another checkpoint"
	switch {
	case errors.Is(err, errSegmentTooLong):
		return nil, fmt.Errorf("%w: pebble state backend: changelog segment %s, read from storage: more than the %d bytes its snapshot lists; %s",
			statebackend.ErrCorrupt, s.name, s.size, damaged)
	case err == nil && (n != s.size || int64(len(w.buf)) != s.size):
		return nil, fmt.Errorf("%w: pebble state backend: changelog segment %s, read from storage: %d bytes, its snapshot lists %d; %s",
			statebackend.ErrCorrupt, s.name, len(w.buf), s.size, damaged)
	case err != nil:
		return nil, fmt.Errorf("pebble state backend: changelog segment %s, read from storage: %w", s.name, err)
	}
	return w.buf, nil
}

var (
	errSegmentTooLong = errors.New("longer than its snapshot lists")
	errReplayStopped  = errors.New("the replay stopped")
)

// segmentWriter collects a fetched segment of at most left more bytes, and
// fails once done is closed.
type segmentWriter struct {
	buf  []byte
	left int64
	done <-chan struct{}
}

func (w *segmentWriter) Write(p []byte) (int, error) {
	select {
	case <-w.done:
		return 0, errReplayStopped
	default:
	}
	if int64(len(p)) > w.left {
		return 0, errSegmentTooLong
	}
	w.left -= int64(len(p))
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// segmentRecords checks the header of a segment's data and returns its
// records.
func segmentRecords(path string, data []byte) ([]byte, error) {
	if len(data) < len(clMagic)+1 || string(data[:len(clMagic)]) != clMagic {
		return nil, badRecord(path, 0, "no changelog header")
	}
	if data[len(clMagic)] != clVersion {
		return nil, badRecord(path, len(clMagic), fmt.Sprintf("format version %d, this build reads version %d", data[len(clMagic)], clVersion))
	}
	return data[len(clMagic)+1:], nil
}

func badRecord(path string, off int, what string) error {
	return fmt.Errorf("%w: pebble state backend: changelog segment %s: offset %d: %s; the file is damaged, restore another checkpoint",
		statebackend.ErrCorrupt, path, off, what)
}

// parseRecord parses the record at recs[off:] (see changelog.go for the
// format). v is nil for clDelete. It returns the offset of the next record,
// or a description of what is wrong.
func parseRecord(recs []byte, off int) (kind byte, k, v []byte, next int, bad string) {
	kind = recs[off]
	k, next, ok := recordField(recs, off+1)
	if !ok {
		return 0, nil, nil, 0, "truncated key"
	}
	switch kind {
	case clSet:
		if v, next, ok = recordField(recs, next); !ok {
			return 0, nil, nil, 0, "truncated value"
		}
	case clDelete:
	default:
		return 0, nil, nil, 0, fmt.Sprintf("unknown record kind %d", kind)
	}
	return kind, k, v, next, ""
}

// recordField parses the uvarint-framed field at b[off:].
func recordField(b []byte, off int) (field []byte, next int, ok bool) {
	if off < len(b) && b[off] < 0x80 { // most fields are shorter than 128 bytes
		n := int(b[off])
		if n > len(b)-off-1 {
			return nil, off, false
		}
		return b[off+1 : off+1+n], off + 1 + n, true
	}
	if off > len(b) {
		return nil, off, false
	}
	n, w := binary.Uvarint(b[off:])
	if w <= 0 || uint64(len(b)-off-w) < n {
		return nil, off, false
	}
	return b[off+w : off+w+int(n)], off + w + int(n), true
}

// partition is one key-group range's records in chain order: in data, or,
// once spilled, in a file (spill.go).
type partition struct {
	data  []byte
	spill *spillFile
}

// partitioner distributes a chain's records among partitions.
type partitioner struct {
	memBytes int64 // Options.ReplayMemoryBytes
	kg       stream.KeyGroupRange
	parts    []*partition
	dir      string
	spill    bool
	spillBuf int // write buffer of a spilled partition
}

func newPartitioner(kg stream.KeyGroupRange, n int, dir string, spill bool, memBytes int64) *partitioner {
	p := &partitioner{memBytes: memBytes, kg: kg, parts: make([]*partition, n), dir: dir, spill: spill,
		spillBuf: int(min(max(memBytes/int64(4*n), 4<<10), 256<<10))}
	for i := range p.parts {
		p.parts[i] = &partition{}
	}
	return p
}

// of returns the partition of the record with key k, or -1 if the record is
// to be skipped.
func (p *partitioner) of(k []byte) int {
	if bytes.HasPrefix(k, metaPrefix) {
		if len(k) == len(metaSizePfx)+2 && bytes.HasPrefix(k, metaSizePfx) && !p.kg.Contains(int(k[3])<<8|int(k[4])) {
			return -1 // the size of a key group not owned
		}
		return len(p.parts) - 1
	}
	kg := int(k[0])<<8 | int(k[1])
	if !p.kg.Contains(kg) {
		return -1
	}
	return (kg - p.kg.Start) * len(p.parts) / p.kg.Len()
}

// segmentReadAhead is how many segments addChain reads (or fetches from
// storage) and checks at once, ahead of the one whose records it
// distributes.
const segmentReadAhead = 2

// addChain verifies the segments and appends their records to their
// partitions, in chain order. Goroutines read and check the next segments
// while the records of one are distributed: segmentReadAhead of them, or
// one alone if it is larger than a quarter of the replay's memory.
func (p *partitioner) addChain(segs []segment) error {
	type verified struct {
		data   []byte
		err    error
		tokens int // of ahead, to give back
	}
	// The reads under way, in chain order: at most segmentReadAhead
	// (a chain may have many thousands of segments).
	order := make(chan chan verified, segmentReadAhead)
	ahead := make(chan struct{}, segmentReadAhead)
	free := make(chan []byte, segmentReadAhead+1) // buffers of distributed segments, for reuse
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, s := range segs {
			tokens := 1
			if s.size > p.memBytes/4 {
				tokens = segmentReadAhead
			}
			for range tokens {
				select {
				case ahead <- struct{}{}:
				case <-done:
					return
				}
			}
			var buf []byte
			select {
			case buf = <-free:
			default:
			}
			res := make(chan verified, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				data, err := readSegment(s, buf, done)
				res <- verified{data, err, tokens}
			}()
			select {
			case order <- res:
			case <-done:
				return
			}
		}
	}()
	defer wg.Wait()
	defer close(done)
	for _, s := range segs {
		res := <-order
		v := <-res
		for range v.tokens {
			<-ahead
		}
		if v.err != nil {
			return v.err
		}
		if err := p.addRecords(s.path, v.data); err != nil {
			return err
		}
		select {
		case free <- v.data:
		default:
		}
	}
	return nil
}

// addRecords appends the records of the segment data (read from path) to
// their partitions.
func (p *partitioner) addRecords(path string, data []byte) error {
	recs, err := segmentRecords(path, data)
	if err != nil {
		return err
	}
	hdr := len(data) - len(recs)
	for off := 0; off < len(recs); {
		_, k, _, next, bad := parseRecord(recs, off)
		if bad != "" {
			return badRecord(path, hdr+off, bad)
		}
		if len(k) < 2 {
			return badRecord(path, hdr+off, fmt.Sprintf("key %x has no key group", k))
		}
		if i := p.of(k); i >= 0 {
			if err := p.write(i, recs[off:next]); err != nil {
				return err
			}
		}
		off = next
	}
	return nil
}

func (p *partitioner) write(i int, rec []byte) error {
	pt := p.parts[i]
	if !p.spill {
		pt.data = append(pt.data, rec...)
		return nil
	}
	if pt.spill == nil {
		sp, err := createSpill(filepath.Join(p.dir, fmt.Sprintf("part-%06d", i)), p.spillBuf)
		if err != nil {
			return fmt.Errorf("pebble state backend: replaying the changelog: %w; check free space in %s", err, p.dir)
		}
		pt.spill = sp
	}
	if err := pt.spill.write(rec); err != nil {
		return fmt.Errorf("pebble state backend: replaying the changelog: %w; check free space in %s", err, p.dir)
	}
	return nil
}

// finish flushes the spilled partitions.
func (p *partitioner) finish() error {
	for _, pt := range p.parts {
		if pt.spill != nil {
			if err := pt.spill.flush(); err != nil {
				return fmt.Errorf("pebble state backend: replaying the changelog: %w; check free space in %s", err, p.dir)
			}
		}
	}
	return nil
}

func (p *partitioner) close() {
	for _, pt := range p.parts {
		if pt.spill != nil {
			pt.spill.remove()
		}
	}
}

// load returns the partition's records, read into buf (reallocated if
// too small) if spilled, and releases them from pt.
func (pt *partition) load(buf []byte) ([]byte, error) {
	if pt.spill == nil {
		data := pt.data
		pt.data = nil
		return data, nil
	}
	// Removed as soon as read, by the worker that read it.
	defer func() {
		pt.spill.remove()
		pt.spill = nil
	}()
	return pt.spill.read(buf)
}

// partSorter sorts partitions into sstables.
type partSorter struct {
	writerOpts sstable.WriterOptions
	dir        string
	parts      []*partition
}

// run sorts the partitions with workers goroutines, each taking a
// contiguous run of partitions and writing one sequence of sstables, and
// returns the sstables in key order. The goroutines have exited when it
// returns.
func (s *partSorter) run(workers int) ([]string, error) {
	var (
		wg    sync.WaitGroup
		files = make([][]string, workers)
		errs  = make([]error, workers)
	)
	n := len(s.parts)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sw := sstWriter{opts: s.writerOpts, dir: s.dir, worker: w}
			defer sw.abort()
			if errs[w] = s.sortRun(w*n/workers, (w+1)*n/workers, &sw); errs[w] == nil {
				errs[w] = sw.close()
				files[w] = sw.paths
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(files...), nil
}

// sortRun sorts partitions lo to hi-1 into sw, loading (reading back, if
// spilled) the next partition while it sorts one.
func (s *partSorter) sortRun(lo, hi int, sw *sstWriter) error {
	type loaded struct {
		data    []byte
		spilled bool
		err     error
	}
	var (
		work    sortWork
		bufs    [2][]byte // read buffers of spilled partitions, in turns
		results = make(chan loaded, 1)
	)
	load := func(i, b int) {
		spilled := s.parts[i].spill != nil
		go func() {
			data, err := s.parts[i].load(bufs[b])
			results <- loaded{data, spilled, err}
		}()
	}
	if lo < hi {
		load(lo, 0)
	}
	for i := lo; i < hi; i++ {
		r := <-results
		b := (i - lo) % 2
		if r.spilled && r.err == nil {
			bufs[b] = r.data // for the partition after next
		}
		if r.err != nil {
			return fmt.Errorf("pebble state backend: replaying the changelog: %w", r.err)
		}
		if i+1 < hi {
			load(i+1, 1-b)
		}
		if err := s.sort(r.data, &work, sw); err != nil {
			if i+1 < hi {
				<-results
			}
			return err
		}
	}
	return nil
}

// sortWork holds a worker's buffers, reused from partition to partition.
type sortWork struct {
	entries, tmp []sortEntry
	touched      byte // keeps touch's loads
}

// sortEntry is a record of a partition being sorted: the first 16 bytes of
// its key (zero-padded), big-endian, which decide most comparisons and all
// comparisons of keys of up to 16 bytes, the key's length and the record's
// offset, which orders the records of one key in chain order.
type sortEntry struct {
	hi, lo uint64
	klen   int
	off    int
}

func newSortEntry(k []byte, off int) sortEntry {
	var pfx [16]byte
	copy(pfx[:], k)
	return sortEntry{binary.BigEndian.Uint64(pfx[:8]), binary.BigEndian.Uint64(pfx[8:]), len(k), off}
}

// sortKeys compares the keys of records of data.
type sortKeys []byte

// key returns e's key.
func (d sortKeys) key(e sortEntry) []byte {
	start := e.off + 1 + uvarintLen(uint64(e.klen))
	return d[start : start+e.klen]
}

func (d sortKeys) compare(a, b sortEntry) int {
	if a.hi != b.hi {
		return cmp.Compare(a.hi, b.hi)
	}
	if a.lo != b.lo {
		return cmp.Compare(a.lo, b.lo)
	}
	if a.klen <= 16 && b.klen <= 16 {
		// Equal zero-padded prefixes: the shorter key is a prefix of
		// the longer.
		return cmp.Compare(a.klen, b.klen)
	}
	return bytes.Compare(d.key(a), d.key(b))
}

// compareRecords orders by key, then chain order.
func (d sortKeys) compareRecords(a, b sortEntry) int {
	if c := d.compare(a, b); c != 0 {
		return c
	}
	return cmp.Compare(a.off, b.off)
}

// radixSort sorts entries by key, then chain order (compareRecords): a
// stable LSD radix sort by the first 8 key bytes (skipping the bytes all
// entries share, such as the key group's high byte), which keeps the
// records of equal prefixes in chain (offset) order, then a comparison sort
// of each run of equal prefixes (usually the records of one key). tmp is
// scratch space; it returns the sorted entries and the other buffer.
func radixSort(entries, tmp []sortEntry, keys sortKeys) (sorted, spare []sortEntry) {
	n := len(entries)
	if n == 0 {
		return entries, tmp
	}
	var counts [8][256]int
	for _, e := range entries {
		for b := range 8 {
			counts[b][byte(e.hi>>(56-8*b))]++
		}
	}
	tmp = slices.Grow(tmp[:0], n)[:n]
	for b := 7; b >= 0; b-- {
		c := &counts[b]
		shift := 56 - 8*uint(b)
		if c[byte(entries[0].hi>>shift)] == n {
			continue // every entry has this byte
		}
		var sum int
		for i, x := range c {
			c[i] = sum
			sum += x
		}
		for _, e := range entries {
			d := byte(e.hi >> shift)
			tmp[c[d]] = e
			c[d]++
		}
		entries, tmp = tmp, entries
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && entries[j].hi == entries[i].hi {
			j++
		}
		if run := entries[i:j]; len(run) > 1 {
			slices.SortFunc(run, keys.compareRecords)
		}
		i = j
	}
	return entries, tmp
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// sort writes the last record of every key of a partition's records data,
// in key order, to sw.
func (s *partSorter) sort(data []byte, w *sortWork, sw *sstWriter) error {
	if len(data) == 0 {
		return nil
	}
	entries := w.entries[:0]
	for off := 0; off < len(data); {
		_, k, _, next, bad := parseRecord(data, off)
		if bad != "" {
			return fmt.Errorf("%w: pebble state backend: replaying the changelog: %s", statebackend.ErrCorrupt, bad)
		}
		entries = append(entries, newSortEntry(k, off))
		off = next
	}
	keys := sortKeys(data)
	w.entries, w.tmp = radixSort(entries, w.tmp, keys)
	entries = w.entries
	for b := 0; b < len(entries); b += touchBlock {
		block := entries[b:min(b+touchBlock, len(entries))]
		w.touched += touch(data, block)
		for j, e := range block {
			if b+j+1 < len(entries) && keys.compare(e, entries[b+j+1]) == 0 {
				continue // a later record of the same key follows
			}
			kind, k, v, _, _ := parseRecord(data, e.off)
			if err := sw.add(kind, k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// touchBlock is how many sorted records touch loads at once.
const touchBlock = 32

// touch reads the first bytes of every record of block (two cache lines'
// worth), so that the records, scattered over the partition, are loaded
// into the CPU cache in parallel (the loads do not depend on each other)
// rather than one cache miss after the other while they are written out.
func touch(data []byte, block []sortEntry) byte {
	var x byte
	last := len(data) - 1
	for _, e := range block {
		x += data[e.off] + data[min(e.off+64, last)]
	}
	return x
}

// sstWriter writes a sorted stream of sets and deletes to sstables of about
// replaySSTBytes each.
type sstWriter struct {
	opts   sstable.WriterOptions
	dir    string
	worker int
	w      *sstable.Writer
	paths  []string
}

func (s *sstWriter) add(kind byte, k, v []byte) error {
	if s.w == nil {
		path := filepath.Join(s.dir, fmt.Sprintf("replay-%02d-%06d.sst", s.worker, len(s.paths)))
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("pebble state backend: replaying the changelog: %w; check free space in %s", err, s.dir)
		}
		s.w = sstable.NewWriter(&unsyncedWritable{f: f, w: bufio.NewWriterSize(f, 1<<20)}, s.opts)
		s.paths = append(s.paths, path)
	}
	var err error
	if kind == clSet {
		err = s.w.Set(k, v)
	} else {
		err = s.w.Delete(k)
	}
	if err != nil {
		return fmt.Errorf("pebble state backend: replaying the changelog into %s: %w", s.paths[len(s.paths)-1], err)
	}
	if s.w.Raw().EstimatedSize() >= replaySSTBytes {
		return s.close()
	}
	return nil
}

// close finishes the open sstable, if any.
func (s *sstWriter) close() error {
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	if err != nil {
		return fmt.Errorf("pebble state backend: replaying the changelog into %s: %w; check free space in %s", s.paths[len(s.paths)-1], err, s.dir)
	}
	return nil
}

func (s *sstWriter) abort() {
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
}

// unsyncedWritable is an objstorage.Writable over a file that, unlike
// Pebble's, does not sync it on Finish: the database runs without a WAL
// and is rebuilt from a checkpoint after a crash, so the ingested files
// need not be durable, and syncing a restore's gigabyte costs seconds.
type unsyncedWritable struct {
	f *os.File
	w *bufio.Writer
}

var _ objstorage.Writable = (*unsyncedWritable)(nil)

func (u *unsyncedWritable) Write(p []byte) error {
	_, err := u.w.Write(p)
	return err
}

func (u *unsyncedWritable) Finish() error {
	return errors.Join(u.w.Flush(), u.f.Close())
}

func (u *unsyncedWritable) Abort() { u.f.Close() }
