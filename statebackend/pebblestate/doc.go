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
//	          → empty
//	meta    0xff 0xff 'v'                → layout version (1 byte, 1)
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
// marker 0x00 never collides with a table id. Key group 0xffff is reserved
// for metadata: a backend owns key groups up to MaxKeyGroup.
//
// # Timers
//
// Within a key group the timer keys iterate in (timestamp, key) order.
// Across key groups an in-memory min-heap holds, per key group that may have
// timers, a lower bound of its smallest timestamp; firing takes the top key
// group, seeks its first timer and fires it if it matches the bound. Timers
// fire in (timestamp, key group, key) order, as in the heap backend. See
// timers.go.
//
// # Writes and reads
//
// Table reads and writes go through a write-back value cache (below); the
// cache, timers, restores and merges write to an indexed Pebble batch that is
// committed every Options.WriteBatchBytes and before Snapshot, Checkpoint
// and Close. No Pebble iterator is open while user code runs (Keys, map Range
// and timer firing read a page at a time), so callbacks may change state.
// The WAL is disabled: state survives a crash only through checkpoints.
//
// # Write-back value cache
//
// In front of the batch sits a cache of state values, bounded by
// Options.ValueCacheBytes (default 32 MiB; counted as key bytes + encoded
// value bytes + about 128 bytes per entry, decoded values not counted). It
// is keyed by the full state key, so all tables share the budget. An entry
// holds the key's encoded value, its decoded value once a Get or Put has
// seen it, or the fact that the key has no value (so a first-seen key costs
// one Pebble lookup, not one per access):
//
//   - Get of a cached key returns the decoded value: no Pebble lookup, no
//     decoding. As in the heap backend, the value given to Put is what Get
//     returns, so callers must treat values as immutable (the Table
//     contract).
//   - Put encodes at once (encoding errors surface where they happen and
//     SizeBytes stays exact) and marks the entry dirty; Delete marks it
//     absent and dirty. Neither touches Pebble.
//   - Eviction is CLOCK (second chance). An evicted dirty entry is written
//     to the batch first.
//   - Every operation that reads Pebble directly first writes all dirty
//     entries to the batch (they stay cached, clean): Keys and map Range and
//     Clear (before every page), Snapshot, Checkpoint/SnapshotFiles, Close
//     and the codec check of a restored table. Restore and MergeInto write
//     around the cache, so they flush and empty it first. Timers are not
//     cached.
//
// Pebble's block cache (Options.CacheBytes, default 64 MiB) sits below and
// holds compressed blocks of keys the value cache missed. Both are per
// backend; a taskmanager sizes them from --state-cache-bytes (see package
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
//   - Checkpoint(dir): a Pebble checkpoint (hard links) after a flush; it
//     lists every file with size and SHA-256 and marks immutable sstables
//     as Shared (content-addressed, reference-counted by the storage layer)
//     and the rest (MANIFEST, OPTIONS, markers) as per-checkpoint.
//   - OpenFromCheckpoint: local recovery from such a directory into a
//     working directory, keeping only the owned key groups (DB.Excise, with
//     DeleteRange as the fallback); MergeInto adds the owned key groups of
//     further checkpoint directories (scale-in), rewriting table ids.
//
// # Compaction and incremental checkpoints
//
// An incremental checkpoint uploads every sstable the previous checkpoint
// did not have, so it costs what flushes and compactions wrote since then,
// not what the application changed. With keys updated uniformly at random
// each flushed L0 file spans the whole key space, and any compaction from
// L0 (or an intermediate level) into a level rewrites all of that level.
// With Pebble's defaults (compact L0 at 2 sublevels, Lbase of 64 MB with
// intermediate levels, read-triggered compactions on) a checkpoint after
// 1 % of 1M keys changed uploaded ~45× the changed bytes.
//
// openDB therefore shapes the LSM for checkpoints:
//
//   - One sublevel per checkpoint: Checkpoint flushes the memtable, and the
//     32 MiB default memtable (Options.MemTableBytes) holds what a
//     checkpoint interval usually writes, so no flush happens in between.
//   - Two levels: LBaseMaxBytes is 2^50, so L0 is compacted straight into
//     the bottom level, and a byte is rewritten once per L0 compaction,
//     not once more per intermediate level (each of which adds about its
//     fan-out, 10, to the ratio).
//   - L0 compacted every ~T = 64 sublevels: Pebble's L0 score is
//     2 × sublevels ÷ L0CompactionThreshold, which is 128. Writes stop at
//     256 sublevels. Read-triggered compactions are off (the backend reads
//     each key it writes, which made Pebble rewrite files merely for being
//     read).
//
// A checkpoint then uploads one flushed file, ~1.15× the changed bytes,
// and one in T uploads the rewritten bottom level, the whole state. The
// amortized ratio is about 1.15 + state ÷ (T × changed per checkpoint):
// 1.15 + 100/64 ≈ 2.7 at 1 % per checkpoint (test/bench
// BenchmarkIncrementalCheckpoint1GB prints it, the p50 and the compactions
// in its window). Below ~2 needs T ≥ 128 or a different design (a
// changelog of state changes uploaded per checkpoint and materialized
// periodically, as Flink's changelog state backend does).
//
// The costs: a point read consults every L0 file that spans its key, up
// to T of them, and although bloom filters (10 bits per key on every
// level) keep most of those lookups off the disk, each costs an iterator:
// BenchmarkValueStateGetUpdateAfterCheckpoints measured ~250 µs per
// read-modify-write with ~60 sublevels against ~15 µs compacted (1M keys,
// a busy 2-core machine), so read-heavy jobs pay for small checkpoints
// with up to an order of magnitude slower state access just before each
// L0 compaction; a scan merges all L0 files; disk space up to ~2× the state (L0 holds up to T checkpoints of
// overwritten values, and a compaction briefly needs a second copy of the
// bottom level); and the checkpoint after a compaction uploads the whole
// state. Options.Configure can restore Pebble's thresholds for read-heavy
// jobs with rare checkpoints, and state: {incremental: false}
// (stream.StateConfig.FullSnapshots) avoids shared files altogether by
// taking full canonical snapshots.
//
// pebblestate imports the standard library, stream, statebackend,
// statebackend/internal/chunk and Pebble.
package pebblestate
