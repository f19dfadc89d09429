// Package etcdtest starts real etcd servers (go.etcd.io/etcd/server/v3/embed)
// inside a test binary, on loopback ports and in t.TempDir directories, for
// the tests of package ha and of the packages that use it. Nothing here
// stands in for etcd: clients talk gRPC to the real servers through TCP
// fault proxies (test/proxytest) that let a test take etcd away and give it
// back.
//
// Start starts one member (a Server); StartCluster starts a cluster of 1, 3
// or 5 members (a Cluster) with one proxy in front of each member's client
// URL, so that a test can stop, restart or cut off a member while the
// others keep quorum, as in production. A member (or Server) can be:
//
//   - stopped: Stop resets every client connection through its proxy (new
//     ones are reset too) and shuts the member down as etcd does on
//     SIGTERM (a leader hands its leadership to a peer first); Restart
//     starts it again on the same data directory and ports, so it rejoins
//     its cluster and data and leases survive like a process restart.
//   - killed: Kill is Stop without the hand-over, as a crash: a leader
//     just disappears and the others elect a new one after their election
//     timeout.
//   - cut off: Cut drops every client connection through its proxy and
//     refuses new ones while the member keeps running (a network
//     partition between clients and that member: on a single server,
//     leases expire); Heal lets clients in again. Peer traffic is not
//     affected.
//
// StartClusterWith and StartWith take Options; with Options.ClientTLS the
// members serve clients only over TLS and require a client certificate
// signed by the given CA, as a production etcd started with
// --client-cert-auth and --trusted-ca-file does. The proxies relay bytes,
// so the TLS session runs end to end between client and member.
//
// etcdtest imports the etcd server and client (the client only to ask the
// members for their status), etcd's client/pkg transport (to load TLS
// files), zap (to silence etcd's logs), test/proxytest, test/polltest and
// the standard library. It is a test helper: only _test.go files import
// it.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/weirstream/weir/test/polltest"
	"github.com/weirstream/weir/test/proxytest"
)

const (
	// readyTimeout bounds how long StartCluster, Start and Restart wait for
	// a member to be ready to serve clients, and how long Leader and
	// WaitHealthy wait for a leader. It is generous on purpose: a slow
	// machine running tests under -race can take many seconds.
	readyTimeout = 60 * time.Second
	// portRetry bounds how long Restart retries while a member's ports
	// are still taken.
	portRetry = 5 * time.Second
	// startAttempts is how often StartCluster picks fresh ports when one
	// it picked was taken before etcd could bind it.
	startAttempts = 3
	// statusTimeout bounds one status request to one member.
	statusTimeout = 2 * time.Second
	// minBcryptCost is the lowest cost bcrypt accepts
	// (golang.org/x/crypto/bcrypt.MinCost).
	minBcryptCost = 4
)

// clusterSeq makes each cluster's token unique within the process, so
// that members of different clusters never accept each other's traffic.
var clusterSeq atomic.Int64

// TLSFiles name PEM files: a CA certificate, and a certificate with its
// private key.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// enabled reports whether any file is named.
func (f TLSFiles) enabled() bool { return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" }

// Options change what StartClusterWith and StartWith start. The zero
// value is what StartCluster and Start start: plaintext everywhere.
type Options struct {
	// ClientTLS, when set (all three files), makes every member serve
	// its clients only over TLS: it presents CertFile with KeyFile and
	// accepts only clients presenting a certificate that CAFile signed
	// (etcd's client-certificate auth). CertFile must name 127.0.0.1 (the
	// address clients dial) and allow client authentication too, because
	// the cluster's own status client presents it; the leaves of
	// security.InitCerts do both. Peer traffic stays plaintext.
	ClientTLS TLSFiles
}

// validate reports an incomplete ClientTLS.
func (o Options) validate() error {
	if f := o.ClientTLS; f.enabled() && (f.CAFile == "" || f.CertFile == "" || f.KeyFile == "") {
		return fmt.Errorf("Options.ClientTLS names %+v; name the CA, certificate and key files together, or none for plaintext", f)
	}
	return nil
}

// Cluster is a static cluster of embedded etcd members, each behind its
// own fault proxy. Its methods may be called from any goroutine, except
// that Leader, Member and Member.Restart fail the test that started the
// cluster when something is wrong, and so belong on that test's goroutine.
type Cluster struct {
	t       testing.TB
	opts    Options
	members []*Member
	token   string
	initial string // the static initial cluster: name=peerURL,...

	admin struct {
		sync.Mutex
		cli    *clientv3.Client // asks members for their status; lazily made
		closed bool
	}
}

// Member is one member of a Cluster. Its methods may be called from any
// goroutine.
type Member struct {
	c      *Cluster
	index  int
	name   string
	dir    string
	client url.URL          // the member's own client URL, behind proxy
	proxy  *proxytest.Proxy // what clients dial
	peer   url.URL          // where the member listens for its peers
	peerPx *proxytest.Proxy // what its peers dial, relaying to peer

	mu struct {
		sync.Mutex
		etcd *embed.Etcd // nil while stopped
		cut  bool
	}
}

// StartCluster starts n etcd members (n is 1, 3 or 5) as one cluster on
// free loopback ports, each with its data in its own t.TempDir and its
// client URL behind its own proxy, waits until every member is ready, and
// registers their shutdown with t.Cleanup. It fails the test if a member
// does not become ready.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, Options{})
}

