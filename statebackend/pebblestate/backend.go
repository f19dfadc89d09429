package pebblestate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
	"github.com/weirstream/weir/stream"
)

// Options configures a Backend. Zero fields take the defaults noted.
type Options struct {
	// Dir is the directory of the Pebble database (required). New creates
	// it and fails if it already holds a database.
	Dir string
	// CacheBytes is the size of Pebble's block cache in bytes. Default
	// 64 MiB. State may be many times larger: blocks not in the cache are
	// read from disk. Ignored if Cache is set.
	CacheBytes int64
	// Cache, if set, is the block cache the backend's database uses
	// instead of one of its own: one cache shared by every backend of a
	// process (pebble.NewCache) keeps hot blocks of busy backends rather
	// than a fixed share per backend. Each open database holds its own
	// reference; the caller keeps the one NewCache returned while it
	// creates backends and releases it (Unref) when it creates no more.
	// Pebble also charges memtables to the cache. Default nil.
	Cache *pebble.Cache
	// MemTableBytes is the size of one Pebble memtable in bytes. Default
	// 4 MiB: larger memtables flush into larger sstables whose filter and
	// index blocks crowd the block cache; point reads of state larger than
	// the caches measured at less than half the speed with 32 MiB.
	MemTableBytes int64
	// MaterializeFactor decides how often SnapshotFiles takes a new Pebble
	// checkpoint (materializes) rather than extending the changelog chain:
	// once the changelog written since the last materialization reaches
	// MaterializeFactor × the state's size (the larger of SizeBytes and the
	// bytes of the last materialized checkpoint). A larger factor uploads
	// less (about 1 + 1/MaterializeFactor times the changed bytes per
	// checkpoint, amortized, since a materialization uploads about the
	// whole state after compactions) and makes a restore replay more (up
	// to MaterializeFactor × the state's size of changelog) and keeps more
	// local disk. Default 2 (DefaultMaterializeFactor); negative: materialize
	// at every snapshot and keep no changelog.
	MaterializeFactor float64
	// ValueCacheBytes bounds the write-back value cache in front of Pebble,
	// in bytes of Go heap: its entry slots and hash index, keys, encoded
	// values, and decoded values counted as large as their encodings.
	// Reads of cached keys are served from memory; changed values reach
	// Pebble when evicted and before anything reads Pebble directly (Keys,
	// map Range, Snapshot, Checkpoint, Close). Default 64 MiB, seven
	// eighths of which go to the resident keys of the windows that use the
	// backend, if any (see statebackend.Slots). State may be many times
	// larger.
	ValueCacheBytes int64
	// KeyFilterBytes bounds the in-memory filter of the state keys the
	// database may hold, in bytes (about 1.25 bytes per key): a read of a
	// key the backend never wrote, such as the first record of every new
	// key of a stream, is then answered without a Pebble lookup. The first
	// part of the filter is sized for twice the entries the value cache
	// holds, later parts for twice the keys of the one before; once the
	// filter would take more than KeyFilterBytes it is dropped and every
	// read of a key the value cache misses looks in Pebble. Only a backend
	// made by New has a filter: one opened from a checkpoint does not
	// know the keys of its database. Default ValueCacheBytes/4 (16 MiB by
	// default, which holds about 7 million keys); negative: no filter.
	KeyFilterBytes int64
	// WriteBatchBytes is how many bytes of writes the backend buffers in a
	// batch before it commits them to the database. Default 1 MiB.
	WriteBatchBytes int
	// TimerCacheBytes bounds the in-memory index of the timers of each
	// domain (event time, processing time: a backend whose operator uses
	// both may take twice as much), in bytes: timestamps and keys plus
	// about 48 bytes per timer. It is split evenly among the backend's key
	// groups; each key group's part holds its earliest timers in order
	// (all of them up to a bound) and timers found or registered beyond
	// the bound, and at least one timer whatever its share, so one
	// domain's index takes at most TimerCacheBytes plus one timer per key
	// group. Firing a timer the index holds, and
	// registering or deleting a timer that it holds or that lies below the
	// bound, do not read Pebble; the next timers are read a share at a
	// time. Timers are written to Pebble as they change, so snapshots and
	// checkpoints do not depend on the index. Default 8 MiB
	// (DefaultTimerCacheBytes): over 100,000 timers with 16-byte keys.
	TimerCacheBytes int64
	// SnapshotCleanupEntries bounds the clean-up that SnapshotFiles and
	// Checkpoint do for tables whose descriptor has a SnapshotFilter (TTL
	// state): those snapshots are the database's files, so they cannot
	// leave out what the filter drops as Snapshot does. Instead, before
	// each of them (in the call, on the caller's goroutine), the backend
	// passes up to SnapshotCleanupEntries stored entries of each such
	// table (a key's value; for map state, the value of one user key) to
	// the filter, and deletes the entries it drops and rewrites those it
	// changes (a list without its expired elements) in the live state.
	// Each snapshot continues where the previous one stopped, key group
	// by key group, and starts over after the last key group, so a table
	// of E entries is swept once every ⌈E/SnapshotCleanupEntries⌉
	// snapshots: what the filter drops is deleted from the database, and
	// so missing from the snapshots taken after the sweep that met it,
	// whether or not its keys are accessed again (compactions then drop
	// its bytes from the files). A snapshot reads and decodes at most
	// SnapshotCleanupEntries entries per such table. Default 10,000
	// (DefaultSnapshotCleanupEntries); negative: no clean-up.
	SnapshotCleanupEntries int
	// ReplayMemoryBytes bounds, roughly, the memory a restore
	// (OpenFromCheckpoint, MergeInto) takes to sort a changelog chain
	// before ingesting it: a chain of up to this many bytes is sorted in
	// memory; a longer one is split by key-group range into partitions
	// spilled to files in Dir (about the chain's size on disk while the
	// restore runs; written with O_DIRECT where the file system allows)
	// and sorted a few at a time (see replay.go). One key
	// group's records are sorted at once, whatever their size. Default
	// 256 MiB (DefaultReplayMemoryBytes).
	ReplayMemoryBytes int64
	// FetchSegment, if set, reads a changelog segment of a snapshot
	// directory that is not on the local disk into w: path is where its
	// file would be. A restore (OpenFromCheckpoint, MergeInto) then streams
	// such segments from storage into its replay instead of reading files
	// downloaded before: the chain, up to MaterializeFactor × the state, is
	// never written to the disk and read back. FetchSegment must fail
	// unless the segment has the size and SHA-256 its snapshot's manifest
	// lists (stream.SnapshotFile.Fetch does); the restore checks its size
	// against the chain. It is called from more than one goroutine at once.
	FetchSegment func(path string, w io.Writer) (int64, error)
	// DeleteOnClose removes Dir when the backend is closed. Default false:
	// Close flushes and leaves the database on disk.
	DeleteOnClose bool
	// Configure, if set, adjusts the Pebble options last (compaction
	// thresholds, compression, ...). The defaults are Pebble's own
	// compaction settings, which keep reads fast, plus bloom filters on
	// every level; checkpoint size is kept small by the changelog, not by
	// compaction tuning (see "Incremental checkpoints" in the package
	// doc). Default nil.
	Configure func(*pebble.Options)
	// Logger receives Pebble's log output. Default: errors only, to the
	// standard logger; informational messages are dropped.
	Logger pebble.Logger
}

