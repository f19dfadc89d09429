// Package clienttls builds the TLS configuration of a connector's client
// of an external system (a Kafka cluster, a NATS server) from the files
// its config names: TLS 1.2 or newer, the server's certificate verified
// against a CA file (by default the system roots) and the server's name,
// and optionally a client certificate. Weir's own connections between its
// processes (mutual TLS 1.3 against the cluster CA, with roles) are
// package security's.
//
// The files are read with a size limit (MaxPEMBytes), and errors name
// them by the config keys the connectors use (caFile, certFile, keyFile),
// never quoting their content.
//
// clienttls imports the standard library and internal/limitedfile only.
package clienttls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/weirstream/weir/internal/limitedfile"
)

// MaxPEMBytes bounds a CA, certificate or key file: anything larger is not
// PEM material but a wrong path.
const MaxPEMBytes = 1 << 20

// FromFiles returns a client TLS configuration. caFile, if not empty,
// holds the PEM certificates that verify the server instead of the
// system roots. certFile and keyFile, given together, are the client's
// certificate and key (PEM); without certFile there is no client
// certificate. serverName, if not empty, is the name checked in the
// server's certificate instead of the host dialed.
func FromFiles(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := limitedfile.Read(caFile, MaxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		cert, err := loadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certFile %s and keyFile %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// loadKeyPair is tls.LoadX509KeyPair with the files' sizes limited.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := limitedfile.Read(certFile, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := limitedfile.Read(keyFile, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
