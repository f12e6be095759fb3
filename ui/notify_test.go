package ui_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ui"
)

// verify is a receiver's check, written as the README shows it (no docket
// import): the HMAC of "t.body" matches v1 and t is recent.
func verify(secret, header string, body []byte, now time.Time) bool {
	var t, sig string
	for _, kv := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "t":
			t = v
		case "v1":
			sig = v
		}
	}
	ts, err := strconv.ParseInt(t, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t + "." + string(body)))
	return hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil))))
}

type delivery struct {
	id, sig string
	body    []byte
}

// TestSignedWebhook: every --notify call is signed over its timestamp and
// body; a receiver verifies it, and refuses a tampered body and a stale
// timestamp; a failed call is retried with the same delivery id and a fresh
// signature.
func TestSignedWebhook(t *testing.T) {
	t.Parallel()
	const secret = "whsec-0123456789abcdef"
	got := make(chan delivery, 8)
	calls := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := delivery{id: r.Header.Get(ui.HeaderDelivery), sig: r.Header.Get(ui.HeaderSignature), body: body}
		calls++ // one handler call at a time: the deliveries of one run are sequential
		got <- d
		if calls == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hook.Close)
	b := setup(t, options{tune: func(c *ui.Config) {
		c.Notify, c.NotifySecret, c.NotifyBackoff = hook.URL, secret, time.Millisecond
	}})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-signed", "plan": onboardingPlan(t), "approve": "none"}, nil)
	var first, second delivery
	for i, d := range []*delivery{&first, &second} {
		select {
		case *d = <-got:
		case <-time.After(20 * time.Second):
			t.Fatalf("webhook call %d did not come", i+1)
		}
	}
	now := time.Now()
	for _, d := range []delivery{first, second} {
		if !strings.HasPrefix(d.id, "dlv_") || !verify(secret, d.sig, d.body, now) {
			t.Fatalf("call %+v does not verify", d)
		}
		if err := ui.VerifyWebhook([]byte(secret), d.sig, d.body, now, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(d.body), `"run_id":"r-signed"`) {
			t.Fatalf("body %s", d.body)
		}
	}
	if first.id != second.id {
		t.Fatalf("a retry has another delivery id: %s, %s", first.id, second.id)
	}
	// Tampered body, wrong secret, stale timestamp: refused.
	tampered := []byte(strings.Replace(string(second.body), "r-signed", "r-other", 1))
	if verify(secret, second.sig, tampered, now) || !errors.Is(ui.VerifyWebhook([]byte(secret), second.sig, tampered, now, 5*time.Minute), ui.ErrWebhookSignature) {
		t.Fatal("a tampered body verified")
	}
	if verify("another-secret-0123", second.sig, second.body, now) {
		t.Fatal("another secret verified")
	}
	later := now.Add(10 * time.Minute)
	if verify(secret, second.sig, second.body, later) || !errors.Is(ui.VerifyWebhook([]byte(secret), second.sig, second.body, later, 5*time.Minute), ui.ErrWebhookStale) {
		t.Fatal("a stale call verified")
	}
	// A call replayed with a new timestamp but the old signature: refused.
	_, v1, _ := strings.Cut(second.sig, ",v1=")
	forged := "t=" + strconv.FormatInt(now.Unix()+60, 10) + ",v1=" + v1
	if verify(secret, forged, second.body, now) {
		t.Fatal("a re-dated signature verified")
	}
}

// TestCertReload: Reload (what SIGHUP calls) serves the new certificate to
// new connections; a bad new pair keeps the previous one.
func TestCertReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	serialA := writeCert(t, certPath, keyPath, "a")
	cr, err := ui.NewCertReloader(certPath, keyPath, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// As docket serve serves it: no fixed certificate, GetCertificate only.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cr.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ErrorLog: log.New(io.Discard, "", 0)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	served := func() *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if s := served(); s.Cmp(serialA) != 0 {
		t.Fatalf("served %v, want %v", s, serialA)
	}
	serialB := writeCert(t, certPath, keyPath, "b")
	if err := cr.Reload(); err != nil {
		t.Fatal(err)
	}
	if s := served(); s.Cmp(serialB) != 0 {
		t.Fatalf("after reload served %v, want %v", s, serialB)
	}
	if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cr.Reload(); err == nil {
		t.Fatal("a bad key reloaded")
	}
	if s := served(); s.Cmp(serialB) != 0 {
		t.Fatalf("after a bad reload served %v, want the previous %v", s, serialB)
	}
}
