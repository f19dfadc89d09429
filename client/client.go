// Package client is the Go client of a Weir cluster's job API (the
// JobService of the leading jobmanager): submit a job graph, list jobs and
// taskmanagers, follow a job's state, cancel it, list and trigger its
// checkpoints. The weir CLI and the test harness use it, and so can user
// programs.
//
// Calls go to the leading jobmanager wherever it is: a client knows one or
// more jobmanager addresses and, with high availability on etcd, reads the
// leader from etcd; a standby that refuses a call names the leader, and the
// call moves there. With Config.WaitForLeader a call keeps trying, round
// after round, until its context ends — through a takeover, say.
//
// The request and response messages are those of the API
// (github.com/weirstream/weir/proto/weirpb).
//
// client imports stream, ha (reading the leader from etcd), the generated
// protobuf package, gRPC and the standard library.
package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
)

// Config configures a Client.
type Config struct {
	// JobManagers are gRPC addresses (host:port) of the cluster's
	// jobmanagers; calls try them in order after the leader etcd names and
	// the last one that answered. At least one of JobManagers and
	// EtcdEndpoints is required.
	JobManagers []string
	// EtcdEndpoints, with a cluster in ha: etcd, are etcd's client URLs:
	// every call first asks etcd for the leader's address.
	EtcdEndpoints []string
	// EtcdPrefix is the cluster's etcd key prefix. Default "/weir".
	EtcdPrefix string
	// EtcdTLS, EtcdUser and EtcdPassword are the etcd client's TLS
	// material and login, when etcd requires them.
	EtcdTLS                ha.TLSFiles
	EtcdUser, EtcdPassword string
	// WaitForLeader: a call that no jobmanager answers as the leader (all
	// unreachable, or standing by) tries again every RetryInterval until
	// its context ends. Otherwise it fails after one round.
	WaitForLeader bool
	// RetryInterval is the pause between rounds with WaitForLeader.
	// Default 100ms.
	RetryInterval time.Duration
	// AttemptTimeout bounds each call to one jobmanager (0: only the
	// call's context), so that a hung or paused jobmanager does not hold
	// the call while another leads.
	AttemptTimeout time.Duration
	// TLS is the client's TLS material (a certificate with the operate or
	// read role from the cluster's CA): with it every connection to a
	// jobmanager is mutual TLS, and only a server with the jobmanager role
	// is accepted. Without it, and without transport credentials in
	// DialOptions, connections are plaintext (a cluster on loopback).
	TLS security.TLSConfig
	// DialOptions are added to every connection to a jobmanager.
	DialOptions []grpc.DialOption
}

// Validate reports a configuration New would refuse.
func (c Config) Validate() error {
	if len(c.JobManagers) == 0 && len(c.EtcdEndpoints) == 0 {
		return errors.New("client: no jobmanager address and no etcd endpoint; give the jobmanager's host:port, or etcd's endpoints for a cluster in ha: etcd")
	}
	if c.RetryInterval < 0 || c.AttemptTimeout < 0 {
		return errors.New("client: RetryInterval and AttemptTimeout must not be negative")
	}
	return nil
}

// LeaderMetadataKey is the gRPC trailer in which a standby jobmanager
// names the leader when it refuses a call.
const LeaderMetadataKey = weirpb.LeaderMetadataKey

// Client calls the leading jobmanager. Its methods are safe for concurrent
// use. It implements grpc.ClientConnInterface, so that
// weirpb.NewJobServiceClient(c) reaches every JobService call.
type Client struct {
	cfg Config
	api weirpb.JobServiceClient

	etcdOnce sync.Once
	etcd     *ha.Client
	etcdErr  error

	mu struct {
		sync.Mutex
		conns  map[string]*grpc.ClientConn
		last   string // the jobmanager that answered last
		closed bool
	}
}

var _ grpc.ClientConnInterface = (*Client)(nil)

