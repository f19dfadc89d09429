// Package proxytest is a TCP fault proxy for tests: it listens on a
// loopback port, relays every connection to a target address, and lets a
// test break the network between the two the ways real networks break:
//
//   - Cut resets every relayed connection and refuses new ones (a peer
//     that went away, or a partition that the kernel reports); Heal lets
//     connections through again.
//   - Drop keeps connections open but discards every byte both ways (a
//     partition that nobody reports: calls hang until a timeout, keepalive
//     or heartbeat notices); Heal resets the connections it held, as a
//     network coming back after the peers gave up would.
//   - Delay holds every chunk of bytes for a while before relaying it.
//
// The cluster harness (clustertest) puts one in front of every process and
// dependency that it starts. proxytest imports the standard library only;
// only tests and test helpers import it.
package proxytest

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// mode is what a proxy does with traffic.
type mode int

const (
	pass mode = iota
	cut
	drop
)

// Proxy relays connections from Addr to a target. Its methods may be called
// from any goroutine.
type Proxy struct {
	ln    net.Listener
	pipes sync.WaitGroup
	done  chan struct{}
	// targetSet is closed once the proxy has a target; connections that
	// arrive before wait for it.
	targetSet chan struct{}
	setOnce   sync.Once

	mu struct {
		sync.Mutex
		target string
		mode   mode
		delay  time.Duration
		// cutOn, when set, cuts as soon as a chunk from a client contains
		// it; fired is closed then.
		cutOn  []byte
		fired  chan struct{}
		conns  map[net.Conn]struct{}
		closed bool
	}
}

// Start starts a proxy to target on a free loopback port and closes it
// with t.Cleanup. An empty target is set later with SetTarget (for a
// backend whose address is known only after it starts, while it must be
// told the proxy's address to advertise); connections wait for it.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Listen starts a proxy to target listening on addr.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, done: make(chan struct{}), targetSet: make(chan struct{})}
	p.mu.target = target
	p.mu.conns = make(map[net.Conn]struct{})
	if target != "" {
		p.setOnce.Do(func() { close(p.targetSet) })
	}
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address connections are relayed to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.target
}

// SetTarget relays new connections to target (a restarted backend on
// another port); existing ones are reset.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.target = target
	p.closeConnsLocked()
	p.setOnce.Do(func() { close(p.targetSet) })
}

// Cut resets every relayed connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.mode = cut
	p.closeConnsLocked()
}

// Drop discards every byte both ways, on open and new connections alike,
// until Heal; connections stay open.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.mode = drop
}

// Heal ends a Cut or a Drop. After a Drop the connections it held are
// reset: the bytes it discarded left them unusable.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.mode == drop {
		p.closeConnsLocked()
	}
	p.mu.mode = pass
}

// CutWhen arms a Cut that fires as soon as a client sends bytes containing
// pattern within one read (a plain-text request line, say "/_manifest"),
// before they reach the target; the returned channel is closed then. Heal
// ends the Cut as usual.
func (p *Proxy) CutWhen(pattern []byte) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.cutOn = bytes.Clone(pattern)
	p.mu.fired = make(chan struct{})
	return p.mu.fired
}

// Delay holds every chunk of relayed bytes for d before passing it on (0:
// no delay).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.delay = d
}

// Close stops the proxy, resets its connections and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	p.closeConnsLocked()
	p.mu.Unlock()
	p.ln.Close()
	<-p.done
	p.pipes.Wait()
}

func (p *Proxy) closeConnsLocked() {
	for c := range p.mu.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a dead peer's kernel sends
		}
		c.Close()
		delete(p.mu.conns, c)
	}
}

func (p *Proxy) accept() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.relay(c)
	}
}

func (p *Proxy) relay(c net.Conn) {
	p.mu.Lock()
	if p.mu.closed || p.mu.mode == cut {
		p.mu.Unlock()
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
		return
	}
	p.mu.conns[c] = struct{}{}
	p.mu.Unlock()
	p.pipes.Add(1)
	go func() {
		defer p.pipes.Done()
		select {
		case <-p.targetSet:
		case <-p.done: // closed
		case <-time.After(30 * time.Second):
		}
		b, err := net.DialTimeout("tcp", p.Target(), 5*time.Second)
		if err != nil {
			p.forget(c)
			c.Close()
			return
		}
		p.mu.Lock()
		if _, ok := p.mu.conns[c]; !ok { // cut, retargeted or closed meanwhile
			p.mu.Unlock()
			b.Close()
			return
		}
		p.mu.conns[b] = struct{}{}
		p.mu.Unlock()
		p.pipes.Add(2)
		go p.pipe(b, c, true)
		go p.pipe(c, b, false)
	}()
}

// pipe copies src to dst (fromClient: src is the accepted connection),
// discarding while dropping and waiting out the delay, until either side
// closes.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer p.pipes.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if fromClient && p.mu.cutOn != nil && bytes.Contains(buf[:n], p.mu.cutOn) {
				p.mu.cutOn = nil
				close(p.mu.fired)
				p.mu.mode = cut
				p.closeConnsLocked()
			}
			m, delay := p.mu.mode, p.mu.delay
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay) // the fault being injected
			}
			if m == pass {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil { // io.EOF or a reset: either ends the relay
			break
		}
	}
	dst.Close()
	src.Close()
	p.forget(dst)
	p.forget(src)
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.mu.conns, c)
	p.mu.Unlock()
}

// Group is the proxies of one network path that has several endpoints
// (the members of an etcd cluster, say); its methods act on every one.
type Group []*Proxy

// Addrs are the proxies' addresses.
func (g Group) Addrs() []string {
	out := make([]string, len(g))
	for i, p := range g {
		out[i] = p.Addr()
	}
	return out
}

// Cut cuts every proxy of the group.
func (g Group) Cut() {
	for _, p := range g {
		p.Cut()
	}
}

// Drop drops the traffic of every proxy of the group.
func (g Group) Drop() {
	for _, p := range g {
		p.Drop()
	}
}

// Heal heals every proxy of the group.
func (g Group) Heal() {
	for _, p := range g {
		p.Heal()
	}
}

// Delay delays the traffic of every proxy of the group by d.
func (g Group) Delay(d time.Duration) {
	for _, p := range g {
		p.Delay(d)
	}
}
