// Package blob holds the definitions that package blobstore re-exports, so
// that its implementations (filestore, s3store) can use them while blobstore
// itself imports the implementations for Open. Nothing outside
// weir/blobstore should import it; use package blobstore instead.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	// Key is the object's key, relative to the store's root.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// ModTime is when the object was last written, as the store reports it.
	ModTime time.Time
}

// Store is a flat namespace of immutable-once-written byte objects. See
// package blobstore for the contract.
type Store interface {
	Put(ctx context.Context, key string, data []byte) error
	PutIfAbsent(ctx context.Context, key string, data []byte) (created bool, err error)
	Get(ctx context.Context, key string) ([]byte, error)
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	Delete(ctx context.Context, key string) error
}

// Streamer is implemented by a Store that can copy an object into a writer
// as it reads it, without holding the whole object in memory. See
// blobstore.GetTo.
type Streamer interface {
	GetTo(ctx context.Context, key string, w io.Writer) (int64, error)
}

// ErrNotFound is returned (wrapped) by Get for a key that has no object.
var ErrNotFound = errors.New("blobstore: object not found")

// ErrBadKey is returned (wrapped) for a key or prefix that breaks the key
// rules.
var ErrBadKey = errors.New("blobstore: invalid key")

// MaxKeyLen is the longest key accepted, in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidateKey reports whether key is a valid object key: non-empty UTF-8
// without NUL or backslash, '/'-separated, with no leading or trailing '/',
// no empty segment and no "." or ".." segment.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrBadKey)
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w %q: ends with '/'", ErrBadKey, key)
	}
	return validate(key, "key")
}

// ValidatePrefix reports whether prefix is a valid List prefix: empty, or a
// string that ValidateKey would accept, optionally followed by '/'.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validate(strings.TrimSuffix(prefix, "/"), "prefix")
}

func validate(s, what string) error {
	if len(s) > MaxKeyLen {
		return fmt.Errorf("%w: %s of %d bytes is longer than %d", ErrBadKey, what, len(s), MaxKeyLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w %q: %s is not valid UTF-8", ErrBadKey, s, what)
	}
	if strings.ContainsAny(s, "\x00\\") {
		return fmt.Errorf("%w %q: %s contains NUL or '\\'", ErrBadKey, s, what)
	}
	if s == "" || strings.HasPrefix(s, "/") {
		return fmt.Errorf("%w %q: %s must be a relative path (no leading '/')", ErrBadKey, s, what)
	}
	for seg := range strings.SplitSeq(s, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w %q: %s has an empty path segment", ErrBadKey, s, what)
		case ".", "..":
			return fmt.Errorf("%w %q: %s has a %q segment", ErrBadKey, s, what, seg)
		}
	}
	return nil
}
