package link

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// The files `router tls init DIR NODE...` writes into DIR: the cluster CA
// (its key too, so that later runs can sign certificates for new nodes)
// and, per node, a certificate and key for --cluster-tls-cert and
// --cluster-tls-key.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// Validity of what WriteCerts makes.
const (
	caValidity = 10 * 365 * 24 * time.Hour
	// DefaultCertValidity is CertOptions.ValidFor when unset: two years.
	DefaultCertValidity = 2 * 365 * 24 * time.Hour
)

// CertOptions tunes WriteCerts.
type CertOptions struct {
	// ValidFor is how long node certificates are valid; default
	// DefaultCertValidity.
	ValidFor time.Duration
	// SANs are extra host names or IP addresses put in every node
	// certificate (the node name always is). Replicas do not check them
	// (any certificate of the cluster CA is a member); other tools may.
	SANs []string
}

// NodeTLSFiles names the files WriteCerts writes into dir for node.
func NodeTLSFiles(dir, node string) TLSFiles {
	return TLSFiles{CertFile: filepath.Join(dir, node+".pem"), KeyFile: filepath.Join(dir, node+"-key.pem"),
		CAFile: filepath.Join(dir, caCertFile)}
}

// nodeName is what a node name may be to name files and a DNS SAN.
var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// WriteCerts makes the cluster's TLS material in dir: a CA (reused when
// dir already holds one) and, for each node, a certificate it signs for
// both serving and dialling, with an ECDSA P-256 key. It refuses to
// overwrite a node's existing files. Keys are written 0600, dir is created
// 0700. It returns the files it wrote.
func WriteCerts(dir string, nodes []string, opts CertOptions) ([]string, error) {
	if len(nodes) == 0 {
		return nil, errors.New("tls init: name at least one node")
	}
	for _, n := range nodes {
		if !nodeName.MatchString(n) {
			return nil, fmt.Errorf("tls init: node name %q: want letters, digits, '.', '_' or '-' (at most 63)", n)
		}
		if _, err := os.Stat(NodeTLSFiles(dir, n).CertFile); err == nil {
			return nil, fmt.Errorf("tls init: %s exists; remove it to make a new certificate for %s", NodeTLSFiles(dir, n).CertFile, n)
		}
	}
	if opts.ValidFor <= 0 {
		opts.ValidFor = DefaultCertValidity
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls init: %w", err)
	}
	ca, caKey, written, err := loadOrMakeCA(dir)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		files, err := writeNodeCert(dir, n, ca, caKey, opts)
		if err != nil {
			return written, err
		}
		written = append(written, files...)
	}
	return written, nil
}

// loadOrMakeCA reads dir's CA, or makes and writes one.
func loadOrMakeCA(dir string) (*x509.Certificate, crypto.Signer, []string, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, key, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("tls init: the CA in %s: %w", dir, err)
		}
		return ca, key, nil, nil
	case !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("tls init: %s needs both %s and %s, or neither: %w", dir, caCertFile, caKeyFile,
			errors.Join(certErr, keyErr))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kvrouter cluster CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	ca, der, err := sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := writePEMs(certPath, der, keyPath, key); err != nil {
		return nil, nil, nil, err
	}
	return ca, key, []string{certPath, keyPath}, nil
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !ca.IsCA {
		return nil, nil, errors.New("not a CA certificate and its signing key")
	}
	return ca, signer, nil
}

// writeNodeCert makes node's key and certificate, signed by ca.
func writeNodeCert(dir, node string, ca *x509.Certificate, caKey crypto.Signer, opts CertOptions) ([]string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:        pkix.Name{CommonName: node},
		DNSNames:       []string{node},
		NotBefore:      now.Add(-time.Hour), // a peer's clock a little behind
		NotAfter:       now.Add(opts.ValidFor),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: ca.SubjectKeyId,
	}
	for _, san := range opts.SANs {
		if ip := net.ParseIP(san); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, san)
		}
	}
	_, der, err := sign(tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	files := NodeTLSFiles(dir, node)
	if err := writePEMs(files.CertFile, der, files.KeyFile, key); err != nil {
		return nil, err
	}
	return []string{files.CertFile, files.KeyFile}, nil
}

// sign gives tmpl a random serial and signs it with parent's key.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("tls init: signing %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, der, err
}

// keyID is the SHA-1 of the public key's encoding, as RFC 5280 suggests
// for key identifiers (an identifier, not a security property).
func keyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha1.Sum(der)
	return sum[:]
}

// writePEMs writes a certificate (0644) and its key (0600), refusing to
// replace existing files.
func writePEMs(certPath string, der []byte, keyPath string, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("tls init: %w", err)
	}
	return f.Close()
}
