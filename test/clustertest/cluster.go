// Package clustertest starts a real Weir cluster for tests: a jobmanager and
// taskmanagers as separate operating-system processes, built from ./cmd with
// the race detector, listening on loopback ports chosen by the kernel. It
// offers what fault tests need: submit a job, wait for a state, kill and
// restart a taskmanager. Every process is stopped by t.Cleanup, and the tail
// of each process's log is printed when a test fails.
//
// With Options.HA the cluster runs in ha: etcd mode against an etcd the
// test provides (ha/etcdtest): several jobmanagers campaign, taskmanagers
// and the CLI find the leader through etcd, and the harness acts as the
// jobmanagers' supervisor (systemd's Restart=always): a jobmanager process
// that exits — killed, or stepping down after losing its leadership — is
// started again on the same ports and stands by. Leader reads the leader
// from etcd, KillJobManager/PauseJobManager/ResumeJobManager hit one
// jobmanager, and Client follows the leader. The logs of every process the
// cluster ever started, exited ones included, stay readable (CountLogLines).
//
// With Options.FaultProxies every network path of a taskmanager runs
// through a TCP fault proxy (proxytest) that a test can cut, drop, delay
// and heal: the jobmanager's calls to it, other taskmanagers' data to it,
// and its calls to the jobmanager (Proxies). A taskmanager advertises the
// proxies' addresses, which stay the same across its restarts. With HA each
// jobmanager also reaches etcd through one (EtcdProxy).
//
// Options.TaskManagerEnv and Options.TaskManagerWrapper shape each
// taskmanager's process, e.g. GOMAXPROCS and a taskset CPU list for a
// benchmark that gives every taskmanager its share of the machine.
//
// Cluster.Client is the product's job API client (package client), so
// that the fault tests exercise it: with HA it follows the leader through
// etcd, standbys' hints and every jobmanager's address.
//
// The process-test packages under test/ share the rest: the sequence
// workload, an exactly-once job whose output is known in advance
// (SequenceJob); waits that pace faults by a job's progress
// (WaitCheckpointsSince, WaitProgress, RecoveryTimes, FinishAndVerify);
// the HA fault tests' cluster (StartHA); and readers of what jobs
// committed (CommittedRows, CommittedWindows, CheckRunningCounts).
//
// clustertest imports client, ha (to read the leader from etcd), proxytest
// (Options.FaultProxies), polltest, the generated gRPC code and the
// standard library.
package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/blobstore/s3store"
	"github.com/weirstream/weir/client"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/proxytest"

	"github.com/weirstream/weir/test/polltest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	// builtHere records that buildDir is a temporary directory this
	// process made, which Main removes.
	builtHere bool
	// inMain records that the test binary runs through Main.
	inMain bool
)

// Main runs the tests of a package that starts clusters and then removes
// the binaries Binaries built for them (about 250 MB a package, which
// would otherwise stay in $TMPDIR after every run). Every such package
// calls it from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
func Main(m *testing.M) int {
	inMain = true
	code := m.Run()
	if builtHere {
		os.RemoveAll(buildDir)
	}
	return code
}

// EnvBinaries names a directory of test/testbin's jobmanager, taskmanager
// and weir built beforehand, with the race detector exactly when the tests
// are: `make test` builds them once for every process-test package instead
// of each package's test binary building its own.
const EnvBinaries = "WEIR_TEST_BINARIES"

