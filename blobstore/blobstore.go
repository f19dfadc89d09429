package blobstore

import (
	"context"
	"io"

	"github.com/weirstream/weir/blobstore/internal/blob"
)

// ObjectInfo describes one stored object: Key (relative to the store's
// root), Size in bytes and ModTime as the store reports it.
type ObjectInfo = blob.ObjectInfo

// Store is a namespace of byte objects addressed by key.
//
// All methods are safe for concurrent use by any number of goroutines. A
// store never keeps or modifies the data slice passed to Put or
// PutIfAbsent after the call returns, and the slice Get returns belongs to
// the caller.
//
//   - Put writes the object atomically: a concurrent or later Get sees the
//     old object or the whole new one, never a mix or a prefix.
//   - PutIfAbsent writes the object only if key has none, atomically with
//     respect to other PutIfAbsent calls; created reports whether it wrote.
//   - Get returns the object's bytes, or an error wrapping ErrNotFound.
//   - List returns every object whose key starts with prefix (a plain string
//     prefix, as in S3: "chk-1" matches "chk-10/x"; end it with '/' to list
//     one "directory"), recursively, sorted by key. An empty prefix lists the
//     whole store.
//   - Delete removes the object; deleting a missing key is not an error.
//
// Every method checks ctx and returns ctx.Err() (wrapped) once it is done.
// Errors name the object's key.
type Store = blob.Store

// Streamer is implemented by a Store that can copy an object into a
// writer as it reads it (s3store, filestore): GetTo writes the object at
// key to w and returns the bytes written; it fails as Get does, and also
// with w's error. Use the function GetTo, which falls back to Get.
type Streamer = blob.Streamer

// GetTo writes the object at key to w, a buffer at a time if s is a
// Streamer, else read whole with Get, and returns the bytes written. A
// caller that writes the object to a file this way never holds it whole,
// which matters for objects of hundreds of megabytes read many at once (a
// restore's sstables).
func GetTo(ctx context.Context, s Store, key string, w io.Writer) (int64, error) {
	if st, ok := s.(Streamer); ok {
		return st.GetTo(ctx, key, w)
	}
	data, err := s.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(data)
	return int64(n), err
}

// ErrNotFound is wrapped by errors for keys that have no object; test with
// errors.Is.
var ErrNotFound = blob.ErrNotFound

// ErrBadKey is wrapped by errors for keys or prefixes that break the key
// rules in the package documentation.
var ErrBadKey = blob.ErrBadKey

// ValidateKey returns an error wrapping ErrBadKey if key is not a valid
// object key.
func ValidateKey(key string) error { return blob.ValidateKey(key) }

// Environment variables that configure s3:// stores in storeuri.Open.
const (
	EnvS3Endpoint  = "WEIR_S3_ENDPOINT"   // host:port, required
	EnvS3AccessKey = "WEIR_S3_ACCESS_KEY" // required unless the service allows anonymous access
	EnvS3SecretKey = "WEIR_S3_SECRET_KEY"
	EnvS3Region    = "WEIR_S3_REGION"   // default us-east-1
	EnvS3Insecure  = "WEIR_S3_INSECURE" // "true" for plain http
	// EnvS3CAFile names a PEM file of the CA certificates that the
	// service's https certificate must chain to, in place of the system's
	// roots; not with EnvS3Insecure.
	EnvS3CAFile = "WEIR_S3_CA_FILE"
)

// ValidatePrefix returns an error wrapping ErrBadKey if prefix is not a
// valid List prefix: empty, or a valid key optionally followed by '/'.
func ValidatePrefix(prefix string) error { return blob.ValidatePrefix(prefix) }
