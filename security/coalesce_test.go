package security

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/credentials"
)

// countingConn counts the writes to a connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestCoalescedRecords checks that a write of many TLS records reaches
// the socket in one write and arrives intact, in order, both ways.
func TestCoalescedRecords(t *testing.T) {
	dir := certSet(t)
	tm1, tm2 := load(t, dir, TaskManagerFile("tm-1")), load(t, dir, TaskManagerFile("tm-2"))
	client := coalescingCreds{credentials.NewTLS(tm1.ClientConfig(RoleTaskManager))}
	server := coalescingCreds{credentials.NewTLS(tm2.ServerConfig())}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	type result struct {
		conn net.Conn
		err  error
	}
	accepted := make(chan result, 1)
	go func() {
		raw, err := lis.Accept()
		if err != nil {
			accepted <- result{err: err}
			return
		}
		conn, _, err := server.ServerHandshake(raw)
		accepted <- result{conn, err}
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingConn{Conn: raw}
	cconn, info, err := client.ClientHandshake(context.Background(), "tm-2", counted)
	if err != nil {
		t.Fatal(err)
	}
	defer cconn.Close()
	if tlsInfo, ok := info.(credentials.TLSInfo); !ok || len(tlsInfo.State.PeerCertificates) == 0 {
		t.Fatalf("auth info %T carries no peer certificate", info)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	sconn := r.conn
	defer sconn.Close()

	msg := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160 kB: ten records
	for _, dir := range []struct {
		name     string
		from, to net.Conn
	}{{"client to server", cconn, sconn}, {"server to client", sconn, cconn}} {
		before := counted.writes.Load()
		done := make(chan error, 1)
		got := make([]byte, len(msg))
		go func() { _, err := io.ReadFull(dir.to, got); done <- err }()
		if n, err := dir.from.Write(msg); err != nil || n != len(msg) {
			t.Fatalf("%s: write: %d, %v", dir.name, n, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: read: %v", dir.name, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("%s: the bytes differ", dir.name)
		}
		if dir.from == cconn {
			if w := counted.writes.Load() - before; w != 1 {
				t.Errorf("%s: %d writes to the socket for one Write of %d bytes, want 1", dir.name, w, len(msg))
			}
		}
	}
}
