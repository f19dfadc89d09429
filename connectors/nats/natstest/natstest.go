// Package natstest runs a real NATS server with JetStream inside a test
// process, for the tests of the NATS connectors and of jobs that use them.
//
// natstest imports the standard library and the NATS server
// (github.com/nats-io/nats-server/v2/server) only.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds the wait for a new server to accept connections; it
// is generous because test machines are slow and shared.
const readyTimeout = 30 * time.Second

// Start runs a NATS server with JetStream on 127.0.0.1 at a random port,
// with its store in a temporary directory, shuts it down when the test
// ends, and returns its client URL (nats://127.0.0.1:port).
func Start(t testing.TB) string {
	t.Helper()
	return StartServer(t, nil).ClientURL()
}

// StartServer is Start for a test that needs the server itself: to shut it
// down early (a connector must then fail with a clear error), or to
// change its options first. configure, if not nil, is called with the
// options before the server starts (to require a user and password, say);
// JetStream, the store directory, the address and logging are set
// already. The server is shut down at cleanup if it still runs.
func StartServer(t testing.TB, configure func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
		// Keep the server's HTTP monitoring, cluster and leaf-node
		// listeners off: the defaults already do, but be explicit.
		HTTPPort: 0,
	}
	if configure != nil {
		configure(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		t.Fatalf("natstest: server not ready for connections within %v", readyTimeout)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}
