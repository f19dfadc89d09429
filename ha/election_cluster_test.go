package ha

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/weirstream/weir/ha/etcdtest"
)

// TestLeaderSurvivesEtcdMemberDown: with etcd run as three members, taking
// down the etcd leader member (gracefully, or as a crash) leaves the
// jobmanager's leadership in place: it is not lost, no standby is
// elected, its writes go on and the member rejoins on restart. Should the
// leadership end anyway, a standby must be elected within the lease TTL.
func TestLeaderSurvivesEtcdMemberDown(t *testing.T) {
	t.Run("stop", func(t *testing.T) { testLeaderSurvivesEtcdMemberDown(t, (*etcdtest.Member).Stop) })
	t.Run("kill", func(t *testing.T) { testLeaderSurvivesEtcdMemberDown(t, (*etcdtest.Member).Kill) })
}

// replay returns a channel that delivers r again.
func replay(r campaignResult) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	ch <- r
	return ch
}

func testLeaderSurvivesEtcdMemberDown(t *testing.T, down func(*etcdtest.Member)) {
	etcd := etcdtest.StartCluster(t, 3)
	const ttl = 4 * time.Second
	cfg := DefaultConfig()
	cfg.Endpoints = etcd.Endpoints()
	cfg.LeaseTTL = ttl
	cfg.DialTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, b, obs := connect(t, cfg), connect(t, cfg), connect(t, cfg)

	la := waitCampaign(t, campaignAsync(t.Context(), a, "jm-a"), 10*time.Second)
	bch := campaignAsync(t.Context(), b, "jm-b")
	if err := la.Store().PutJob(t.Context(), "j", []byte("graph"), []byte("0")); err != nil {
		t.Fatalf("PutJob: %v", err)
	}

	m := etcd.Member(etcd.Leader())
	downAt := time.Now()
	down(m)
	next := etcd.Leader()
	t.Logf("etcd leader %s down; %s leads etcd %v later", m.Name(), etcd.Member(next).Name(), time.Since(downAt).Round(time.Millisecond))

	// For longer than the lease TTL the jobmanager keeps writing as
	// leader; a missed keep-alive would have ended its leadership by now.
	hold := ttl + ttl/2
	var written, failed int
	var lastErr error
	lost := func() bool {
		select {
		case <-la.Lost():
			return true
		default:
			return false
		}
	}
	for time.Since(downAt) < hold && !lost() {
		select {
		case r := <-bch:
			if !lost() {
				t.Fatalf("standby elected while the leader keeps its lease: %+v", r)
			}
			bch = replay(r)
		default:
		}
		err := la.Store().PutJobStatus(t.Context(), "j", fmt.Append(nil, written+1))
		switch {
		case err == nil:
			written++
		case errors.Is(err, ErrFenced), errors.Is(err, ErrLeadershipLost):
			// The loop sees Lost next.
		default:
			failed++
			lastErr = err
		}
		sleepCtx(t.Context(), 50*time.Millisecond) // write pacing, not synchronisation
	}
	if lost() {
		// Allowed, if a standby takes over within the lease TTL.
		t.Logf("leadership lost %v after the etcd member went down: %s", time.Since(downAt).Round(time.Millisecond), la.Reason())
		lb := waitCampaign(t, bch, ttl+5*time.Second)
		if lb.Epoch() <= la.Epoch() {
			t.Fatalf("new epoch %d not above old epoch %d", lb.Epoch(), la.Epoch())
		}
		t.Logf("jm-b elected %v after the etcd member went down", time.Since(downAt).Round(time.Millisecond))
		return
	}
	t.Logf("jm-a kept leading and wrote %d times in %v with etcd member %s down (%d writes failed; last error: %v)", written, hold, m.Name(), failed, lastErr)
	if written == 0 {
		t.Fatalf("no write succeeded with one etcd member of three down; last error: %v", lastErr)
	}
	want := LeaderInfo{ID: "jm-a", Address: "jm-a.example:6123", Epoch: la.Epoch()}
	if li, err := obs.Leader(t.Context()); err != nil || li != want {
		t.Fatalf("Leader = %+v, %v; want %+v", li, err, want)
	}

	m.Restart()
	etcd.WaitHealthy(t)
	select {
	case <-la.Lost():
		t.Fatalf("leadership lost after the etcd member rejoined: %s", la.Reason())
	default:
	}
	if li, err := obs.Leader(t.Context()); err != nil || li != want {
		t.Fatalf("Leader after the member rejoined = %+v, %v; want %+v", li, err, want)
	}
	// A failed write may have been applied: then the status is one more.
	recs, err := la.Store().ListJobs(t.Context())
	if err != nil || len(recs) != 1 {
		t.Fatalf("ListJobs = %+v, %v; want job j", recs, err)
	}
	if got := string(recs[0].Status); got != fmt.Sprint(written) && (failed == 0 || got != fmt.Sprint(written+1)) {
		t.Fatalf("status of job j = %s after %d writes (%d failed)", got, written, failed)
	}

	// The standby still takes over on a hand-over.
	if err := la.Resign(t.Context()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if lb := waitCampaign(t, bch, 10*time.Second); lb.Epoch() <= la.Epoch() {
		t.Fatalf("new epoch %d not above old epoch %d", lb.Epoch(), la.Epoch())
	}
}