// New returns a client for cfg. It does no I/O: connections are made by
// the first calls.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EtcdPrefix == "" {
		cfg.EtcdPrefix = "/weir"
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 100 * time.Millisecond
	}
	m, err := cfg.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if m != nil || cfg.DialOptions == nil {
		cfg.DialOptions = append([]grpc.DialOption{security.DialOption(m, security.RoleJobManager)}, cfg.DialOptions...)
	}
	c := &Client{cfg: cfg}
	c.mu.conns = make(map[string]*grpc.ClientConn)
	c.api = weirpb.NewJobServiceClient(c)
	return c, nil
}

// Close closes the client's connections; later calls fail.
func (c *Client) Close() error {
	c.mu.Lock()
	c.mu.closed = true
	var errs []error
	for addr, cc := range c.mu.conns {
		errs = append(errs, cc.Close())
		delete(c.mu.conns, addr)
	}
	c.mu.Unlock()
	if c.etcd != nil {
		errs = append(errs, c.etcd.Close())
	}
	return errors.Join(errs...)
}

// Leader returns the address of the jobmanager that answered the last call
// ("" before any did).
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.last
}

// API returns the JobService client behind the convenience methods.
func (c *Client) API() weirpb.JobServiceClient { return c.api }

// Submit submits a job graph (planned or not) and returns the job's id.
func (c *Client) Submit(ctx context.Context, g *stream.JobGraph) (string, error) {
	resp, err := c.api.SubmitJob(ctx, &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g)})
	if err != nil {
		return "", err
	}
	return resp.GetJobId(), nil
}

// Jobs lists the jobs the leader knows.
func (c *Client) Jobs(ctx context.Context) ([]*weirpb.JobSummary, error) {
	resp, err := c.api.ListJobs(ctx, &weirpb.ListJobsRequest{})
	return resp.GetJobs(), err
}

// Job returns a job's detail: state, tasks and graph.
func (c *Client) Job(ctx context.Context, id string) (*weirpb.GetJobResponse, error) {
	return c.api.GetJob(ctx, &weirpb.GetJobRequest{JobId: id})
}

// Cancel starts cancelling a job.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := c.api.CancelJob(ctx, &weirpb.CancelJobRequest{JobId: id})
	return err
}

// Checkpoints lists a job's checkpoints.
func (c *Client) Checkpoints(ctx context.Context, id string) (*weirpb.ListCheckpointsResponse, error) {
	return c.api.ListCheckpoints(ctx, &weirpb.ListCheckpointsRequest{JobId: id})
}

// TriggerCheckpoint triggers a checkpoint of a running job at once and
// returns its id.
func (c *Client) TriggerCheckpoint(ctx context.Context, id string) (int64, error) {
	resp, err := c.api.TriggerCheckpoint(ctx, &weirpb.TriggerJobCheckpointRequest{JobId: id})
	return resp.GetCheckpointId(), err
}

// TaskManagers lists the taskmanagers the leader knows, live or lost.
func (c *Client) TaskManagers(ctx context.Context) ([]*weirpb.TaskManagerInfo, error) {
	resp, err := c.api.ListTaskManagers(ctx, &weirpb.ListTaskManagersRequest{})
	return resp.GetTaskmanagers(), err
}

// WaitJob polls a job every interval until it is FINISHED, CANCELED or
// FAILED (returning its last detail) or ctx ends.
func (c *Client) WaitJob(ctx context.Context, id string, interval time.Duration) (*weirpb.GetJobResponse, error) {
	for {
		resp, err := c.Job(ctx, id)
		if err == nil {
			switch resp.GetJob().GetState() {
			case weirpb.JobState_JOB_STATE_FINISHED, weirpb.JobState_JOB_STATE_CANCELED, weirpb.JobState_JOB_STATE_FAILED:
				return resp, nil
			}
		} else if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
			return nil, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client: job %s did not end: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

// conn returns the connection to addr, dialing it the first time.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, status.Error(codes.Canceled, "client: closed")
	}
	if cc := c.mu.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("client: jobmanager address %q: %w (want host:port)", addr, err)
	}
	c.mu.conns[addr] = cc
	return cc, nil
}

