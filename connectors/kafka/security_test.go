package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weirstream/weir/connectors/kafka/kafkatest"
	"github.com/weirstream/weir/stream"
)

// TestSecurity connects the sink and the source over TLS with SASL (PLAIN
// and SCRAM), the CA and the passwords read from files under the path
// policy's root; a wrong password fails Open without showing it.
func TestSecurity(t *testing.T) {
	if os.Getenv(kafkatest.BrokersEnv) != "" {
		t.Skip("needs kfake, configured here with TLS and SASL")
	}
	dir := t.TempDir()
	serverCert, caFile := testCA(t, dir)
	topic := kafkatest.Topic("sec")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"), kfake.Superuser("SCRAM-SHA-256", "scram-user", "scram-pass"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}))
	must(t, err)
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	paths, err := stream.NewPathPolicy([]string{dir})
	must(t, err)
	pwFile := func(name, pw string) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, []byte(pw+"\n"), 0o600))
		return p
	}
	sec := func(mech, user, file string) *SecurityConfig {
		return &SecurityConfig{TLS: &TLSConfig{CAFile: caFile}, SASL: &SASLConfig{Mechanism: mech, Username: user, PasswordFile: file}}
	}

	in := stream.MustSchema(stream.Field{Name: "value", Type: stream.TypeString})
	octx := sinkOctx(in, 0, 1, 1)
	octx.Paths = paths
	sink := openSink(t, SinkConfig{BootstrapServers: brokers, Topic: topic, Format: "raw", ValueField: "value",
		Security: sec("SCRAM-SHA-256", "scram-user", pwFile("scram", "scram-pass"))}, octx, 0, nil)
	b := stream.NewBatch(in, 2)
	b.AppendRow("x")
	b.AppendRow("y")
	must(t, sink.ProcessBatch(0, b, nil))
	snapshot(t, sink, 1)
	must(t, sink.NotifyCheckpointComplete(1))
	must(t, sink.Close())

	sctx := srcOctx(0, 1)
	sctx.Paths = paths
	src := openSource(t, SourceConfig{BootstrapServers: brokers, Topics: []string{topic}, StopAtEnd: true,
		Security: sec("PLAIN", "plain-user", pwFile("plain", "plain-pass"))}, sctx, 0, nil)
	var col collector
	drainBounded(t, src, &col)
	src.Close()
	checkExactlyOnce(t, valueCounts(col.rows(), 1), []string{"x", "y"})

	bad, err := NewSource(cfgJSON(t, SourceConfig{BootstrapServers: brokers, Topics: []string{topic},
		Security: sec("PLAIN", "plain-user", pwFile("wrong", "wrong-pass-123"))}))
	must(t, err)
	bad.connectTimeout = 2 * time.Second
	err = bad.Open(t.Context(), sctx)
	bad.Close()
	t.Logf("wrong password: %v", err)
	if err == nil || strings.Contains(err.Error(), "wrong-pass-123") {
		t.Fatalf("Open with a wrong password: %v", err)
	}

	outside, err := NewSource(cfgJSON(t, SourceConfig{BootstrapServers: brokers, Topics: []string{topic},
		Security: sec("PLAIN", "plain-user", "/etc/passwd")}))
	must(t, err)
	err = outside.Open(t.Context(), sctx)
	outside.Close()
	if !errors.Is(err, stream.ErrPathNotAllowed) {
		t.Fatalf("Open with a password file outside the roots: %v", err)
	}
}

// testCA writes a CA certificate to dir and returns a server certificate
// for 127.0.0.1 that it signed, and the CA file.
func testCA(t *testing.T, dir string) (tls.Certificate, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	must(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	must(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	must(t, err)
	caFile := filepath.Join(dir, "ca.pem")
	must(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, caFile
}
