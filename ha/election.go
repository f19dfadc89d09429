package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const (
	// retryDelay and maxRetryDelay bound the back-off between campaign
	// attempts and leader-watch retries while etcd is unreachable.
	retryDelay    = 100 * time.Millisecond
	maxRetryDelay = 2 * time.Second
	// revokeTimeout bounds the best-effort lease revoke when a term ends.
	revokeTimeout = time.Second
)

// Leadership is one campaign of a jobmanager: once Campaign returns it, the
// jobmanager leads with fencing epoch Epoch until Lost is closed. Its
// methods may be called concurrently.
type Leadership struct {
	c           *Client
	id, address string
	sess        *concurrency.Session
	elec        *concurrency.Election
	key         string
	epoch       atomic.Int64 // set once Campaign won; read by end's log
	store       *Store

	lost     chan struct{}
	lostOnce sync.Once
	reason   string // set before lost is closed
	armc     chan clientv3.WatchChan
	resign   sync.Once
	wg       sync.WaitGroup // the monitor goroutine
}

// Campaign blocks until this jobmanager leads the cluster and returns its
// Leadership; standbys simply wait here. id names the jobmanager and
// address is where it serves taskmanagers and clients; both are published
// to Leader and WatchLeader. While etcd is unreachable Campaign logs and
// retries with back-off, starting a new session whenever the previous one
// lapsed, so a leader is elected again once etcd returns. It returns only
// when leading, or with ctx's error, or ErrClosed.
func (c *Client) Campaign(ctx context.Context, id, address string) (*Leadership, error) {
	if id == "" {
		return nil, errors.New("ha: campaign: empty jobmanager id; give each jobmanager a unique id")
	}
	val, err := json.Marshal(leaderValue{ID: id, Address: address})
	if err != nil {
		return nil, fmt.Errorf("ha: campaign of %s: encode leader record: %w", id, err)
	}
	delay := retryDelay
	for {
		l, err := c.campaignOnce(ctx, id, address, string(val))
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrClosed) || c.closed() {
			return nil, fmt.Errorf("ha: campaign of %s: %w", id, ErrClosed)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ha: campaign of %s: %w", id, ctx.Err())
		}
		c.log.Warn("campaign interrupted; retrying", "id", id, "endpoints", c.cfg.Endpoints, "retryIn", delay, "err", err)
		if !sleepCtx(ctx, delay) {
			return nil, fmt.Errorf("ha: campaign of %s: %w", id, ctx.Err())
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// campaignOnce runs one session: grant a lease, keep it alive, campaign.
func (c *Client) campaignOnce(ctx context.Context, id, address, val string) (*Leadership, error) {
	l := &Leadership{c: c, id: id, address: address, lost: make(chan struct{}), armc: make(chan clientv3.WatchChan, 1)}
	if err := c.register(l); err != nil {
		return nil, err
	}
	// The watchdog counts from before the grant was sent: etcd's own
	// expiry can only be later.
	start := time.Now()
	gctx, gcancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	grant, err := c.etcd.Grant(gctx, c.cfg.ttlSeconds())
	gcancel()
	if err != nil {
		c.unregister(l)
		return nil, fmt.Errorf("ha: grant a %ds session lease at %v: %w", c.cfg.ttlSeconds(), c.cfg.Endpoints, err)
	}
	ttl := time.Duration(grant.TTL) * time.Second
	// The session keeps the lease alive; our own keep-alive channel tells
	// the watchdog when etcd last acknowledged it.
	sess, err := concurrency.NewSession(c.etcd, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(grant.TTL)))
	if err != nil {
		c.revoke(grant.ID)
		c.unregister(l)
		return nil, fmt.Errorf("ha: start session: %w", err)
	}
	l.sess = sess
	kactx, kacancel := context.WithCancel(context.Background())
	kach, err := c.etcd.KeepAlive(kactx, grant.ID)
	if err != nil {
		kacancel()
		sess.Orphan()
		c.revoke(grant.ID)
		c.unregister(l)
		return nil, fmt.Errorf("ha: keep session lease alive: %w", err)
	}
	// The leader-key watch lives as long as the monitor; creating it
	// blocks while etcd is unreachable, so it is created here, where the
	// monitor's exit (wcancel) can interrupt it.
	wctx, wcancel := context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.monitor(start, ttl, kach, func() { kacancel(); wcancel() })

	l.elec = concurrency.NewElection(sess, c.electionPrefix())
	// The session lapsing ends the campaign too.
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-l.lost:
			ccancel()
		case <-done:
		}
	}()
	fail := func(err error) (*Leadership, error) {
		l.end(err.Error())
		l.wg.Wait()
		return nil, err
	}
	if err := l.elec.Campaign(cctx, val); err != nil {
		return fail(fmt.Errorf("ha: campaign: %w", err))
	}
	l.key = l.elec.Key()
	l.epoch.Store(l.elec.Rev())

	// Campaign waits for the older keys to go but not for ours to stay:
	// check that it still exists with our epoch before claiming the lead.
	resp, err := c.etcd.Get(cctx, l.key)
	switch {
	case err != nil:
		return fail(fmt.Errorf("ha: check leader key %s: %w", l.key, err))
	case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.Epoch():
		return fail(fmt.Errorf("ha: leader key %s of epoch %d vanished while campaigning", l.key, l.Epoch()))
	}
	l.store = newStore(c, l)
	l.armc <- c.etcd.Watch(wctx, l.key, clientv3.WithRev(resp.Header.Revision+1))
	c.log.Info("leading", "id", l.id, "address", l.address, "epoch", l.Epoch(), "key", l.key, "leaseTTL", ttl)
	return l, nil
}