// Binaries builds jobmanager, taskmanager and weir once per test binary (with
// the race detector when the test binary has it) and returns their
// directory, or returns the directory EnvBinaries names. They are
// test/testbin's: the stock commands with the failure-injection operator
// registered too.
func Binaries(t testing.TB) string {
	t.Helper()
	if !inMain {
		t.Fatalf("clustertest: the package's TestMain must run the tests through clustertest.Main, which removes the binaries built for them: func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }")
	}
	buildOnce.Do(func() {
		if dir := os.Getenv(EnvBinaries); dir != "" {
			for _, name := range []string{"jobmanager", "taskmanager", "weir"} {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					buildErr = fmt.Errorf("%s=%s: %v; build them with `go build -race -o DIR/ ./test/testbin/...` or unset it", EnvBinaries, dir, err)
					return
				}
			}
			buildDir = dir
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		buildDir, err = os.MkdirTemp("", "weir-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtHere = true
		args := []string{"build", "-o", buildDir + "/"}
		if raceEnabled {
			args = append(args, "-race")
		}
		// The test binaries: the stock commands with the test operator
		// registry (the failure-injection operator besides the built-in
		// ones).
		cmd := exec.Command("go", append(args, "./test/testbin/jobmanager", "./test/testbin/taskmanager", "./test/testbin/weir")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("clustertest: %v", buildErr)
	}
	return buildDir
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the weir module")
	}
	return filepath.Dir(mod), nil
}

// Options shape a cluster.
type Options struct {
	TaskManagers int // default 2
	Slots        int // per taskmanager, default 2
	// JobManagers is how many jobmanager processes run (default 1). More
	// than one needs HA.
	JobManagers int
	// HA, if not nil, runs the cluster in ha: etcd mode.
	HA *HA
	// HeartbeatInterval and HeartbeatTimeout for the jobmanager (defaults
	// 1s and 10s).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// SlotWaitTimeout for the jobmanager (default 30s).
	SlotWaitTimeout time.Duration
	// Env is added to every process's environment (e.g. WEIR_S3_*).
	Env []string
	// LogLevel of the processes (default debug).
	LogLevel string
	// TaskManagerArgs are added to every taskmanager's command line.
	TaskManagerArgs []string
	// TaskManagerEnv, if not nil, returns what is added to taskmanager
	// i's environment after Env (e.g. GOMAXPROCS=1), at its first start
	// and at every restart.
	TaskManagerEnv func(i int) []string
	// TaskManagerWrapper, if not nil, returns the command that taskmanager
	// i is started under, at its first start and at every restart: the
	// taskmanager's executable and arguments are appended to it (e.g.
	// {"taskset", "-c", "0"}); nil or empty runs the taskmanager directly.
	// The wrapper must exec the taskmanager in its own process, as taskset
	// and env do, so that Pid, the signals the harness sends and what
	// /proc says about the process are the taskmanager's.
	TaskManagerWrapper func(i int) []string
	// JobManagerArgs are added to every jobmanager's command line.
	JobManagerArgs []string
	// S3 starts a versitygw S3 server (blobstoretest) with the bucket
	// blobstoretest.VersityBucket, behind a fault proxy, and gives every
	// process the WEIR_S3_* environment to reach it: jobs can keep their
	// checkpoints at s3://weir-test/<prefix>. Cluster.S3 returns it. With
	// TLS it serves https with a certificate from the cluster's CA
	// (WEIR_S3_CA_FILE), as an etcd the cluster starts serves TLS.
	S3 bool
	// PlaintextS3 keeps S3 on http even with TLS, for a test whose fault
	// proxy must read the requests (proxytest.Proxy.CutWhen).
	PlaintextS3 bool
	// TLS turns on mutual TLS everywhere: the harness issues a development
	// CA and certificates for every role (security.InitCerts), each
	// process gets its own, the harness's client and Weir the operator's,
	// and HTTPClient the reader's.
	TLS bool
	// FaultProxies puts a TCP fault proxy (proxytest) on each network path
	// of every taskmanager: the jobmanager's calls to it, other
	// taskmanagers' data to it, and (without HA) its calls to the
	// jobmanager. Proxies(i) returns them.
	FaultProxies bool
}

// TMProxies are the fault proxies on the network paths of one
// taskmanager; they stay the same across its restarts.
type TMProxies struct {
	// Control carries the jobmanager's calls to the taskmanager (its
	// advertised address).
	Control *proxytest.Proxy
	// Data carries the other taskmanagers' data streams to it (its
	// advertised exchange address).
	Data *proxytest.Proxy
	// JobManager carries its calls to the jobmanager (nil with HA, where
	// it finds the leader through etcd).
	JobManager *proxytest.Proxy
}

// HA configures ha: etcd mode.
type HA struct {
	// Endpoints of the etcd the cluster uses, e.g. etcdtest.Server's
	// Endpoints(). Empty: the cluster starts an etcd of its own
	// (etcdtest) of EtcdMembers members, which Cluster.EtcdCluster
	// returns (and Cluster.Etcd, for one member).
	Endpoints []string
	// EtcdMembers is the size of the etcd the cluster starts: 1 (the
	// default), 3 or 5.
	EtcdMembers int
	// Prefix is the cluster's etcd key prefix (default "/weir-clustertest").
	Prefix string
	// LeaseTTL is the jobmanagers' leader lease TTL (default 3s): a killed
	// leader blocks a takeover for up to this long.
	LeaseTTL time.Duration
}

// Process is one running Weir process.
type Process struct {
	Name    string
	cmd     *exec.Cmd
	log     string
	args    []string
	started time.Time
	done    chan struct{}
	// addrFile is where a taskmanager writes its address (--address-file).
	addrFile string
}

// Cluster is a running jobmanager (or, with HA, several) with its
// taskmanagers.
type Cluster struct {
	t   testing.TB
	bin string
	dir string
	// singleArgs are the ha: none jobmanager's arguments for a restart
	// (RestartJobManager).
	singleArgs []string
	opts       Options
	// RPCAddr and REST are the addresses of jobmanager 0. Without HA that
	// is the jobmanager; with HA it may be a standby (use Client, Leader).
	RPCAddr string
	REST    string
	// JM is jobmanager 0 as first started. With HA use JobManager(i),
	// which follows the supervisor's restarts.
	JM  *Process
	TMs []*Process
	// Client is a JobService client (package client). With HA it follows
	// the leader: a call answered Unavailable (a standby, a dead or paused
	// jobmanager) is retried on the leader until its context ends, so use
	// contexts with deadlines.
	Client weirpb.JobServiceClient
	cl     *client.Client // without HA

	ha   *haState         // nil without HA
	s3   *S3              // Options.S3
	etcd *etcdtest.Server // started by the cluster (HA without endpoints, one member)
	// certs is the directory of the development certificates (Options.TLS),
	// "" without; etcdTLS says the cluster started its etcd with TLS.
	certs   string
	etcdTLS bool
	// etcdCluster is the etcd the cluster started (HA without endpoints).
	etcdCluster *etcdtest.Cluster

	proxies []*TMProxies // by taskmanager index, with FaultProxies

	mu struct {
		sync.Mutex
		all []*Process // every process ever started, in order
	}
}

// Start launches a cluster and waits until every taskmanager registered
// (and, with HA, until a jobmanager leads).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.TaskManagers == 0 {
		opts.TaskManagers = 2
	}
	if opts.Slots == 0 {
		opts.Slots = 2
	}
	if opts.JobManagers == 0 {
		opts.JobManagers = 1
	}
	if opts.JobManagers > 1 && opts.HA == nil {
		t.Fatalf("clustertest: %d jobmanagers need Options.HA (etcd); set HA or use one jobmanager", opts.JobManagers)
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "debug"
	}
	c := &Cluster{t: t, bin: Binaries(t), dir: t.TempDir(), opts: opts}
	if opts.TLS {
		c.certs = filepath.Join(c.dir, "tls")
		ids := make([]string, opts.TaskManagers)
		for i := range ids {
			ids[i] = "tm-" + strconv.Itoa(i)
		}
		if _, err := security.InitCerts(c.certs, security.CertOptions{TaskManagers: ids}); err != nil {
			t.Fatalf("clustertest: certificates: %v", err)
		}
	}
	// Dependencies first: their cleanups then run after the processes
	// stopped. With TLS, etcd and S3 serve TLS too, with certificates
	// from the same CA.
	if opts.HA != nil && len(opts.HA.Endpoints) == 0 {
		ha := *opts.HA
		var eopts etcdtest.Options
		if c.certs != "" {
			eopts.ClientTLS = etcdtest.TLSFiles(security.Files(c.certs, security.JobManagerFile))
			c.etcdTLS = true
		}
		if ha.EtcdMembers <= 1 {
			c.etcd = etcdtest.StartWith(t, eopts)
			c.etcdCluster = c.etcd.Cluster()
		} else {
			c.etcdCluster = etcdtest.StartClusterWith(t, ha.EtcdMembers, eopts)
		}
		ha.Endpoints = c.etcdCluster.Endpoints()
		c.opts.HA = &ha
	}
	if opts.S3 {
		var gw *blobstoretest.VersityGW
		s3env := []string{blobstore.EnvS3Insecure + "=true"}
		if c.certs != "" && !opts.PlaintextS3 {
			f := security.Files(c.certs, security.JobManagerFile)
			gw = blobstoretest.StartVersityGWServerTLS(t, blobstoretest.VersityGWTLS{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile})
			s3env = []string{blobstore.EnvS3CAFile + "=" + f.CAFile}
		} else {
			gw = blobstoretest.StartVersityGWServer(t)
		}
		c.s3 = &S3{Server: gw, Proxy: proxytest.Start(t, gw.Endpoint()), Bucket: blobstoretest.VersityBucket}
		c.opts.Env = append(slices.Clone(opts.Env), append(s3env, blobstore.EnvS3Endpoint+"="+c.s3.Proxy.Addr(),
			blobstore.EnvS3AccessKey+"="+gw.AccessKey, blobstore.EnvS3SecretKey+"="+gw.SecretKey)...)
	}
	opts = c.opts
	t.Cleanup(c.stop)

	if opts.HA != nil {
		c.startHA()
	} else {
		c.startSingle()
	}
	for i := 0; i < opts.TaskManagers; i++ {
		c.TMs = append(c.TMs, c.startTaskManager(i, "127.0.0.1:0"))
	}
	c.waitLive(opts.TaskManagers, true)
	return c
}

