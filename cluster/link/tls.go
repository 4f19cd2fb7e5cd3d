package link

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles names the PEM files of a replica's cluster identity: its
// certificate and key (--cluster-tls-cert, --cluster-tls-key) and the
// certificate of the CA that signs every replica's (--cluster-tls-ca).
// `router tls init` writes a set. All three or none.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// Enabled reports whether any of the files is set.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// validate names the flags of the files that are missing when some are set.
func (f TLSFiles) Validate() error {
	if !f.Enabled() {
		return nil
	}
	var errs []error
	for flag, path := range map[string]string{"cluster-tls-cert": f.CertFile, "cluster-tls-key": f.KeyFile,
		"cluster-tls-ca": f.CAFile} {
		if path == "" {
			errs = append(errs, flagErr(flag, "required with the other --cluster-tls-* flags"))
		}
	}
	return errors.Join(errs...)
}

// TLS is the mutual TLS of the links between replicas: every replica
// presents its certificate, signed by the cluster CA, and accepts a peer
// only if the peer's certificate is signed by that CA too. Any certificate
// the CA signed is a member of the cluster, whatever names it carries, so
// the CA must be one made for the cluster alone (as `router tls init`
// makes). The files are read at start and again at Reload; handshakes
// always use the latest material that loaded, so a bad reload leaves the
// old one in place. Safe for concurrent use.
type TLS struct {
	files   TLSFiles
	current atomic.Pointer[tlsMaterial]
}

// tlsMaterial is one loaded set of files.
type tlsMaterial struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

// LoadTLS reads files; nil, nil when none are set.
func LoadTLS(files TLSFiles) (*TLS, error) {
	if !files.Enabled() {
		return nil, nil
	}
	t := &TLS{files: files}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the files again and, if they make a valid identity, uses
// them for every later handshake. Connections already open keep theirs.
func (t *TLS) Reload() error {
	m, err := readTLSMaterial(t.files)
	if err != nil {
		return err
	}
	t.current.Store(m)
	return nil
}

func readTLSMaterial(f TLSFiles) (*tlsMaterial, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, flagErr("cluster-tls-cert", "loading %s with key %s: %v", f.CertFile, f.KeyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, flagErr("cluster-tls-cert", "%s: %v", f.CertFile, err)
		}
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, flagErr("cluster-tls-ca", "%v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, flagErr("cluster-tls-ca", "%s holds no PEM certificate", f.CAFile)
	}
	m := &tlsMaterial{cert: &cert, pool: pool}
	// Refuse an identity the peers would refuse, at start rather than at
	// every handshake.
	if err := m.verify(cert.Leaf, cert.Certificate[1:]); err != nil {
		return nil, flagErr("cluster-tls-cert", "%s is not signed by the CA in %s: %v", f.CertFile, f.CAFile, err)
	}
	return m, nil
}

// verify checks that leaf chains up to the cluster CA and may be used both
// to serve and to dial (every replica does both).
func (m *tlsMaterial) verify(leaf *x509.Certificate, intermediates [][]byte) error {
	inter := x509.NewCertPool()
	for _, der := range intermediates {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		opts := x509.VerifyOptions{Roots: m.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}
		if _, err := leaf.Verify(opts); err != nil {
			return err
		}
	}
	return nil
}

// minTLSVersion: every replica is this program, so nothing older is needed.
const minTLSVersion = tls.VersionTLS13

// ServerConfig is the configuration the cluster port accepts with: a peer
// must present a certificate the CA signed.
func (t *TLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: minTLSVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := t.current.Load()
			return &tls.Config{MinVersion: minTLSVersion, Certificates: []tls.Certificate{*m.cert},
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: m.pool}, nil
		},
	}
}

// ClientConfig is the configuration a replica dials its peers with. The
// peer's certificate is checked against the CA only, not against the
// address dialled (see TLS).
func (t *TLS) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: minTLSVersion,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return t.current.Load().cert, nil
		},
		// The standard check would also match the certificate's names to
		// the address; VerifyConnection does the chain check instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("cluster tls: the peer presented no certificate")
			}
			var inter [][]byte
			for _, c := range cs.PeerCertificates[1:] {
				inter = append(inter, c.Raw)
			}
			if err := t.current.Load().verify(cs.PeerCertificates[0], inter); err != nil {
				return fmt.Errorf("cluster tls: the peer's certificate is not from the cluster CA: %w", err)
			}
			return nil
		},
	}
}