// Epoch is the fencing epoch: the etcd revision at which this leadership's
// key was created. Epochs of successive leaders strictly increase. The
// jobmanager sends it on every call to taskmanagers and with every sink
// commit; they reject a lower epoch than the highest they have seen.
func (l *Leadership) Epoch() int64 { return l.epoch.Load() }

// Key is the leadership's election key in etcd.
func (l *Leadership) Key() string { return l.key }

// ID and Address are what Campaign was given.
func (l *Leadership) ID() string      { return l.id }
func (l *Leadership) Address() string { return l.address }

// Lost is closed when this leadership ends: etcd acknowledged no
// keep-alive for most of the lease TTL (the leader steps down before etcd
// expires its key, so that two jobmanagers do not believe they lead at
// once, barring pauses; fencing covers those), the key was deleted or its
// lease revoked, a Store write was fenced, Resign was called or the client
// closed. The jobmanager must stop acting as leader at once: stop
// scheduling, triggering checkpoints and writing, and campaign again.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Reason says why the leadership ended; empty while it lasts.
func (l *Leadership) Reason() string {
	select {
	case <-l.lost:
		return l.reason
	default:
		return ""
	}
}

// Store is the metadata store fenced on this leadership's epoch.
func (l *Leadership) Store() *Store { return l.store }

// Resign gives up the leadership: its key is deleted (if it is still this
// leadership's) so that a standby is elected at once, the session lease is
// revoked and Lost is closed. It waits for the leadership's goroutine.
// Resign after the leadership was lost still cleans up and is harmless;
// it blocks at most until ctx ends when etcd is unreachable.
func (l *Leadership) Resign(ctx context.Context) error {
	var err error
	l.resign.Do(func() {
		l.end("resigned")
		// The monitor revokes the lease, which deletes the key; delete it
		// here too in case the revoke failed.
		l.wg.Wait()
		if e := l.elec.Resign(ctx); e != nil {
			err = fmt.Errorf("ha: resign epoch %d (key %s): %w", l.Epoch(), l.key, e)
		}
	})
	l.wg.Wait()
	return err
}

// end closes Lost once, recording why.
func (l *Leadership) end(reason string) {
	l.lostOnce.Do(func() {
		l.reason = reason
		close(l.lost)
		if epoch := l.epoch.Load(); epoch != 0 {
			l.c.log.Warn("leadership ended", "id", l.id, "epoch", epoch, "reason", reason)
		}
	})
}

// monitor is the leadership's one goroutine. It closes Lost when etcd has
// not acknowledged a keep-alive for TTL-TTL/5 (etcd's expiry of the lease
// is at least TTL after the last acknowledged refresh was sent), when the
// keep-alive stream ends (lease expired or revoked) or when the leader key
// is deleted; then it stops the keep-alives and revokes the lease.
func (l *Leadership) monitor(start time.Time, ttl time.Duration, kach <-chan *clientv3.LeaseKeepAliveResponse, stop func()) {
	defer l.wg.Done()
	defer l.c.unregister(l)
	grace := func() time.Duration { return ttl - ttl/5 }
	last := start
	timer := time.NewTimer(time.Until(last.Add(grace())))
	defer timer.Stop()
	var wch clientv3.WatchChan
loop:
	for {
		select {
		case resp, ok := <-kach:
			if !ok {
				l.end("session lease expired or was revoked")
				break loop
			}
			if resp.TTL > 0 {
				ttl = time.Duration(resp.TTL) * time.Second
			}
			last = time.Now()
			timer.Reset(grace())
		case <-timer.C:
			l.end(fmt.Sprintf("etcd acknowledged no lease keep-alive for %v (lease TTL %v); etcd unreachable", time.Since(last).Round(time.Millisecond), ttl))
			break loop
		case wch = <-l.armc:
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				l.end(fmt.Sprintf("watch of leader key %s failed: %v", l.key, wr.Err()))
				break loop
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.end(fmt.Sprintf("leader key %s was deleted", l.key))
					break loop
				}
			}
		case <-l.lost:
			break loop
		}
	}
	stop()
	l.sess.Orphan()
	l.c.revoke(l.sess.Lease())
}

// revoke revokes a lease, best effort: if etcd does not answer, the lease
// expires by itself.
func (c *Client) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	if _, err := c.etcd.Revoke(ctx, id); err != nil {
		c.log.Debug("revoke session lease failed; it will expire", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