// startSingle starts the one jobmanager of ha: none.
func (c *Cluster) startSingle() {
	addrFile := filepath.Join(c.dir, "jobmanager.addr")
	c.JM = c.spawn("jobmanager", filepath.Join(c.bin, "jobmanager"), c.jobManagerArgs("127.0.0.1:0", "127.0.0.1:0", addrFile, nil))
	c.RPCAddr, c.REST = c.waitAddressFile("jobmanager", addrFile)
	// Restarts reuse the ports, so that taskmanagers and clients find it.
	c.singleArgs = c.jobManagerArgs(c.RPCAddr, c.REST, addrFile, nil)
	cl, err := client.New(client.Config{JobManagers: []string{c.RPCAddr}, TLS: c.TLSFiles(security.OperatorFile)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.cl = cl
	c.Client = cl.API()
}

// jobManagerArgs are the flags every jobmanager gets; with HA it reaches
// etcd at etcdEndpoints.
func (c *Cluster) jobManagerArgs(rpc, rest, addrFile string, etcdEndpoints []string) []string {
	args := []string{"--rpc-address", rpc, "--rest-address", rest, "--address-file", addrFile, "--log-level", c.opts.LogLevel}
	args = append(args, c.tlsArgs(security.JobManagerFile)...)
	if c.opts.HeartbeatInterval > 0 {
		args = append(args, "--heartbeat-interval", c.opts.HeartbeatInterval.String())
	}
	if c.opts.HeartbeatTimeout > 0 {
		args = append(args, "--heartbeat-timeout", c.opts.HeartbeatTimeout.String())
	}
	if c.opts.SlotWaitTimeout > 0 {
		args = append(args, "--slot-wait-timeout", c.opts.SlotWaitTimeout.String())
	}
	if c.opts.HA == nil {
		// Its jobs survive a restart (RestartJobManager).
		args = append(args, "--data-dir", filepath.Join(c.dir, "jobmanager-data"))
	}
	if h := c.opts.HA; h != nil {
		args = append(args, c.etcdTLSArgs(security.JobManagerFile)...)
		args = append(args, "--ha", "etcd", "--ha-etcd-endpoints", strings.Join(etcdEndpoints, ","),
			"--ha-prefix", h.Prefix, "--ha-lease-ttl", h.LeaseTTL.String())
	}
	return append(args, c.opts.JobManagerArgs...)
}

// waitAddressFile waits until a jobmanager wrote its bound addresses.
func (c *Cluster) waitAddressFile(name, path string) (rpc, rest string) {
	c.t.Helper()
	polltest.Eventually(c.t, 60*time.Second, name+" writes its address file", func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		var a map[string]string
		if json.Unmarshal(data, &a) != nil {
			return false
		}
		rpc, rest = a["rpc"], a["rest"]
		return rpc != ""
	})
	return rpc, rest
}

// startTaskManager starts taskmanager i listening on rpcAddr.
func (c *Cluster) startTaskManager(i int, rpcAddr string) *Process {
	id := "tm-" + strconv.Itoa(i)
	addrFile := filepath.Join(c.dir, fmt.Sprintf("%s-%d.addr", id, time.Now().UnixNano()))
	// Local state under the test's directory, one per taskmanager id (a
	// restarted taskmanager finds its predecessor's, as on a real host).
	args := []string{"--id", id, "--rpc-address", rpcAddr, "--address-file", addrFile, "--metrics-address", "127.0.0.1:0",
		"--slots", strconv.Itoa(c.opts.Slots), "--log-level", c.opts.LogLevel, "--state-dir", c.StateDir(i)}
	args = append(args, c.tlsArgs(security.TaskManagerFile(id))...)
	px := c.tmProxies(i)
	jm := c.RPCAddr
	if px != nil {
		args = append(args, "--advertise-address", px.Control.Addr(), "--exchange-advertise-address", px.Data.Addr())
		if px.JobManager != nil {
			jm = px.JobManager.Addr()
		}
	}
	if h := c.opts.HA; h != nil {
		args = append(args, "--ha", "etcd", "--ha-etcd-endpoints", strings.Join(h.Endpoints, ","), "--ha-prefix", h.Prefix)
		args = append(args, c.etcdTLSArgs(security.TaskManagerFile(id))...)
	} else {
		args = append(args, "--jobmanager", jm)
	}
	args = append(args, c.opts.TaskManagerArgs...)
	var env, wrapper []string
	if c.opts.TaskManagerEnv != nil {
		env = c.opts.TaskManagerEnv(i)
	}
	if c.opts.TaskManagerWrapper != nil {
		wrapper = c.opts.TaskManagerWrapper(i)
	}
	p, err := c.startWith(id, wrapper, filepath.Join(c.bin, "taskmanager"), args, env)
	if err != nil {
		c.t.Fatal(err)
	}
	p.addrFile = addrFile
	if px != nil {
		// The proxies hold the connections that arrive before the
		// taskmanager's port is known.
		addr, _ := c.processAddr(p)
		px.Control.SetTarget(addr)
		px.Data.SetTarget(c.addressFile(p)["exchange"])
	}
	return p
}

// StateDir is taskmanager i's local state directory (--state-dir).
func (c *Cluster) StateDir(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("tm-%d-state", i))
}

