package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirstream/weir/internal/limitedfile"
)

// Role is what a certificate's holder may do; it is the certificate
// subject's organizational unit.
type Role string

// The roles.
const (
	RoleJobManager  Role = "jobmanager"
	RoleTaskManager Role = "taskmanager"
	RoleOperate     Role = "operate"
	RoleRead        Role = "read"
)

// ErrConfig marks a TLS setting that is incomplete or unusable.
var ErrConfig = errors.New("security: TLS config")

// TLSConfig names a process's TLS material. All three files, or none
// (plaintext, on loopback only).
type TLSConfig struct {
	// CAFile is the cluster CA's certificate (PEM): peers must present a
	// certificate it signed.
	CAFile string
	// CertFile and KeyFile are this process's certificate and private key
	// (PEM).
	CertFile, KeyFile string
}

// Enabled reports whether any TLS file is set.
func (c TLSConfig) Enabled() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// Load reads and checks the material: all three files set, the certificate
// signed by the CA and valid now. It returns nil, nil when TLS is off.
func (c TLSConfig) Load() (*Material, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: the CA, certificate and key files go together; set all three (tls.ca, tls.cert, tls.key) or none", ErrConfig)
	}
	caPEM, err := readPEM(c.CAFile, "CA")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, c.CAFile)
	}
	certPEM, err := readPEM(c.CertFile, "certificate")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(c.KeyFile, "key")
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s and key %s: %v", ErrConfig, c.CertFile, c.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: certificate %s: %v", ErrConfig, c.CertFile, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%w: certificate %s is not valid under CA %s: %v; issue it from that CA (weir certs init) or renew it",
			ErrConfig, c.CertFile, c.CAFile, err)
	}
	return &Material{pool: pool, pair: pair, self: identityOf(leaf)}, nil
}

func readPEM(path, what string) ([]byte, error) {
	b, err := ReadPEMFile(path)
	switch {
	case errors.Is(err, ErrFileTooLarge):
		return nil, fmt.Errorf("%w: %s file %s is larger than %d bytes; is it the right file?", ErrConfig, what, path, MaxPEMBytes)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("%w: %s file: %v", ErrConfig, what, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %s file %s: %v", ErrConfig, what, path, err)
	}
	return b, nil
}

// MaxPEMBytes bounds a CA, certificate or key file: anything larger is not
// PEM material but a wrong path.
const MaxPEMBytes = 1 << 20

// ErrFileTooLarge: a file given as PEM material is larger than
// MaxPEMBytes.
var ErrFileTooLarge = errors.New("security: file too large for PEM material")

// ReadPEMFile reads a CA, certificate or key file of at most MaxPEMBytes;
// a larger one is ErrFileTooLarge. Errors name the file, not its content.
func ReadPEMFile(path string) ([]byte, error) {
	b, err := limitedfile.Read(path, MaxPEMBytes)
	if errors.Is(err, limitedfile.ErrTooLarge) {
		return nil, ErrFileTooLarge
	}
	return b, err
}

// Material is a process's loaded TLS material.
type Material struct {
	pool *x509.CertPool
	pair tls.Certificate
	self Identity
}

// Self is the identity this process's certificate carries.
func (m *Material) Self() Identity { return m.self }

// ServerConfig is the TLS config of a server: TLS 1.3, and a client
// certificate from the CA required.
func (m *Material) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.pool,
	}
}

// ClientConfig is the TLS config of a client that expects a server with
// role want: the server's chain is verified against the CA and its role
// checked; its host name is not (see the package documentation).
func (m *Material) ClientConfig(want Role) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.pair},
		// The chain and role are verified in VerifyConnection instead of
		// against a host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("security: the server presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: m.pool, Intermediates: x509.NewCertPool(), CurrentTime: time.Now(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("security: the server's certificate is not from the cluster CA: %w", err)
			}
			if id := identityOf(cs.PeerCertificates[0]); !id.Has(want) {
				return fmt.Errorf("security: the server %q has roles %v, not %s; check the address", id.Name, id.Roles, want)
			}
			return nil
		},
	}
}

// ServerOption is the gRPC server option for m: TLS credentials, or none
// (plaintext) for nil. The TLS records of one write of gRPC's reach the
// socket in one write (see coalescingCreds).
func ServerOption(m *Material) []grpc.ServerOption {
	if m == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(coalescingCreds{credentials.NewTLS(m.ServerConfig())})}
}

// DialOption is the gRPC dial option for a client of a server with role
// want: TLS credentials for m, plaintext for nil. The TLS records of one
// write of gRPC's reach the socket in one write (see coalescingCreds).
func DialOption(m *Material, want Role) grpc.DialOption {
	if m == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(coalescingCreds{credentials.NewTLS(m.ClientConfig(want))})
}

// ErrPlaintext marks a plaintext listener on an address other than
// loopback.
var ErrPlaintext = errors.New("security: plaintext on a non-loopback address")

// RequireLoopback returns an error unless addr (host:port) is a loopback
// address: what a process without TLS may listen on. what names the
// setting, for the message.
func RequireLoopback(what, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s %s would accept anyone on the network; set tls.ca, tls.cert and tls.key (weir certs init makes a development set) or listen on 127.0.0.1",
		ErrPlaintext, what, addr)
}

// Identity is who a certificate names: its common name and its roles.
type Identity struct {
	Name  string
	Roles []Role
}

// Has reports whether the identity has role r; the operate role includes
// read.
func (id Identity) Has(r Role) bool {
	if r == RoleRead && slices.Contains(id.Roles, RoleOperate) {
		return true
	}
	return slices.Contains(id.Roles, r)
}

func identityOf(c *x509.Certificate) Identity {
	id := Identity{Name: c.Subject.CommonName}
	for _, ou := range c.Subject.OrganizationalUnit {
		id.Roles = append(id.Roles, Role(ou))
	}
	return id
}

type identityKey struct{}

// WithIdentity returns ctx carrying id; the interceptors put the caller's
// identity there.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom is the caller's identity, if the call came over TLS.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
