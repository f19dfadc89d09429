// Package checkpoint owns how checkpoints are laid out in checkpoint storage
// and the formats of what is stored there: operator snapshot blobs,
// manifests and the completed-checkpoint pointer. It reads and writes them
// through a blobstore.Store; it does not decide when checkpoints are taken
// (package coordinator) nor how operators produce state (statebackend,
// dataflow).
//
// # Layout
//
// Keys are relative to the storage root (file:///path or s3://bucket/prefix):
//
//	<job-id>/chk-<n>/<operator-uid>/<subtask>-a<attempt>   one operator subtask's snapshot
//	<job-id>/chk-<n>/_manifest                             the manifest (weirpb.Manifest, version 1)
//	<job-id>/_completed                                    the latest completed checkpoint (weirpb.CompletedPointer)
//
// The attempt in a snapshot's name keeps a restarted task's upload from
// overwriting one that an earlier attempt may still be writing. A checkpoint
// is complete once its manifest exists; snapshot objects without a manifest
// belong to checkpoints that were aborted or are still in progress.
//
// # Snapshot format, version 1
//
// A snapshot blob holds one stream.OperatorSnapshot. Integers marked u32/u64
// are little-endian fixed width; uvarint is encoding/binary's unsigned varint.
//
//	header      "WEIRSNAP"  8 bytes, magic
//	            u32         format version (1)
//	            u32         K, the number of key groups with keyed state
//	            u64         D, the length of the keyed data region
//	key index   K entries of 24 bytes, key groups strictly ascending:
//	              u32 key group, u32 chunk count,
//	              u64 offset (from the start of the keyed data region), u64 length
//	keyed data  D bytes; each index entry's region is its chunks in order,
//	            each chunk a uvarint length then that many bytes
//	list state  uvarint count of names, then per name (strictly ascending):
//	              uvarint name length, name, uvarint item count,
//	              items (uvarint length then bytes each)
//	union state the same layout as list state
//	trailer     u32 CRC-32C (Castagnoli) of every byte before it
//
// The index lets a reader decode only the key groups it owns and skip the
// rest. Encoding is deterministic: the same snapshot always gives the same
// bytes. A reader rejects an unknown version, a bad checksum, and any length
// or offset that does not fit; decoding never panics on corrupt input.
//
// # Manifest encoding
//
// A manifest is the protobuf encoding of weirpb.Manifest, byte for byte
// what proto.MarshalOptions{Deterministic: true} writes, so that any
// protobuf reader reads it. WriteManifest encodes it with a specialised
// encoder (encode.go), which costs a fraction of the generic marshaller
// at a wide job's 40,000 messages and reuses its buffer from one
// checkpoint to the next; a test checks that it knows every field of the
// manifest messages (should one be added without it, the generic
// marshaller takes over) and that both write the same bytes.
//
// Besides the CRC inside the blob, every StateHandle records the object's
// size and SHA-256, which LoadOperatorState checks before decoding, so that a
// modified, truncated or missing object fails the restore with an error
// naming the object instead of restoring wrong state.
//
// checkpoint imports blobstore, stream, proto/weirpb, internal/errkind,
// golang.org/x/sync and protobuf.
package checkpoint