// tmProxies returns taskmanager i's fault proxies (made at its first
// start), or nil without FaultProxies.
func (c *Cluster) tmProxies(i int) *TMProxies {
	if !c.opts.FaultProxies {
		return nil
	}
	for len(c.proxies) <= i {
		c.proxies = append(c.proxies, nil)
	}
	if c.proxies[i] == nil {
		px := &TMProxies{Control: proxytest.Start(c.t, ""), Data: proxytest.Start(c.t, "")}
		if c.opts.HA == nil {
			px.JobManager = proxytest.Start(c.t, c.RPCAddr)
		}
		c.proxies[i] = px
	}
	return c.proxies[i]
}

// Proxies returns taskmanager i's fault proxies (Options.FaultProxies).
func (c *Cluster) Proxies(i int) *TMProxies {
	c.t.Helper()
	if !c.opts.FaultProxies {
		c.t.Fatal("clustertest: Proxies needs Options.FaultProxies")
	}
	return c.proxies[i]
}

func (c *Cluster) spawn(name, exe string, args []string) *Process {
	c.t.Helper()
	p, err := c.start(name, exe, args)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// start starts a process; unlike spawn it may be called from any
// goroutine (the jobmanager supervisor).
func (c *Cluster) start(name, exe string, args []string) (*Process, error) {
	return c.startWith(name, nil, exe, args, nil)
}

// startWith is start with the command run under wrapper (if not empty:
// wrapper's executable gets wrapper's arguments, exe and args) and env
// added to the environment after Options.Env.
func (c *Cluster) startWith(name string, wrapper []string, exe string, args, env []string) (*Process, error) {
	logPath := filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("clustertest: log file for %s: %w", name, err)
	}
	argv := append(append(slices.Clone(wrapper), exe), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), c.opts.Env...), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("clustertest: start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, log: logPath, args: args, started: time.Now(), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	c.mu.Lock()
	c.mu.all = append(c.mu.all, p)
	c.mu.Unlock()
	return p, nil
}

