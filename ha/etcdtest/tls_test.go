package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weirstream/weir/security"
)

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

// clientTLS is the TLS configuration of a client presenting cert from the
// set in dir (no certificate for cert "") and trusting caDir's CA.
func clientTLS(t *testing.T, caDir, dir, cert string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(caDir, security.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	cfg := &tls.Config{RootCAs: pool}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, cert), filepath.Join(dir, security.KeyFile(cert)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// newTLSClient is newClient over TLS.
func newTLSClient(t *testing.T, cfg *tls.Config, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: cfg, DialTimeout: opTimeout, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("client for %v: %v", eps, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// handshakeAlert completes a TLS handshake with the member at addr and
// returns the error of the first read: with TLS 1.3 the server checks the
// client's certificate after the client has finished its handshake, so
// a refusal arrives as an alert on the first read.
func handshakeAlert(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A member that accepted the client would wait for its request: the
	// deadline turns that into a failure of the test instead of a hang.
	conn.SetReadDeadline(time.Now().Add(opTimeout))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// TestClientTLS: with Options.ClientTLS the members serve clients only
// over TLS, through their proxies and directly, and refuse a client
// without a certificate, with a certificate from another CA, or in
// plaintext; a restarted member keeps doing so.
func TestClientTLS(t *testing.T) {
	dir, other := certSet(t), certSet(t)
	c := StartClusterWith(t, 3, Options{ClientTLS: TLSFiles(security.Files(dir, security.JobManagerFile))})
	// The status client speaks TLS too.
	c.WaitHealthy(t)
	for _, ep := range c.DirectEndpoints() {
		if !strings.HasPrefix(ep, "https://") {
			t.Fatalf("DirectEndpoints = %v, want https:// URLs", c.DirectEndpoints())
		}
	}

	good := clientTLS(t, dir, dir, security.OperatorFile)
	cli := newTLSClient(t, good, c.Endpoints()...)
	put(t, cli, "/tls", "1")
	waitValue(t, newTLSClient(t, good, c.DirectEndpoints()[1]), "/tls", "1", "a direct read over TLS", clientv3.WithSerializable())

	refused := func(t *testing.T, addr string) {
		t.Helper()
		tests := []struct {
			name string
			cfg  *tls.Config
			want string
		}{
			{"no certificate", clientTLS(t, dir, "", ""), "remote error: tls: certificate required"},
			{"certificate from another CA", clientTLS(t, dir, other, security.OperatorFile), "remote error: tls: unknown certificate authority"},
			{"server from another CA", clientTLS(t, other, dir, security.OperatorFile), "x509: certificate signed by unknown authority"},
		}
		for _, tt := range tests {
			err := handshakeAlert(t, addr, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: TLS to %s = %v, want %q", tt.name, addr, err, tt.want)
			}
		}
		plain := newClient(t, addr)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := plain.Get(ctx, "/tls"); err == nil {
			t.Errorf("a plaintext read through %s succeeded", addr)
		}
	}
	refused(t, c.Member(0).Endpoint())

	m := c.Member(0)
	m.Stop()
	m.Restart()
	c.WaitHealthy(t)
	waitValue(t, newTLSClient(t, good, m.Endpoint()), "/tls", "1", "a read over TLS from the restarted member")
	refused(t, m.Endpoint())
}

// TestStartRejectsPartialTLS: ClientTLS names all three files or none.
func TestStartRejectsPartialTLS(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartWith(f, Options{ClientTLS: TLSFiles{CAFile: "ca.pem"}})
	}()
	<-done
	if !strings.Contains(f.msg, "ClientTLS") || !strings.Contains(f.msg, "together") {
		t.Errorf("StartWith(a CA file alone) failed with %q; want it to say the three files go together", f.msg)
	}
}
