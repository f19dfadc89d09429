// Package etcdtest starts a real, single-member etcd server
// (go.etcd.io/etcd/server/v3/embed) inside a test binary, on loopback ports
// and in a t.TempDir, for the tests of package ha and of the packages that
// use it. Nothing here stands in for etcd: clients talk gRPC to the real
// server through a TCP fault proxy (test/proxytest) that lets a test take
// etcd away and give it back:
//
//   - Stop shuts the server down and resets every client connection (new
//     ones are reset too); Restart starts it again on the same data
//     directory and ports, so data and leases survive like a process
//     restart.
//   - Cut drops every client connection and refuses new ones while the
//     server keeps running (a network partition: leases expire on the
//     server); Heal lets clients in again.
//
// etcdtest imports the etcd server, zap (to silence etcd's logs),
// test/proxytest and the standard library. It is a test helper: only
// _test.go files import it.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/weirstream/weir/test/proxytest"
)

// startTimeout bounds how long Start and Restart wait for the server to be
// ready to serve clients.
const startTimeout = 20 * time.Second

// Server is one embedded etcd member behind a fault proxy. Its methods may
// be called from any goroutine.
type Server struct {
	t       testing.TB
	dir     string
	proxy   *proxytest.Proxy // what clients dial
	backend url.URL
	peer    url.URL

	mu struct {
		sync.Mutex
		etcd *embed.Etcd // nil while stopped
		cut  bool
	}
}

// Start starts an etcd server on free loopback ports with its data in a
// t.TempDir and registers its shutdown with t.Cleanup. It fails the test if
// the server does not become ready.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	s.backend = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.peer = url.URL{Scheme: "http", Host: freeAddr(t)}
	if err := s.startEtcd(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	s.proxy = proxytest.Start(t, s.backend.Host)
	t.Cleanup(s.Stop) // before the proxy closes: cleanups run last first
	return s
}

// Endpoint is the address clients dial ("127.0.0.1:port"); it stays the same
// across Stop and Restart.
func (s *Server) Endpoint() string { return s.proxy.Addr() }

// Endpoints is Endpoint as a one-element list, the shape ha.Config wants.
func (s *Server) Endpoints() []string { return []string{s.Endpoint()} }

// DirectEndpoints is the server's own client URL, bypassing the proxy: a
// client connected here is not affected by Cut (it is by Stop). Tests use
// it to watch the server while the other clients are cut off.
func (s *Server) DirectEndpoints() []string { return []string{s.backend.String()} }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.dir }

// Stop resets every client connection, refuses new ones and shuts the
// server down. It is a no-op when the server is already stopped.
func (s *Server) Stop() {
	s.t.Helper()
	s.proxy.Cut()
	s.mu.Lock()
	e := s.mu.etcd
	s.mu.etcd = nil
	s.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Restart starts a stopped server again with the same data directory and
// ports, and lets clients in unless Cut. It fails the test if the server
// does not come up.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.mu.etcd != nil
	s.mu.Unlock()
	if running {
		s.t.Fatalf("etcdtest: Restart: the server at %s is running; call Stop first", s.Endpoint())
	}
	// The ports were ours a moment ago; the kernel may need a moment to
	// release them.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.startEtcd()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("etcdtest: restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // retry pacing, not synchronisation
	}
	s.mu.Lock()
	cut := s.mu.cut
	s.mu.Unlock()
	if !cut {
		s.proxy.Heal()
	}
}

// Cut drops every client connection and refuses new ones while the server
// keeps running, as if the network between clients and etcd failed.
func (s *Server) Cut() {
	s.mu.Lock()
	s.mu.cut = true
	s.mu.Unlock()
	s.proxy.Cut()
}

// Heal undoes Cut (a stopped server stays unreachable until Restart).
func (s *Server) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.cut = false
	if s.mu.etcd != nil {
		s.proxy.Heal()
	}
}

func (s *Server) startEtcd() error {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls = []url.URL{s.backend}
	cfg.AdvertiseClientUrls = []url.URL{s.backend}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd in %s on %s: %w", s.dir, s.backend.Host, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd in %s failed while starting: %w", s.dir, err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("etcd in %s not ready after %v", s.dir, startTimeout)
	}
	s.mu.Lock()
	s.mu.etcd = e
	s.mu.Unlock()
	return nil
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
