// Package pebblestate is Weir's on-disk keyed-state backend: a
// statebackend.Backend over a Pebble (github.com/cockroachdb/pebble/v2)
// database in a local directory, for state larger than memory, with full
// snapshots in the heap backend's chunk format and Pebble checkpoints as the
// base of incremental checkpoints.
//
// # Key layout
//
// Every state key starts with its key group, so one key group is one
// contiguous key range and a key-group range is one contiguous range (which
// OpenFromCheckpoint excises and Snapshot iterates):
//
//	state   kg (2 bytes, big-endian) | table id (uvarint, ≥ 1) |
//	        len(key) (uvarint) | key [| user key (map state)]
//	          → the value, encoded with the table's codec
//	timer   kg (2 bytes) | 0x00 | ts (8 bytes, big-endian, sign bit
//	        flipped) | key
//	          → empty                    (event time)
//	ptimer  kg (2 bytes) | 0x80 0x00 | ts (8 bytes, as above) | key
//	          → empty                    (processing time)
//	meta    0xff 0xff 'v'                → layout version (1 byte, 1 or 2)
//	        0xff 0xff 't' | table name   → uvarint id | kind byte |
//	                                       codec ID | user-key codec ID
//	                                       (length-prefixed; empty = unknown)
//	        0xff 0xff 's' | kg (2 bytes) → live bytes of the key group
//	                                       (varint; written at Checkpoint
//	                                       and Close)
//
// Table ids come from the persisted registry (the 't' records), so a key
// does not repeat the state name. The length prefix makes a key's entries
// contiguous (no key's encoding is a prefix of another's), so a map state's
// user keys of one key are one range. Table ids start at 1, so the timer
// marker 0x00 never collides with a table id. Nor does the processing-time
// timer marker 0x80 0x00: a table id is written as the shortest uvarint,
// in which a byte with the continuation bit (0x80) set is never followed
// by 0x00 (id 128 is 0x80 0x01). Processing-time timer keys sort between
// the keys of tables 1 to 127 and those of table 128 on; every reader of
// a key group's range tells the three kinds apart (parseTimerKey). Key
// group 0xffff is reserved for metadata: a backend owns key groups up to
// MaxKeyGroup.
//
// Layout version 2 is version 1 with processing-time timers. A database
// records version 1 until it first holds a processing-time timer key
// (registered, restored or merged), and version 2 from then on, so that a
// build that reads only version 1 still opens a database without them,
// and refuses, naming the version, one whose timers it would lose. A
// database opened with version 1 is known to have no processing-time
// timers, so none are looked for.
//
// # Timers
//
// Event-time and processing-time timers are two separate queues over their
// own keys (the two markers above), with the same machinery: what follows
// holds for each. Within a key group the timer keys iterate in (timestamp,
// key) order. Across key groups an in-memory min-heap holds, per key group
// that may have timers, a lower bound of its smallest timestamp; firing
// takes the top key group, finds its first timer and fires it if it
// matches the bound. Timers fire in (timestamp, key group, key) order, as
// in the heap backend, and NextProcessingTime settles the top the same way
// without firing.
//
// Timers are written to the batch as they change, but read through an
// in-memory index bounded by Options.TimerCacheBytes per domain (default
// 8 MiB, split evenly among the key groups): per key group, its earliest
// timers in
// order, every timer up to a bound, plus timers found or registered
// beyond it. The first timer of a key group comes from the index, which
// reads the next page of timers from Pebble only once it holds none below
// its bound; registering (or deleting) a timer the index holds, or one
// below the bound, reads nothing. Re-registering the same (key, timestamp)
// for every record of a window thus costs a binary search instead of a
// Pebble read, and firing a timer a delete instead of an iterator: with
// 100,000 timers (BenchmarkTimers, 2 cores) registering again took ~190 ns
// instead of ~1,300 and firing ~500 ns instead of ~4,000; with 1,000,000,
// beyond the default index, firing took ~850 ns instead of ~4,900 and
// registering again, mostly a Pebble read still, ~3.5 µs instead of ~4.
// See timers.go.
//
// # Writes and reads
//
// Table reads and writes go through a write-back value cache (below); the
// cache, timers, restores and merges write to a Pebble batch that is
// committed every Options.WriteBatchBytes, at the end of every eviction
// sweep of the cache, before an iterator is opened and before Snapshot,
// Checkpoint and Close. The batch is not indexed: a point read looks up
// the keys written to it since its last commit in a map (pending), then
// seeks one Pebble iterator kept open for point reads (SeekPrefixGE, which
// skips sstables by their bloom filters) and reopened after every commit.
// That spares every write and read a search of the batch's skiplist on
// top of the memtable's, and every read the iterator construction of
// DB.Get (together about 1.5× the throughput of a keyed
// count over 1 M keys that mostly miss the value cache). Otherwise no
// Pebble iterator is open while user code runs (Keys, map Range and timer
// firing read a page at a time, each page through a new iterator after a
// commit), so callbacks may change state. The WAL is disabled: state
// survives a crash only through checkpoints.
//
// # Key filter
//
// A backend made by New keeps in memory a Bloom filter of every state key
// it has written to Pebble (keyfilter.go): a point read of a key the
// filter does not hold returns "absent" without looking in the batch or
// Pebble. Keyed streams meet new keys all the time, and Pebble can say
// that a key is absent only after a search of every memtable (skiplists,
// no filters) and a bloom filter probe per level: in a keyed count of
// 2 M rows over 1 M keys (running_count's benchmark) some 865,000 rows
// are their key's first, most of the lookups that miss the value cache.
// Deleted keys stay in the filter (a false positive costs one lookup, as
// before). The filter is blocked (one cache line per key, 10 bits per key,
// about 1 % false positives per part) and grows without rescanning the
// database: parts of doubling size, a key added to the newest. Once it
// would exceed Options.KeyFilterBytes (default a quarter of the value
// cache's budget: about 7 M keys) it turns itself off. A backend opened
// from a checkpoint (OpenFromCheckpoint) has no filter, since its
// database holds keys it never saw; Restore and MergeInto write through
// the backend, so a new backend they fill keeps its filter. With a filter
// the lookups that reach Pebble are mostly of keys that exist, so the
// point-read iterator leaves out the bloom filters of L6 (Pebble's
// default), which such lookups would pass anyway; without one it uses
// them, to answer for new keys.
//
// # Write-back value cache
//
// In front of the batch sits a cache of state values, bounded by
// Options.ValueCacheBytes (default 64 MiB). It counts the memory it holds:
// entry slots (24-byte structs in 12 KiB pages), an open-addressing hash
// index of 8-byte slots, each entry's key and encoded value (one
// allocation, rounded to the allocator's size class) and a decoded value
// as large as its encoding, kept only for types that are not fixed-width
// scalars (an int64 decodes again faster than an interface slot pays for
// itself in keys cached). An entry of a running count (16-byte state
// key, int64) takes about 67 bytes on the Go heap, and is counted within
// 2 % of that (TestValueCacheAccountsItsMemory); with 56-byte slots and
// every value held decoded it took about 110 (64 MiB: ~580,000 keys then,
// 1 M now, so that running_count's benchmark over 1 M keys no longer
// reads Pebble: pebble_vs_heap_1m_keys went from 0.25 to 1.6). Value
// state of such a scalar reads and writes the encodings itself
// (statebackend.EncodedTable), so it boxes no value either. It is keyed
// by the full state key, so all tables share the budget. An entry holds
// the key's encoded value, its decoded value (if kept) once a Get or Put
// has seen it, or the fact that the key has no value
// (so a first-seen key costs one Pebble lookup, not one per access), or,
// after a Peek, only the value's length (a stub, so that a Put or Delete
// that follows need not read the old value again to keep SizeBytes exact;
// a Slots, which reads a key's slots with PeekLen, also keeps that length
// itself and writes them back with PutLen and DeleteLen, giving it:
// statebackend.SizedWriter, so that a stub the cache evicted costs no
// read either):
//
//   - Get of a cached key returns the decoded value: no Pebble lookup, and
//     no decoding but a scalar's. As in the heap backend, the value given to Put is what Get
//     returns, so callers must treat values as immutable (the Table
//     contract).
//   - Put encodes at once (encoding errors surface where they happen and
//     SizeBytes stays exact) and marks the entry dirty; Delete marks it
//     absent and dirty. Neither touches Pebble.
//   - Eviction is CLOCK (second chance), in sweeps: once over budget, the
//     cache evicts until it is 1 MiB (a sixteenth of the budget if less)
//     below it (an evicted entry frees its key, value and decoded value;
//     its slot is reused by the next entry), or, once within the budget,
//     until its writes would fill a quarter of a memtable (Pebble makes a
//     larger batch a memtable of its own, which reads search apart), then
//     writes the sweep's dirty victims to the batch in key order and
//     commits it, so that reads need not look for them in the batch.
//   - Every operation that reads Pebble directly first writes all dirty
//     entries to the batch and commits it (they stay cached, clean): Keys
//     and map Range and Clear (before every page), ScanKeys, Snapshot,
//     Checkpoint/SnapshotFiles, Close and the codec check of a restored
//     table. Restore and MergeInto write around the cache, so they flush
//     and empty it first. Timers are not cached.
//   - Write-backs of 256 entries or more go to the batch in key order
//     (sorted by a 16-byte key prefix held beside each entry's slot, the
//     whole keys breaking ties), in a batch of their own: Pebble inserts
//     a sorted batch into the memtable's skiplist near the previous
//     insertion, and sorts a batch of half a memtable or more (a
//     checkpoint's write-back of a window's resident keys) in linear
//     time. Measured on running_count over 1 M keys, the memtable
//     insertions of eviction sweeps took half the CPU (0.44 s against
//     0.88 s) for 0.07 s of sorting; on q5 Pebble's sorting of large
//     batches fell from 0.97 s to 0.38 s of CPU over 10 checkpoints (what
//     is left sorts batches of timer deletions).
//
// Pebble's block cache sits below and holds blocks of keys the value cache
// missed: the backend's own (Options.CacheBytes, default 64 MiB), or one
// shared with other backends (Options.Cache). The value cache is per
// backend; a taskmanager sizes both from --state-cache-bytes (see package
// statebackend/backends).
//
// Errors Pebble reports in calls that cannot return one (Get, Put) are kept
// and returned by Err, Snapshot, Checkpoint and Close.
//
// # Snapshots and checkpoints
//
//   - Snapshot/Restore: full snapshots, one chunk per non-empty key group in
//     the format of statebackend/internal/chunk that the heap backend writes
//     too, so heap and Pebble snapshots restore into either backend, at any
//     parallelism.
//   - Snapshot leaves out what a table's Descriptor.SnapshotFilter drops
//     (expired TTL state); Checkpoint and SnapshotFiles, whose snapshots
//     are the database's files, cannot, so before each of them the backend
//     applies the filter to the live state of Options.SnapshotCleanupEntries
//     entries per such table (default 10,000), continuing where the last
//     one stopped: expired state leaves the database and the following
//     snapshots within ⌈entries/SnapshotCleanupEntries⌉ snapshots, without
//     a scan of the state per snapshot (filter.go).
//   - Checkpoint(dir): a Pebble checkpoint (hard links) after a flush; it
//     lists every file with size and SHA-256 and marks immutable sstables
//     as Shared (content-addressed, reference-counted by the storage layer)
//     and the rest (MANIFEST, OPTIONS, markers) as per-checkpoint.
//   - OpenFromCheckpoint: local recovery from such a directory into a
//     working directory, keeping only the owned key groups (DB.Excise,
//     which turns the sstables spanning a trimmed range into virtual
//     sstables without rewriting them, with DeleteRange as the fallback);
//     MergeInto adds the owned key groups of further checkpoint
//     directories (scale-in), rewriting table ids.
//
// # Incremental checkpoints: materialized checkpoint + changelog
//
// SnapshotFiles (statebackend.IncrementalSnapshotter) pairs a periodically
// materialized Pebble checkpoint with a changelog of the writes since. Once
// snapshots start, every write the backend makes to Pebble (puts and deletes
// of state, timers, the table registry and key-group sizes; the value cache's
// dirty entries reach Pebble, and so the changelog, before a snapshot) is also
// appended to a local changelog segment (changelog.go: header WEIRCL +
// version, then records of kind, uvarint-framed key and value). A snapshot is
//
//   - the last materialized Pebble checkpoint (its sstables, MANIFEST,
//     OPTIONS and marker files, kept hard-linked in Options.Dir/weir-changelog
//     until the next materialization), plus
//   - the changelog segments written since, changelog-<seq>.wcl with seq
//     from 1 in chain order, listed with size and SHA-256 in the
//     per-snapshot file WEIR-CHANGELOG (ChainFile).
//
// All files but WEIR-CHANGELOG are immutable and Shared, so storage keeps
// one copy per content hash and a checkpoint uploads only the segment
// closed since the previous one (about the changed bytes plus ~10 %
// framing and key overhead) — until the changelog since the last
// materialization reaches Options.MaterializeFactor (default 2) × the
// state's size (the larger of SizeBytes and the last materialized
// checkpoint's bytes). Then the snapshot materializes: it commits and
// flushes, takes a Pebble checkpoint and starts an empty chain; after
// compactions that uploads about the whole state once — somewhat more,
// as the sstables still hold overwritten values compaction has not yet
// dropped. The amortized upload is so about 1 + 1/MaterializeFactor of the
// changed bytes (measured at 1.1 GB of state, 1 % of the keys per
// checkpoint: 2.01 with factor 1.5), and a restore (OpenFromCheckpoint,
// MergeInto) replays at most MaterializeFactor × the state after opening
// the materialized checkpoint and trimming it to the owned key groups.
// The replay does not write the records through the memtable: each
// segment's size and SHA-256 are checked (a restore through the task
// runtime streams the segments from storage rather than downloading
// them: Options.FetchSegment), the records of owned key groups are
// partitioned by key-group range (spilled to files beyond
// Options.ReplayMemoryBytes, with O_DIRECT where it can: spill.go), each
// partition is sorted keeping the last record of every key, and the result
// is written to sstables that DB.Ingest adds in one step above the
// checkpoint's data (replay.go); a test checks that this leaves the same
// keys and values as replaying through the memtable, which took 66 s for
// 1.1 GB of state and 2.2 GB of changelog on 2 cores. Such a restore is
// bound by its writes to disk. Downloading the segments first, then
// spilling through the page cache wrote 6.7 GB and took 22-45 s in all on
// the test machine; streaming them cut that to 19-20 s; spilling past the
// page cache to 12 s, and reading the next spilled partition back while
// sorting one to 9.5 s (1.1 s of it the download). The first snapshot of a backend (new or restored) always
// materializes; a negative factor materializes at every snapshot (a plain
// Pebble checkpoint, no changelog). A backend that only takes full
// snapshots (Snapshot) never writes a changelog.
//
// # Compaction
//
// Pebble runs with its own compaction settings (L0 compacted at 2
// sublevels, Lbase with intermediate levels), a 4 MiB memtable and bloom
// filters (10 bits per key) on every level, which keep point reads fast.
// Earlier versions tuned compaction for small sstable-based incremental
// checkpoints instead (two levels, L0 compacted at 64 sublevels): that
// reached an amortized upload of ~2.8× the changed bytes at 112 MB of
// state and ~4.7× at 1.1 GB (compactions rewrite most sstables with
// uniformly spread updates), but made a read-modify-write with a deep L0
// ~17× slower (~250 µs against ~15 µs): the changelog gets a lower ratio
// without that cost. Options.Configure can still change the settings.
//
// Tombstone-density compactions (Pebble's default compacts an sstable
// once a tenth of its blocks are mostly tombstones) are off. State
// deletes all the time — fired windows and timers, expired TTL entries —
// and q5 (Nexmark, sliding windows) ran 25 of its 28 compactions for
// tombstones, rewriting its whole bottom level each time: 2.3 s of CPU in
// compactions against 1.35 s without them, for the same 1.2 MB of final
// state. The ordinary compactions (L0's read amplification, level sizes)
// still drop tombstones, and the backend's scans skip those they can:
// timer loads start after the last timer they read, Keys and map Range
// after the last key of the page before.
//
// pebblestate imports the standard library, stream, statebackend,
// statebackend/internal/chunk and Pebble.
package pebblestate
