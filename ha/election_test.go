package ha

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/ha/etcdtest"
)

func TestConnectUnreachable(t *testing.T) {
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	cfg := DefaultConfig()
	cfg.Endpoints = []string{dead}
	cfg.DialTimeout = 300 * time.Millisecond
	start := time.Now()
	_, err = Connect(t.Context(), cfg)
	if err == nil {
		t.Fatal("Connect to a dead endpoint succeeded")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("error %v does not wrap ErrUnavailable", err)
	}
	for _, want := range []string{dead, "check that etcd is running", "retry"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Connect took %v with a 300ms dial timeout", d)
	}
}

func TestConnectRetryAfterEtcdStarts(t *testing.T) {
	srv := etcdtest.Start(t)
	srv.Stop()
	cfg := testConfig(srv, 2*time.Second, nil)
	cfg.DialTimeout = 300 * time.Millisecond
	if _, err := Connect(t.Context(), cfg); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Connect with etcd stopped = %v, want ErrUnavailable", err)
	}
	srv.Restart()
	c := connect(t, cfg)
	if _, err := c.Leader(t.Context()); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader on a fresh cluster = %v, want ErrNoLeader", err)
	}
}

func TestElectionHandover(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(srv, 2*time.Second, nil)
	a, b, obs := connect(t, cfg), connect(t, cfg), connect(t, cfg)

	watch := obs.WatchLeader(t.Context())
	if li := <-watch; li != (LeaderInfo{}) {
		t.Fatalf("first WatchLeader value = %+v, want none", li)
	}

	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 5*time.Second)
	if la.Epoch() <= 0 {
		t.Fatalf("epoch %d, want > 0", la.Epoch())
	}
	want := LeaderInfo{ID: "jm-a", Address: "jm-a.example:6123", Epoch: la.Epoch()}
	if li, err := obs.Leader(t.Context()); err != nil || li != want {
		t.Fatalf("Leader = %+v, %v; want %+v", li, err, want)
	}
	if li := <-watch; li != want {
		t.Fatalf("WatchLeader = %+v, want %+v", li, want)
	}

	// b stands by while a leads.
	bch := campaignAsync(t.Context(), b, "jm-b")
	select {
	case r := <-bch:
		t.Fatalf("standby won while the leader lives: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	select {
	case <-la.Lost():
		t.Fatalf("leader lost its leadership: %s", la.Reason())
	default:
	}

	if err := la.Resign(t.Context()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	waitClosed(t, la.Lost(), time.Second, "Lost after Resign")
	if la.Reason() != "resigned" {
		t.Errorf("Reason = %q, want resigned", la.Reason())
	}
	lb := waitCampaign(t, bch, 5*time.Second)
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("new epoch %d not above old epoch %d", lb.Epoch(), la.Epoch())
	}
	want = LeaderInfo{ID: "jm-b", Address: "jm-b.example:6123", Epoch: lb.Epoch()}
	if li, err := a.Leader(t.Context()); err != nil || li != want {
		t.Fatalf("Leader after handover = %+v, %v; want %+v", li, err, want)
	}
	if li := <-watch; li != want {
		t.Fatalf("WatchLeader after handover = %+v, want %+v", li, want)
	}
	if err := lb.Resign(t.Context()); err != nil {
		t.Fatalf("Resign b: %v", err)
	}
	if li := <-watch; li != (LeaderInfo{}) {
		t.Fatalf("WatchLeader after the last leader resigned = %+v, want none", li)
	}
}

func TestLostWhenLeaseRevoked(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(srv, 10*time.Second, nil)
	a, b := connect(t, cfg), connect(t, cfg)
	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 5*time.Second)
	bch := campaignAsync(t.Context(), b, "jm-b")

	// Someone else (an operator, etcd itself) revokes the leader's lease.
	if _, err := b.etcd.Revoke(t.Context(), la.sess.Lease()); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	// Well before the 10s TTL.
	d := waitClosed(t, la.Lost(), 3*time.Second, "Lost after the lease was revoked")
	t.Logf("Lost %v after the revoke: %s", d, la.Reason())
	lb := waitCampaign(t, bch, 5*time.Second)
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("new epoch %d not above old epoch %d", lb.Epoch(), la.Epoch())
	}
	// Resign of a lost leadership is harmless and does not touch b's key.
	if err := la.Resign(t.Context()); err != nil {
		t.Fatalf("Resign after loss: %v", err)
	}
	if li, err := a.Leader(t.Context()); err != nil || li.ID != "jm-b" {
		t.Fatalf("Leader = %+v, %v; want jm-b", li, err)
	}
}

