// Package ha owns Weir's high availability on etcd (ha: etcd): the
// election of one leading jobmanager among several, the fencing epoch that
// comes with a leadership, and the leader's metadata in etcd — job graphs
// and statuses, completed-checkpoint pointers and the checkpoint-id
// counters. Large payloads (manifests, snapshots, big graphs) stay in
// checkpoint storage; etcd holds small values and pointers to them.
//
// # Election
//
// Connect returns a Client. Each jobmanager calls Campaign, which blocks
// until it leads; the others wait inside Campaign as standbys. A
// Leadership's Epoch is the etcd revision at which its election key
// (<prefix>/leader/<lease>) was created; epochs of successive leaders
// strictly increase. The key is bound to a session lease of Config.LeaseTTL
// kept alive in the background. Leadership.Lost closes when the leader
// must step down: etcd has not acknowledged a keep-alive for four fifths
// of the TTL (so the old leader stops before etcd can elect another,
// unless the process was paused), the key was deleted or its lease
// revoked, a write was fenced, or Resign. Taskmanagers, the CLI and
// standbys find the leader with Leader and WatchLeader.
//
// # Fencing
//
// Leases are not locks: a paused leader can wake up believing it leads.
// Every Store write is one etcd transaction conditioned on the leader key
// still having CreateRevision == epoch, so a stale leader's writes fail
// with ErrFenced, are counted (Store.FencedWrites, Client.FencedWrites) and
// logged. The same epoch must travel on every jobmanager→taskmanager call
// and every sink commit (that is the jobmanager's and taskmanager's job).
//
// # Keys
//
//	<prefix>/leader/<lease-hex>              one per campaigning jobmanager: {"id","address"}
//	<prefix>/jobs/<id>/graph                 opaque bytes (the jobmanager's encoding)
//	<prefix>/jobs/<id>/status                opaque bytes
//	<prefix>/jobs/<id>/checkpoints/latest    {"v":1,"id","manifestKey","manifestSha256"}
//	<prefix>/jobs/<id>/checkpoint-id         the last allocated id, decimal
//	<prefix>/leader-term                     the last allocated leadership term, decimal
//
// # Security
//
// Config.TLS names a CA file and a client certificate with its key: the
// client then speaks TLS to etcd, trusts only that CA for etcd's server
// certificates (checked against the endpoint's host name, as usual) and
// presents the certificate to etcd's client-certificate auth.
// Config.Username and Config.Password log in when etcd's own
// authentication is on. Without them the connection is plaintext, which
// suits loopback and test clusters. A refused certificate or login makes
// Connect fail with ErrAuthentication, naming the setting to fix.
//
// ha imports the etcd client and its API error codes (it is the only
// package that does), gRPC (to read why a connection failed), zap (to
// silence the client's logs), jobmanager/jobstore (the job-store seam its
// Store implements, with the types and errors it shares) and the standard
// library. It must not import generated protobuf code: values are opaque
// bytes.
package ha

import (
	"errors"

	"github.com/weirstream/weir/jobmanager/jobstore"
)

var (
	// ErrUnavailable means etcd did not answer; retry later.
	ErrUnavailable = errors.New("ha: etcd unavailable")
	// ErrAuthentication means etcd and this client did not accept each
	// other: a TLS certificate was refused (by either side) or etcd
	// refused the user, its password or its access to the prefix.
	// Retrying does not help until the certificates, the CA, the
	// credentials or etcd's permissions change.
	ErrAuthentication = errors.New("ha: etcd authentication failed")
	// ErrNoLeader means no jobmanager leads at the moment.
	ErrNoLeader = errors.New("ha: no leader elected")
	// ErrFenced means a write was refused, and not applied, because the
	// writer's leadership had ended.
	ErrFenced = errors.New("ha: write fenced")
	// ErrLeadershipLost means the leadership ended while a write was in
	// flight; the write may or may not have been applied.
	ErrLeadershipLost = errors.New("ha: leadership lost")
	// ErrNotFound means the job or checkpoint pointer is not stored. It is
	// jobstore.ErrNotFound, the same for every job store.
	ErrNotFound = jobstore.ErrNotFound
	// ErrStaleCheckpoint means a checkpoint pointer would move backwards.
	// It is jobstore.ErrStaleCheckpoint.
	ErrStaleCheckpoint = jobstore.ErrStaleCheckpoint
	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("ha: client closed")
)
