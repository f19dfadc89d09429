package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir/security"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// The names of the security settings as the jobmanager, the taskmanager
// and the CLI expose them (config-file key and flag), so that an error
// says which one to fix. The password has no flag, because command lines
// are visible to every user of the host.
const (
	settingCA       = "ha.etcdCA (--ha-etcd-ca)"
	settingCert     = "ha.etcdCert (--ha-etcd-cert)"
	settingKey      = "ha.etcdKey (--ha-etcd-key)"
	settingUser     = "ha.etcdUser (--ha-etcd-user)"
	settingPassword = "the etcd password (WEIR_HA_ETCD_PASSWORD)"
)

// maxPEMBytes bounds a CA, certificate or key file.
const maxPEMBytes = security.MaxPEMBytes

// endpointScheme is "http", "https" or another scheme of an endpoint URL,
// and "" for a bare host:port.
func endpointScheme(ep string) string {
	scheme, _, ok := strings.Cut(ep, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(scheme)
}

// validateSecurity checks that the endpoints' schemes agree with each
// other and with the TLS settings, and that the login is complete. It
// reads no file.
func (c Config) validateSecurity() error {
	first := endpointScheme(c.Endpoints[0])
	for _, ep := range c.Endpoints[1:] {
		// The etcd client takes plaintext or TLS for every endpoint from
		// the first one, so a mix would silently dial some of them wrong.
		if s := endpointScheme(ep); s != first {
			return fmt.Errorf("ha: config: etcd endpoints %q and %q differ in scheme; write them all the same way (all https://host:port, all http://host:port or all host:port), because the client uses the first one's for every connection",
				c.Endpoints[0], ep)
		}
	}
	if first == "http" && c.TLS.Enabled() {
		return fmt.Errorf("ha: config: etcd endpoint %q is plain http, but the etcd TLS settings are set; write https://host:port (or host:port), or unset %s, %s and %s for plaintext",
			c.Endpoints[0], settingCA, settingCert, settingKey)
	}
	switch {
	case c.Username != "" && c.Password == "":
		return fmt.Errorf("ha: config: etcd user %q has no password; set %s, or unset %s", c.Username, settingPassword, settingUser)
	case c.Username == "" && c.Password != "":
		return fmt.Errorf("ha: config: %s is set but no etcd user; set %s, or unset the password", settingPassword, settingUser)
	}
	return nil
}

// load reads the TLS files and returns the client TLS configuration for
// etcd, or nil for plaintext. The server's certificate is verified as
// usual: chained to CAFile's certificates and naming the endpoint's host,
// which gRPC takes from the endpoint dialled.
func (f TLSFiles) load() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	var missing []string
	for _, s := range []struct{ file, setting string }{{f.CAFile, settingCA}, {f.CertFile, settingCert}, {f.KeyFile, settingKey}} {
		if s.file == "" {
			missing = append(missing, s.setting)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("ha: config: etcd TLS: %s not set; set the CA, the client certificate and its key together (%s, %s, %s), or none of them for plaintext",
			strings.Join(missing, " and "), settingCA, settingCert, settingKey)
	}
	caPEM, err := readPEM(f.CAFile, settingCA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("ha: config: %s: %s holds no PEM certificate; give the PEM certificate of the CA that signed etcd's server certificate", settingCA, f.CAFile)
	}
	certPEM, err := readPEM(f.CertFile, settingCert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(f.KeyFile, settingKey)
	if err != nil {
		return nil, err
	}
	// The errors of X509KeyPair describe the PEM blocks, never their
	// contents, so the key cannot leak through them.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ha: config: %s %s with %s %s: %v; give a PEM certificate and the private key it was issued for",
			settingCert, f.CertFile, settingKey, f.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("ha: config: %s %s: %v; give a PEM X.509 certificate", settingCert, f.CertFile, err)
		}
	}
	if err := checkClientCert(leaf, f.CertFile, time.Now()); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      pool,
		Certificates: []tls.Certificate{pair},
	}, nil
}

// checkClientCert rejects a certificate etcd would refuse for reasons
// visible here: outside its validity period, or not for clients. Whether
// etcd trusts its issuer only etcd can tell (its CA may differ from the
// one that signed its own certificate).
func checkClientCert(leaf *x509.Certificate, file string, now time.Time) error {
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("ha: config: %s %s expired at %s; renew it", settingCert, file, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("ha: config: %s %s is not valid before %s; check this host's clock, or wait", settingCert, file, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return fmt.Errorf("ha: config: %s %s is not for TLS clients (its extended key usage lacks clientAuth), so etcd would refuse it; issue one that allows client authentication", settingCert, file)
	}
	return nil
}

// readPEM reads one of the TLS files.
func readPEM(path, setting string) ([]byte, error) {
	b, err := security.ReadPEMFile(path)
	switch {
	case errors.Is(err, security.ErrFileTooLarge):
		return nil, fmt.Errorf("ha: config: %s: %s is larger than %d bytes, too large for PEM certificates or keys; is it the right file?", setting, path, maxPEMBytes)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("ha: config: %s: %w; check the path and that this process may read it", setting, err)
	case err != nil:
		return nil, fmt.Errorf("ha: config: %s: read %s: %w", setting, path, err)
	}
	return b, nil
}

// lastRPCError keeps the error of a failed etcd call as gRPC returned
// it. The etcd client reports a call that timed out waiting for a
// connection with the context's error alone, while gRPC's error says why
// no connection came up: a TLS alert, an untrusted certificate. An error
// that names a TLS problem is kept over later ones that do not, such as
// a reset of the next attempt's connection.
type lastRPCError struct {
	mu  sync.Mutex
	err error
}

// intercept is a gRPC unary client interceptor that records failures.
func (l *lastRPCError) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		l.mu.Lock()
		if l.err == nil || !namesTLSProblem(l.err.Error()) {
			l.err = err
		}
		l.mu.Unlock()
	}
	return err
}

