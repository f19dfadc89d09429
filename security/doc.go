// Package security owns who may talk to a Weir process and what they may
// do: the TLS material of each process (a CA, a certificate and its key),
// the identity a peer's certificate carries, the roles that authorize
// calls, and the development certificates `weir certs init` writes.
//
// Every connection between Weir processes is mutual TLS (TLS 1.3) against
// one cluster CA. A certificate names its holder in the subject's common
// name and its role in an organizational unit:
//
//   - jobmanager: serves ClusterService and JobService, calls
//     taskmanagers;
//   - taskmanager: its common name is its taskmanager id, bound to it: a
//     taskmanager may register, heartbeat and report only under that id;
//   - operate: a client that may submit, cancel and trigger (and read);
//   - read: a client that may only read.
//
// A client checks the server's chain against the CA and its role (dialing
// a jobmanager wants the jobmanager role), not its host name, so that
// processes may move between addresses without new certificates. A server
// requires a client certificate from the CA; gRPC interceptors then check
// each method against the caller's roles (Authorizer).
//
// Without TLS material a process runs in plaintext, which is allowed only
// on loopback addresses (RequireLoopback): a development cluster on one
// machine, and `weir local`.
//
// security imports the standard library, gRPC and internal/limitedfile.
package security