// Defaults of Options.
const (
	DefaultCacheBytes             = 64 << 20
	DefaultValueCacheBytes        = 64 << 20
	DefaultTimerCacheBytes        = 8 << 20
	DefaultSnapshotCleanupEntries = 10_000
)

// Validate reports options no backend can run with.
func (o Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("pebble state backend: no directory; set Options.Dir to a local directory for the database")
	case o.CacheBytes < 0:
		return fmt.Errorf("pebble state backend: cache size %d bytes is negative", o.CacheBytes)
	case o.ValueCacheBytes < 0:
		return fmt.Errorf("pebble state backend: value cache size %d bytes is negative", o.ValueCacheBytes)
	case o.MemTableBytes < 0:
		return fmt.Errorf("pebble state backend: memtable size %d bytes is negative", o.MemTableBytes)
	case o.MaterializeFactor != o.MaterializeFactor:
		return errors.New("pebble state backend: materialize factor is NaN; set Options.MaterializeFactor to a number (0 for the default)")
	case o.ReplayMemoryBytes < 0:
		return fmt.Errorf("pebble state backend: replay memory %d bytes is negative", o.ReplayMemoryBytes)
	case o.WriteBatchBytes < 0:
		return fmt.Errorf("pebble state backend: write batch size %d bytes is negative", o.WriteBatchBytes)
	case o.TimerCacheBytes < 0:
		return fmt.Errorf("pebble state backend: timer cache size %d bytes is negative", o.TimerCacheBytes)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.ValueCacheBytes == 0 {
		o.ValueCacheBytes = DefaultValueCacheBytes
	}
	if o.KeyFilterBytes == 0 {
		o.KeyFilterBytes = o.ValueCacheBytes / 4
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = defaultMemTableBytes
	}
	if o.MaterializeFactor == 0 {
		o.MaterializeFactor = DefaultMaterializeFactor
	}
	if o.ReplayMemoryBytes == 0 {
		o.ReplayMemoryBytes = DefaultReplayMemoryBytes
	}
	if o.WriteBatchBytes == 0 {
		o.WriteBatchBytes = 1 << 20
	}
	if o.TimerCacheBytes == 0 {
		o.TimerCacheBytes = DefaultTimerCacheBytes
	}
	if o.SnapshotCleanupEntries == 0 {
		o.SnapshotCleanupEntries = DefaultSnapshotCleanupEntries
	}
	if o.Logger == nil {
		o.Logger = quietLogger{}
	}
	return o
}

