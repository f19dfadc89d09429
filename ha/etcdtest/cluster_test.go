package etcdtest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) {
	// No ignores: stopped members and closed clients leave no goroutines.
	goleak.VerifyTestMain(m)
}

// opTimeout bounds one request of the tests' clients.
const opTimeout = 5 * time.Second

// newClient connects an etcd client to eps and closes it at the end of
// the test (before the cluster stops).
func newClient(t *testing.T, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: opTimeout, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("client for %v: %v", eps, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// put writes key=val, retrying a failed attempt (a put is idempotent) for
// up to 20s, and returns how many attempts failed.
func put(t *testing.T, cli *clientv3.Client, key, val string) int {
	t.Helper()
	failed := 0
	polltest.NoError(t, 20*time.Second, "put "+key, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
		defer cancel()
		_, err := cli.Put(ctx, key, val)
		if err != nil {
			failed++
		}
		return err
	})
	return failed
}

// get reads key (linearizable unless opts say otherwise); "" when absent.
func get(cli *clientv3.Client, key string, opts ...clientv3.OpOption) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, key, opts...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// waitValue polls a read of key through cli until it returns want.
func waitValue(t *testing.T, cli *clientv3.Client, key, want, what string, opts ...clientv3.OpOption) {
	t.Helper()
	polltest.NoError(t, 20*time.Second, what, func() error {
		got, err := get(cli, key, opts...)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s = %q, want %q", key, got, want)
		}
		return nil
	})
}

// fatalTB records the first Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartClusterRejectsSizes(t *testing.T) {
	for _, n := range []int{-1, 0, 2, 4, 6, 7} {
		f := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			StartCluster(f, n)
		}()
		<-done
		if !strings.Contains(f.msg, fmt.Sprintf("a cluster of %d members", n)) || !strings.Contains(f.msg, "use 1, 3 or 5") {
			t.Errorf("StartCluster(%d) failed with %q; want it to name the size and the allowed sizes", n, f.msg)
		}
	}
}

// TestClusterWriteRead: a client with every member's proxy writes and
// reads, and every member holds the write.
func TestClusterWriteRead(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3 members ready in %v", time.Since(start).Round(time.Millisecond))
	c.WaitHealthy(t)
	if eps := c.Endpoints(); len(eps) != 3 || eps[0] == eps[1] || eps[1] == eps[2] {
		t.Fatalf("Endpoints = %v, want 3 distinct proxies", eps)
	}
	leader := c.Leader()
	if leader < 0 || leader > 2 {
		t.Fatalf("Leader = %d, want a member index", leader)
	}

	cli := newClient(t, c.Endpoints()...)
	put(t, cli, "/a", "1")
	if v, err := get(cli, "/a"); err != nil || v != "1" {
		t.Fatalf("get /a = %q, %v; want 1", v, err)
	}
	for i := range c.Size() {
		m := c.Member(i)
		direct := newClient(t, m.DirectEndpoint())
		waitValue(t, direct, "/a", "1", "member "+m.Name()+" to hold /a", clientv3.WithSerializable())
	}
}

// TestClusterLeaderStopAndRejoin: stopping (or killing) the leader member
// elects another, writes go on, and the stopped member rejoins on Restart
// with the writes made while it was down.
func TestClusterLeaderStopAndRejoin(t *testing.T) {
	t.Run("stop", func(t *testing.T) { testLeaderDownAndRejoin(t, (*Member).Stop) })
	t.Run("kill", func(t *testing.T) { testLeaderDownAndRejoin(t, (*Member).Kill) })
}

func testLeaderDownAndRejoin(t *testing.T, down func(*Member)) {
	c := StartCluster(t, 3)
	cli := newClient(t, c.Endpoints()...)
	put(t, cli, "/before", "x")

	old := c.Leader()
	m := c.Member(old)
	start := time.Now()
	down(m)
	if m.Running() {
		t.Fatalf("member %s runs after Stop", m.Name())
	}
	next := c.Leader()
	t.Logf("leader %s stopped; %s leads %v later", m.Name(), c.Member(next).Name(), time.Since(start).Round(time.Millisecond))
	if next == old {
		t.Fatalf("Leader = %d, the stopped member", next)
	}

	failed := 0
	for i := range 10 {
		failed += put(t, cli, fmt.Sprintf("/down/%d", i), fmt.Sprint(i))
	}
	t.Logf("10 writes with %s down: %d failed attempts retried", m.Name(), failed)
	if v, err := get(cli, "/down/9"); err != nil || v != "9" {
		t.Fatalf("get /down/9 = %q, %v; want 9", v, err)
	}

	start = time.Now()
	m.Restart()
	c.WaitHealthy(t)
	t.Logf("%s restarted and rejoined in %v", m.Name(), time.Since(start).Round(time.Millisecond))
	if l := c.Leader(); l < 0 || l > 2 {
		t.Fatalf("Leader after the restart = %d", l)
	}
	// Read from the restarted member alone, without a round to the
	// leader: it must have caught up on its own log.
	direct := newClient(t, m.DirectEndpoint())
	for i := range 10 {
		waitValue(t, direct, fmt.Sprintf("/down/%d", i), fmt.Sprint(i), "the restarted member to hold the writes made while it was down", clientv3.WithSerializable())
	}
	waitValue(t, direct, "/before", "x", "the restarted member to keep its data", clientv3.WithSerializable())
	// And it takes writes through its own proxy again.
	own := newClient(t, m.Endpoint())
	put(t, own, "/after", "y")
	waitValue(t, cli, "/after", "y", "a write through the restarted member")
}