// Processes returns every process the cluster started, exited ones
// included, in start order.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.mu.all...)
}

// CountLogLines counts the lines containing substr in the logs of every
// process the cluster started, exited ones included.
func (c *Cluster) CountLogLines(substr string) int {
	n := 0
	for _, p := range c.Processes() {
		for _, line := range strings.Split(p.Log(), "\n") {
			if strings.Contains(line, substr) {
				n++
			}
		}
	}
	return n
}

// Pid returns the operating-system process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log returns what the process has written so far.
func (p *Process) Log() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// RestartJobManager starts the jobmanager of ha: none again, on the same
// addresses and with the same data directory, killing it first (SIGKILL)
// if it still runs. With HA, KillJobManager's supervisor restarts.
func (c *Cluster) RestartJobManager() {
	c.t.Helper()
	if c.ha != nil {
		c.t.Fatal("clustertest: RestartJobManager is for ha: none; with HA use KillJobManager")
	}
	if !c.JM.Exited() {
		c.KillJobManager(0)
	}
	addrFile := filepath.Join(c.dir, "jobmanager.addr")
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		c.t.Fatal(err)
	}
	// The kernel may take a moment to release the ports; retry.
	polltest.Eventually(c.t, 60*time.Second, "the jobmanager restarts on its ports", func() bool {
		p, err := c.start("jobmanager", filepath.Join(c.bin, "jobmanager"), c.singleArgs)
		if err != nil {
			c.t.Fatal(err)
		}
		for !p.Exited() {
			if data, err := os.ReadFile(addrFile); err == nil && len(data) > 0 {
				c.JM = p
				return true
			}
			time.Sleep(20 * time.Millisecond) // polling the process, not synchronisation
		}
		return false
	})
	c.waitAddressFile("jobmanager", addrFile)
}

