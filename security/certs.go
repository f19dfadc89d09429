package security

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CertOptions say what InitCerts creates.
type CertOptions struct {
	// TaskManagers are the ids of the taskmanagers to issue certificates
	// for (default tm-1, tm-2, tm-3).
	TaskManagers []string
	// Hosts are extra host names and IP addresses for the certificates'
	// subject alternative names, besides localhost, 127.0.0.1 and ::1 (for
	// tools that check host names; Weir's processes check the CA and the
	// role).
	Hosts []string
	// Validity is how long the leaf certificates are valid (default one
	// year; the CA is valid ten times as long).
	Validity time.Duration
	// Now is the start of validity (default time.Now()).
	Now time.Time
}

// CertFiles are the file names InitCerts writes in its directory, each
// certificate with its key next to it as <name>-key.pem.
const (
	CAFile         = "ca.pem"
	JobManagerFile = "jobmanager.pem"
	OperatorFile   = "operator.pem"
	ReaderFile     = "reader.pem"
)

// TaskManagerFile is the certificate file of taskmanager id.
func TaskManagerFile(id string) string { return "taskmanager-" + id + ".pem" }

// KeyFile is the key file of certificate file cert.
func KeyFile(cert string) string { return cert[:len(cert)-len(".pem")] + "-key.pem" }

// ErrExists marks an InitCerts that would overwrite a file.
var ErrExists = errors.New("security: certificate file exists")

// InitCerts creates a development CA and, signed by it, a certificate for
// the jobmanager, one per taskmanager id (its common name), one for an
// operator (role operate) and one for a reader (role read), in dir
// (created with mode 0700; keys are written 0600). It never overwrites a
// file: a dir that holds any of them is refused. It returns the files
// written.
func InitCerts(dir string, opts CertOptions) ([]string, error) {
	if len(opts.TaskManagers) == 0 {
		opts.TaskManagers = []string{"tm-1", "tm-2", "tm-3"}
	}
	if opts.Validity <= 0 {
		opts.Validity = 365 * 24 * time.Hour
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	type leaf struct {
		file, name string
		role       Role
	}
	leaves := []leaf{{JobManagerFile, "jobmanager", RoleJobManager}, {OperatorFile, "operator", RoleOperate}, {ReaderFile, "reader", RoleRead}}
	for _, id := range opts.TaskManagers {
		if id == "" || filepath.Base(id) != id || id == "." || id == ".." {
			return nil, fmt.Errorf("security: taskmanager id %q cannot name a certificate file; use letters, digits, '-', '_' and '.'", id)
		}
		leaves = append(leaves, leaf{TaskManagerFile(id), id, RoleTaskManager})
	}
	files := []string{CAFile, KeyFile(CAFile)}
	for _, l := range leaves {
		files = append(files, l.file, KeyFile(l.file))
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return nil, fmt.Errorf("%w: %s; pick an empty directory or delete the old set first", ErrExists, filepath.Join(dir, f))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("security: certificate directory: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "weir development CA"},
		NotBefore:             opts.Now.Add(-time.Minute),
		NotAfter:              opts.Now.Add(10 * opts.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writeCert(dir, CAFile, caDER, caKey); err != nil {
		return nil, err
	}
	for _, l := range leaves {
		der, key, err := issue(ca, caKey, l.name, l.role, opts)
		if err != nil {
			return nil, err
		}
		if err := writeCert(dir, l.file, der, key); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// issue signs a certificate for name with role, usable both as a server
// and as a client (Weir processes are both).
func issue(ca *x509.Certificate, caKey crypto.Signer, name string, role Role, opts CertOptions) ([]byte, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{string(role)}},
		NotBefore:    opts.Now.Add(-time.Minute),
		NotAfter:     opts.Now.Add(opts.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range opts.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	return der, key, err
}

// writeCert writes a certificate (0644) and its key (0600).
func writeCert(dir, file string, der []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, KeyFile(file)), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, path)
		}
		return fmt.Errorf("security: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("security: %s: %w", path, err)
	}
	return f.Close()
}

// Files is the TLSConfig of the certificate file cert in a directory
// InitCerts wrote.
func Files(dir, cert string) TLSConfig {
	return TLSConfig{CAFile: filepath.Join(dir, CAFile), CertFile: filepath.Join(dir, cert), KeyFile: filepath.Join(dir, KeyFile(cert))}
}