// quietLogger drops Pebble's informational messages.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(f string, args ...any) { pebble.DefaultLogger.Errorf(f, args...) }
func (quietLogger) Fatalf(f string, args ...any) { pebble.DefaultLogger.Fatalf(f, args...) }

// Backend is the Pebble state backend. Create it with New or
// OpenFromCheckpoint. Like every statebackend.Backend it is not safe for
// concurrent use.
type Backend struct {
	opts Options
	db   *pebble.DB
	kg   stream.KeyGroupRange
	// layout is the database's key layout version (layoutV1 or layoutV2).
	layout byte

	key      []byte
	keyGroup int

	// batch buffers writes; it is committed when it exceeds
	// opts.WriteBatchBytes, at the end of an eviction sweep of the value
	// cache, before an iterator is opened (newIter) and before Snapshot,
	// Checkpoint and Close. No iterator but rd, which every commit
	// reopens, is open across a call into user code, so a commit may
	// happen in any state call. The batch is not indexed: point reads
	// (get) find the keys it holds in pending, so that neither writes nor
	// reads search a skiplist of the batch on top of the memtable's.
	batch *pebble.Batch
	// pending holds the value of every key written to batch since its last
	// commit (ok false: deleted); the values are in pendingBuf.
	pending    map[string]pendingValue
	pendingBuf []byte
	// rd is the iterator get seeks (nil: none open): creating one per
	// read, as DB.Get does, costs more than the seek. It sees the database
	// as of its creation, so commit closes it; until then it pins that
	// view's memtables and sstables. It is the only iterator open across
	// calls into user code.
	rd *pebble.Iterator

	tables map[string]*table
	byID   map[uint64]*table
	nextID uint64
	timers timerService

	sizes      []int64 // live key+value bytes per key group - kg.Start
	savedSizes []int64 // sizes as last written to the batch
	size       int64

	// probe remembers the value length (-1: absent) of the last key read
	// or written, so that a read-modify-write does not read twice to keep
	// sizes exact.
	probe struct {
		key []byte
		n   int
		ok  bool
	}

	// reads counts the point reads that looked in the batch or Pebble.
	reads int

	hashes map[string]string // "name/size" → SHA-256 of immutable files
	err    error             // first I/O or encoding error; see Err
	closed bool

	// cache is the write-back value cache in front of batch (cache.go).
	cache valueCache
	// filter knows the state keys the database may hold (keyfilter.go);
	// off unless the backend was made by New.
	filter keyFilter

	// cl records writes for changelog snapshots (changelog.go).
	cl changelog

	kbuf, vbuf, tbuf, rbuf []byte
}