// KillTaskManager sends SIGKILL to taskmanager i and waits for it to die.
func (c *Cluster) KillTaskManager(i int) {
	p := c.TMs[i]
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// PauseTaskManager stops taskmanager i with SIGSTOP; ResumeTaskManager
// continues it with SIGCONT.
func (c *Cluster) PauseTaskManager(i int) {
	if err := c.TMs[i].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", c.TMs[i].Name, err)
	}
}

// ResumeTaskManager continues a paused taskmanager.
func (c *Cluster) ResumeTaskManager(i int) {
	if err := c.TMs[i].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", c.TMs[i].Name, err)
	}
}

// RestartTaskManager starts taskmanager i again with the same id, on a
// port the kernel picks.
func (c *Cluster) RestartTaskManager(i int) {
	if !c.TMs[i].Exited() {
		c.KillTaskManager(i)
	}
	c.TMs[i] = c.startTaskManager(i, "127.0.0.1:0")
}

// RestartTaskManagerSamePort starts taskmanager i again with the same id
// on the address it listened on (as a service manager restarts a
// taskmanager with a fixed port), killing it first if it still runs.
func (c *Cluster) RestartTaskManagerSamePort(i int) {
	c.t.Helper()
	addr, _ := c.TaskManagerAddr(i)
	if !c.TMs[i].Exited() {
		c.KillTaskManager(i)
	}
	c.TMs[i] = c.startTaskManager(i, addr)
}

// TaskManagerAddr waits until taskmanager i listens and returns its address
// and its process instance id.
func (c *Cluster) TaskManagerAddr(i int) (addr, instance string) {
	c.t.Helper()
	return c.processAddr(c.TMs[i])
}

// TaskManagerMetricsAddr waits until taskmanager i listens and returns the
// address of its Prometheus metrics (http://ADDR/metrics).
func (c *Cluster) TaskManagerMetricsAddr(i int) string {
	c.t.Helper()
	return c.addressFile(c.TMs[i])["metrics"]
}

// processAddr waits until taskmanager process p wrote its address file and
// returns its bound address and process instance id.
func (c *Cluster) processAddr(p *Process) (addr, instance string) {
	c.t.Helper()
	a := c.addressFile(p)
	return a["rpc"], a["instance"]
}

// addressFile waits until taskmanager process p wrote its address file and
// returns what it holds.
func (c *Cluster) addressFile(p *Process) (a map[string]string) {
	c.t.Helper()
	polltest.Eventually(c.t, 60*time.Second, p.Name+" writes its address file", func() bool {
		if p.Exited() {
			c.t.Fatalf("clustertest: %s exited (%s); log tail:\n%s", p.Name, p.cmd.ProcessState, tail(p.Log(), 20))
		}
		data, err := os.ReadFile(p.addrFile)
		if err != nil {
			return false
		}
		if json.Unmarshal(data, &a) != nil {
			return false
		}
		return a["rpc"] != ""
	})
	return a
}

// WaitLiveTaskManagers waits until the jobmanager lists n live taskmanagers.
func (c *Cluster) WaitLiveTaskManagers(n int) {
	c.t.Helper()
	c.waitLive(n, false)
}