// StartClusterWith is StartCluster with opts.
func StartClusterWith(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if n != 1 && n != 3 && n != 5 {
		t.Fatalf("etcdtest: StartCluster: a cluster of %d members; use 1, 3 or 5 (odd sizes, so that a majority survives 0, 1 or 2 members down)", n)
		return nil
	}
	if err := opts.validate(); err != nil {
		t.Fatalf("etcdtest: StartCluster: %v", err)
		return nil
	}
	c := &Cluster{t: t, opts: opts}
	for attempt := 1; ; attempt++ {
		err := c.launch(n)
		if err == nil {
			break
		}
		c.stopMembers()
		for _, m := range c.members {
			m.proxy.Close()
			m.peerPx.Close()
		}
		if !addrInUse(err) || attempt == startAttempts {
			t.Fatalf("etcdtest: StartCluster(%d), attempt %d: %v", n, attempt, err)
		}
	}
	// Registered after the proxies', so it runs before they close
	// (cleanups run last first).
	t.Cleanup(c.stop)

	deadline := time.Now().Add(readyTimeout)
	for _, m := range c.members {
		if err := m.waitReady(m.etcdServer(), time.Until(deadline)); err != nil {
			t.Fatalf("etcdtest: StartCluster(%d): %v", n, err)
		}
	}
	return c
}

// launch starts n members on fresh ports, proxies and data directories
// without waiting for them to be ready: a member of a new cluster is ready
// only once a majority of the members run. Peer traffic goes through a
// proxy too, only so that every peer connection ends when the test does.
func (c *Cluster) launch(n int) error {
	c.token = fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), clusterSeq.Add(1))
	addrs, err := freeAddrs(2 * n)
	if err != nil {
		return err
	}
	c.members = make([]*Member, n)
	initial := make([]string, n)
	scheme := "http"
	if c.opts.ClientTLS.enabled() {
		scheme = "https"
	}
	for i := range c.members {
		m := &Member{
			c:      c,
			index:  i,
			name:   fmt.Sprintf("member%d", i),
			dir:    c.t.TempDir(),
			client: url.URL{Scheme: scheme, Host: addrs[2*i]},
			peer:   url.URL{Scheme: "http", Host: addrs[2*i+1]},
		}
		m.proxy = proxytest.Start(c.t, m.client.Host)
		m.peerPx = proxytest.Start(c.t, m.peer.Host)
		c.members[i] = m
		initial[i] = m.name + "=" + m.PeerURL()
	}
	c.initial = strings.Join(initial, ",")
	for _, m := range c.members {
		if err := m.launch(); err != nil {
			return err
		}
	}
	return nil
}

// Endpoints are the addresses clients dial ("127.0.0.1:port"), one proxy
// per member, in member order; they stay the same across Stop and
// Restart. They carry no scheme: with Options.ClientTLS a client must be
// configured for TLS itself.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// DirectEndpoints are the members' own client URLs, bypassing the proxies,
// in member order: https:// URLs with Options.ClientTLS, else http://.
func (c *Cluster) DirectEndpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.DirectEndpoint()
	}
	return eps
}

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Member returns member i, counting from 0.
func (c *Cluster) Member(i int) *Member {
	if i < 0 || i >= len(c.members) {
		c.t.Fatalf("etcdtest: Member(%d): the cluster has members 0 to %d", i, len(c.members)-1)
		return nil
	}
	return c.members[i]
}