var _ statebackend.Backend = (*Backend)(nil)
var _ statebackend.SlotMemory = (*Backend)(nil)
var _ statebackend.KeyScanner = (*Backend)(nil)

// New creates an empty backend for the key groups kg in a new database in
// opts.Dir.
func New(opts Options, kg stream.KeyGroupRange) (*Backend, error) {
	if err := checkRange(kg); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	db, err := openDB(opts, true)
	if err != nil {
		return nil, err
	}
	if err := db.Set(metaVersionKey, []byte{layoutV1}, pebble.NoSync); err != nil {
		db.Close()
		return nil, fmt.Errorf("pebble state backend: %s: %w", opts.Dir, err)
	}
	b := newBackend(opts, db, kg, layoutV1)
	// The database is empty: every key it will hold is written through
	// b.write, so the key filter knows them all.
	first := 2 * opts.ValueCacheBytes / cacheTypicalEntryBytes
	b.filter.init(int(min(first, opts.KeyFilterBytes*8/filterBitsPerKey/4)), opts.KeyFilterBytes)
	return b, nil
}

func checkRange(kg stream.KeyGroupRange) error {
	if kg.Start < 0 || kg.End > MaxKeyGroup {
		return fmt.Errorf("pebble state backend: key groups %v outside [0..%d]; use a smaller max parallelism", kg, MaxKeyGroup)
	}
	return nil
}

// defaultMemTableBytes is Options.MemTableBytes's default.
const defaultMemTableBytes = 4 << 20

func openDB(opts Options, create bool) (*pebble.DB, error) {
	db, _, err := openDBWith(opts, create)
	return db, err
}

// openDBWith is openDB that also returns the Pebble options it opened the
// database with.
func openDBWith(opts Options, create bool) (*pebble.DB, *pebble.Options, error) {
	po := pebbleOptions(opts, create)
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		if create {
			return nil, nil, fmt.Errorf("pebble state backend: cannot create a database in %s: %w; give every backend its own empty directory", opts.Dir, err)
		}
		return nil, nil, fmt.Errorf("pebble state backend: cannot open the database in %s: %w", opts.Dir, err)
	}
	return db, po, nil
}

// pebbleOptions returns the Pebble options of a backend's database.
func pebbleOptions(opts Options, create bool) *pebble.Options {
	po := &pebble.Options{
		Cache:              opts.Cache,
		CacheSize:          opts.CacheBytes,
		MemTableSize:       uint64(opts.MemTableBytes),
		DisableWAL:         true, // state is recovered from checkpoints, never from the WAL
		ErrorIfExists:      create,
		ErrorIfNotExists:   !create,
		FormatMajorVersion: pebble.FormatNewest, // Excise needs virtual sstables
		Logger:             opts.Logger,
	}
	// Bloom filters on every level: most reads are point lookups of one
	// key's state, and without filters each lookup searches every L0 file
	// and level that spans the key.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// No tombstone-density compactions: state deletes keys all the time
	// (fired windows and timers, expired entries), and Pebble's default
	// compacts every sstable whose blocks are a tenth tombstones at once,
	// rewriting the bottom level again and again for a few deletions
	// (q5 spent more CPU in them than in all its reads). Tombstones are
	// dropped by the ordinary compactions that L0's file count and the
	// level sizes trigger, and the backend's scans (timers, Keys, map
	// Range) start after the keys they already consumed.
	po.Experimental.TombstoneDenseCompactionThreshold = -1
	if opts.Configure != nil {
		opts.Configure(po)
	}
	return po
}

// newBackend returns a backend over db, whose key layout version is
// layout.
func newBackend(opts Options, db *pebble.DB, kg stream.KeyGroupRange, layout byte) *Backend {
	b := &Backend{
		opts:       opts,
		db:         db,
		kg:         kg,
		layout:     layout,
		keyGroup:   kg.Start,
		batch:      db.NewBatch(),
		pending:    make(map[string]pendingValue),
		tables:     make(map[string]*table),
		byID:       make(map[uint64]*table),
		nextID:     1,
		sizes:      make([]int64, kg.Len()),
		savedSizes: make([]int64, kg.Len()),
		hashes:     make(map[string]string),
	}
	b.cache.init(opts.ValueCacheBytes)
	b.timers.init(b)
	return b
}

