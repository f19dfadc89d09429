package clustertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/weirstream/weir/client"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/test/proxytest"

	"github.com/weirstream/weir/test/polltest"
)

// restartDelay is the supervisor's pause before starting an exited
// jobmanager again (systemd's RestartSec).
const restartDelay = 200 * time.Millisecond

// haState is the HA half of a Cluster: the jobmanager slots, their
// supervisors, and an etcd client to read the leader.
type haState struct {
	c    *Cluster
	etcd *ha.Client
	jms  []*jobManagerSlot
	cl   *client.Client // behind Cluster.Client

	// direct holds plain connections to single jobmanagers (WaitLeader
	// asks one whether it answers as the leader).
	direct struct {
		sync.Mutex
		conns map[string]*grpc.ClientConn
	}

	stopping chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup // supervisors
}

// jobManagerSlot is one supervised jobmanager: fixed ports across restarts,
// like a jobmanager on its own machine.
type jobManagerSlot struct {
	name      string
	rpc, rest string
	args      []string
	// etcd are the fault proxies to etcd, one per endpoint
	// (Options.FaultProxies), nil without.
	etcd proxytest.Group

	mu struct {
		sync.Mutex
		proc     *Process
		paused   bool
		restarts int
		err      error // the supervisor gave up
	}
}

func (s *jobManagerSlot) current() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.proc
}

func (c *Cluster) startHA() {
	t := c.t
	h := c.opts.HA
	if len(h.Endpoints) == 0 {
		t.Fatalf("clustertest: Options.HA has no etcd endpoints; pass an etcdtest.Server's Endpoints()")
	}
	if h.Prefix == "" {
		h.Prefix = "/weir-clustertest"
	}
	if h.LeaseTTL == 0 {
		h.LeaseTTL = 3 * time.Second
	}
	cfg := ha.DefaultConfig()
	cfg.Endpoints, cfg.Prefix, cfg.LeaseTTL = h.Endpoints, h.Prefix, h.LeaseTTL
	cfg.TLS = c.etcdTLSFiles(security.OperatorFile)
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	etcd, err := ha.Connect(ctx, cfg)
	cancel()
	if err != nil {
		t.Fatalf("clustertest: connect to etcd for leader reads: %v", err)
	}
	hs := &haState{c: c, etcd: etcd, stopping: make(chan struct{})}
	c.ha = hs
	for i := 0; i < c.opts.JobManagers; i++ {
		name := "jobmanager-" + strconv.Itoa(i)
		addrFile := filepath.Join(c.dir, name+".addr")
		slot := &jobManagerSlot{name: name}
		endpoints := h.Endpoints
		if c.opts.FaultProxies {
			for _, e := range h.Endpoints {
				slot.etcd = append(slot.etcd, proxytest.Start(t, e))
			}
			endpoints = slot.etcd.Addrs()
		}
		p := c.spawn(name, filepath.Join(c.bin, "jobmanager"), c.jobManagerArgs("127.0.0.1:0", "127.0.0.1:0", addrFile, endpoints))
		slot.mu.proc = p
		slot.rpc, slot.rest = c.waitAddressFile(name, addrFile)
		// Restarts reuse the ports, so the slot keeps its addresses.
		slot.args = c.jobManagerArgs(slot.rpc, slot.rest, addrFile, endpoints)
		hs.jms = append(hs.jms, slot)
		if i == 0 {
			c.JM, c.RPCAddr, c.REST = p, slot.rpc, slot.rest
		}
	}
	for i := range hs.jms {
		hs.wg.Add(1)
		go hs.supervise(i)
	}
	// The product's client, following the leader through etcd (directly:
	// the jobmanagers' etcd proxies may be cut), the standbys' hints and
	// every jobmanager's address; a call waits out a takeover until its
	// context ends, and a paused jobmanager holds it at most 2s.
	var addrs []string
	for _, s := range hs.jms {
		addrs = append(addrs, s.rpc)
	}
	cl, err := client.New(client.Config{JobManagers: addrs, EtcdEndpoints: h.Endpoints, EtcdPrefix: h.Prefix,
		WaitForLeader: true, AttemptTimeout: 2 * time.Second, TLS: c.TLSFiles(security.OperatorFile),
		EtcdTLS: c.etcdTLSFiles(security.OperatorFile)})
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	hs.cl = cl
	hs.direct.conns = make(map[string]*grpc.ClientConn)
	c.Client = cl.API()
	c.WaitLeader(0)
}

// supervise restarts jobmanager i whenever it exits, until the cluster
// stops.
func (hs *haState) supervise(i int) {
	defer hs.wg.Done()
	slot := hs.jms[i]
	for {
		p := slot.current()
		select {
		case <-hs.stopping:
			return
		case <-p.done:
		}
		select {
		case <-hs.stopping:
			return
		case <-time.After(restartDelay):
		}
		np, err := hs.c.start(slot.name, filepath.Join(hs.c.bin, "jobmanager"), slot.args)
		slot.mu.Lock()
		if err != nil {
			slot.mu.err = err
			slot.mu.Unlock()
			return
		}
		slot.mu.proc, slot.mu.paused = np, false
		slot.mu.restarts++
		slot.mu.Unlock()
	}
}

func (hs *haState) stopSupervisors() {
	hs.stopOnce.Do(func() { close(hs.stopping) })
	hs.wg.Wait()
}