func TestLostWhenEtcdStopsThenLeaderElectedAgain(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	cfg := testConfig(srv, ttl, nil)
	a, b := connect(t, cfg), connect(t, cfg)
	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 5*time.Second)
	bch := campaignAsync(t.Context(), b, "jm-b")
	if err := la.Store().PutJob(t.Context(), "kept", []byte("graph"), []byte("RUNNING")); err != nil {
		t.Fatalf("PutJob: %v", err)
	}

	srv.Stop()
	stopped := time.Now()
	waitClosed(t, la.Lost(), 2*ttl, "Lost with etcd stopped")
	d := time.Since(stopped)
	t.Logf("leader stepped down %v after etcd stopped: %s", d, la.Reason())
	if d >= ttl {
		t.Errorf("leader stepped down after %v, not before its lease TTL %v", d, ttl)
	}
	if !strings.Contains(la.Reason(), "no lease keep-alive") {
		t.Errorf("Reason = %q, want the keep-alive watchdog", la.Reason())
	}
	// Writes of the lost leadership are refused without reaching etcd.
	if err := la.Store().PutJob(t.Context(), "j", []byte("g"), []byte("s")); !errors.Is(err, ErrFenced) {
		t.Fatalf("PutJob after Lost = %v, want ErrFenced", err)
	}

	srv.Restart()
	// a campaigns again; b has been campaigning (and retrying) all along.
	ach := campaignAsync(t.Context(), a, "jm-a")
	var l *Leadership
	select {
	case r := <-ach:
		l = r.l
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer func() { waitCampaign(t, bch, 10*time.Second) }()
		defer l.Resign(t.Context())
	case r := <-bch:
		l = r.l
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer func() { waitCampaign(t, ach, 10*time.Second) }()
		defer l.Resign(t.Context())
	case <-time.After(15 * time.Second):
		t.Fatal("no leader elected within 15s of etcd's restart")
	}
	if l.Epoch() <= la.Epoch() {
		t.Fatalf("epoch after restart %d not above %d", l.Epoch(), la.Epoch())
	}
	li, err := a.Leader(t.Context())
	if err != nil || li.Epoch != l.Epoch() || li.ID != l.ID() {
		t.Fatalf("Leader = %+v, %v; want %s at epoch %d", li, err, l.ID(), l.Epoch())
	}
	t.Logf("%s leads with epoch %d after etcd's restart", l.ID(), l.Epoch())
	// What the old leader wrote survived the restart.
	jobs, err := l.Store().ListJobs(t.Context())
	if err != nil || len(jobs) != 1 || jobs[0].ID != "kept" || string(jobs[0].Status) != "RUNNING" {
		t.Fatalf("ListJobs after restart = %+v, %v; want job kept", jobs, err)
	}
}

func TestCloseEndsCampaignsAndLeadership(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(srv, 5*time.Second, nil)
	a, b, obs := connect(t, cfg), connect(t, cfg), connect(t, cfg)
	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 5*time.Second)
	bch := campaignAsync(t.Context(), b, "jm-b")

	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, la.Lost(), time.Second, "Lost after Close")
	// Close revoked the lease: b takes over without waiting for the TTL.
	lb := waitCampaign(t, bch, 3*time.Second)
	checkFor(t, 2*time.Second, "observer sees jm-b", func() error {
		li, err := obs.Leader(t.Context())
		if err != nil || li.ID != "jm-b" || li.Epoch != lb.Epoch() {
			return fmt.Errorf("leader %+v, %v", li, err)
		}
		return nil
	})
	if _, err := a.Campaign(t.Context(), "jm-a", ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("Campaign on a closed client = %v, want ErrClosed", err)
	}
	if w, ok := <-a.WatchLeader(t.Context()); ok {
		t.Fatalf("WatchLeader on a closed client sent %+v", w)
	}
}

// TestPartitionedLeaderStepsDownBeforeItsKeyExpires: with etcd running but
// unreachable, the leader steps down before etcd expires its key, so no
// standby can be elected while the old leader still believes it leads.
func TestPartitionedLeaderStepsDownBeforeItsKeyExpires(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	cfg := testConfig(srv, ttl, nil)
	a, b := connect(t, cfg), connect(t, cfg)
	direct := cfg
	direct.Endpoints = srv.DirectEndpoints()
	obs := connect(t, direct)

	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 5*time.Second)
	bch := campaignAsync(t.Context(), b, "jm-b")
	srv.Cut()

	var lostAt, expiredAt time.Time
	deadline := time.Now().Add(3 * ttl)
	for expiredAt.IsZero() && time.Now().Before(deadline) {
		select {
		case <-la.Lost():
			if lostAt.IsZero() {
				lostAt = time.Now()
			}
		default:
		}
		resp, err := obs.etcd.Get(t.Context(), la.Key())
		if err != nil {
			t.Fatalf("direct Get: %v", err)
		}
		if len(resp.Kvs) == 0 {
			expiredAt = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if expiredAt.IsZero() {
		t.Fatalf("etcd did not expire the cut-off leader's key within %v", 3*ttl)
	}
	if lostAt.IsZero() || !lostAt.Before(expiredAt) {
		t.Fatalf("leader stepped down at %v, etcd expired its key at %v: the leader must step down first", lostAt, expiredAt)
	}
	t.Logf("leader stepped down %v before etcd expired its key: %s", expiredAt.Sub(lostAt), la.Reason())

	srv.Heal()
	lb := waitCampaign(t, bch, 10*time.Second)
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("epoch after the partition %d not above %d", lb.Epoch(), la.Epoch())
	}
	if err := la.Store().PutJob(t.Context(), "j", nil, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("old leader's PutJob = %v, want ErrFenced", err)
	}
}