func (l *lastRPCError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// namesTLSProblem reports whether an error message says that a TLS peer
// refused the other: a certificate this side does not trust, or an alert
// from the other side.
func namesTLSProblem(msg string) bool {
	return strings.Contains(msg, "x509:") || strings.Contains(msg, "tls: failed to verify") || strings.Contains(msg, "remote error: tls:")
}

// probeTimeout bounds probeTLS, which runs only when Connect has failed
// already.
const probeTimeout = time.Second

// probeTLS completes a TLS handshake with each endpoint in turn and
// returns the first error that names a TLS problem, or nil. It explains
// failures that gRPC's errors do not: with TLS 1.3 etcd checks the client
// certificate only after the client has finished its handshake, and when
// the client has already sent its first request by then, the refusal
// (an alert) may be lost to a reset connection. Sending nothing, the
// probe reads the alert. It takes at most probeTimeout, all of it when
// an endpoint accepts the certificate.
func probeTLS(ctx context.Context, endpoints []string, cfg *tls.Config) error {
	deadline := time.Now().Add(probeTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for _, ep := range endpoints {
		if ctx.Err() != nil {
			return nil
		}
		addr := ep
		if _, rest, ok := strings.Cut(ep, "://"); ok {
			addr, _, _ = strings.Cut(rest, "/")
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		c := cfg.Clone()
		c.ServerName = host
		conn, err := (&tls.Dialer{Config: c}).DialContext(ctx, "tcp", addr)
		if err != nil {
			if namesTLSProblem(err.Error()) {
				return err
			}
			continue
		}
		conn.SetReadDeadline(deadline)
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err != nil && namesTLSProblem(err.Error()) {
			return err
		}
	}
	return nil
}

// connectFailure describes why Connect's first contact with etcd failed:
// err is what the etcd client returned and cause the gRPC error recorded
// (nil if none). With TLS, when neither names the problem, it probes the
// endpoints (see probeTLS).
func connectFailure(ctx context.Context, cfg Config, tlsCfg *tls.Config, err, cause error) error {
	detail := err.Error()
	if cause != nil {
		// gRPC's message, without the wrapping that says nothing more.
		detail = strings.TrimPrefix(status.Convert(cause).Message(), "latest balancer error: ")
	}
	if tlsCfg != nil && !namesTLSProblem(detail) {
		if perr := probeTLS(ctx, cfg.Endpoints, tlsCfg); perr != nil {
			detail = perr.Error()
		}
	}
	return connectError(cfg, err, detail)
}

// connectError is connectFailure's error for detail, the most telling
// error text. Certificates and credentials that one side refused wrap
// ErrAuthentication and say which setting to fix; everything else wraps
// ErrUnavailable.
func connectError(cfg Config, err error, detail string) error {
	eps := strings.Join(cfg.Endpoints, ",")
	tlsOn := cfg.TLS.Enabled()
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("ha: etcd at %s refused user %q (%w): %v; check %s and %s",
			eps, cfg.Username, ErrAuthentication, err, settingUser, settingPassword)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("ha: etcd at %s denied user %q access to %s (%w): %v; grant the user's role read and write permission on the key prefix %s/ (etcdctl role grant-permission --prefix)",
			eps, cfg.Username, cfg.prefix(), ErrAuthentication, err, cfg.prefix())
	case strings.Contains(detail, "x509:") || strings.Contains(detail, "tls: failed to verify"):
		// This client checked etcd's server certificate and refused it.
		if !tlsOn {
			return fmt.Errorf("ha: etcd at %s: this client does not trust etcd's server certificate (%w): %s; set %s to the PEM file of the CA that signed it (with %s and %s)",
				eps, ErrAuthentication, detail, settingCA, settingCert, settingKey)
		}
		return fmt.Errorf("ha: etcd at %s: this client does not trust etcd's server certificate (%w): %s; %s must hold the CA that signed it, and the certificate must name the host of each endpoint",
			eps, ErrAuthentication, detail, settingCA)
	case strings.Contains(detail, "remote error: tls:"):
		// etcd sent a TLS alert: it refused the client's certificate (or
		// its absence).
		if !tlsOn {
			return fmt.Errorf("ha: etcd at %s requires a client certificate (%w): %s; set %s, %s and %s",
				eps, ErrAuthentication, detail, settingCA, settingCert, settingKey)
		}
		return fmt.Errorf("ha: etcd at %s refused this client's certificate %s (%w): %s; %s must be issued by a CA that etcd trusts (its --trusted-ca-file), valid now, and allow client authentication",
			eps, cfg.TLS.CertFile, ErrAuthentication, detail, settingCert)
	case tlsOn && strings.Contains(detail, "handshake"):
		return fmt.Errorf("ha: etcd at %s: the TLS handshake failed (%w): %s; if etcd serves plain http, unset %s, %s and %s; otherwise check that ha.endpoints lists etcd's client URLs",
			eps, ErrUnavailable, detail, settingCA, settingCert, settingKey)
	case !tlsOn && strings.Contains(detail, "server preface"):
		return fmt.Errorf("ha: etcd at %s closed the connection before answering (%w): %s; if etcd serves TLS (https client URLs), set %s, %s and %s; otherwise check that ha.endpoints lists etcd's client URLs",
			eps, ErrUnavailable, detail, settingCA, settingCert, settingKey)
	}
	return fmt.Errorf("ha: etcd at %s did not answer within %v (%w): %s; check that etcd is running, that ha.endpoints lists its client URLs, and that this host can reach them; then retry",
		eps, cfg.DialTimeout, ErrUnavailable, detail)
}
