package security

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// crypto/tls writes every TLS record (at most 16 KiB of plaintext) with a
// write of its own to the connection, so one write of gRPC's (its buffer
// of HTTP/2 frames, 32 KiB by default) becomes three or more writes to
// the socket, and the peer wakes up to read each of them, where a
// plaintext connection makes one. coalescingCreds collects the records of
// one write and hands them to the socket together. The records are
// exactly what crypto/tls made: encryption and verification are not
// touched.

// coalescingCreds wraps TLS transport credentials so that the records of
// one Write reach the socket in one write.
type coalescingCreds struct {
	credentials.TransportCredentials
}

var _ credentials.TransportCredentials = coalescingCreds{}

func (c coalescingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	w := &recordWriter{Conn: raw}
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, w)
	if err != nil {
		return nil, nil, err
	}
	return &coalescedConn{Conn: conn, w: w}, info, nil
}

func (c coalescingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	w := &recordWriter{Conn: raw}
	conn, info, err := c.TransportCredentials.ServerHandshake(w)
	if err != nil {
		return nil, nil, err
	}
	return &coalescedConn{Conn: conn, w: w}, info, nil
}

func (c coalescingCreds) Clone() credentials.TransportCredentials {
	return coalescingCreds{c.TransportCredentials.Clone()}
}

// coalescedConn is a TLS connection whose Write passes the records it
// makes to the socket in one write.
type coalescedConn struct {
	net.Conn // the TLS connection
	w        *recordWriter
}

func (c *coalescedConn) Write(p []byte) (int, error) {
	c.w.hold()
	n, err := c.Conn.Write(p)
	if ferr := c.w.release(); err == nil && ferr != nil {
		err = ferr
	}
	return n, err
}

// recordWriter is the socket under a TLS connection. While a Write of the
// TLS connection is under way (held), it collects what the TLS connection
// writes, and writes it to the socket when the last such Write ends.
// crypto/tls writes from the goroutine calling Write, or from the one
// calling Read (alerts, key updates) under the same lock, so the
// collected bytes are in the connection's order.
type recordWriter struct {
	net.Conn
	mu    sync.Mutex
	holds int
	buf   []byte
}

// maxKeptBuffer bounds the buffer a recordWriter keeps between writes.
const maxKeptBuffer = 256 << 10

func (w *recordWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds > 0 {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	return w.Conn.Write(p)
}

func (w *recordWriter) hold() {
	w.mu.Lock()
	w.holds++
	w.mu.Unlock()
}

// release ends a hold; the last one writes what was collected.
func (w *recordWriter) release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holds--
	if w.holds > 0 || len(w.buf) == 0 {
		return nil
	}
	_, err := w.Conn.Write(w.buf)
	if cap(w.buf) > maxKeptBuffer {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	return err
}