// waitLive is WaitLiveTaskManagers; at start-up (failFast) a taskmanager
// that exits fails the test at once with its log.
func (c *Cluster) waitLive(n int, failFast bool) {
	c.t.Helper()
	polltest.Eventually(c.t, 60*time.Second, fmt.Sprintf("%d live taskmanagers", n), func() bool {
		if failFast {
			for _, p := range c.TMs {
				if p.Exited() {
					c.t.Fatalf("clustertest: %s exited while starting (%s); log tail:\n%s", p.Name, p.cmd.ProcessState, tail(p.Log(), 20))
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := c.Client.ListTaskManagers(ctx, &weirpb.ListTaskManagersRequest{})
		if err != nil {
			return false
		}
		live := 0
		for _, tm := range resp.GetTaskmanagers() {
			if tm.GetLive() {
				live++
			}
		}
		return live >= n
	})
}

// Submit submits a planned or unplanned graph and returns the job id.
func (c *Cluster) Submit(g *stream.JobGraph) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Client.SubmitJob(ctx, &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g)})
	if err != nil {
		c.t.Fatalf("submit %s: %v", g.Name, err)
	}
	return resp.GetJobId()
}

// Job returns the job's current detail.
func (c *Cluster) Job(id string) (*weirpb.GetJobResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Client.GetJob(ctx, &weirpb.GetJobRequest{JobId: id})
}

// WaitJob waits until the job reaches a terminal state and returns it.
func (c *Cluster) WaitJob(id string, timeout time.Duration) *weirpb.GetJobResponse {
	c.t.Helper()
	return c.WaitJobWhile(id, timeout, nil)
}

// WaitJobWhile is WaitJob that also calls during (if not nil) at every poll.
func (c *Cluster) WaitJobWhile(id string, timeout time.Duration, during func()) *weirpb.GetJobResponse {
	c.t.Helper()
	var last *weirpb.GetJobResponse
	polltest.Eventually(c.t, timeout, "job "+id+" ends", func() bool {
		if during != nil {
			during()
		}
		resp, err := c.Job(id)
		if err != nil {
			return false
		}
		last = resp
		switch resp.GetJob().GetState() {
		case weirpb.JobState_JOB_STATE_FINISHED, weirpb.JobState_JOB_STATE_CANCELED, weirpb.JobState_JOB_STATE_FAILED:
			return true
		}
		return false
	})
	return last
}

// Checkpoints lists the job's checkpoints.
func (c *Cluster) Checkpoints(id string) (*weirpb.ListCheckpointsResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Client.ListCheckpoints(ctx, &weirpb.ListCheckpointsRequest{JobId: id})
}

// JobRestarts returns how often the job was restarted since the current
// jobmanager (or leader) started it: its tasks' current attempt number
// within the jobmanager's term, minus one.
func (c *Cluster) JobRestarts(id string) int {
	c.t.Helper()
	resp, err := c.Job(id)
	if err != nil {
		c.t.Fatalf("job %s: %v", id, err)
	}
	var attempt int64
	for _, t := range resp.GetTasks() {
		attempt = max(attempt, t.GetId().GetAttempt())
	}
	return int(stream.DeploymentOf(attempt)) - 1
}

