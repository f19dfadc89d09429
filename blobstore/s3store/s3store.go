// Package s3store is the blobstore.Store on an S3-compatible object service
// (s3:// storage URIs), through github.com/minio/minio-go/v7. It is the only
// Weir package that imports minio-go.
//
// Objects live in one existing bucket under an optional key prefix. New
// creates nothing: it checks that the bucket can be reached and exists.
// S3 PUTs are atomic, so Put needs no temporary object. PutIfAbsent sends a
// conditional PUT (If-None-Match: *), which AWS S3, MinIO and versitygw
// honour atomically; a service that ignores the header would make it an
// unconditional Put.
//
// Config.Secure selects https; Config.CAFile then names the CA that signed
// the service's certificate when it is not one of the system's roots.
// minio-go's own HTTP transport is used either way, with only the roots
// changed and retries of an untrusted certificate cut short.
//
// s3store imports the standard library, minio-go and
// blobstore/internal/blob.
package s3store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/weirstream/weir/blobstore/internal/blob"
	"github.com/weirstream/weir/internal/errkind"
)

// ErrNoSuchBucket is wrapped by the error of New when the bucket does not
// exist at the endpoint. Stores never create buckets; MakeBucket does.
var ErrNoSuchBucket = errors.New("s3store: no such bucket")

// Config says where the store's objects are.
type Config struct {
	// Endpoint is the service's host:port, e.g. "s3.amazonaws.com" or
	// "127.0.0.1:7070". Required.
	Endpoint string
	// AccessKey and SecretKey are the static credentials; both empty means
	// anonymous access.
	AccessKey string
	SecretKey string
	// Region is the bucket's region. Default "us-east-1".
	Region string
	// Bucket is the existing bucket that holds the objects. Required.
	Bucket string
	// Prefix is prepended (with a '/') to every key; empty for none. It
	// follows the blobstore key rules.
	Prefix string
	// Secure selects https; false means plain http.
	Secure bool
	// CAFile is a PEM file of the CA certificates the service's
	// certificate must chain to, in place of the system's roots: for a
	// service whose certificate a private CA signed. Empty means the
	// system's roots. Only with Secure. Validate and New read it; the
	// service's certificate must also name the Endpoint's host.
	CAFile string
	// MaxRetries is how many times a failed request is tried in total.
	// Default 10; 1 disables retries.
	MaxRetries int
}

// DefaultConfig returns a Config with the defaults filled in and the
// required fields empty.
func DefaultConfig() Config {
	return Config{Region: "us-east-1", Secure: true, MaxRetries: 10}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Endpoint == "":
		return errors.New("s3store: endpoint is empty; set it to the S3 service's host:port")
	case strings.Contains(c.Endpoint, "://"):
		return fmt.Errorf("s3store: endpoint %q: give host:port without a scheme (Secure selects https)", c.Endpoint)
	case c.Bucket == "":
		return errors.New("s3store: bucket is empty; name an existing bucket, as in s3://bucket/prefix")
	case (c.AccessKey == "") != (c.SecretKey == ""):
		return errors.New("s3store: set both the access key and the secret key, or neither")
	case c.MaxRetries < 0:
		return fmt.Errorf("s3store: MaxRetries %d: must not be negative", c.MaxRetries)
	case c.CAFile != "" && !c.Secure:
		return fmt.Errorf("s3store: a CA file (%s, WEIR_S3_CA_FILE) is set for plain http (WEIR_S3_INSECURE=true), which checks no certificate; unset one of them", c.CAFile)
	}
	if c.CAFile != "" {
		if _, err := loadCA(c.CAFile); err != nil {
			return err
		}
	}
	if err := s3utils.CheckValidBucketName(c.Bucket); err != nil {
		return fmt.Errorf("s3store: bucket %q: %v", c.Bucket, err)
	}
	if err := blob.ValidatePrefix(c.Prefix); err != nil {
		return fmt.Errorf("s3store: prefix: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 10
	}
	c.Prefix = strings.Trim(c.Prefix, "/")
	return c
}

func (c Config) scheme() string {
	if c.Secure {
		return "https"
	}
	return "http"
}

// Store is a blobstore.Store on an S3 bucket. It is safe for concurrent use.
type Store struct {
	cfg    Config
	client *minio.Client
	prefix string // cfg.Prefix + "/", or "" for none
}

var _ blob.Store = (*Store)(nil)

// maxCABytes bounds the CA file: anything larger is not a few PEM
// certificates but a wrong path.
const maxCABytes = 1 << 20

