package ha

import (
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/security"
)

// certSet writes a development CA and its role certificates into a new
// directory and returns it.
func certSet(t *testing.T, opts security.CertOptions) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := security.InitCerts(dir, opts); err != nil {
		t.Fatalf("InitCerts: %v", err)
	}
	return dir
}

// tlsFiles is the ha TLS setting for certificate cert of the set in dir.
func tlsFiles(dir, cert string) TLSFiles { return TLSFiles(security.Files(dir, cert)) }

// startTLSEtcd starts etcd members that serve clients over TLS with
// client-certificate auth, with the jobmanager certificate of the set in
// dir as their server certificate.
func startTLSEtcd(t *testing.T, dir string, members int) *etcdtest.Cluster {
	t.Helper()
	return etcdtest.StartClusterWith(t, members, etcdtest.Options{ClientTLS: etcdtest.TLSFiles(security.Files(dir, security.JobManagerFile))})
}

// tlsConfig is a quiet config for endpoints with TLS files f.
func tlsConfig(endpoints []string, f TLSFiles) Config {
	cfg := DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.TLS = f
	cfg.LeaseTTL = 4 * time.Second
	cfg.DialTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// TestTLSElection: over TLS with client certificates, through the
// members' proxies, one jobmanager campaigns and writes, others read the
// leader, both as host:port and as https:// endpoints, and keep doing so
// after the etcd member they used goes down.
func TestTLSElection(t *testing.T) {
	dir := certSet(t, security.CertOptions{})
	etcd := startTLSEtcd(t, dir, 3)
	https := make([]string, etcd.Size())
	for i, ep := range etcd.Endpoints() {
		https[i] = "https://" + ep
	}
	jm := connect(t, tlsConfig(etcd.Endpoints(), tlsFiles(dir, security.JobManagerFile)))
	reader := connect(t, tlsConfig(https, tlsFiles(dir, security.TaskManagerFile("tm-1"))))

	l := waitCampaign(t, campaignAsync(t.Context(), jm, "jm-a"), 10*time.Second)
	if err := l.Store().PutJob(t.Context(), "j", []byte("graph"), []byte("running")); err != nil {
		t.Fatalf("PutJob over TLS: %v", err)
	}
	want := LeaderInfo{ID: "jm-a", Address: "jm-a.example:6123", Epoch: l.Epoch()}
	if li, err := reader.Leader(t.Context()); err != nil || li != want {
		t.Fatalf("Leader over TLS = %+v, %v; want %+v", li, err, want)
	}
	watch := reader.WatchLeader(t.Context())
	if li := <-watch; li != want {
		t.Fatalf("WatchLeader over TLS sent %+v first, want %+v", li, want)
	}

	// The clients fail over to another member, again through TLS.
	etcd.Member(etcd.Leader()).Kill()
	checkFor(t, 20*time.Second, "the leader read through the surviving etcd members", func() error {
		li, err := reader.Leader(t.Context())
		if err == nil && li != want {
			t.Fatalf("Leader after an etcd member went down = %+v, want %+v", li, want)
		}
		return err
	})
	if err := l.Resign(t.Context()); err != nil {
		t.Fatalf("Resign over TLS: %v", err)
	}
	select {
	case li := <-watch:
		if li != (LeaderInfo{}) {
			t.Fatalf("WatchLeader after Resign sent %+v, want no leader", li)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchLeader sent nothing within 10s of Resign")
	}
}

// TestTLSRefused: etcd with client-certificate auth refuses clients that
// do not present a certificate from its CA, and a client refuses an etcd
// whose certificate is not from its CA. Each failure says which setting to
// fix and comes within the dial timeout, although the etcd client retries.
func TestTLSRefused(t *testing.T) {
	dir := certSet(t, security.CertOptions{})
	other := certSet(t, security.CertOptions{})
	etcd := startTLSEtcd(t, dir, 1)
	plain := etcdtest.Start(t)
	good, foreign := tlsFiles(dir, security.OperatorFile), tlsFiles(other, security.OperatorFile)

	tests := []struct {
		name      string
		endpoints []string
		tls       TLSFiles
		kind      error
		want      []string // what the message names
	}{
		{"certificate from another CA", etcd.Endpoints(), TLSFiles{CAFile: good.CAFile, CertFile: foreign.CertFile, KeyFile: foreign.KeyFile},
			ErrAuthentication, []string{"refused this client's certificate", foreign.CertFile, "remote error: tls:", "--ha-etcd-cert"}},
		{"server from another CA", etcd.Endpoints(), TLSFiles{CAFile: foreign.CAFile, CertFile: good.CertFile, KeyFile: good.KeyFile},
			ErrAuthentication, []string{"does not trust etcd's server certificate", "x509:", "--ha-etcd-ca"}},
		{"https without TLS settings", []string{"https://" + etcd.Endpoints()[0]}, TLSFiles{},
			ErrAuthentication, []string{"does not trust etcd's server certificate", "--ha-etcd-ca", "--ha-etcd-cert", "--ha-etcd-key"}},
		{"plaintext to TLS etcd", etcd.Endpoints(), TLSFiles{},
			ErrUnavailable, []string{"if etcd serves TLS", "--ha-etcd-ca", etcd.Endpoints()[0]}},
		{"TLS to plaintext etcd", plain.Endpoints(), good,
			ErrUnavailable, []string{"TLS handshake failed", "if etcd serves plain http"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tlsConfig(tt.endpoints, tt.tls)
			// Long enough for a handshake to fail on a loaded machine (at
			// 500ms the dial sometimes gave up before any handshake ended,
			// with no reason to report).
			cfg.DialTimeout = 2 * time.Second
			start := time.Now()
			c, err := Connect(t.Context(), cfg)
			if err == nil {
				c.Close()
				t.Fatal("Connect succeeded, want it refused")
			}
			t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, tt.kind) {
				t.Errorf("error does not wrap %v", tt.kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q", w)
				}
			}
			if d := time.Since(start); d > 4*cfg.DialTimeout {
				t.Errorf("Connect took %v with a %v dial timeout", d, cfg.DialTimeout)
			}
		})
	}
}

// TestConfigValidateTLS: incomplete, unreadable or unusable TLS files and
// logins are reported before any connection, naming the setting, never
// echoing the password.
func TestConfigValidateTLS(t *testing.T) {
	dir := certSet(t, security.CertOptions{})
	other := certSet(t, security.CertOptions{})
	expired := certSet(t, security.CertOptions{Now: time.Now().Add(-3 * 365 * 24 * time.Hour)})
	f := tlsFiles(dir, security.OperatorFile)
	missing := filepath.Join(t.TempDir(), "absent.pem")
	const secret = "s3cr3t-Pa55"

	ok := DefaultConfig()
	ok.Endpoints = []string{"127.0.0.1:2379"}
	ok.TLS = f
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr []string // what the message names; none: valid
	}{
		{"all three files", func(*Config) {}, nil},
		{"none", func(c *Config) { c.TLS = TLSFiles{} }, nil},
		{"https endpoints", func(c *Config) { c.Endpoints = []string{"https://a:2379", "https://b:2379"} }, nil},
		{"login", func(c *Config) { c.Username, c.Password = "weir", secret }, nil},
		{"CA only", func(c *Config) { c.TLS = TLSFiles{CAFile: f.CAFile} }, []string{"ha.etcdCert (--ha-etcd-cert) and ha.etcdKey (--ha-etcd-key) not set", "together"}},
		{"no key", func(c *Config) { c.TLS.KeyFile = "" }, []string{"--ha-etcd-key", "not set"}},
		{"unreadable CA", func(c *Config) { c.TLS.CAFile = missing }, []string{"--ha-etcd-ca", missing, "check the path"}},
		{"CA not PEM", func(c *Config) { c.TLS.CAFile = f.KeyFile }, []string{"--ha-etcd-ca", "holds no PEM certificate"}},
		{"key of another certificate", func(c *Config) { c.TLS.KeyFile = tlsFiles(other, security.OperatorFile).KeyFile },
			[]string{"--ha-etcd-cert", "--ha-etcd-key", "does not match"}},
		{"expired certificate", func(c *Config) { c.TLS = tlsFiles(expired, security.OperatorFile) }, []string{"--ha-etcd-cert", "expired", "renew"}},
		{"http endpoint with TLS", func(c *Config) { c.Endpoints = []string{"http://127.0.0.1:2379"} }, []string{"plain http", "https://"}},
		{"mixed schemes", func(c *Config) { c.Endpoints = []string{"https://a:2379", "b:2379"} }, []string{`"https://a:2379" and "b:2379"`, "same way"}},
		{"user without password", func(c *Config) { c.Username = "weir" }, []string{`user "weir" has no password`, "WEIR_HA_ETCD_PASSWORD"}},
		{"password without user", func(c *Config) { c.Password = secret }, []string{"no etcd user", "--ha-etcd-user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate succeeded, want an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Validate = %q shows the password", err)
			}
		})
	}
}