// Options returns the backend's options, with defaults filled in.
func (b *Backend) Options() Options { return b.opts }

// Err returns the first error the backend met in a call that cannot return
// one (a failed read or write in Pebble, a value its codec cannot encode).
// Snapshot, Checkpoint and Close return it too, so that a checkpoint never
// captures state that missed a write.
func (b *Backend) Err() error { return b.err }

func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// SetCurrentKey implements statebackend.Backend.
func (b *Backend) SetCurrentKey(key []byte, keyGroup int) {
	if !b.kg.Contains(keyGroup) {
		panic(fmt.Sprintf("pebble state backend: key group %d is outside this subtask's range %v; the record was routed to the wrong subtask", keyGroup, b.kg))
	}
	b.key = key
	b.keyGroup = keyGroup
}

// CurrentKey implements statebackend.Backend.
func (b *Backend) CurrentKey() ([]byte, int) { return b.key, b.keyGroup }

// KeyGroups implements statebackend.Backend.
func (b *Backend) KeyGroups() stream.KeyGroupRange { return b.kg }

// Timers implements statebackend.Backend.
func (b *Backend) Timers() statebackend.TimerService { return &b.timers }

// SizeBytes implements statebackend.Backend: the bytes of live keys and
// values (including timers) in the backend's key groups, not counting
// Pebble's overhead, compression or data not yet compacted away.
func (b *Backend) SizeBytes() int64 { return b.size }

// Table implements statebackend.Backend.
func (b *Backend) Table(d statebackend.Descriptor) (statebackend.Table, error) {
	if b.closed {
		return nil, statebackend.ErrClosed
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	t := b.tables[d.Name]
	if t == nil {
		t = b.addTable(d.Name, d.Kind)
		t.d, t.registered = d, true
		t.codecID, t.ukCodecID = d.Codec.ID(), codecID(d.UserKeyCodec)
		b.saveTable(t)
		return t, nil
	}
	if t.registered {
		if err := t.d.Compatible(d); err != nil {
			return nil, err
		}
		return t, nil
	}
	// Restored, not asked for yet.
	if t.kind != d.Kind {
		return nil, fmt.Errorf("%w: state %q was restored as %s state and is requested as %s state; use another name for the new state",
			statebackend.ErrConflict, d.Name, t.kind, d.Kind)
	}
	if t.codecID == "" || t.codecID != d.Codec.ID() || t.ukCodecID != codecID(d.UserKeyCodec) {
		// Written with an unknown or another codec: every value must
		// decode with this one (as in the heap backend).
		if err := t.validate(d); err != nil {
			return nil, err
		}
	}
	t.d, t.registered = d, true
	t.codecID, t.ukCodecID = d.Codec.ID(), codecID(d.UserKeyCodec)
	b.saveTable(t)
	return t, nil
}

func codecID(c statebackend.ValueCodec) string {
	if c == nil {
		return ""
	}
	return c.ID()
}

// addTable registers a new table name with the next free id.
func (b *Backend) addTable(name string, kind statebackend.Kind) *table {
	t := &table{b: b, name: name, id: b.nextID, kind: kind}
	t.d = statebackend.Descriptor{Name: name, Kind: kind}
	b.nextID++
	b.tables[name] = t
	b.byID[t.id] = t
	return t
}

// saveTable persists t's registry record: uvarint id, kind, codec ID and
// user-key codec ID (length-prefixed; empty when unknown).
func (b *Backend) saveTable(t *table) {
	v := binary.AppendUvarint(nil, t.id)
	v = append(v, byte(t.kind))
	v = chunk.AppendField(v, t.codecID)
	v = chunk.AppendField(v, t.ukCodecID)
	if err := b.batchSet(append(bytes.Clone(metaTablePfx), t.name...), v); err != nil {
		b.fail(err)
	}
}

// holdProcTimers records, before the first processing-time timer key is
// written, that the database now has the layout with them (layoutV2).
func (b *Backend) holdProcTimers() {
	if b.layout >= layoutV2 {
		return
	}
	if err := b.batchSet(metaVersionKey, []byte{layoutV2}); err != nil {
		b.fail(err)
		return
	}
	b.layout = layoutV2
}

// loadLayout reads the key layout version of an opened database.
func loadLayout(r pebble.Reader, dir string) (byte, error) {
	v, closer, err := r.Get(metaVersionKey)
	if err != nil {
		return 0, fmt.Errorf("pebble state backend: %s: no layout version (%v); the directory does not hold a Weir state database", dir, err)
	}
	ver := append([]byte(nil), v...)
	closer.Close()
	if len(ver) != 1 || ver[0] < layoutV1 || ver[0] > layoutV2 {
		return 0, fmt.Errorf("pebble state backend: %s: key layout version %v, this build reads versions %d and %d; open it with the Weir version that wrote it", dir, ver, layoutV1, layoutV2)
	}
	return ver[0], nil
}

// loadTables reads the layout version and the table registry of an opened
// database.
func loadTables(r pebble.Reader, dir string) (map[string]*table, byte, error) {
	layout, err := loadLayout(r, dir)
	if err != nil {
		return nil, 0, err
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: metaTablePfx, UpperBound: prefixEnd(metaTablePfx)})
	if err != nil {
		return nil, 0, err
	}
	defer it.Close()
	out := make(map[string]*table)
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[len(metaTablePfx):])
		rd := chunk.NewReader(it.Value())
		t := &table{name: name, id: rd.Uvarint(), kind: statebackend.Kind(rd.Byte())}
		t.codecID = string(rd.Bytes())
		t.ukCodecID = string(rd.Bytes())
		if rd.Err() != nil || !t.kind.Valid() || t.id == 0 {
			return nil, 0, fmt.Errorf("%w: pebble state backend: %s: damaged registry record of table %q", statebackend.ErrCorrupt, dir, name)
		}
		t.d = statebackend.Descriptor{Name: name, Kind: t.kind}
		out[name] = t
	}
	return out, layout, it.Error()
}

