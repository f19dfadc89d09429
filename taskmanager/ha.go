package taskmanager

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
)

// Fencing. Every jobmanager→taskmanager call carries the caller's fencing
// epoch (0 in ha: none), and so do the jobmanager's answers to
// registrations and heartbeats. The taskmanager remembers the highest epoch
// it has seen: a call with a lower one comes from a deposed leader (a
// zombie) and is rejected; a higher one means a new leader, and the tasks
// deployed under lower epochs are cancelled (the new leader redeploys them
// from its latest completed checkpoint).

//
// An epoch is only raised when it is the leader's: a call carrying a
// higher epoch than the taskmanager knows is checked against etcd first
// (verifyEpoch), so that a holder of a jobmanager certificate cannot poison
// the taskmanager with a huge epoch and lock the real leader out.

// fenceCall admits a call carrying epoch, or rejects it with
// FailedPrecondition (a stale epoch) or PermissionDenied (an epoch no
// leader holds). Each stale call is counted and logged exactly once, with
// zombie_write_rejected=1.
func (tm *TaskManager) fenceCall(ctx context.Context, call string, epoch int64) error {
	tm.mu.Lock()
	cur := tm.mu.epoch
	tm.mu.Unlock()
	if epoch > cur {
		if err := tm.verifyEpoch(ctx, call, epoch); err != nil {
			return err
		}
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.fenceLocked(call, epoch)
}

// verifyEpoch checks that epoch, higher than any this taskmanager has
// seen, is no higher than the epoch etcd names for the leading jobmanager.
// Without HA every jobmanager call carries epoch 0, so any other is
// refused.
func (tm *TaskManager) verifyEpoch(ctx context.Context, call string, epoch int64) error {
	if tm.testAcceptEpochs.Load() {
		return nil
	}
	if !tm.cfg.HA.etcd() {
		tm.log.Warn("call with a fencing epoch refused: this taskmanager runs without HA", "call", call, "epoch", epoch)
		return status.Errorf(codes.PermissionDenied,
			"jobmanager epoch %d refused: %s: this taskmanager runs without HA, where every jobmanager call carries epoch 0 (start the taskmanager with the jobmanager's --ha settings)", epoch, call)
	}
	c := tm.etcd.Load()
	if c == nil {
		return status.Errorf(codes.Unavailable, "jobmanager epoch %d: %s: not yet connected to etcd to verify it; retry", epoch, call)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	li, err := c.Leader(lctx)
	cancel()
	if err != nil {
		return status.Errorf(codes.Unavailable, "jobmanager epoch %d: %s: cannot verify it in etcd: %v", epoch, call, err)
	}
	if epoch > li.Epoch {
		tm.log.Warn("call with an epoch no leader holds refused", "call", call, "epoch", epoch, "leader_epoch", li.Epoch)
		return status.Errorf(codes.PermissionDenied,
			"jobmanager epoch %d refused: %s: etcd names leader epoch %d; only the leading jobmanager may raise the epoch", epoch, call, li.Epoch)
	}
	return nil
}

func (tm *TaskManager) fenceLocked(call string, epoch int64) error {
	if cur := tm.mu.epoch; epoch < cur {
		tm.metrics.fencedCalls.Inc()
		tm.log.Warn("call from a stale jobmanager rejected", "zombie_write_rejected", 1, "call", call, "epoch", epoch, "current_epoch", cur)
		return status.Errorf(codes.FailedPrecondition, "stale jobmanager epoch %d < %d: %s refused; a newer jobmanager leads", epoch, cur, call)
	}
	tm.raiseLocked(epoch)
	return nil
}

// observeEpoch records an epoch the jobmanager answered with (register,
// heartbeat); a lower one than known is ignored.
func (tm *TaskManager) observeEpoch(epoch int64) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.raiseLocked(epoch)
}

// raiseLocked raises the known epoch and cancels the tasks of lower ones.
func (tm *TaskManager) raiseLocked(epoch int64) {
	if epoch <= tm.mu.epoch {
		return
	}
	old := tm.mu.epoch
	tm.mu.epoch = epoch
	n := 0
	for _, rt := range tm.mu.tasks {
		if rt.epoch < epoch && !terminal(rt.state) && rt.cancel != nil {
			rt.cancel()
			n++
		}
	}
	tm.log.Info("new jobmanager epoch; tasks of older epochs cancelled", "epoch", epoch, "previous_epoch", old, "cancelled", n)
}

// commitGuard returns the check a task runs before it delivers a
// checkpoint completion (the 2PC sinks' commit): it fails once an epoch
// higher than the task's deployment epoch was seen.
func (tm *TaskManager) commitGuard(name string, epoch int64) func(id int64) error {
	return func(id int64) error {
		tm.mu.Lock()
		cur := tm.mu.epoch
		tm.mu.Unlock()
		if epoch < cur {
			return fmt.Errorf("task %s: commit of checkpoint %d refused: deployed under jobmanager epoch %d < %d, a newer leader took over", name, id, epoch, cur)
		}
		return nil
	}
}

// Leader discovery (ha: etcd). The taskmanager reads the leader's address
// from etcd (it never campaigns), registers with it and follows changes.

// jmConn is the connection to one jobmanager.
type jmConn struct {
	addr   string
	conn   *grpc.ClientConn
	client weirpb.ClusterServiceClient
}

// cluster returns the client of the current jobmanager.
func (tm *TaskManager) cluster() weirpb.ClusterServiceClient {
	return tm.jm.Load().client
}

// dial connects (lazily, as gRPC does) to the jobmanager at addr.
func (tm *TaskManager) dial(addr string) (*jmConn, error) {
	// Cap gRPC's reconnect backoff (default up to 2 minutes) so that a
	// taskmanager finds a restarted jobmanager within a few retries.
	backoff := grpcbackoff.DefaultConfig
	backoff.MaxDelay = max(5*time.Second, 2*tm.cfg.RegisterRetry)
	conn, err := grpc.NewClient(addr, security.DialOption(tm.tls, security.RoleJobManager),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff, MinConnectTimeout: 5 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("taskmanager: jobmanager address %s: %w", addr, err)
	}
	return &jmConn{addr: addr, conn: conn, client: weirpb.NewClusterServiceClient(conn)}, nil
}

// switchTo makes addr the current jobmanager (if it is not already) and
// closes the previous connection.
func (tm *TaskManager) switchTo(addr string) error {
	if cur := tm.jm.Load(); cur != nil && cur.addr == addr {
		return nil
	}
	c, err := tm.dial(addr)
	if err != nil {
		return err
	}
	if old := tm.jm.Swap(c); old != nil {
		old.conn.Close()
	}
	tm.log.Info("following jobmanager", "jobmanager", addr)
	return nil
}

// haConnect connects to etcd, retrying with a clear error until ctx ends.
func (tm *TaskManager) haConnect(ctx context.Context) (*ha.Client, error) {
	cfg := ha.DefaultConfig()
	cfg.Endpoints = tm.cfg.HA.Endpoints
	if tm.cfg.HA.Prefix != "" {
		cfg.Prefix = tm.cfg.HA.Prefix
	}
	cfg.TLS, cfg.Username, cfg.Password = tm.cfg.HA.EtcdTLS, tm.cfg.HA.EtcdUser, tm.cfg.HA.EtcdPassword
	cfg.Logger = tm.log
	return ha.ConnectRetrying(ctx, cfg, tm.cfg.RegisterRetry, func(err error) {
		tm.log.Error("cannot reach etcd to find the leading jobmanager; retrying (check --ha-etcd-endpoints and that etcd runs)",
			"endpoints", cfg.Endpoints, "retry", tm.cfg.RegisterRetry, "err", err)
	})
}

// resolveLeader blocks until etcd names a leader and makes it the current
// jobmanager. It logs (at most every ten attempts) while etcd is
// unreachable or no jobmanager leads.
func (tm *TaskManager) resolveLeader(ctx context.Context, c *ha.Client) bool {
	for attempt := 0; ; attempt++ {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		li, err := c.Leader(lctx)
		cancel()
		if err == nil && li.Address != "" {
			if err = tm.switchTo(li.Address); err == nil {
				return true
			}
		}
		if ctx.Err() != nil {
			return false
		}
		if attempt%10 == 0 {
			tm.log.Error("cannot find the leading jobmanager in etcd; retrying (check --ha-etcd-endpoints and --ha-prefix, and that a jobmanager with --ha etcd runs)",
				"endpoints", tm.cfg.HA.Endpoints, "prefix", tm.cfg.HA.Prefix, "err", err)
		}
		if !sleepCtx(ctx, tm.cfg.RegisterRetry) {
			return false
		}
	}
}

// membershipHA is membership in ha: etcd: it finds the leader through
// etcd, registers and heartbeats, and starts over with the new leader when
// etcd names another one or the current one stops answering.
func (tm *TaskManager) membershipHA(ctx context.Context) error {
	c, err := tm.haConnect(ctx)
	if err != nil {
		return nil // ctx ended
	}
	defer c.Close()
	tm.etcd.Store(c)
	defer tm.etcd.Store(nil)
	changed := make(chan string, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := c.WatchLeader(wctx)
	go func() {
		for li := range watch {
			if li.Address == "" {
				continue
			}
			select {
			case <-changed:
			default:
			}
			changed <- li.Address
		}
	}()
	for ctx.Err() == nil {
		if !tm.resolveLeader(ctx, c) {
			return nil
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-sctx.Done():
					return
				case addr := <-changed:
					if cur := tm.jm.Load(); cur == nil || cur.addr != addr {
						tm.log.Info("etcd names a new leading jobmanager; registering with it", "jobmanager", addr)
						cancel()
						return
					}
				}
			}
		}()
		ok, err := tm.register(sctx)
		if ok {
			tm.heartbeat(sctx)
		}
		cancel()
		<-done
		if err != nil {
			return err
		}
	}
	return nil
}