// quorum is how many members must run for the cluster to make progress.
func (c *Cluster) quorum() int { return len(c.members)/2 + 1 }

// Leader returns the index of the current raft leader: the member that
// says it leads and that a majority of the members acknowledge, asked with
// the maintenance Status API. It polls until there is one and fails the
// test when there is none within a minute. Call it from the goroutine of
// the test that started the cluster.
func (c *Cluster) Leader() int {
	c.t.Helper()
	if n := len(c.running()); n < c.quorum() {
		c.t.Fatalf("etcdtest: Leader: %d of %d members running; the cluster needs %d for a leader: Restart the stopped members first", n, len(c.members), c.quorum())
	}
	leader := -1
	polltest.NoError(c.t, readyTimeout, "a leader of the etcd cluster", func() error {
		var err error
		leader, err = c.leader()
		return err
	})
	return leader
}

// WaitHealthy waits until every running member answers a status request
// and all of them acknowledge the same leader, a running member. It fails
// the test when that takes over a minute, or at once when fewer than a
// majority of the members run.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	if n := len(c.running()); n < c.quorum() {
		t.Fatalf("etcdtest: WaitHealthy: %d of %d members running; the cluster needs %d for a leader: Restart the stopped members first", n, len(c.members), c.quorum())
	}
	polltest.NoError(t, readyTimeout, "every running etcd member to acknowledge one leader", func() error {
		var leader uint64
		var lead *Member
		for _, m := range c.running() {
			st, err := c.status(m)
			if err != nil {
				return err
			}
			switch {
			case st.Leader == 0:
				return fmt.Errorf("member %s (%s) knows no leader", m.name, m.client.Host)
			case leader != 0 && st.Leader != leader:
				return fmt.Errorf("members disagree on the leader: %x and %x", leader, st.Leader)
			}
			leader = st.Leader
			if st.Header.MemberId == leader {
				lead = m
			}
		}
		if lead == nil {
			return fmt.Errorf("the leader %x is not a running member", leader)
		}
		return nil
	})
}

// leader is one attempt of Leader.
func (c *Cluster) leader() (int, error) {
	votes := make(map[uint64]int)
	self := make(map[uint64]int) // members that say they lead, by id
	var errs []string
	for _, m := range c.running() {
		st, err := c.status(m)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if st.Leader != 0 {
			votes[st.Leader]++
		}
		if st.Leader == st.Header.MemberId {
			self[st.Leader] = m.index
		}
	}
	for id, n := range votes {
		if i, ok := self[id]; ok && n >= c.quorum() {
			return i, nil
		}
	}
	if len(errs) > 0 {
		return -1, fmt.Errorf("no leader acknowledged by %d members; %s", c.quorum(), strings.Join(errs, "; "))
	}
	return -1, fmt.Errorf("no leader acknowledged by %d members", c.quorum())
}

// status asks member m for its status through its own client URL.
func (c *Cluster) status(m *Member) (*clientv3.StatusResponse, error) {
	cli, err := c.adminClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	st, err := cli.Status(ctx, m.DirectEndpoint())
	if err != nil {
		return nil, fmt.Errorf("status of member %s (%s): %w", m.name, m.client.Host, err)
	}
	return st, nil
}

func (c *Cluster) adminClient() (*clientv3.Client, error) {
	c.admin.Lock()
	defer c.admin.Unlock()
	if c.admin.closed {
		return nil, errors.New("etcdtest: the cluster was stopped at the end of the test")
	}
	if c.admin.cli == nil {
		cfg := clientv3.Config{
			Endpoints:   c.DirectEndpoints(),
			DialTimeout: statusTimeout,
			Logger:      zap.NewNop(),
		}
		if f := c.opts.ClientTLS; f.enabled() {
			// The members require a client certificate from the CA; the
			// server's own certificate serves as one.
			tlsCfg, err := transport.TLSInfo{CertFile: f.CertFile, KeyFile: f.KeyFile, TrustedCAFile: f.CAFile}.ClientConfig()
			if err != nil {
				return nil, fmt.Errorf("etcdtest: status client TLS from %+v: %w", f, err)
			}
			cfg.TLS = tlsCfg
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("etcdtest: status client for %v: %w", c.DirectEndpoints(), err)
		}
		c.admin.cli = cli
	}
	return c.admin.cli, nil
}

