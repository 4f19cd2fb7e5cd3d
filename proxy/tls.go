package proxy

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"
)

// serverCert is the client listener's certificate, replaceable while
// connections are served (ReloadTLS).
type serverCert struct {
	certPath, keyPath string
	cert              atomic.Pointer[tls.Certificate]
}

func newServerCert(certPath, keyPath string) (*serverCert, error) {
	s := &serverCert{certPath: certPath, keyPath: keyPath}
	return s, s.reload()
}

func (s *serverCert) reload() error {
	cert, err := tls.LoadX509KeyPair(s.certPath, s.keyPath)
	if err != nil {
		return fmt.Errorf("--tls-cert-path/--tls-key-path: %w", err)
	}
	s.cert.Store(&cert)
	return nil
}

func (s *serverCert) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
}
