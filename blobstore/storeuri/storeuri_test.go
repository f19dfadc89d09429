package storeuri_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/blobstore/filestore"
	"github.com/weirstream/weir/blobstore/s3store"
	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/security"
)

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	s, err := storeuri.Open(t.Context(), "file://"+dir+"/sub")
	if err != nil {
		t.Fatal(err)
	}
	fs, ok := s.(*filestore.Store)
	if !ok || fs.Root() != dir+"/sub" {
		t.Fatalf("Open(file://%s/sub) = %T %v, want a filestore rooted there", dir, s, s)
	}
}

func TestOpenS3(t *testing.T) {
	endpoint, access, secret := blobstoretest.StartVersityGW(t)
	t.Setenv(blobstore.EnvS3Endpoint, endpoint)
	t.Setenv(blobstore.EnvS3AccessKey, access)
	t.Setenv(blobstore.EnvS3SecretKey, secret)
	t.Setenv(blobstore.EnvS3Insecure, "true")
	t.Setenv(blobstore.EnvS3CAFile, "")
	s, err := storeuri.Open(t.Context(), "s3://"+blobstoretest.VersityBucket+"/some/prefix")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(t.Context(), "k")
	if err != nil || string(got) != "v" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// The prefix is honoured: a store on the bucket root sees the key under it.
	root, err := storeuri.Open(t.Context(), "s3://"+blobstoretest.VersityBucket)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := root.List(t.Context(), "")
	if err != nil || len(infos) != 1 || infos[0].Key != "some/prefix/k" {
		t.Fatalf("List on the bucket root = %+v, %v; want [some/prefix/k]", infos, err)
	}

	_, err = storeuri.Open(t.Context(), "s3://no-such-bucket/x")
	if !errors.Is(err, s3store.ErrNoSuchBucket) || !strings.Contains(err.Error(), "no-such-bucket") || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("Open(missing bucket) = %v; want s3store.ErrNoSuchBucket naming bucket and endpoint and saying to create it", err)
	}
}

// TestOpenS3TLS: WEIR_S3_CA_FILE makes s3:// stores trust an https
// service whose certificate a private CA signed; without it the error
// names the variable.
func TestOpenS3TLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := security.InitCerts(dir, security.CertOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := blobstoretest.StartVersityGWServerTLS(t, blobstoretest.VersityGWTLS(security.Files(dir, security.JobManagerFile)))
	t.Setenv(blobstore.EnvS3Endpoint, gw.Endpoint())
	t.Setenv(blobstore.EnvS3AccessKey, gw.AccessKey)
	t.Setenv(blobstore.EnvS3SecretKey, gw.SecretKey)
	t.Setenv(blobstore.EnvS3Insecure, "")
	uri := "s3://" + blobstoretest.VersityBucket + "/tls"

	t.Setenv(blobstore.EnvS3CAFile, "")
	if _, err := storeuri.Open(t.Context(), uri); err == nil || !strings.Contains(err.Error(), blobstore.EnvS3CAFile) {
		t.Fatalf("Open without %s = %v, want an error naming it", blobstore.EnvS3CAFile, err)
	}

	t.Setenv(blobstore.EnvS3CAFile, filepath.Join(dir, security.CAFile))
	s, err := storeuri.Open(t.Context(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(t.Context(), "k"); err != nil || string(got) != "v" {
		t.Fatalf("Get over https = %q, %v", got, err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Setenv(blobstore.EnvS3Endpoint, "")
	tests := []struct {
		uri  string
		want []string
	}{
		{"gs://bucket/x", []string{`unsupported scheme "gs"`, "file:///abs/path", "s3://bucket/prefix"}},
		{"/just/a/path", []string{"no scheme", "file:///abs/path", "s3://bucket/prefix"}},
		{"file://relative/path", []string{"three slashes"}},
		{"s3:///prefix", []string{"missing bucket"}},
		{"s3://bucket/prefix", []string{blobstore.EnvS3Endpoint, "is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.uri, func(t *testing.T) {
			_, err := storeuri.Open(context.Background(), tt.uri)
			if err == nil {
				t.Fatalf("Open(%q) succeeded, want an error", tt.uri)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open(%q) error %q does not contain %q", tt.uri, err, w)
				}
			}
		})
	}
}