// running returns the members that are not stopped.
func (c *Cluster) running() []*Member {
	var rs []*Member
	for _, m := range c.members {
		if m.etcdServer() != nil {
			rs = append(rs, m)
		}
	}
	return rs
}

// stop closes the status client and stops every member.
func (c *Cluster) stop() {
	c.admin.Lock()
	c.admin.closed = true
	cli := c.admin.cli
	c.admin.cli = nil
	c.admin.Unlock()
	if cli != nil {
		cli.Close()
	}
	c.stopMembers()
}

// stopMembers stops every member. Nobody needs a graceful hand-over at the
// end of a test: every connection is reset and every member's raft is
// stopped first, so that no member waits for a leadership transfer or for
// the others' peer connections, and then the members close together.
func (c *Cluster) stopMembers() {
	for _, m := range c.members {
		m.proxy.Cut()
		m.peerPx.Cut()
	}
	var es []*embed.Etcd
	for _, m := range c.members {
		if e := m.take(); e != nil {
			e.Server.HardStop()
			es = append(es, e)
		}
	}
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Go(e.Close)
	}
	wg.Wait()
}

// Name is the member's name in the cluster ("member0", ...).
func (m *Member) Name() string { return m.name }

// Endpoint is the address clients dial for this member ("127.0.0.1:port");
// it stays the same across Stop and Restart.
func (m *Member) Endpoint() string { return m.proxy.Addr() }

// DirectEndpoint is the member's own client URL, bypassing its proxy: a
// client connected here is not affected by Cut (it is by Stop).
func (m *Member) DirectEndpoint() string { return m.client.String() }

// PeerURL is the URL the other members reach this one at.
func (m *Member) PeerURL() string { return "http://" + m.peerPx.Addr() }

// DataDir is the member's data directory.
func (m *Member) DataDir() string { return m.dir }

// Running reports whether the member is started (it may still be waiting
// for a majority to be ready).
func (m *Member) Running() bool { return m.etcdServer() != nil }

// Stop resets every client connection through the member's proxy, refuses
// new ones and shuts the member down as etcd does on SIGTERM: a leader
// hands its leadership to another member first (which takes etcd's request
// timeout, about 7s, when no majority is left to elect it). It is a no-op
// when the member is already stopped.
func (m *Member) Stop() {
	m.proxy.Cut()
	m.shutdown(true)
}

// Kill is Stop without the hand-over, as a crash or SIGKILL: a leader just
// disappears and the others elect a new one once their election timeout
// passes.
func (m *Member) Kill() {
	m.proxy.Cut()
	m.shutdown(false)
}

// Restart starts a stopped member again with the same data directory and
// URLs, so that it rejoins its cluster, and lets clients in unless Cut. It
// waits until the member is ready when a majority of the members then run;
// otherwise it returns at once and the member becomes ready once enough of
// the others are restarted (WaitHealthy waits for that). It fails the test
// if the member does not come up.
func (m *Member) Restart() {
	t := m.c.t
	t.Helper()
	if m.Running() {
		t.Fatalf("etcdtest: Restart: member %s (%s) is running; call Stop first", m.name, m.Endpoint())
	}
	// The ports were ours a moment ago; the kernel may need a moment to
	// release them.
	deadline := time.Now().Add(portRetry)
	for {
		err := m.launch()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: Restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // retry pacing, not synchronisation
	}
	if len(m.c.running()) >= m.c.quorum() {
		if err := m.waitReady(m.etcdServer(), readyTimeout); err != nil {
			t.Fatalf("etcdtest: Restart: %v", err)
		}
	}
	m.mu.Lock()
	cut := m.mu.cut
	m.mu.Unlock()
	if !cut {
		m.proxy.Heal()
	}
}

// Cut drops every client connection through the member's proxy and
// refuses new ones while the member keeps running, as if the network
// between clients and this member failed.
func (m *Member) Cut() {
	m.mu.Lock()
	m.mu.cut = true
	m.mu.Unlock()
	m.proxy.Cut()
}

// Heal undoes Cut (a stopped member stays unreachable until Restart).
func (m *Member) Heal() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.cut = false
	if m.mu.etcd != nil {
		m.proxy.Heal()
	}
}

func (m *Member) etcdServer() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.etcd
}

// describe names the member and its URLs for error messages.
func (m *Member) describe() string {
	return fmt.Sprintf("member %s of %d (client %s, peer %s via %s, data %s)", m.name, len(m.c.members), m.client.String(), m.peer.String(), m.PeerURL(), m.dir)
}

