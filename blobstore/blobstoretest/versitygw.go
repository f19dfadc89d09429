package blobstoretest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore/s3store"
	"github.com/weirstream/weir/internal/syncbuf"
)

// VersityBucket is the bucket StartVersityGW creates.
const VersityBucket = "weir-test"

// EnvVersityGW names the versitygw binary to use instead of bin/versitygw
// in the module root.
const EnvVersityGW = "WEIR_VERSITYGW"

var moduleRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
})

// VersityGWPath returns the versitygw binary: $WEIR_VERSITYGW if set, else
// bin/versitygw under the module root. It fails the test if there is none.
func VersityGWPath(t testing.TB) string {
	t.Helper()
	const hint = "versitygw not found in bin/; run `make test` (it installs versitygw) or `make bin/versitygw`"
	if p := os.Getenv(EnvVersityGW); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v; %s", EnvVersityGW, p, err, hint)
		}
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("%v; %s", err, hint)
	}
	p := filepath.Join(root, "bin", "versitygw")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s (looked for %s)", hint, p)
	}
	return p
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// StartVersityGW starts a versitygw S3 server with its posix backend on a
// temporary directory, listening on a free port of 127.0.0.1, creates the
// bucket VersityBucket, and stops the server in t.Cleanup. It returns the
// endpoint (host:port, plain http) and the root credentials.
//
// The binary is found by VersityGWPath; the test fails if it is missing.
func StartVersityGW(t testing.TB) (endpoint, accessKey, secretKey string) {
	t.Helper()
	gw := StartVersityGWServer(t)
	return gw.Endpoint(), gw.AccessKey, gw.SecretKey
}

// VersityGW is a running versitygw server that a test can kill and start
// again on the same data. Its methods may be called from one goroutine at
// a time.
type VersityGW struct {
	AccessKey, SecretKey string
	t                    testing.TB
	bin, dir             string
	tls                  VersityGWTLS // zero for plain http
	endpoint             string
	stop                 func(kill bool)
}

// VersityGWTLS names the PEM files of a versitygw that serves https: the
// certificate it presents with its key, and the CA that signed the
// certificate, which its clients trust. The certificate must name
// 127.0.0.1, where the server listens; the leaves of security.InitCerts
// do.
type VersityGWTLS struct {
	CAFile, CertFile, KeyFile string
}

// StartVersityGWServer is StartVersityGW returning the server.
func StartVersityGWServer(t testing.TB) *VersityGW {
	t.Helper()
	return startVersityGWServer(t, VersityGWTLS{})
}

// StartVersityGWServerTLS is StartVersityGWServer serving https with the
// certificate files tls names (all three are required). Its S3Config and
// NewS3Store give clients that trust tls.CAFile.
func StartVersityGWServerTLS(t testing.TB, tls VersityGWTLS) *VersityGW {
	t.Helper()
	if tls.CAFile == "" || tls.CertFile == "" || tls.KeyFile == "" {
		t.Fatalf("StartVersityGWServerTLS(%+v): name the CA, the certificate and its key", tls)
	}
	return startVersityGWServer(t, tls)
}

func startVersityGWServer(t testing.TB, tls VersityGWTLS) *VersityGW {
	t.Helper()
	gw := &VersityGW{t: t, bin: VersityGWPath(t), dir: t.TempDir(), tls: tls,
		AccessKey: "weirtest" + randomHex(4), SecretKey: randomHex(16)}
	gw.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s3store.MakeBucket(ctx, gw.S3Config("")); err != nil {
		t.Fatalf("versitygw on %s: %v", gw.endpoint, err)
	}
	t.Cleanup(func() {
		if gw.stop != nil {
			gw.stop(false)
		}
	})
	return gw
}

// Endpoint is the server's host:port (plain http, or https when started
// by StartVersityGWServerTLS); it changes with Restart.
func (gw *VersityGW) Endpoint() string { return gw.endpoint }

// Secure reports whether the server serves https.
func (gw *VersityGW) Secure() bool { return gw.tls.CertFile != "" }

// CAFile is the CA file clients trust for an https server; "" for plain
// http.
func (gw *VersityGW) CAFile() string { return gw.tls.CAFile }

