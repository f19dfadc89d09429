package cli

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/jobmanager"
)

// findLeader reads the leading jobmanager's address from etcd.
func findLeader(ctx context.Context, endpoints []string, prefix string, timeout time.Duration) (string, error) {
	cfg := ha.DefaultConfig()
	cfg.Endpoints = endpoints
	if prefix != "" {
		cfg.Prefix = prefix
	}
	cfg.DialTimeout = timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := ha.Connect(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("finding the leading jobmanager: cannot reach etcd at %v: %v; check --ha-etcd-endpoints (WEIR_HA_ETCD_ENDPOINTS) and that etcd runs", endpoints, err)
	}
	defer c.Close()
	li, err := c.Leader(ctx)
	if err != nil {
		return "", fmt.Errorf("finding the leading jobmanager in etcd %v under prefix %s: %v; check --ha-prefix (WEIR_HA_PREFIX) and that a jobmanager runs with --ha etcd", endpoints, cfg.Prefix, err)
	}
	return li.Address, nil
}

// leaderInMessage finds the leader's address in a standby's refusal when
// the trailer is missing.
var leaderInMessage = regexp.MustCompile(`not the leader; the leader is (\S+)`)

// standbyRedirect returns the leader's address that a standby named in
// its refusal of a call, or "".
func standbyRedirect(err error, trailer metadata.MD) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return ""
	}
	if v := trailer.Get(jobmanager.LeaderMetadataKey); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	if m := leaderInMessage.FindStringSubmatch(st.Message()); m != nil && m[1] != "unknown" {
		return m[1]
	}
	return ""
}

// redirector is a unary client interceptor that follows a standby's
// redirect once: when a call is refused with Unavailable naming the
// leader, it is retried against the leader.
type redirector struct {
	mu     sync.Mutex
	conns  []*grpc.ClientConn
	target *string // the address the CLI talks to; updated on redirect
}

func (r *redirector) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var trailer metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
	leader := standbyRedirect(err, trailer)
	if leader == "" || leader == cc.Target() {
		return err
	}
	conn, derr := grpc.NewClient(leader, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if derr != nil {
		return err
	}
	r.mu.Lock()
	r.conns = append(r.conns, conn)
	*r.target = leader
	r.mu.Unlock()
	return conn.Invoke(ctx, method, req, reply, opts...)
}

func (r *redirector) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}
