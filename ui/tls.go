package ui

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// CertReloader serves a certificate and key read from files, and reads them
// again on Reload (docket serve calls it on SIGHUP), so a renewed
// certificate needs no restart. A new pair that cannot be read or does not
// match keeps the one in use.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	cur               atomic.Pointer[tls.Certificate]
}

// NewCertReloader reads the pair once; an error here is the caller's to
// report (nothing is served yet).
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &CertReloader{certFile: certFile, keyFile: keyFile, log: log.With("component", "tls")}
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(cert)
	return c, nil
}

func (c *CertReloader) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parsing the TLS certificate %s: %w", c.certFile, err)
		}
	}
	return &cert, nil
}

// Reload reads the files again. On success the new pair is served to every
// new connection; on error the old one stays, and the error is logged and
// returned.
func (c *CertReloader) Reload() error {
	cert, err := c.load()
	if err != nil {
		c.log.Error("TLS certificate not reloaded: still serving the previous one", "err", err)
		return err
	}
	c.cur.Store(cert)
	c.log.Info("TLS certificate reloaded", "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	return nil
}

// Certificate is the pair served now.
func (c *CertReloader) Certificate() *tls.Certificate { return c.cur.Load() }

// GetCertificate is tls.Config.GetCertificate.
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// TLSConfig is a server configuration serving the reloaded pair (TLS 1.2 at
// least).
func (c *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}
