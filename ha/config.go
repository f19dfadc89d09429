package ha

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Config configures a Client. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Endpoints are the etcd client URLs or host:port pairs, for example
	// "http://10.0.0.1:2379", "https://etcd-0.example:2379" or
	// "10.0.0.1:2379". At least one is required. All must use the same
	// scheme, because the etcd client picks plaintext or TLS for the whole
	// connection from the first. A host:port uses TLS when TLS is set and
	// plaintext otherwise; http:// cannot be combined with TLS; https://
	// without TLS trusts the system's root CAs and presents no client
	// certificate.
	Endpoints []string
	// Prefix is the cluster prefix every key lives under, so that several
	// Weir clusters can share one etcd. Default "/weir". Trailing slashes
	// are ignored.
	Prefix string
	// LeaseTTL is the lifetime of a jobmanager's session lease: how long
	// etcd keeps its campaign (and leadership) after it stops hearing from
	// it, and so bounds how long a dead leader blocks a takeover. Rounded up
	// to whole seconds; at least 1s. Default 10s. A leader steps down on its
	// own a little earlier (see Leadership.Lost).
	LeaseTTL time.Duration
	// DialTimeout bounds Connect's first contact with etcd. Default 5s.
	DialTimeout time.Duration
	// TLS secures the connection to etcd; the zero value means plaintext.
	TLS TLSFiles
	// Username and Password log in to etcd when its authentication is
	// enabled (etcdctl auth enable); both empty means no login. With a
	// client certificate and no Username, etcd takes the certificate's
	// common name as the user. Password is a secret: no error or log
	// line of this package shows it, and it should travel over TLS.
	Username, Password string
	// Logger receives the package's logs; nil means slog.Default().
	Logger *slog.Logger
}

// TLSFiles name the PEM files of TLS to etcd. Set all three, or none for
// plaintext. They are read by Validate and Connect; a renewed certificate
// takes effect at the next Connect.
type TLSFiles struct {
	// CAFile holds the certificates of the CAs that signed the etcd
	// servers' certificates (etcd's --cert-file). They replace the
	// system's roots. The server's certificate must name the host of the
	// endpoint dialled (a DNS name or an IP address in its subject
	// alternative names).
	CAFile string
	// CertFile and KeyFile are this process's client certificate and its
	// private key, which etcd started with --client-cert-auth checks
	// against its --trusted-ca-file. The certificate must allow client
	// authentication (extended key usage clientAuth, or none).
	CertFile, KeyFile string
}

// Enabled reports whether any TLS file is set.
func (f TLSFiles) Enabled() bool { return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" }

// DefaultConfig returns the defaults; the caller still sets Endpoints.
func DefaultConfig() Config {
	return Config{
		Prefix:      "/weir",
		LeaseTTL:    10 * time.Second,
		DialTimeout: 5 * time.Second,
	}
}

// Validate reports the first problem with c. It reads the TLS files, to
// report a missing, unreadable or unusable one before Connect would.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate returning the TLS configuration it loaded (nil for
// plaintext), so that Connect reads the files once.
func (c Config) validate() (*tls.Config, error) {
	if err := c.validateFields(); err != nil {
		return nil, err
	}
	return c.TLS.load()
}

// validateFields is Validate without reading the TLS files.
func (c Config) validateFields() error {
	if len(c.Endpoints) == 0 {
		return errors.New("ha: config: no etcd endpoints; set ha.endpoints to the etcd client URLs (for example http://127.0.0.1:2379)")
	}
	for i, ep := range c.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return fmt.Errorf("ha: config: etcd endpoint %d is empty; give host:port or a URL", i)
		}
	}
	if strings.Trim(c.Prefix, "/") == "" {
		return fmt.Errorf("ha: config: prefix %q names no key space; use something like /weir", c.Prefix)
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("ha: config: lease TTL %v is below 1s; etcd leases are granted in whole seconds", c.LeaseTTL)
	}
	if c.DialTimeout <= 0 {
		return fmt.Errorf("ha: config: dial timeout %v must be positive", c.DialTimeout)
	}
	return c.validateSecurity()
}

// ttlSeconds is LeaseTTL rounded up to whole seconds.
func (c Config) ttlSeconds() int64 {
	return int64((c.LeaseTTL + time.Second - 1) / time.Second)
}

// prefix is the cluster prefix without trailing slashes.
func (c Config) prefix() string {
	return strings.TrimRight(c.Prefix, "/")
}
