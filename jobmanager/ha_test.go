package jobmanager

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/proto/weirpb"
)

// TestHAStandbyRedirects runs two jobmanagers on a real etcd: one leads
// and answers, the other refuses with Unavailable naming the leader; when
// the leader stops, the standby takes over and answers.
func TestHAStandbyRedirects(t *testing.T) {
	etcd := etcdtest.Start(t)
	start := func() (*JobManager, context.CancelFunc, chan error) {
		cfg := DefaultConfig()
		cfg.RPCAddress, cfg.RESTAddress = "127.0.0.1:0", ""
		cfg.HA = HAConfig{Mode: "etcd", Endpoints: etcd.Endpoints(), Prefix: "/weir-test", LeaseTTL: 2 * time.Second}
		jm, err := New(cfg, builtin.Registry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- jm.Run(ctx) }()
		<-jm.Ready()
		return jm, cancel, done
	}
	list := func(addr string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = weirpb.NewJobServiceClient(conn).ListJobs(ctx, &weirpb.ListJobsRequest{})
		return err
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a, stopA, doneA := start()
	waitFor("a leads", func() bool { return a.lead.Load() != nil })
	b, stopB, doneB := start()
	defer func() { stopB(); <-doneB }()
	if err := list(a.RPCAddr()); err != nil {
		t.Fatalf("leader refused ListJobs: %v", err)
	}
	var err error
	waitFor("b redirects to a", func() bool {
		err = list(b.RPCAddr())
		return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "not the leader; the leader is "+a.RPCAddr())
	})
	stopA()
	<-doneA
	waitFor("b takes over", func() bool { return b.lead.Load() != nil })
	if err := list(b.RPCAddr()); err != nil {
		t.Fatalf("new leader refused ListJobs: %v", err)
	}
	if b.epoch() <= 0 {
		t.Fatalf("new leader's epoch %d, want > 0", b.epoch())
	}
}
