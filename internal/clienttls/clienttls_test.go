package clienttls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/limitedfile"
)

// pki is a CA with a server certificate for server.test and a client
// certificate, the CA and client files written to a directory.
type pki struct {
	pool                      *x509.CertPool
	server                    tls.Certificate
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER := create(t, caTmpl, caTmpl, caKey, caKey)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		return create(t, tmpl, ca, key, caKey), key
	}
	serverDER, serverKey := leaf(2, "server.test", x509.ExtKeyUsageServerAuth)
	clientDER, clientKey := leaf(3, "client", x509.ExtKeyUsageClientAuth)
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	p := pki{pool: x509.NewCertPool(), server: tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey},
		caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client-key.pem")}
	p.pool.AddCert(ca)
	write(t, p.caFile, "CERTIFICATE", caDER)
	write(t, p.certFile, "CERTIFICATE", clientDER)
	write(t, p.keyFile, "EC PRIVATE KEY", keyDER)
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func create(t *testing.T, tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) []byte {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func write(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// handshake connects a client with cfg over loopback to a server of p
// that requires a client certificate from p's CA, reads a byte the server
// sends once it accepted the client, and returns the client's error.
func handshake(t *testing.T, p pki, cfg *tls.Config) error {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte{1}) // completes the handshake first
	}()
	defer func() { <-done }()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(tls.Client(c, cfg), make([]byte, 1))
	return err
}

// TestHandshake checks that the configuration verifies the server by the
// CA file and the server name, and presents the client certificate.
func TestHandshake(t *testing.T) {
	p := newPKI(t)
	cfg, err := FromFiles(p.caFile, p.certFile, p.keyFile, "server.test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ServerName != "server.test" || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("config: min version %#x, server name %q, %d certificates, roots %v", cfg.MinVersion, cfg.ServerName, len(cfg.Certificates), cfg.RootCAs)
	}
	if err := handshake(t, p, cfg); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	wrongName, err := FromFiles(p.caFile, p.certFile, p.keyFile, "other.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, p, wrongName); err == nil || !strings.Contains(err.Error(), "other.test") {
		t.Fatalf("handshake with another server name: %v, want a certificate error", err)
	}
	noClientCert, err := FromFiles(p.caFile, "", "", "server.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, p, noClientCert); err == nil {
		t.Fatal("handshake without a client certificate succeeded")
	}
}

func TestErrors(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, MaxPEMBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                      string
		caFile, certFile, keyFile string
		want                      string
		is                        error
	}{
		{"ca without PEM", notPEM, "", "", "caFile " + notPEM + " holds no PEM certificate", nil},
		{"ca too large", big, "", "", "caFile: " + big + " is larger than 1048576 bytes", limitedfile.ErrTooLarge},
		{"ca missing", filepath.Join(dir, "none"), "", "", "caFile: open " + filepath.Join(dir, "none") + ": no such file or directory", os.ErrNotExist},
		{"key too large", "", p.certFile, big, "certFile " + p.certFile + " and keyFile " + big + ": " + big + " is larger than 1048576 bytes", limitedfile.ErrTooLarge},
		{"key of another certificate", "", p.caFile, p.keyFile, "certFile " + p.caFile + " and keyFile " + p.keyFile + ": tls: private key does not match public key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := FromFiles(tc.caFile, tc.certFile, tc.keyFile, "")
			if err == nil || err.Error() != tc.want || cfg != nil {
				t.Fatalf("FromFiles = %v, %v; want error %q", cfg, err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
		})
	}
}