// adoptTables installs tables loaded by loadTables as restored tables.
func (b *Backend) adoptTables(ts map[string]*table) {
	for _, t := range ts {
		t.b = b
		b.tables[t.name] = t
		b.byID[t.id] = t
		b.nextID = max(b.nextID, t.id+1)
	}
}

// Keys implements statebackend.Backend. Keys are read a page at a time and
// no iterator is open while fn runs.
func (b *Backend) Keys(name string, keyGroup int, fn func(key []byte) bool) {
	if b.closed {
		return
	}
	t := b.tables[name]
	if t == nil || !b.kg.Contains(keyGroup) {
		return
	}
	prefix := appendTablePrefix(nil, keyGroup, t.id)
	lower, upper := prefix, prefixEnd(prefix)
	const page = 256
	keys := make([][]byte, 0, page)
	for {
		keys = keys[:0]
		b.flush()
		it, err := b.newIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			b.fail(err)
			return
		}
		for ok := it.First(); ok && len(keys) < page; {
			k, good := b.keyAt(it, prefix, name)
			if !good {
				break
			}
			keys = append(keys, bytes.Clone(k))
			ok = b.pastKey(it, t, keyGroup, k)
		}
		if err := it.Close(); err != nil {
			b.fail(err)
			return
		}
		for _, k := range keys {
			if !fn(k) || b.closed {
				return
			}
		}
		if len(keys) < page {
			return
		}
		lower = prefixEnd(appendStateKey(nil, keyGroup, t.id, keys[len(keys)-1]))
	}
}

// ScanKeys implements statebackend.KeyScanner: one iterator over the
// table's keys in every key group of the backend, rather than one per key
// group and page as Keys opens.
func (b *Backend) ScanKeys(name string, fn func(key []byte, keyGroup int) bool) {
	if b.closed {
		return
	}
	t := b.tables[name]
	if t == nil {
		return
	}
	b.flush()
	it, err := b.newIter(&pebble.IterOptions{LowerBound: kgPrefix(b.kg.Start), UpperBound: kgPrefix(b.kg.End + 1)})
	if err != nil {
		b.fail(err)
		return
	}
	defer func() {
		if err := it.Close(); err != nil {
			b.fail(err)
		}
	}()
	var prefix []byte
	for kg := b.kg.Start; kg <= b.kg.End; kg++ {
		prefix = appendTablePrefix(prefix[:0], kg, t.id)
		for ok := it.SeekGE(prefix); ok && bytes.HasPrefix(it.Key(), prefix); {
			k, good := b.keyAt(it, prefix, name)
			if !good || !fn(k, kg) {
				return
			}
			ok = b.pastKey(it, t, kg, k)
		}
	}
}

