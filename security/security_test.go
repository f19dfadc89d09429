package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// certSet writes a development set into a temp dir once per test.
func certSet(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := InitCerts(dir, CertOptions{TaskManagers: []string{"tm-1", "tm-2"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir, cert string) *Material {
	t.Helper()
	m, err := Files(dir, cert).Load()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestInitCerts(t *testing.T) {
	dir := certSet(t)
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
	for _, f := range []string{CAFile, JobManagerFile, OperatorFile, ReaderFile, TaskManagerFile("tm-1"), TaskManagerFile("tm-2")} {
		kst, err := os.Stat(filepath.Join(dir, KeyFile(f)))
		if err != nil || kst.Mode().Perm() != 0o600 {
			t.Errorf("key of %s: mode %v (%v), want 0600", f, kst.Mode().Perm(), err)
		}
	}
	for cert, want := range map[string]Identity{
		JobManagerFile:          {Name: "jobmanager", Roles: []Role{RoleJobManager}},
		TaskManagerFile("tm-2"): {Name: "tm-2", Roles: []Role{RoleTaskManager}},
		OperatorFile:            {Name: "operator", Roles: []Role{RoleOperate}},
		ReaderFile:              {Name: "reader", Roles: []Role{RoleRead}},
	} {
		got := load(t, dir, cert).Self()
		if got.Name != want.Name || len(got.Roles) != 1 || got.Roles[0] != want.Roles[0] {
			t.Errorf("%s: identity %+v, want %+v", cert, got, want)
		}
	}
	if _, err := InitCerts(dir, CertOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("second InitCerts into the same dir: %v, want ErrExists", err)
	}
	if _, err := InitCerts(t.TempDir(), CertOptions{TaskManagers: []string{"../x"}}); err == nil {
		t.Error("a taskmanager id with a path accepted")
	}
}

func TestLoadRejects(t *testing.T) {
	dir, other := certSet(t), certSet(t)
	cases := map[string]TLSConfig{
		"no key":           {CAFile: filepath.Join(dir, CAFile), CertFile: filepath.Join(dir, JobManagerFile)},
		"missing file":     Files(filepath.Join(dir, "nope"), JobManagerFile),
		"another CA":       {CAFile: filepath.Join(other, CAFile), CertFile: filepath.Join(dir, JobManagerFile), KeyFile: filepath.Join(dir, KeyFile(JobManagerFile))},
		"key of another":   {CAFile: filepath.Join(dir, CAFile), CertFile: filepath.Join(dir, JobManagerFile), KeyFile: filepath.Join(dir, KeyFile(ReaderFile))},
		"CA is not a cert": {CAFile: filepath.Join(dir, KeyFile(CAFile)), CertFile: filepath.Join(dir, JobManagerFile), KeyFile: filepath.Join(dir, KeyFile(JobManagerFile))},
	}
	for name, c := range cases {
		if m, err := c.Load(); !errors.Is(err, ErrConfig) || m != nil {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if m, err := (TLSConfig{}).Load(); m != nil || err != nil {
		t.Errorf("no TLS: %v, %v; want nil, nil", m, err)
	}
}

func TestRequireLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:0": true,
		"0.0.0.0:6123": false, ":6123": false, "10.0.0.1:1": false, "example.com:1": false} {
		if err := RequireLoopback("rpc address", addr); (err == nil) != ok || (!ok && !errors.Is(err, ErrPlaintext)) {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// serve starts a health server with material m and policy p.
func serve(t *testing.T, m *Material, p Policy) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(p.ServerOptions(m)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func check(t *testing.T, addr string, opt grpc.DialOption) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestGRPCMutualTLS(t *testing.T) {
	dir, other := certSet(t), certSet(t)
	jm := load(t, dir, JobManagerFile)
	addr := serve(t, jm, Policy{healthpb.Health_Check_FullMethodName: {RoleRead}})
	cases := []struct {
		name string
		opt  grpc.DialOption
		want codes.Code
	}{
		{"reader", DialOption(load(t, dir, ReaderFile), RoleJobManager), codes.OK},
		{"operator (operate includes read)", DialOption(load(t, dir, OperatorFile), RoleJobManager), codes.OK},
		{"taskmanager role", DialOption(load(t, dir, TaskManagerFile("tm-1")), RoleJobManager), codes.PermissionDenied},
		{"plaintext", DialOption(nil, RoleJobManager), codes.Unavailable},
		{"another CA", DialOption(load(t, other, OperatorFile), RoleJobManager), codes.Unavailable},
		{"server of the wrong role", DialOption(load(t, dir, ReaderFile), RoleTaskManager), codes.Unavailable},
	}
	for _, tc := range cases {
		if got := status.Code(check(t, addr, tc.opt)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A method the policy does not list is closed.
	closed := serve(t, jm, Policy{})
	if got := status.Code(check(t, closed, DialOption(load(t, dir, OperatorFile), RoleJobManager))); got != codes.PermissionDenied {
		t.Errorf("unlisted method: %v, want PermissionDenied", got)
	}
	// Plaintext servers let every call through (loopback only).
	plain := serve(t, nil, Policy{})
	if err := check(t, plain, DialOption(nil, RoleJobManager)); err != nil {
		t.Errorf("plaintext: %v", err)
	}
}

type tmRequest struct{ id string }

func (r tmRequest) GetTaskmanagerId() string { return r.id }

// A taskmanager's certificate binds its id: requests naming another id
// are refused.
func TestTaskManagerIDBound(t *testing.T) {
	dir := certSet(t)
	raw, err := os.ReadFile(filepath.Join(dir, TaskManagerFile("tm-1")))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(raw, mustRead(t, filepath.Join(dir, KeyFile(TaskManagerFile("tm-1")))))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}})
	p := Policy{"/m": {RoleTaskManager}}
	if _, err := p.authorize(ctx, "/m", tmRequest{"tm-1"}); err != nil {
		t.Errorf("own id: %v", err)
	}
	if _, err := p.authorize(ctx, "/m", tmRequest{"tm-2"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another id: %v, want PermissionDenied", err)
	}
	if _, err := p.authorize(context.Background(), "/m", tmRequest{"tm-1"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no peer: %v, want Unauthenticated", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHTTPHandler(t *testing.T) {
	dir := certSet(t)
	jm := load(t, dir, JobManagerFile)
	srv := httptest.NewUnstartedServer(HTTPHandler(jm, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := IdentityFrom(r.Context())
		io.WriteString(w, id.Name)
	})))
	srv.TLS = jm.ServerConfig()
	srv.StartTLS()
	defer srv.Close()
	client := func(m *Material) *http.Client {
		tr := &http.Transport{TLSClientConfig: m.ClientConfig(RoleJobManager)}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	reader, operator := client(load(t, dir, ReaderFile)), client(load(t, dir, OperatorFile))
	for _, tc := range []struct {
		name   string
		c      *http.Client
		method string
		want   int
	}{
		{"reader GET", reader, http.MethodGet, http.StatusOK},
		{"reader POST", reader, http.MethodPost, http.StatusForbidden},
		{"operator POST", operator, http.MethodPost, http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+"/v1/jobs", nil)
		resp, err := tc.c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.want)
		}
		if tc.want == http.StatusForbidden && (!strings.Contains(string(body), "needs the operate role") ||
			resp.Header.Get("Content-Type") != "application/json" || !json.Valid(body)) {
			t.Errorf("%s: body %q (%s) does not say in JSON which role is needed", tc.name, body, resp.Header.Get("Content-Type"))
		}
	}
	// No client certificate: the handshake fails.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	if resp, err := plain.Get(srv.URL + "/v1/jobs"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %d", resp.StatusCode)
	}
	for _, c := range []*http.Client{reader, operator, plain} {
		c.CloseIdleConnections()
	}
}
