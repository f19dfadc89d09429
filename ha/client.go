package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Client is one process's connection to the etcd cluster. A jobmanager
// campaigns through it; taskmanagers, the CLI and standbys use it to find
// the leader. Its methods may be called concurrently. Close releases it.
type Client struct {
	cfg    Config
	log    *slog.Logger
	etcd   *clientv3.Client
	prefix string // cluster prefix, no trailing slash

	fenced atomic.Int64 // writes refused by the fence, over all leaderships

	mu struct {
		sync.Mutex
		closed bool
		// terms holds the sessions (campaigning or leading) not yet
		// released; Close ends them.
		terms map[*Leadership]struct{}
		// watches cancel the WatchLeader goroutines.
		watches map[*watchHandle]struct{}
	}
	wg sync.WaitGroup // WatchLeader goroutines
}

type watchHandle struct{ cancel context.CancelFunc }

// LeaderInfo describes the current leader. The zero value (Epoch 0) means
// no jobmanager leads.
type LeaderInfo struct {
	// ID is the leader's jobmanager id, Address where it serves clients
	// and taskmanagers, both as given to Campaign.
	ID, Address string
	// Epoch is the leader's fencing epoch (see Leadership.Epoch).
	Epoch int64
}

// leaderValue is what a campaign stores in its election key.
type leaderValue struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

// ConnectRetrying calls Connect until it succeeds or ctx ends, waiting
// retry between attempts and passing each failure to failed (to log it
// with what the caller needs etcd for). It returns ctx's error when ctx
// ends first.
func ConnectRetrying(ctx context.Context, cfg Config, retry time.Duration, failed func(error)) (*Client, error) {
	for {
		c, err := Connect(ctx, cfg)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		failed(err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retry):
		}
	}
}

// Connect connects to etcd and checks that the cluster answers a
// linearizable read within cfg.DialTimeout. When it does not, Connect
// returns an error that names the endpoints and wraps ErrUnavailable,
// or ErrAuthentication when a certificate or the credentials were
// refused; the error says which setting to check. The caller may retry.
// Connect starts no campaign.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	tlsCfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Username != "" && tlsCfg == nil && endpointScheme(cfg.Endpoints[0]) != "https" {
		log.Warn("the etcd password travels in plaintext; set "+settingCA+", "+settingCert+" and "+settingKey, "component", "ha", "user", cfg.Username, "endpoints", cfg.Endpoints)
	}
	last := new(lastRPCError)
	etcd, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Logger:      zap.NewNop(),
		// Keepalive pings notice a dead connection between requests.
		DialKeepAliveTime:    cfg.DialTimeout,
		DialKeepAliveTimeout: cfg.DialTimeout,
		TLS:                  tlsCfg,
		Username:             cfg.Username,
		Password:             cfg.Password,
		// Chained inside the etcd client's own interceptor, so it sees
		// gRPC's error before the etcd client reduces it to ctx.Err().
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(last.intercept)},
	})
	if err != nil {
		return nil, connectFailure(ctx, cfg, tlsCfg, err, last.get())
	}
	c := &Client{cfg: cfg, log: log.With("component", "ha"), etcd: etcd, prefix: cfg.prefix()}
	c.mu.terms = make(map[*Leadership]struct{})
	c.mu.watches = make(map[*watchHandle]struct{})

	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	_, err = etcd.Get(pctx, c.electionPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		etcd.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ha: connect to etcd at %s: %w", strings.Join(cfg.Endpoints, ","), ctx.Err())
		}
		return nil, connectFailure(ctx, cfg, tlsCfg, err, last.get())
	}
	c.log.Info("connected to etcd", "endpoints", cfg.Endpoints, "prefix", c.prefix)
	return c, nil
}

// Close ends every campaign and leadership of this client (as if lost:
// the session leases are revoked when etcd answers), stops the leader
// watches, waits for the client's goroutines and closes the connection.
// Call Resign first for a graceful hand-over. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	terms := make([]*Leadership, 0, len(c.mu.terms))
	for l := range c.mu.terms {
		terms = append(terms, l)
	}
	for w := range c.mu.watches {
		w.cancel()
	}
	c.mu.Unlock()
	for _, l := range terms {
		l.end("client closed")
		l.wg.Wait()
	}
	c.wg.Wait()
	return c.etcd.Close()
}

// FencedWrites is the number of Store writes refused because their
// leadership had ended, over every leadership of this client.
func (c *Client) FencedWrites() int64 { return c.fenced.Load() }

// Leader returns the current leader, or an error wrapping ErrNoLeader when
// no jobmanager leads.
func (c *Client) Leader(ctx context.Context) (LeaderInfo, error) {
	resp, err := c.etcd.Get(ctx, c.electionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("ha: read the leader from etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return LeaderInfo{}, fmt.Errorf("ha: %w under %s", ErrNoLeader, c.prefix)
	}
	kv := resp.Kvs[0]
	return decodeLeader(kv.Value, kv.CreateRevision)
}

// WatchLeader sends the current leader at once (the zero LeaderInfo when
// none leads) and then every change of leader, until ctx ends or the
// client is closed, when it closes the channel. A slow receiver sees only
// the latest leader: intermediate ones may be skipped, never reordered.
// While etcd is unreachable nothing is sent.
func (c *Client) WatchLeader(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	ctx, cancel := context.WithCancel(ctx)
	h := &watchHandle{cancel: cancel}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		cancel()
		close(out)
		return out
	}
	c.mu.watches[h] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.mu.watches, h)
			c.mu.Unlock()
			cancel()
			close(out)
		}()
		c.watchLeader(ctx, out)
	}()
	return out
}

func (c *Client) watchLeader(ctx context.Context, out chan<- LeaderInfo) {
	pfx := c.electionPrefix() + "/"
	var last LeaderInfo
	sent := false
	for ctx.Err() == nil {
		resp, err := c.etcd.Get(ctx, pfx, clientv3.WithFirstCreate()...)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("watch leader: read failed; retrying", "err", err)
				if !sleepCtx(ctx, retryDelay) {
					return
				}
			}
			continue
		}
		var cur LeaderInfo
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			if cur, err = decodeLeader(kv.Value, kv.CreateRevision); err != nil {
				c.log.Warn("watch leader: undecodable leader key", "key", string(kv.Key), "err", err)
			}
		}
		if !sent || cur != last {
			select {
			case out <- cur:
				last, sent = cur, true
			case <-ctx.Done():
				return
			}
		}
		// Wait for any change under the election prefix after what we read,
		// then read again.
		wctx, wcancel := context.WithCancel(ctx)
		wch := c.etcd.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if wr.Err() != nil || len(wr.Events) > 0 {
				break
			}
		}
		wcancel()
	}
}

func decodeLeader(val []byte, epoch int64) (LeaderInfo, error) {
	var v leaderValue
	if err := json.Unmarshal(val, &v); err != nil {
		return LeaderInfo{Epoch: epoch}, fmt.Errorf("ha: leader key of epoch %d holds %q, not a leader record: %w", epoch, val, err)
	}
	return LeaderInfo{ID: v.ID, Address: v.Address, Epoch: epoch}, nil
}

// electionPrefix is where the campaigns' keys live:
// <prefix>/leader/<lease id in hex>.
func (c *Client) electionPrefix() string { return c.prefix + "/leader" }

func (c *Client) register(l *Leadership) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	c.mu.terms[l] = struct{}{}
	return nil
}

func (c *Client) unregister(l *Leadership) {
	c.mu.Lock()
	delete(c.mu.terms, l)
	c.mu.Unlock()
}

func (c *Client) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}