func (hs *haState) close() {
	if hs.cl != nil {
		hs.cl.Close()
	}
	hs.direct.Lock()
	for _, cc := range hs.direct.conns {
		cc.Close()
	}
	hs.direct.conns = nil
	hs.direct.Unlock()
	hs.etcd.Close()
}

// conn returns a plain connection to the jobmanager at addr.
func (hs *haState) conn(addr string) (*grpc.ClientConn, error) {
	hs.direct.Lock()
	defer hs.direct.Unlock()
	if cc, ok := hs.direct.conns[addr]; ok {
		return cc, nil
	}
	m, err := hs.c.TLSFiles(security.OperatorFile).Load()
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(addr, security.DialOption(m, security.RoleJobManager))
	if err != nil {
		return nil, err
	}
	hs.direct.conns[addr] = cc
	return cc, nil
}

// EtcdProxy returns the fault proxies between jobmanager i and etcd, one
// per etcd endpoint (HA with FaultProxies).
func (c *Cluster) EtcdProxy(i int) proxytest.Group {
	c.t.Helper()
	hs := c.mustHA("EtcdProxy")
	if hs.jms[i].etcd == nil {
		c.t.Fatal("clustertest: EtcdProxy needs Options.FaultProxies")
	}
	return hs.jms[i].etcd
}

func (c *Cluster) mustHA(what string) *haState {
	c.t.Helper()
	if c.ha == nil {
		c.t.Fatalf("clustertest: %s needs a cluster started with Options.HA", what)
	}
	return c.ha
}

// JobManagers is the number of jobmanager slots.
func (c *Cluster) JobManagers() int {
	if c.ha == nil {
		return 1
	}
	return len(c.ha.jms)
}

// JobManager returns jobmanager i's current process (with HA, the latest
// the supervisor started).
func (c *Cluster) JobManager(i int) *Process {
	if c.ha == nil {
		return c.JM
	}
	return c.ha.jms[i].current()
}

// JobManagerAddrs returns jobmanager i's gRPC and REST addresses; with HA
// they stay the same across restarts.
func (c *Cluster) JobManagerAddrs(i int) (rpc, rest string) {
	if c.ha == nil {
		return c.RPCAddr, c.REST
	}
	return c.ha.jms[i].rpc, c.ha.jms[i].rest
}

// JobManagerRestarts counts how often the supervisor started an exited
// jobmanager again, over all slots. It fails the test if a supervisor gave
// up because a process could not be started.
func (c *Cluster) JobManagerRestarts() int {
	hs := c.mustHA("JobManagerRestarts")
	n := 0
	for _, s := range hs.jms {
		s.mu.Lock()
		n += s.mu.restarts
		err := s.mu.err
		s.mu.Unlock()
		if err != nil {
			c.t.Fatalf("clustertest: supervisor of %s gave up: %v", s.name, err)
		}
	}
	return n
}

// KillJobManager sends SIGKILL to jobmanager i's current process and
// waits until it died; with HA the supervisor then starts it again. It
// returns the killed process.
func (c *Cluster) KillJobManager(i int) *Process {
	p := c.JobManager(i)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return p
}

// PauseJobManager stops jobmanager i with SIGSTOP. Client skips a paused
// jobmanager (a call to it would hang until its deadline).
func (c *Cluster) PauseJobManager(i int) *Process {
	slot := c.mustHA("PauseJobManager").jms[i]
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if err := slot.mu.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", slot.name, err)
	}
	slot.mu.paused = true
	return slot.mu.proc
}

// ResumeJobManager continues jobmanager i with SIGCONT.
func (c *Cluster) ResumeJobManager(i int) {
	slot := c.mustHA("ResumeJobManager").jms[i]
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if err := slot.mu.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Fatalf("SIGCONT %s: %v", slot.name, err)
	}
	slot.mu.paused = false
}

// Leader reads the leader from etcd and returns its jobmanager slot and
// fencing epoch. i is -1 when no jobmanager leads, or when the leader is
// not one of this cluster's jobmanagers; err is etcd's error (e.g. while
// etcd is down).
func (c *Cluster) Leader() (i int, epoch int64, err error) {
	hs := c.mustHA("Leader")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	li, err := hs.etcd.Leader(ctx)
	if err != nil {
		if errors.Is(err, ha.ErrNoLeader) {
			return -1, 0, nil
		}
		return -1, 0, err
	}
	return hs.slotOf(li.Address), li.Epoch, nil
}

func (hs *haState) slotOf(addr string) int {
	for i, s := range hs.jms {
		if s.rpc == addr {
			return i
		}
	}
	return -1
}

// WaitLeader waits until one of the cluster's jobmanagers leads with an
// epoch above after, is neither exited nor paused, and answers JobService
// calls (it finished taking over); it returns the leader's slot and epoch.
func (c *Cluster) WaitLeader(after int64) (i int, epoch int64) {
	c.t.Helper()
	hs := c.mustHA("WaitLeader")
	polltest.Eventually(c.t, 2*time.Minute, fmt.Sprintf("a jobmanager to lead with an epoch above %d", after), func() bool {
		var err error
		i, epoch, err = c.Leader()
		if err != nil || i < 0 || epoch <= after {
			return false
		}
		slot := hs.jms[i]
		slot.mu.Lock()
		p, paused := slot.mu.proc, slot.mu.paused
		slot.mu.Unlock()
		if paused || p.Exited() {
			return false
		}
		conn, err := hs.conn(slot.rpc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = weirpb.NewJobServiceClient(conn).ListJobs(ctx, &weirpb.ListJobsRequest{})
		return err == nil
	})
	return i, epoch
}