// keyAt returns the key of the state entry it is at, whose state key starts
// with prefix (key group and table id), in table name. A key that does not
// parse fails the backend.
func (b *Backend) keyAt(it *pebble.Iterator, prefix []byte, name string) ([]byte, bool) {
	k, _, ok := parseStateKey(it.Key()[len(prefix):])
	if !ok {
		b.fail(fmt.Errorf("%w: pebble state backend: table %q: a key of %d bytes does not parse as a state key", statebackend.ErrCorrupt, name, len(it.Key())))
	}
	return k, ok
}

// pastKey moves it past the entries of key k, in key group kg of table t
// (a map's entries are one per user key), and reports whether it is at an
// entry.
func (b *Backend) pastKey(it *pebble.Iterator, t *table, kg int, k []byte) bool {
	if t.kind == statebackend.KindMap {
		return it.SeekGE(prefixEnd(appendStateKey(b.kbuf[:0], kg, t.id, k)))
	}
	return it.Next()
}

// oldLen returns the length of k's value, or -1 if k has none.
func (b *Backend) oldLen(k []byte) int {
	if b.probe.ok && bytes.Equal(b.probe.key, k) {
		return b.probe.n
	}
	v, found, err := b.get(k, nil)
	if err != nil {
		b.fail(err)
	}
	if !found {
		return -1
	}
	return len(v)
}

// pendingValue is a key's value in the uncommitted batch.
type pendingValue struct {
	v  []byte // in pendingBuf
	ok bool   // false: deleted
}

// get appends k's value to dst: nothing if the key filter knows k was
// never written, from the uncommitted batch (pending) if it holds k, else
// from the database. found is false if k has no value.
func (b *Backend) get(k, dst []byte) (v []byte, found bool, err error) {
	if b.filter.on && isStateKey(k) && !b.filter.mayHave(k) {
		return dst, false, nil // never written
	}
	b.reads++
	if p, ok := b.pending[string(k)]; ok {
		return append(dst, p.v...), p.ok, nil
	}
	if b.rd == nil {
		// Pebble's iterators skip the bloom filters of L6 by default (L6
		// mostly holds the keys sought). Without a key filter, new keys,
		// which every keyed stream has, are sought in vain, and their
		// lookups are cheaper with the filters; with one, the keys sought
		// were mostly written, and the filters cost more than they save.
		if b.rd, err = b.db.NewIter(&pebble.IterOptions{UseL6Filters: !b.filter.on}); err != nil {
			return dst, false, err
		}
	}
	// The default comparer's prefix is the whole key: SeekPrefixGE finds
	// k or nothing, and skips files whose bloom filter excludes k.
	if !b.rd.SeekPrefixGE(k) || !bytes.Equal(b.rd.Key(), k) {
		return dst, false, b.rd.Error()
	}
	v = append(dst, b.rd.Value()...)
	return v, true, b.rd.Error()
}

// closeReader closes rd, if open.
func (b *Backend) closeReader() error {
	if b.rd == nil {
		return nil
	}
	err := b.rd.Close()
	b.rd = nil
	return err
}

// newIter commits the batch and opens an iterator over the database.
func (b *Backend) newIter(o *pebble.IterOptions) (*pebble.Iterator, error) {
	if err := b.commit(); err != nil {
		return nil, err
	}
	return b.db.NewIter(o)
}

func (b *Backend) setProbe(k []byte, n int) {
	b.probe.key = append(b.probe.key[:0], k...)
	b.probe.n, b.probe.ok = n, true
}

// kgIndex returns the index into sizes of the key group k belongs to.
func (b *Backend) kgIndex(k []byte) int { return (int(k[0])<<8 | int(k[1])) - b.kg.Start }