// TestCheckClientCert: a certificate only for servers is refused before
// etcd would refuse it.
func TestCheckClientCert(t *testing.T) {
	now := time.Now()
	valid := func(eku ...x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: eku}
	}
	tests := []struct {
		name string
		cert *x509.Certificate
		want string // "" for accepted
	}{
		{"client and server", valid(x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth), ""},
		{"no extended key usage", valid(), ""},
		{"any", valid(x509.ExtKeyUsageAny), ""},
		{"server only", valid(x509.ExtKeyUsageServerAuth), "not for TLS clients"},
		{"not yet valid", &x509.Certificate{NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)}, "not valid before"},
	}
	for _, tt := range tests {
		err := checkClientCert(tt.cert, "c.pem", now)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: checkClientCert = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestEtcdLogin: with etcd's authentication on, the right user and
// password campaign; a wrong password, and a user without permission on
// the prefix, are refused with ErrAuthentication, without showing the
// password.
func TestEtcdLogin(t *testing.T) {
	dir := certSet(t, security.CertOptions{})
	etcd := startTLSEtcd(t, dir, 1)
	const rootPassword, weakPassword = "root-Pa55", "weak-Pa55"
	admin := tlsFiles(dir, security.OperatorFile)
	enableAuth(t, etcd.DirectEndpoints(), admin, rootPassword, weakPassword)

	login := func(user, password string) Config {
		cfg := tlsConfig(etcd.Endpoints(), admin)
		cfg.Username, cfg.Password = user, password
		return cfg
	}
	c := connect(t, login("root", rootPassword))
	l := waitCampaign(t, campaignAsync(t.Context(), c, "jm-a"), 10*time.Second)
	if li, err := c.Leader(t.Context()); err != nil || li.Epoch != l.Epoch() {
		t.Fatalf("Leader with a login = %+v, %v; want epoch %d", li, err, l.Epoch())
	}

	tests := []struct {
		name, user, password string
		want                 []string
	}{
		{"wrong password", "root", "wrong-Pa55", []string{`refused user "root"`, "--ha-etcd-user", "WEIR_HA_ETCD_PASSWORD"}},
		{"no permission", "weak", weakPassword, []string{`denied user "weak"`, "/weir", "grant"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Connect(t.Context(), login(tt.user, tt.password))
			if err == nil {
				c.Close()
				t.Fatal("Connect succeeded, want it refused")
			}
			t.Log(err)
			if !errors.Is(err, ErrAuthentication) {
				t.Errorf("error does not wrap ErrAuthentication")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q", w)
				}
			}
			if strings.Contains(err.Error(), tt.password) {
				t.Errorf("error shows the password")
			}
		})
	}
}

