package ui_test

import (
	"context"
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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ui"
)

// verify is a receiver's check, written as the README shows it (no docket
// import): the HMAC of "id.t.body" matches v2 and t is recent.
func verify(secret, id, header string, body []byte, now time.Time) bool {
	var t, sig string
	for _, kv := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "t":
			t = v
		case "v2":
			sig = v
		}
	}
	ts, err := strconv.ParseInt(t, 10, 64)
	if err != nil || strings.Contains(id, ".") || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(id + "." + t + "." + string(body)))
	return hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil))))
}

type delivery struct {
	id, sig string
	body    []byte
}

// TestSignedWebhook: every --notify call is signed over its delivery id,
// its timestamp and its body; a receiver verifies it, and refuses a tampered
// body, a stale timestamp and a call replayed under another delivery id; a
// failed call is retried with the same delivery id and a fresh signature.
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
		if !strings.HasPrefix(d.id, "dlv_") || !verify(secret, d.id, d.sig, d.body, now) {
			t.Fatalf("call %+v does not verify", d)
		}
		if err := ui.VerifyWebhook([]byte(secret), d.id, d.sig, d.body, now, 5*time.Minute); err != nil {
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
	if verify(secret, second.id, second.sig, tampered, now) || !errors.Is(ui.VerifyWebhook([]byte(secret), second.id, second.sig, tampered, now, 5*time.Minute), ui.ErrWebhookSignature) {
		t.Fatal("a tampered body verified")
	}
	if verify("another-secret-0123", second.id, second.sig, second.body, now) {
		t.Fatal("another secret verified")
	}
	later := now.Add(10 * time.Minute)
	if verify(secret, second.id, second.sig, second.body, later) || !errors.Is(ui.VerifyWebhook([]byte(secret), second.id, second.sig, second.body, later, 5*time.Minute), ui.ErrWebhookStale) {
		t.Fatal("a stale call verified")
	}
	// The same call replayed under a new delivery id (to get past a
	// receiver that drops ids it has seen): refused.
	for _, id := range []string{"dlv_" + strings.Repeat("0", 32), second.id + "x", strings.ToUpper(second.id)} {
		if verify(secret, id, second.sig, second.body, now) || !errors.Is(ui.VerifyWebhook([]byte(secret), id, second.sig, second.body, now, 5*time.Minute), ui.ErrWebhookSignature) {
			t.Fatalf("the call replayed under delivery id %s verified", id)
		}
	}
	// The signed string splits one way only: an id with a dot is refused.
	if err := ui.VerifyWebhook([]byte(secret), second.id+".1", second.sig, second.body, now, 5*time.Minute); !errors.Is(err, ui.ErrWebhookSignature) {
		t.Fatalf("an id with a dot: %v", err)
	}
	// A receiver written for v1 (the time and the body) still verifies it.
	t1, rest, _ := strings.Cut(strings.TrimPrefix(second.sig, "t="), ",v1=")
	v1sig, _, _ := strings.Cut(rest, ",")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t1 + "." + string(second.body)))
	if !hmac.Equal([]byte(v1sig), []byte(hex.EncodeToString(mac.Sum(nil)))) {
		t.Fatalf("the v1 signature of %q does not verify as HMAC(t.body)", second.sig)
	}
	// A call replayed with a new timestamp but the old signature: refused.
	_, v2, _ := strings.Cut(second.sig, ",v2=")
	forged := "t=" + strconv.FormatInt(now.Unix()+60, 10) + ",v2=" + v2
	if verify(secret, second.id, forged, second.body, now) || ui.VerifyWebhook([]byte(secret), second.id, forged, second.body, now, 5*time.Minute) == nil {
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

// records is a slog handler that keeps every record's message and
// attributes as text, and says when one with a given message arrives.
type records struct {
	mu    sync.Mutex
	lines []string
	want  string
	seen  chan struct{}
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, line)
	if r.Message == h.want {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}

func (h *records) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.lines, "\n")
}

// TestWebhookRedirectNotFollowed: a receiver that answers a redirect (302,
// or 307, which would re-send the signed body) is a failed call, retried as
// any failure and given up after NotifyAttempts; the redirect's target gets
// nothing; the log names the Location (without its query).
func TestWebhookRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			var targetCalls atomic.Int64
			reached := make(chan string, 16)
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				targetCalls.Add(1)
				reached <- r.Method + " with Docket-Signature " + strconv.Quote(r.Header.Get(ui.HeaderSignature))
			}))
			t.Cleanup(target.Close)
			var hookCalls atomic.Int64
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hookCalls.Add(1)
				http.Redirect(w, r, target.URL+"/elsewhere?sig=secret-in-query", code)
			}))
			t.Cleanup(hook.Close)
			logs := &records{want: "webhook delivery given up", seen: make(chan struct{}, 1)}
			b := setup(t, options{tune: func(c *ui.Config) {
				c.Notify, c.NotifySecret, c.NotifyBackoff, c.NotifyAttempts = hook.URL, "whsec-0123456789abcdef", time.Millisecond, 3
				c.Logger = slog.New(logs)
			}})
			b.call("POST", "/v1/runs", map[string]any{"run_id": "r-redirect", "plan": onboardingPlan(t), "approve": "none"}, nil)
			select {
			case <-logs.seen:
			case got := <-reached:
				t.Fatalf("the redirect was followed: its target got a %s", got)
			case <-time.After(30 * time.Second):
				t.Fatalf("the delivery was not given up; log:\n%s", logs.text())
			}
			if n := targetCalls.Load(); n != 0 {
				t.Errorf("the redirect's target got %d calls, want none", n)
			}
			if n := hookCalls.Load(); n != 3 {
				t.Errorf("the receiver got %d calls, want 3 (NotifyAttempts)", n)
			}
			log := logs.text()
			if !strings.Contains(log, "redirect to") || !strings.Contains(log, target.URL+"/elsewhere") || !strings.Contains(log, strconv.Itoa(code)) {
				t.Errorf("the log does not name the redirect and its Location:\n%s", log)
			}
			if strings.Contains(log, "secret-in-query") {
				t.Errorf("the log holds the Location's query:\n%s", log)
			}
		})
	}
}
