// Package storeuri opens the blob store a storage URI names: file:///abs/path
// (filestore) or s3://bucket/prefix (s3store, configured from the WEIR_S3_*
// environment variables). It is apart from package blobstore so that the
// interface does not link the S3 client.
//
// storeuri imports blobstore, its filestore and s3store, and the standard
// library.
package storeuri

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/filestore"
	"github.com/weirstream/weir/blobstore/s3store"
)

// Open returns the store that uri names:
//
//   - file:///abs/path — a filestore rooted at /abs/path (created if
//     missing);
//   - s3://bucket/prefix — an s3store on an existing bucket, with the
//     endpoint, credentials and region taken from the WEIR_S3_* environment
//     variables (see blobstore.EnvS3Endpoint and the others). Open checks that the
//     bucket can be reached.
func Open(ctx context.Context, uri string) (blobstore.Store, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("blobstore: storage URI %q: %v; want file:///abs/path or s3://bucket/prefix", uri, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("blobstore: storage URI %q: file URIs take no host; write file:///abs/path (three slashes)", uri)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("blobstore: storage URI %q: the path must be absolute, as in file:///var/lib/weir/checkpoints", uri)
		}
		return filestore.New(filepath.Clean(u.Path))
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("blobstore: storage URI %q: missing bucket; write s3://bucket/prefix", uri)
		}
		cfg := s3store.Config{
			Endpoint:  os.Getenv(blobstore.EnvS3Endpoint),
			AccessKey: os.Getenv(blobstore.EnvS3AccessKey),
			SecretKey: os.Getenv(blobstore.EnvS3SecretKey),
			Region:    os.Getenv(blobstore.EnvS3Region),
			Bucket:    u.Host,
			Prefix:    strings.Trim(u.Path, "/"),
			Secure:    !strings.EqualFold(os.Getenv(blobstore.EnvS3Insecure), "true"),
			CAFile:    os.Getenv(blobstore.EnvS3CAFile),
		}
		if cfg.Endpoint == "" {
			return nil, fmt.Errorf("blobstore: storage URI %q: %s is not set; set it to the S3 service's host:port (and %s, %s, optionally %s, %s=true for http, or %s for https with a private CA)",
				uri, blobstore.EnvS3Endpoint, blobstore.EnvS3AccessKey, blobstore.EnvS3SecretKey, blobstore.EnvS3Region, blobstore.EnvS3Insecure, blobstore.EnvS3CAFile)
		}
		return s3store.New(ctx, cfg)
	case "":
		return nil, fmt.Errorf("blobstore: storage URI %q has no scheme; supported: file:///abs/path, s3://bucket/prefix", uri)
	default:
		return nil, fmt.Errorf("blobstore: storage URI %q: unsupported scheme %q; supported: file:///abs/path, s3://bucket/prefix", uri, u.Scheme)
	}
}