// enableAuth creates the users root (with role root) and weak (no role)
// and turns etcd's authentication on.
func enableAuth(t *testing.T, endpoints []string, f TLSFiles, rootPassword, weakPassword string) {
	t.Helper()
	tlsCfg, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	defer cli.Close()
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "weak", weakPassword); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enable etcd auth: %v", err)
		}
	}
}

// TestTLSFilesSize: a huge file named as a certificate is refused without
// reading it all.
func TestTLSFilesSize(t *testing.T) {
	dir := certSet(t, security.CertOptions{})
	big := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(big, make([]byte, maxPEMBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	f := tlsFiles(dir, security.OperatorFile)
	f.CAFile = big
	if _, err := f.load(); err == nil || !strings.Contains(err.Error(), "right file") {
		t.Fatalf("load with a %d-byte CA file = %v, want a size error", maxPEMBytes+1, err)
	}
}

// TestProbeTLS: the probe that explains a failed Connect reads etcd's
// verdict on the client certificate, which gRPC's own error may lose.
func TestProbeTLS(t *testing.T) {
	dir, other := certSet(t, security.CertOptions{}), certSet(t, security.CertOptions{})
	etcd := startTLSEtcd(t, dir, 1)
	good, foreign := tlsFiles(dir, security.OperatorFile), tlsFiles(other, security.OperatorFile)
	tests := []struct {
		name string
		tls  TLSFiles
		want string // "" for no verdict
	}{
		{"accepted", good, ""},
		{"certificate from another CA", TLSFiles{CAFile: good.CAFile, CertFile: foreign.CertFile, KeyFile: foreign.KeyFile}, "remote error: tls: unknown certificate authority"},
		{"server from another CA", TLSFiles{CAFile: foreign.CAFile, CertFile: good.CertFile, KeyFile: good.KeyFile}, "x509: certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		cfg, err := tt.tls.load()
		if err != nil {
			t.Fatal(err)
		}
		err = probeTLS(t.Context(), []string{"https://" + etcd.Endpoints()[0]}, cfg)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: probeTLS = %v, want %q", tt.name, err, tt.want)
		}
	}
}