// loadCA reads the CA file into a pool.
func loadCA(path string) (*x509.CertPool, error) {
	const fix = "give the PEM certificate of the CA that signed the S3 service's certificate"
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("s3store: CA file (WEIR_S3_CA_FILE): %w; %s", err, fix)
	}
	defer f.Close()
	pem, err := io.ReadAll(io.LimitReader(f, maxCABytes+1))
	if err != nil {
		return nil, fmt.Errorf("s3store: CA file (WEIR_S3_CA_FILE) %s: %w", path, err)
	}
	if len(pem) > maxCABytes {
		return nil, fmt.Errorf("s3store: CA file (WEIR_S3_CA_FILE) %s is larger than %d bytes; is it the right file? %s", path, maxCABytes, fix)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("s3store: CA file (WEIR_S3_CA_FILE) %s holds no PEM certificate; %s", path, fix)
	}
	return pool, nil
}

func newClient(cfg Config) (*minio.Client, error) {
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{})
	}
	opts := &minio.Options{
		Creds:        creds,
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   cfg.MaxRetries,
	}
	if cfg.Secure {
		// minio-go's own transport, so that only the roots (and the
		// retries of an untrusted certificate) differ.
		tr, err := minio.DefaultTransport(true)
		if err != nil {
			return nil, fmt.Errorf("s3store: endpoint %q: %w", cfg.Endpoint, err)
		}
		if cfg.CAFile != "" {
			pool, err := loadCA(cfg.CAFile)
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig.RootCAs = pool
		}
		opts.Transport = untrustedFailsFast{tr}
	}
	client, err := minio.New(cfg.Endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("s3store: endpoint %q: %w", cfg.Endpoint, err)
	}
	return client, nil
}

// New returns a store on cfg.Bucket after checking that the bucket exists
// and is reachable with the credentials; the error otherwise names the
// endpoint and bucket and says what to fix. It wraps ErrNoSuchBucket for a
// missing bucket, and the network error (a net.Error) for an endpoint it
// cannot reach.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, client: client}
	if cfg.Prefix != "" {
		s.prefix = cfg.Prefix + "/"
	}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, s.describeBucketError(err)
	}
	if !ok {
		return nil, errkind.Mark(fmt.Errorf("s3store: bucket %q does not exist at endpoint %s://%s; create it first (for example `aws --endpoint-url %s://%s s3 mb s3://%s`) or fix the bucket name in the storage URI",
			cfg.Bucket, cfg.scheme(), cfg.Endpoint, cfg.scheme(), cfg.Endpoint, cfg.Bucket), ErrNoSuchBucket)
	}
	return s, nil
}

func (s *Store) describeBucketError(err error) error {
	c := s.cfg
	where := fmt.Sprintf("bucket %q at endpoint %s://%s", c.Bucket, c.scheme(), c.Endpoint)
	var netErr net.Error
	switch code := minio.ToErrorResponse(err).Code; {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("s3store: checking %s: %w", where, err)
	case code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
		minio.ToErrorResponse(err).StatusCode == http.StatusForbidden:
		return fmt.Errorf("s3store: checking %s: access denied (%v); check the access key and secret key (WEIR_S3_ACCESS_KEY, WEIR_S3_SECRET_KEY) and the bucket's policy", where, err)
	case isCertificateError(err):
		roots := "the system's root CAs"
		if c.CAFile != "" {
			roots = "the CA file " + c.CAFile
		}
		return fmt.Errorf("s3store: checking %s: the service's TLS certificate is not trusted (checked against %s): %w; set WEIR_S3_CA_FILE to the PEM file of the CA that signed it, and make sure the certificate names the endpoint's host",
			where, roots, err)
	case errors.As(err, &netErr) && c.Secure:
		return fmt.Errorf("s3store: cannot reach %s: %w; check that the endpoint (WEIR_S3_ENDPOINT, host:port) is right and the service is running, and set WEIR_S3_INSECURE=true if it serves plain http", where, err)
	case errors.As(err, &netErr):
		return fmt.Errorf("s3store: cannot reach %s: %w; check that the endpoint (WEIR_S3_ENDPOINT, host:port) is right and the service is running; if it serves https, unset WEIR_S3_INSECURE (and set WEIR_S3_CA_FILE if a private CA signed its certificate)", where, err)
	default:
		return fmt.Errorf("s3store: checking %s: %w", where, err)
	}
}

// untrustedFailsFast ends minio-go's retries of a request whose TLS
// handshake failed because the service's certificate is from an unknown
// CA: retrying cannot change the certificate, and ten tries with back-off
// only delay the error by seconds. minio-go stops retrying when the
// transport returns an x509.UnknownAuthorityError, but the standard
// library wraps it in a *tls.CertificateVerificationError, which minio-go
// does not look into; so it is returned unwrapped.
type untrustedFailsFast struct{ http.RoundTripper }

func (t untrustedFailsFast) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	var unknown x509.UnknownAuthorityError
	if err != nil && errors.As(err, &unknown) {
		return nil, unknown
	}
	return resp, err
}