// launch starts the member's etcd without waiting for it to be ready.
func (m *Member) launch() error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	// Password hashing at etcd's default cost takes seconds under -race;
	// tests that turn etcd's authentication on need it cheap, not strong.
	cfg.BcryptCost = minBcryptCost
	cfg.ListenClientUrls = []url.URL{m.client}
	cfg.AdvertiseClientUrls = []url.URL{m.client}
	cfg.ListenPeerUrls = []url.URL{m.peer}
	if f := m.c.opts.ClientTLS; f.enabled() {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       f.CertFile,
			KeyFile:        f.KeyFile,
			TrustedCAFile:  f.CAFile,
			ClientCertAuth: true,
		}
	}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peerPx.Addr()}}
	// Used only on the first start: a restarted member reads its cluster
	// from its data directory.
	cfg.InitialCluster = m.c.initial
	cfg.InitialClusterToken = m.c.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start %s: %w", m.describe(), err)
	}
	m.mu.Lock()
	m.mu.etcd = e
	m.mu.Unlock()
	return nil
}

// waitReady waits up to d for e, the member's etcd, to be ready to serve
// clients.
func (m *Member) waitReady(e *embed.Etcd, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("%s failed while starting: %w", m.describe(), err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("%s stopped while starting", m.describe())
	case <-timer.C:
		return fmt.Errorf("%s not ready after %v: it needs %d of the %d members running and reachable on their peer URLs to join; the machine may be overloaded (run fewer test binaries at once with -p)",
			m.describe(), d.Round(time.Second), m.c.quorum(), len(m.c.members))
	}
}

// take marks the member stopped and returns its etcd, nil if it was
// stopped already.
func (m *Member) take() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.mu.etcd
	m.mu.etcd = nil
	return e
}

// shutdown shuts the member's etcd down, if it runs; graceful lets a
// leader hand over its leadership first.
func (m *Member) shutdown(graceful bool) {
	e := m.take()
	if e == nil {
		return
	}
	select {
	case <-e.Server.ReadyNotify():
	default:
		// A member that never became ready would make Close wait for
		// its client listeners forever: stop its raft first.
		graceful = false
	}
	if !graceful {
		e.Server.HardStop()
	}
	e.Close()
}

// Server is a single embedded etcd member behind a fault proxy: a
// one-member Cluster. Its methods may be called from any goroutine.
type Server struct {
	c *Cluster
	m *Member
}

// Start starts an etcd server on free loopback ports with its data in a
// t.TempDir and registers its shutdown with t.Cleanup. It fails the test if
// the server does not become ready.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	c := StartClusterWith(t, 1, opts)
	return &Server{c: c, m: c.members[0]}
}

// Endpoint is the address clients dial ("127.0.0.1:port"); it stays the same
// across Stop and Restart.
func (s *Server) Endpoint() string { return s.m.Endpoint() }

// Endpoints is Endpoint as a one-element list, the shape ha.Config wants.
func (s *Server) Endpoints() []string { return []string{s.Endpoint()} }

// Cluster is the one-member cluster the server is.
func (s *Server) Cluster() *Cluster { return s.c }

// DirectEndpoints is the server's own client URL, bypassing the proxy: a
// client connected here is not affected by Cut (it is by Stop). Tests use
// it to watch the server while the other clients are cut off.
func (s *Server) DirectEndpoints() []string { return []string{s.m.DirectEndpoint()} }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.m.DataDir() }

// Stop resets every client connection, refuses new ones and shuts the
// server down. It is a no-op when the server is already stopped.
func (s *Server) Stop() { s.m.Stop() }

// Restart starts a stopped server again with the same data directory and
// ports, and lets clients in unless Cut. It fails the test if the server
// does not come up.
func (s *Server) Restart() {
	s.c.t.Helper()
	s.m.Restart()
}

// Cut drops every client connection and refuses new ones while the server
// keeps running, as if the network between clients and etcd failed.
func (s *Server) Cut() { s.m.Cut() }

// Heal undoes Cut (a stopped server stays unreachable until Restart).
func (s *Server) Heal() { s.m.Heal() }

// addrInUse reports whether err is a port taken by someone else.
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// freeAddrs returns n distinct loopback addresses with ports that were
// free a moment ago. The listeners stay open until all n are picked, so
// that the kernel cannot hand out one port twice.
func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}