// set writes k=v; old is k's previous value length (-1: none).
func (b *Backend) set(k, v []byte, old int) {
	if err := b.batchSet(k, v); err != nil {
		b.fail(err)
		return
	}
	d := int64(len(k) + len(v))
	if old >= 0 {
		d -= int64(len(k) + old)
	}
	b.sizes[b.kgIndex(k)] += d
	b.size += d
	b.setProbe(k, len(v))
	b.maybeCommit()
}

// account adds the change of state key k's value from length old to length
// n (-1: none) to the key group's size.
func (b *Backend) account(k []byte, old, n int) {
	var d int64
	if old >= 0 {
		d -= int64(len(k) + old)
	}
	if n >= 0 {
		d += int64(len(k) + n)
	}
	b.sizes[b.kgIndex(k)] += d
	b.size += d
}

// del deletes k, whose value has length old (≥ 0).
func (b *Backend) del(k []byte, old int) {
	if err := b.batchDelete(k); err != nil {
		b.fail(err)
		return
	}
	d := int64(len(k) + old)
	b.sizes[b.kgIndex(k)] -= d
	b.size -= d
	b.setProbe(k, -1)
	b.maybeCommit()
}

func (b *Backend) maybeCommit() {
	if b.batch.Len() >= b.opts.WriteBatchBytes {
		b.commit()
	}
}

// commit applies the buffered writes to the database.
func (b *Backend) commit() error {
	if b.batch.Empty() {
		return b.err
	}
	err := errors.Join(b.closeReader(), b.batch.Commit(pebble.NoSync))
	b.batch.Reset()
	clear(b.pending)
	b.pendingBuf = b.pendingBuf[:0]
	if err != nil {
		b.fail(fmt.Errorf("pebble state backend: %s: commit: %w", b.opts.Dir, err))
	}
	return b.err
}

// saveSizes persists the live bytes of every owned key group, so that a
// backend opened from a checkpoint knows its SizeBytes.
func (b *Backend) saveSizes() {
	for i, n := range b.sizes {
		if n == b.savedSizes[i] {
			continue
		}
		k := appendKG(bytes.Clone(metaSizePfx), b.kg.Start+i)
		if err := b.batchSet(k, binary.AppendVarint(nil, n)); err != nil {
			b.fail(err)
			continue
		}
		b.savedSizes[i] = n
	}
}

// loadSizes reads the sizes saveSizes wrote for the owned key groups.
func (b *Backend) loadSizes() error {
	for i := range b.sizes {
		k := appendKG(bytes.Clone(metaSizePfx), b.kg.Start+i)
		v, found, err := b.get(k, b.vbuf[:0])
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		n, _ := binary.Varint(v)
		b.sizes[i], b.savedSizes[i] = n, n
		b.size += n
	}
	return nil
}

// Close implements statebackend.Backend. Without Options.DeleteOnClose it
// commits and flushes, leaving a database that OpenFromCheckpoint can open.
// It returns the error of Err, if any.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.err
	if !b.opts.DeleteOnClose {
		b.flush()
		b.saveSizes()
		err = errors.Join(err, b.commit(), b.db.Flush())
	}
	b.batch.Close()
	err = errors.Join(err, b.closeReader(), b.closeChangelog(), b.db.Close())
	if b.opts.DeleteOnClose {
		err = errors.Join(err, os.RemoveAll(b.opts.Dir))
	}
	b.tables, b.byID = nil, nil
	return err
}

// SharedCache is a block cache that every Pebble backend of a process
// uses (Options.Cache), so that the blocks of busy backends stay cached
// rather than each backend keeping a fixed share. Each open backend holds
// a reference of its own; Close releases the creator's.
type SharedCache struct {
	cache *pebble.Cache
	once  sync.Once
}

// NewSharedCache returns a block cache of bytes bytes (at least 1).
func NewSharedCache(bytes int64) *SharedCache {
	return &SharedCache{cache: pebble.NewCache(max(bytes, 1))}
}

// Use sets o to open its database on the shared cache.
func (c *SharedCache) Use(o *Options) { o.Cache = c.cache }

// Close releases the creator's reference; the cache's memory goes once
// every backend using it has closed too. It is idempotent.
func (c *SharedCache) Close() { c.once.Do(c.cache.Unref) }

// Bytes returns the cache's capacity.
func (c *SharedCache) Bytes() int64 { return c.cache.MaxSize() }