// S3Config returns the s3store configuration for the bucket VersityBucket
// on this server, under prefix, over https trusting CAFile when the
// server serves https. It changes with Restart.
func (gw *VersityGW) S3Config(prefix string) s3store.Config {
	cfg := S3Config(gw.endpoint, gw.AccessKey, gw.SecretKey, prefix)
	cfg.Secure = gw.Secure()
	cfg.CAFile = gw.tls.CAFile
	return cfg
}

// NewS3Store returns an s3store on this server under a fresh random
// prefix, so that every call sees an empty store.
func (gw *VersityGW) NewS3Store(t testing.TB) *s3store.Store {
	t.Helper()
	s, err := s3store.New(t.Context(), gw.S3Config("t-"+randomHex(6)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Kill ends the server with SIGKILL, as a crash would.
func (gw *VersityGW) Kill() {
	if gw.stop != nil {
		gw.stop(true)
		gw.stop = nil
	}
}

// Restart starts the server again (after Kill) on its data directory, on a
// new free port: see Endpoint.
func (gw *VersityGW) Restart() {
	gw.t.Helper()
	gw.Kill()
	gw.start()
}

func (gw *VersityGW) start() {
	gw.t.Helper()
	var lastErr error
	for range 3 { // another process may take the port between pick and bind
		addr := freePort(gw.t)
		stop, err := startVersityGW(gw.t, gw.bin, addr, gw.dir, gw.AccessKey, gw.SecretKey, gw.tls)
		if err != nil {
			lastErr = err
			continue
		}
		gw.endpoint, gw.stop = addr, stop
		return
	}
	gw.t.Fatalf("start versitygw: %v", lastErr)
}

// startVersityGW runs the server and waits until it answers HTTP (or
// HTTPS with tls's certificate). It returns the function that stops it
// (SIGTERM, or SIGKILL with kill); the caller must call it.
func startVersityGW(t testing.TB, bin, addr, dir, accessKey, secretKey string, tlsFiles VersityGWTLS) (stop func(kill bool), err error) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	scheme := "http"
	args := []string{
		"--port", addr,
		"--access", accessKey,
		"--secret", secretKey,
		"--region", "us-east-1",
		"--quiet",
	}
	if tlsFiles.CertFile != "" {
		// --cert and --key are options of the gateway, so they come
		// before the backend's subcommand.
		args = append(args, "--cert", tlsFiles.CertFile, "--key", tlsFiles.KeyFile)
		pem, err := os.ReadFile(tlsFiles.CAFile)
		if err != nil {
			return nil, fmt.Errorf("versitygw CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("versitygw CA file %s holds no PEM certificate", tlsFiles.CAFile)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		scheme = "https"
	}
	args = append(args, "posix", dir)
	out := syncbuf.Buffer{Limit: 1 << 20}
	cmd := exec.Command(bin, args...)
	// Keep the root credentials, and TLS files that would turn a plain
	// server into an https one, out of the environment the server sees.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY=", "ROOT_SECRET_KEY=", "ROOT_ACCESS_KEY_ID=", "ROOT_SECRET_ACCESS_KEY=", "VGW_CERT=", "VGW_KEY=")
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop = func(kill bool) {
		if kill {
			cmd.Process.Kill()
		} else {
			cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("versitygw on %s output:\n%s", addr, out.String())
		}
	}

	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("versitygw on %s exited before answering (%v); output:\n%s", addr, waitErr, out.String())
		default:
		}
		resp, err := client.Get(scheme + "://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop(true)
			return nil, fmt.Errorf("versitygw on %s did not answer within 30s (last error: %v); output:\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// NewS3Store returns an s3store on the server StartVersityGW started,
// under a fresh random prefix, so that every call sees an empty store.
func NewS3Store(t testing.TB, endpoint, accessKey, secretKey string) *s3store.Store {
	t.Helper()
	s, err := s3store.New(t.Context(), S3Config(endpoint, accessKey, secretKey, "t-"+randomHex(6)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// S3Config returns the s3store configuration for the bucket StartVersityGW
// created, under prefix.
func S3Config(endpoint, accessKey, secretKey, prefix string) s3store.Config {
	return s3store.Config{
		Endpoint:  endpoint,
		AccessKey: accessKey,
		SecretKey: secretKey,
		Bucket:    VersityBucket,
		Prefix:    prefix,
	}
}
