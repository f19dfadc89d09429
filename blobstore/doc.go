// Package blobstore owns the blob-store seam that checkpoint storage is
// written against: the small Store interface, its error sentinels and key
// rules. storeuri.Open turns a storage URI into a Store.
//
// Implementations live in subpackages: filestore (a local or shared file
// system, file:///abs/path) and s3store (any S3-compatible service,
// s3://bucket/prefix). NewMem is an in-memory fake for unit tests of the
// layers above. blobstoretest holds the conformance suite every
// implementation passes and a helper that starts a real versitygw S3
// server, over http or https.
//
// Keys are '/'-separated relative paths such as "job-1/chk-3/_manifest": no
// leading or trailing '/', no empty, "." or ".." segment, no NUL or '\',
// at most 1024 bytes. A store rejects other keys with an error wrapping
// ErrBadKey. A key must not also be a path prefix of another key ("a" and
// "a/b" cannot both exist): filestore cannot represent it.
//
// blobstore imports the standard library and its internal/blob; only
// s3store imports minio-go, and only storeuri imports s3store.
package blobstore