// TestClusterCutMember: cutting one member's proxy leaves that member
// unreachable for clients, while a client with every endpoint keeps
// writing; Heal lets clients in again.
func TestClusterCutMember(t *testing.T) {
	c := StartCluster(t, 3)
	c.WaitHealthy(t)
	cli := newClient(t, c.Endpoints()...)
	put(t, cli, "/k", "0")

	m := c.Member(0)
	only := newClient(t, m.Endpoint())
	waitValue(t, only, "/k", "0", "a read through member0's proxy")
	m.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := only.Get(ctx, "/k")
	cancel()
	if err == nil {
		t.Fatalf("a read through the cut proxy of %s succeeded", m.Name())
	}

	failed := 0
	for i := 1; i <= 10; i++ {
		failed += put(t, cli, "/k", fmt.Sprint(i))
	}
	t.Logf("10 writes with %s cut off: %d failed attempts retried", m.Name(), failed)
	waitValue(t, cli, "/k", "10", "the last write")
	// The cut member still runs and replicates (peer traffic is not cut).
	if !m.Running() {
		t.Fatalf("member %s stopped by Cut", m.Name())
	}
	direct := newClient(t, m.DirectEndpoint())
	waitValue(t, direct, "/k", "10", "the cut member to replicate", clientv3.WithSerializable())

	m.Heal()
	waitValue(t, only, "/k", "10", "a read through member0's proxy after Heal")
}

// TestClusterQuorumLossAndRecovery: with two of three members stopped the
// cluster cannot write; Restart of the first returns without waiting (no
// majority yet), a member stopped before it was ready stops cleanly, and
// once a majority is back every member is healthy with the data.
func TestClusterQuorumLossAndRecovery(t *testing.T) {
	c := StartCluster(t, 3)
	cli := newClient(t, c.Endpoints()...)
	put(t, cli, "/q", "kept")

	a, b := c.Member(1), c.Member(2)
	a.Stop()
	b.Stop()
	// A linearizable read needs a majority too, and unlike a timed-out
	// write it cannot be applied later.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	_, err := cli.Get(ctx, "/q")
	cancel()
	if err == nil {
		t.Fatal("a linearizable read with two of three members stopped succeeded")
	}

	a.Restart() // one of three stopped still: no majority until b is back
	a.Stop()    // stopping a member that never became ready must not hang
	a.Restart()
	b.Restart()
	c.WaitHealthy(t)
	for i := range c.Size() {
		direct := newClient(t, c.Member(i).DirectEndpoint())
		waitValue(t, direct, "/q", "kept", "member "+c.Member(i).Name()+" to hold /q", clientv3.WithSerializable())
	}
	put(t, cli, "/q", "new")
}

// TestFiveMembersSurviveTwoStopped: a cluster of five keeps writing with
// two members (the leader among them) stopped.
func TestFiveMembersSurviveTwoStopped(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, 5)
	t.Logf("5 members ready in %v", time.Since(start).Round(time.Millisecond))
	cli := newClient(t, c.Endpoints()...)
	put(t, cli, "/five", "0")

	l := c.Leader()
	c.Member(l).Stop()
	c.Member((l + 1) % 5).Stop()
	if next := c.Leader(); next == l || next == (l+1)%5 {
		t.Fatalf("Leader = %d, a stopped member", next)
	}
	put(t, cli, "/five", "1")
	c.WaitHealthy(t)
	waitValue(t, cli, "/five", "1", "the write with two members stopped")
}

// TestServerSingleMember: Start's Server is a one-member cluster with the
// behaviour its callers rely on.
func TestServerSingleMember(t *testing.T) {
	s := Start(t)
	if len(s.Endpoints()) != 1 || s.Endpoints()[0] != s.Endpoint() {
		t.Fatalf("Endpoints = %v, want [%s]", s.Endpoints(), s.Endpoint())
	}
	if s.DataDir() == "" {
		t.Fatal("empty DataDir")
	}
	cli := newClient(t, s.Endpoints()...)
	put(t, cli, "/s", "1")

	s.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := cli.Get(ctx, "/s")
	cancel()
	if err == nil {
		t.Fatal("a read through the cut proxy succeeded")
	}
	direct := newClient(t, s.DirectEndpoints()...)
	waitValue(t, direct, "/s", "1", "a direct read while cut")
	s.Heal()
	waitValue(t, cli, "/s", "1", "a read after Heal")

	s.Stop()
	s.Stop() // a no-op
	s.Restart()
	waitValue(t, cli, "/s", "1", "a read after Restart")
}