// etcdLeader returns the leader etcd names ("" without etcd, or when etcd
// cannot say).
func (c *Client) etcdLeader(ctx context.Context) (string, error) {
	if len(c.cfg.EtcdEndpoints) == 0 {
		return "", nil
	}
	c.etcdOnce.Do(func() {
		cfg := ha.DefaultConfig()
		cfg.Endpoints, cfg.Prefix = c.cfg.EtcdEndpoints, c.cfg.EtcdPrefix
		cfg.TLS, cfg.Username, cfg.Password = c.cfg.EtcdTLS, c.cfg.EtcdUser, c.cfg.EtcdPassword
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c.etcd, c.etcdErr = ha.Connect(cctx, cfg)
	})
	if c.etcdErr != nil {
		return "", fmt.Errorf("cannot reach etcd at %v: %w; check the etcd endpoints and that etcd runs", c.cfg.EtcdEndpoints, c.etcdErr)
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	li, err := c.etcd.Leader(lctx)
	if err != nil {
		return "", fmt.Errorf("no leading jobmanager in etcd %v under prefix %s: %w; check the prefix and that a jobmanager runs with ha: etcd",
			c.cfg.EtcdEndpoints, c.cfg.EtcdPrefix, err)
	}
	return li.Address, nil
}

// candidates are the addresses to try, in order: the leader etcd names,
// the one that answered last, then the configured ones.
func (c *Client) candidates(ctx context.Context) ([]string, error) {
	leader, err := c.etcdLeader(ctx)
	var out []string
	add := func(a string) {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	add(leader)
	add(c.Leader())
	for _, a := range c.cfg.JobManagers {
		add(a)
	}
	if len(out) == 0 && err != nil {
		return nil, err
	}
	return out, nil
}

// leaderInMessage finds the leader's address in a standby's refusal when
// the trailer is missing.
var leaderInMessage = regexp.MustCompile(`not the leader; the leader is (\S+)`)

// redirect returns the leader's address that a standby named when it
// refused a call, or "".
func redirect(err error, trailer metadata.MD) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return ""
	}
	if v := trailer.Get(LeaderMetadataKey); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	if m := leaderInMessage.FindStringSubmatch(st.Message()); m != nil && m[1] != "unknown" {
		return m[1]
	}
	return ""
}

// Invoke implements grpc.ClientConnInterface: it sends a unary call to the
// leading jobmanager, trying the candidates in turn (and the leader a
// refusing standby names) while they answer Unavailable, for one round or,
// with WaitForLeader, until ctx ends.
func (c *Client) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	var last error
	for {
		addrs, err := c.candidates(ctx)
		if err != nil {
			last = err
		}
		tried := make(map[string]bool, len(addrs))
		for i := 0; i < len(addrs); i++ {
			addr := addrs[i]
			if tried[addr] {
				continue
			}
			tried[addr] = true
			cc, err := c.conn(addr)
			if err != nil {
				last = err
				continue
			}
			actx, cancel := ctx, context.CancelFunc(func() {})
			if c.cfg.AttemptTimeout > 0 {
				actx, cancel = context.WithTimeout(ctx, c.cfg.AttemptTimeout)
			}
			var trailer metadata.MD
			err = cc.Invoke(actx, method, args, reply, append(slices.Clone(opts), grpc.Trailer(&trailer))...)
			cancel()
			if err == nil {
				c.mu.Lock()
				c.mu.last = addr
				c.mu.Unlock()
				return nil
			}
			last = err
			if ctx.Err() != nil {
				return err
			}
			code := status.Code(err)
			if code != codes.Unavailable && !(code == codes.DeadlineExceeded && c.cfg.AttemptTimeout > 0) {
				return err // the leader answered: the call itself failed
			}
			if l := redirect(err, trailer); l != "" && !tried[l] {
				addrs = slices.Insert(addrs, i+1, l) // the leader, next
			}
		}
		if !c.cfg.WaitForLeader {
			if last == nil {
				last = status.Error(codes.Unavailable, "client: no jobmanager to call")
			}
			return last
		}
		t := time.NewTimer(c.cfg.RetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			if last == nil {
				return ctx.Err()
			}
			return last
		case <-t.C:
		}
	}
}

// NewStream implements grpc.ClientConnInterface; the job API has no
// streaming calls.
func (c *Client) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "client: %s streams; the job API client sends unary calls only", method)
}
