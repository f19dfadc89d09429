// Package etcdtest starts a real, single-member etcd server
// (go.etcd.io/etcd/server/v3/embed) inside a test binary, on loopback ports
// and in a t.TempDir, for the tests of package ha and of the packages that
// use it. Nothing here stands in for etcd: clients talk gRPC to the real
// server through a small TCP relay that lets a test take etcd away and give
// it back:
//
//   - Stop shuts the server down and closes its client port (connections
//     are reset, new ones refused); Restart starts it again on the same data
//     directory and ports, so data and leases survive like a process restart.
//   - Cut drops every client connection and refuses new ones while the
//     server keeps running (a network partition: leases expire on the
//     server); Heal lets clients in again.
//
// etcdtest imports the etcd server, zap (to silence etcd's logs) and the
// standard library. It is a test helper: only _test.go files import it.
package etcdtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds how long Start and Restart wait for the server to be
// ready to serve clients.
const startTimeout = 20 * time.Second

// Server is one embedded etcd member behind a TCP relay. Its methods may be
// called from any goroutine.
type Server struct {
	t        testing.TB
	dir      string
	endpoint string // the relay's address, what clients dial
	backend  url.URL
	peer     url.URL

	mu struct {
		sync.Mutex
		etcd     *embed.Etcd
		ln       net.Listener // nil while stopped
		cut      bool
		conns    map[net.Conn]struct{}
		acceptWG *sync.WaitGroup
	}
	pipes sync.WaitGroup
}

// Start starts an etcd server on free loopback ports with its data in a
// t.TempDir and registers its shutdown with t.Cleanup. It fails the test if
// the server does not become ready.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	s.mu.conns = make(map[net.Conn]struct{})
	s.backend = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.peer = url.URL{Scheme: "http", Host: freeAddr(t)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: listen on loopback: %v", err)
	}
	s.endpoint = ln.Addr().String()
	t.Cleanup(s.shutdown)
	if err := s.startEtcd(); err != nil {
		ln.Close()
		t.Fatalf("etcdtest: %v", err)
	}
	s.serve(ln)
	return s
}

// Endpoint is the address clients dial ("127.0.0.1:port"); it stays the same
// across Stop and Restart.
func (s *Server) Endpoint() string { return s.endpoint }

// Endpoints is Endpoint as a one-element list, the shape ha.Config wants.
func (s *Server) Endpoints() []string { return []string{s.endpoint} }

// DirectEndpoints is the server's own client URL, bypassing the relay: a
// client connected here is not affected by Cut (it is by Stop). Tests use
// it to watch the server while the other clients are cut off.
func (s *Server) DirectEndpoints() []string { return []string{s.backend.String()} }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.dir }

// Stop closes every client connection, closes the client port and shuts the
// server down. It is a no-op when the server is already stopped.
func (s *Server) Stop() {
	s.t.Helper()
	s.mu.Lock()
	ln, e, wg := s.mu.ln, s.mu.etcd, s.mu.acceptWG
	s.mu.ln, s.mu.etcd, s.mu.acceptWG = nil, nil, nil
	s.closeConnsLocked()
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
		wg.Wait()
	}
	if e != nil {
		e.Close()
	}
}

// Restart starts a stopped server again with the same data directory and
// ports. It fails the test if the server does not come up.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.mu.etcd != nil
	s.mu.Unlock()
	if running {
		s.t.Fatalf("etcdtest: Restart: the server at %s is running; call Stop first", s.endpoint)
	}
	if err := s.startEtcd(); err != nil {
		s.t.Fatalf("etcdtest: restart: %v", err)
	}
	var ln net.Listener
	var err error
	// The port was ours a moment ago; the kernel may need a moment to
	// release it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", s.endpoint)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcdtest: restart: listen on %s again: %v", s.endpoint, err)
	}
	s.serve(ln)
}

// Cut drops every client connection and refuses new ones while the server
// keeps running, as if the network between clients and etcd failed.
func (s *Server) Cut() {
	s.mu.Lock()
	s.mu.cut = true
	s.closeConnsLocked()
	s.mu.Unlock()
}

// Heal undoes Cut.
func (s *Server) Heal() {
	s.mu.Lock()
	s.mu.cut = false
	s.mu.Unlock()
}

func (s *Server) shutdown() {
	s.Stop()
	s.pipes.Wait()
}

func (s *Server) closeConnsLocked() {
	for c := range s.mu.conns {
		c.Close()
		delete(s.mu.conns, c)
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

// serve relays the connections accepted on ln to the etcd server.
func (s *Server) serve(ln net.Listener) {
	wg := &sync.WaitGroup{}
	s.mu.Lock()
	s.mu.ln = ln
	s.mu.acceptWG = wg
	s.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			s.relay(c)
		}
	}()
}

func (s *Server) relay(c net.Conn) {
	s.mu.Lock()
	if s.mu.cut || s.mu.etcd == nil {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.mu.conns[c] = struct{}{}
	s.mu.Unlock()
	b, err := net.Dial("tcp", s.backend.Host)
	if err != nil {
		s.forget(c)
		c.Close()
		return
	}
	s.mu.Lock()
	if _, ok := s.mu.conns[c]; !ok { // cut or stopped meanwhile
		s.mu.Unlock()
		b.Close()
		return
	}
	s.mu.conns[b] = struct{}{}
	s.mu.Unlock()
	s.pipes.Add(2)
	go s.pipe(b, c)
	go s.pipe(c, b)
}

func (s *Server) pipe(dst, src net.Conn) {
	defer s.pipes.Done()
	io.Copy(dst, src) //nolint:errcheck // either side closing ends the relay
	dst.Close()
	src.Close()
	s.forget(dst)
	s.forget(src)
}

func (s *Server) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.mu.conns, c)
	s.mu.Unlock()
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