// Weir runs the weir CLI against the cluster and returns its combined
// output and exit error. With HA the CLI finds the leader through etcd.
func (c *Cluster) Weir(args ...string) (string, error) {
	target := []string{"--jobmanager", c.RPCAddr}
	if h := c.opts.HA; h != nil {
		target = []string{"--ha-etcd-endpoints", strings.Join(h.Endpoints, ","), "--ha-prefix", h.Prefix}
	}
	target = append(target, c.tlsArgs(security.OperatorFile)...)
	if c.opts.HA != nil {
		target = append(target, c.etcdTLSArgs(security.OperatorFile)...)
	}
	cmd := exec.Command(filepath.Join(c.bin, "weir"), append(target, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *Cluster) stop() {
	if c.ha != nil {
		c.ha.stopSupervisors() // no restarts from here on
	}
	if c.cl != nil {
		c.cl.Close()
	}
	var live []*Process
	for _, p := range c.Processes() {
		if !p.Exited() {
			live = append(live, p)
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it paused
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range live {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if c.ha != nil {
		c.ha.close()
	}
	if c.t.Failed() {
		c.DumpLogs(60)
	}
}

// DumpLogs logs the last n lines of every process the cluster started
// (exited ones get n/3 lines), for failure reports.
func (c *Cluster) DumpLogs(n int) {
	for _, p := range c.Processes() {
		lines, state := n, "running"
		if p.Exited() {
			lines, state = max(n/3, 10), "exited: "+p.cmd.ProcessState.String()
		}
		c.t.Logf("---- %s (pid %d, started %s, %s) log (tail) ----\n%s", p.Name, p.Pid(), p.started.Format("15:04:05.000"), state, tail(p.Log(), lines))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// S3 is the S3 server a cluster started (Options.S3): the processes reach
// it through Proxy.
type S3 struct {
	Server *blobstoretest.VersityGW
	Proxy  *proxytest.Proxy
	Bucket string
}

// Restart starts the server again (after Server.Kill, say) and points the
// proxy at it.
func (s *S3) Restart() {
	s.Server.Restart()
	s.Proxy.SetTarget(s.Server.Endpoint())
}

// URI is the storage URI of prefix in the bucket.
func (s *S3) URI(prefix string) string { return "s3://" + s.Bucket + "/" + prefix }

// Store opens prefix of the bucket directly, not through the proxy.
func (s *S3) Store(t testing.TB, prefix string) blobstore.Store {
	t.Helper()
	st, err := s3store.New(t.Context(), s.Server.S3Config(prefix))
	if err != nil {
		t.Fatalf("clustertest: open S3 prefix %s: %v", prefix, err)
	}
	return st
}

// S3 returns the S3 server the cluster started (Options.S3).
func (c *Cluster) S3() *S3 {
	c.t.Helper()
	if c.s3 == nil {
		c.t.Fatal("clustertest: S3 needs Options.S3")
	}
	return c.s3
}

// TLSFiles is the TLS config of certificate file cert (security's file
// names) with Options.TLS, else the zero config (plaintext).
func (c *Cluster) TLSFiles(cert string) security.TLSConfig {
	if c.certs == "" {
		return security.TLSConfig{}
	}
	return security.Files(c.certs, cert)
}

// tlsArgs are the --tls-* flags for certificate file cert, none without
// Options.TLS.
func (c *Cluster) tlsArgs(cert string) []string {
	f := c.TLSFiles(cert)
	if !f.Enabled() {
		return nil
	}
	return []string{"--tls-ca", f.CAFile, "--tls-cert", f.CertFile, "--tls-key", f.KeyFile}
}

// etcdTLSFiles is the TLS config for etcd of certificate file cert: the
// zero config unless the cluster started etcd itself with Options.TLS.
func (c *Cluster) etcdTLSFiles(cert string) ha.TLSFiles {
	if !c.etcdTLS {
		return ha.TLSFiles{}
	}
	return ha.TLSFiles(c.TLSFiles(cert))
}

// etcdTLSArgs are the --ha-etcd-* flags for certificate file cert (see
// etcdTLSFiles).
func (c *Cluster) etcdTLSArgs(cert string) []string {
	f := c.etcdTLSFiles(cert)
	if !f.Enabled() {
		return nil
	}
	return []string{"--ha-etcd-ca", f.CAFile, "--ha-etcd-cert", f.CertFile, "--ha-etcd-key", f.KeyFile}
}

// HTTPClient is a client for the REST API and the metrics endpoints: with
// Options.TLS it presents the reader's certificate (URL gives https).
func (c *Cluster) HTTPClient() *http.Client {
	c.t.Helper()
	if c.certs == "" {
		return &http.Client{Timeout: 30 * time.Second}
	}
	m, err := c.TLSFiles(security.ReaderFile).Load()
	if err != nil {
		c.t.Fatalf("clustertest: %v", err)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: m.ClientConfig(security.RoleJobManager)}}
}

// URL is the base URL of a REST or metrics address of the cluster.
func (c *Cluster) URL(addr string) string {
	if c.certs == "" {
		return "http://" + addr
	}
	return "https://" + addr
}

// Etcd returns the one-member etcd the cluster started (HA without
// endpoints or EtcdMembers).
func (c *Cluster) Etcd() *etcdtest.Server {
	c.t.Helper()
	if c.etcd == nil {
		c.t.Fatal("clustertest: Etcd: the cluster started no one-member etcd; use Options.HA without endpoints or EtcdMembers")
	}
	return c.etcd
}

// EtcdCluster returns the etcd the cluster started (HA without
// endpoints), of HA.EtcdMembers members.
func (c *Cluster) EtcdCluster() *etcdtest.Cluster {
	c.t.Helper()
	if c.etcdCluster == nil {
		c.t.Fatal("clustertest: EtcdCluster: the cluster started no etcd; use Options.HA without endpoints")
	}
	return c.etcdCluster
}
