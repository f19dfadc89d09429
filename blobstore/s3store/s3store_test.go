package s3store_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/blobstore/s3store"
)

// TestConformance runs the blob-store suite against a real S3 server
// (versitygw on loopback).
func TestConformance(t *testing.T) {
	endpoint, access, secret := blobstoretest.StartVersityGW(t)
	blobstoretest.RunConformance(t, func(t *testing.T) blobstore.Store {
		return blobstoretest.NewS3Store(t, endpoint, access, secret)
	})
}

func TestNewErrors(t *testing.T) {
	endpoint, access, secret := blobstoretest.StartVersityGW(t)

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	isNet := func(err error) bool { var ne net.Error; return errors.As(err, &ne) }
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	tests := []struct {
		name string
		cfg  s3store.Config
		kind func(error) bool // nil: a failure with no kind of its own
		want []string         // what the message names: the setting, the endpoint, the fix
	}{
		{"missing bucket", s3store.Config{Endpoint: endpoint, AccessKey: access, SecretKey: secret, Bucket: "absent"},
			is(s3store.ErrNoSuchBucket), []string{`bucket "absent"`, endpoint, "create it"}},
		{"wrong secret", s3store.Config{Endpoint: endpoint, AccessKey: access, SecretKey: "wrong", Bucket: blobstoretest.VersityBucket},
			nil, []string{"access denied", endpoint, "secret key"}},
		{"unreachable", s3store.Config{Endpoint: closed, AccessKey: access, SecretKey: secret, Bucket: blobstoretest.VersityBucket, MaxRetries: 1},
			isNet, []string{closed, blobstoretest.VersityBucket, "endpoint"}},
		{"no endpoint", s3store.Config{Bucket: "bucket"}, nil, []string{"endpoint is empty"}},
		{"scheme in endpoint", s3store.Config{Endpoint: "http://h:1", Bucket: "bucket"}, nil, []string{"without a scheme"}},
		{"bad bucket name", s3store.Config{Endpoint: endpoint, Bucket: "b"}, nil, []string{`bucket "b"`}},
		{"bad prefix", s3store.Config{Endpoint: endpoint, Bucket: "bucket", Prefix: "a//b"}, is(blobstore.ErrBadKey), []string{"prefix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := s3store.New(t.Context(), tt.cfg)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			if tt.kind != nil && !tt.kind(err) {
				t.Errorf("error %v is not of the expected kind", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			t.Logf("%v (after %v)", err, time.Since(start))
		})
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	endpoint, access, secret := blobstoretest.StartVersityGW(t)
	s := blobstoretest.NewS3Store(t, endpoint, access, secret)
	_, err := s.Get(t.Context(), "job-7/chk-3/_manifest")
	if !errors.Is(err, blobstore.ErrNotFound) || !strings.Contains(err.Error(), "job-7/chk-3/_manifest") {
		t.Fatalf("Get(missing) = %v, want ErrNotFound naming the key", err)
	}
}