// isCertificateError reports whether err is this client's refusal of the
// service's certificate.
func isCertificateError(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// MakeBucket creates cfg.Bucket. Stores never create buckets themselves;
// this is for test harnesses and setup tools.
func MakeBucket(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	client, err := newClient(cfg)
	if err != nil {
		return err
	}
	if err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
		return fmt.Errorf("s3store: make bucket %q at endpoint %s://%s: %w", cfg.Bucket, cfg.scheme(), cfg.Endpoint, err)
	}
	return nil
}

func (s *Store) String() string {
	return "s3://" + s.cfg.Bucket + "/" + s.cfg.Prefix
}

// object checks ctx and key and returns the S3 object name.
func (s *Store) object(ctx context.Context, op, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("s3store: %s %q: %w", op, key, err)
	}
	if err := blob.ValidateKey(key); err != nil {
		return "", fmt.Errorf("s3store: %s: %w", op, err)
	}
	return s.prefix + key, nil
}

func (s *Store) errorf(op, key string, err error) error {
	return fmt.Errorf("s3store: %s %q in s3://%s/%s: %w", op, key, s.cfg.Bucket, s.prefix, err)
}

// Put implements blobstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	name, err := s.object(ctx, "put", key)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, s.cfg.Bucket, name, newReader(data), int64(len(data)), s.putOptions())
	if err != nil {
		return s.errorf("put", key, err)
	}
	return nil
}

func (s *Store) putOptions() minio.PutObjectOptions {
	// One PUT up to 5 GiB: the data is in memory anyway, and a single PUT
	// keeps conditional writes simple.
	return minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
}

// newReader returns a reader over data that minio-go may seek for retries.
func newReader(data []byte) io.Reader { return bytes.NewReader(data) }

// PutIfAbsent implements blobstore.Store with a conditional PUT
// (If-None-Match: *).
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	name, err := s.object(ctx, "put", key)
	if err != nil {
		return false, err
	}
	opts := s.putOptions()
	opts.SetMatchETagExcept("*")
	for attempt := 0; ; attempt++ {
		_, err = s.client.PutObject(ctx, s.cfg.Bucket, name, newReader(data), int64(len(data)), opts)
		if err == nil {
			return true, nil
		}
		resp := minio.ToErrorResponse(err)
		switch {
		case resp.Code == "PreconditionFailed" || resp.StatusCode == http.StatusPreconditionFailed:
			return false, nil
		case resp.StatusCode == http.StatusConflict && attempt < 5 && ctx.Err() == nil:
			// ConditionalRequestConflict: a concurrent conditional write is
			// in flight; try again, and one of the writers then wins.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
			}
			continue
		}
		return false, s.errorf("put", key, err)
	}
}

func isNotFound(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket"
}

// Get implements blobstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	body, info, err := s.open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	if info.Size < 0 {
		return nil, s.errorf("get", key, fmt.Errorf("server reported size %d", info.Size))
	}
	data := make([]byte, info.Size)
	if _, err := io.ReadFull(body, data); err != nil {
		return nil, s.errorf("get", key, err)
	}
	return data, nil
}

// open sends the GET of Get and GetTo and returns the body to read. One
// GET: the lazy minio.Object would issue further conditional requests that
// fail when the object is overwritten meanwhile.
func (s *Store) open(ctx context.Context, key string) (io.ReadCloser, minio.ObjectInfo, error) {
	name, err := s.object(ctx, "get", key)
	if err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.cfg.Bucket, name, minio.GetObjectOptions{})
	if err != nil {
		if isNotFound(err) {
			return nil, info, s.errorf("get", key, blob.ErrNotFound)
		}
		return nil, info, s.errorf("get", key, err)
	}
	return body, info, nil
}

// GetTo implements blobstore.Streamer: one GET, its body copied to w a
// buffer at a time.
func (s *Store) GetTo(ctx context.Context, key string, w io.Writer) (int64, error) {
	body, info, err := s.open(ctx, key)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	n, err := io.CopyBuffer(w, io.LimitReader(body, info.Size), *buf)
	if err == nil && n != info.Size {
		err = fmt.Errorf("%d of the %d bytes the server announced: %w", n, info.Size, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return n, s.errorf("get", key, err)
	}
	return n, nil
}

// copyBuffers are GetTo's buffers.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// List implements blobstore.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("s3store: list %q: %w", prefix, err)
	}
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("s3store: list: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the lister goroutine if we return early
	var out []blob.ObjectInfo
	for obj := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.errorf("list", prefix, obj.Err)
		}
		key, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok || key == "" || strings.HasSuffix(key, "/") {
			continue // directory markers are not objects
		}
		out = append(out, blob.ObjectInfo{Key: key, Size: obj.Size, ModTime: obj.LastModified})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("s3store: list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b blob.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete implements blobstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	name, err := s.object(ctx, "delete", key)
	if err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, name, minio.RemoveObjectOptions{}); err != nil {
		if isNotFound(err) {
			return nil
		}
		return s.errorf("delete", key, err)
	}
	return nil
}
