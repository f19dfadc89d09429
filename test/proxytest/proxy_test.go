package proxytest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes lines back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line on c and reads it back within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo garbled: " + line)
	}
	return nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyFaults(t *testing.T) {
	p := Start(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("through a healthy proxy: %v", err)
	}

	// Cut: the open connection is reset, new ones are refused.
	p.Cut()
	if err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("a connection survived Cut")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil { // accepted by the listener, then reset
		err = roundTrip(c2, bufio.NewReader(c2), 5*time.Second)
		c2.Close()
		if err == nil {
			t.Fatal("a new connection worked while cut")
		}
	}
	p.Heal()
	c, r = dial(t, p.Addr())
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("after Heal: %v", err)
	}

	// Drop: the connection stays open, nothing arrives.
	p.Drop()
	err := roundTrip(c, r, 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("while dropping: %v, want a timeout", err)
	}
	p.Heal() // the connection that lost bytes is reset
	if err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("the connection that lost bytes survived Heal")
	}
	c, r = dial(t, p.Addr())
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("after Heal of a Drop: %v", err)
	}

	// Delay: each direction holds its bytes for the delay.
	p.Delay(100 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("round trip took %v with 100ms each way", took)
	}
	p.Delay(0)

	// CutWhen: the chunk with the pattern never arrives; the proxy cuts.
	fired := p.CutWhen([]byte("boom"))
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("boom\n")); err == nil {
		if line, err := r.ReadString('\n'); err == nil {
			t.Fatalf("read %q through a proxy armed to cut on it", line)
		}
	}
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("CutWhen did not fire")
	}
	p.Heal()
	c, r = dial(t, p.Addr())
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("after a CutWhen and Heal: %v", err)
	}

	// SetTarget: new connections go to the new backend.
	other := echoServer(t)
	p.SetTarget(other)
	if p.Target() != other {
		t.Fatalf("target %s, want %s", p.Target(), other)
	}
	c, r = dial(t, p.Addr())
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("after SetTarget: %v", err)
	}
}
