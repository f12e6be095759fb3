package ui_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ui"
)

// writeCert makes a self-signed certificate for 127.0.0.1 and localhost
// (crypto/x509) over a new key and writes it and its key as PEM files,
// returning the certificate's serial number.
func writeCert(t testing.TB, certPath, keyPath, name string) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return writeCertKey(t, certPath, keyPath, name, key)
}

// bundleKey is the key of every bundle's certificate (testCert): each
// bundle gets its own certificate, all over this key, so that Chromium can
// be told to trust exactly it (bundleKeySPKI) and nothing else.
var bundleKey = sync.OnceValue(func() *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return key
})

// bundleKeySPKI is base64(SHA-256(SubjectPublicKeyInfo)) of bundleKey, what
// Chromium's --ignore-certificate-errors-spki-list takes: Chromium accepts
// the test's certificates, and only them, without a CA in its store.
func bundleKeySPKI() string {
	der, err := x509.MarshalPKIXPublicKey(&bundleKey().PublicKey)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// writeCertKey is writeCert over key.
func writeCertKey(t testing.TB, certPath, keyPath, name string, key *ecdsa.PrivateKey) *big.Int {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		DNSNames:              []string{"localhost", "example.com"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return serial
}

// testCert is a CertReloader over a certificate the test makes (over
// bundleKey).
func testCert(t testing.TB, name string) *ui.CertReloader {
	t.Helper()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCertKey(t, cert, key, name, bundleKey())
	cr, err := ui.NewCertReloader(cert, key, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return cr
}
