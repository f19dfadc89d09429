package s3store_test

import (
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/blobstore/s3store"
	"github.com/weirstream/weir/security"
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

// certSet writes a development CA and its role certificates into a new
// directory and returns it.
func certSet(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := security.InitCerts(dir, security.CertOptions{}); err != nil {
		t.Fatalf("InitCerts: %v", err)
	}
	return dir
}

// startTLSGW starts versitygw serving https with a certificate from the
// set in dir.
func startTLSGW(t *testing.T, dir string) *blobstoretest.VersityGW {
	t.Helper()
	f := security.Files(dir, security.JobManagerFile)
	return blobstoretest.StartVersityGWServerTLS(t, blobstoretest.VersityGWTLS(f))
}

// TestConformanceTLS runs the blob-store suite against versitygw over
// https, trusting the CA that signed its certificate.
func TestConformanceTLS(t *testing.T) {
	gw := startTLSGW(t, certSet(t))
	if cfg := gw.S3Config(""); !cfg.Secure || cfg.CAFile == "" {
		t.Fatalf("S3Config of a TLS server = %+v, want Secure with a CA file", cfg)
	}
	blobstoretest.RunConformance(t, func(t *testing.T) blobstore.Store { return gw.NewS3Store(t) })
}

// TestTLSErrors: a client that does not trust the service's certificate,
// or speaks the wrong protocol, or names an unusable CA file, fails with
// an error naming the setting to fix.
func TestTLSErrors(t *testing.T) {
	dir, other := certSet(t), certSet(t)
	gw := startTLSGW(t, dir)
	plain := blobstoretest.StartVersityGWServer(t)
	missing := filepath.Join(t.TempDir(), "absent.pem")

	withCA := func(cfg s3store.Config, ca string) s3store.Config { cfg.CAFile = ca; return cfg }
	insecure := func(cfg s3store.Config) s3store.Config { cfg.Secure, cfg.CAFile = false, ""; return cfg }
	https := func(cfg s3store.Config, ca string) s3store.Config { cfg.Secure, cfg.CAFile = true, ca; return cfg }
	once := func(cfg s3store.Config) s3store.Config { cfg.MaxRetries = 1; return cfg }
	isCert := func(err error) bool { var ua x509.UnknownAuthorityError; return errors.As(err, &ua) }
	tests := []struct {
		name string
		cfg  s3store.Config
		kind func(error) bool // nil: a failure with no kind of its own
		want []string         // what the message names: the setting, the endpoint, the fix
		fast bool             // no retries: the failure cannot go away
	}{
		{"CA of another set", withCA(gw.S3Config(""), filepath.Join(other, security.CAFile)),
			isCert, []string{"not trusted", filepath.Join(other, security.CAFile), "WEIR_S3_CA_FILE", gw.Endpoint()}, true},
		{"system roots", withCA(gw.S3Config(""), ""),
			isCert, []string{"not trusted", "system's root CAs", "WEIR_S3_CA_FILE"}, true},
		{"plain http to https", once(insecure(gw.S3Config(""))),
			nil, []string{"http://" + gw.Endpoint(), "if it serves https, unset WEIR_S3_INSECURE"}, false},
		{"https to plain http", https(plain.S3Config(""), filepath.Join(dir, security.CAFile)),
			nil, []string{plain.Endpoint(), "WEIR_S3_INSECURE=true"}, true},
		{"CA file with plain http", withCA(insecure(gw.S3Config("")), filepath.Join(dir, security.CAFile)),
			nil, []string{"WEIR_S3_CA_FILE", "WEIR_S3_INSECURE=true", "unset one"}, true},
		{"missing CA file", withCA(gw.S3Config(""), missing),
			nil, []string{"WEIR_S3_CA_FILE", missing}, true},
		{"CA file not PEM", withCA(gw.S3Config(""), filepath.Join(dir, security.KeyFile(security.CAFile))),
			nil, []string{"WEIR_S3_CA_FILE", "holds no PEM certificate"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := s3store.New(t.Context(), tt.cfg)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
			if tt.kind != nil && !tt.kind(err) {
				t.Errorf("error is not of the expected kind")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q", w)
				}
			}
			if strings.Contains(err.Error(), tt.cfg.SecretKey) {
				t.Errorf("error shows the secret key")
			}
			// minio-go backs off for seconds over its ten tries.
			if d := time.Since(start); tt.fast && d > 2*time.Second {
				t.Errorf("New took %v: the failure was retried", d)
			}
		})
	}
}
