package ui_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ui"
)

// isSessionCookie says whether c is the page's session cookie
// (__Host-docket_session over HTTPS, docket_session over plain HTTP).
func isSessionCookie(c *http.Cookie) bool {
	return c.Name == "docket_session" || c.Name == "__Host-docket_session"
}

// generous bounds how long a test waits for the server to do what it must
// (close a connection); it is a hang guard, not a speed assertion.
const generous = 30 * time.Second

// rawDial opens a connection to b's server as a client would, over TLS when
// b serves HTTPS.
func (b *bundle) rawDial(t *testing.T) net.Conn {
	t.Helper()
	addr := b.hs.Listener.Addr().String()
	if b.secure() {
		tr := b.client().Transport.(*http.Transport)
		cfg := tr.TLSClientConfig.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reads c until the server closes it (true) or generous
// passes (false). Whatever the server answered first is returned.
func closedByServer(c net.Conn) (bool, string) {
	c.SetReadDeadline(time.Now().Add(generous))
	var got bytes.Buffer
	_, err := io.Copy(&got, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, got.String()
	}
	return true, got.String()
}

// TestSlowBodyCutOff: a client that sends POST /v1/session's headers and
// then dribbles its body, a byte at a time, never authenticated, is cut off
// once BodyTimeout has passed (the connection is closed), instead of
// holding the connection for as long as it likes.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.BodyTimeout = 300 * time.Millisecond }})
	for _, path := range []string{"/v1/session", "/v1/runs"} {
		c := b.rawDial(t)
		auth := "" // POST /v1/session reads its body before any token is known
		if path == "/v1/runs" {
			auth = "Authorization: Bearer " + testToken + "\r\n"
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: 100000\r\n\r\n{", path, b.hs.Listener.Addr(), auth)
		stop := make(chan struct{})
		dribbled := make(chan struct{})
		go func() {
			defer close(dribbled)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		closed, answer := closedByServer(c)
		close(stop)
		<-dribbled
		if !closed {
			t.Fatalf("%s: a body dribbled a byte at a time still held its connection after %v (answer so far: %q)", path, generous, answer)
		}
		if answer != "" && !strings.Contains(answer, "400 Bad Request") {
			t.Fatalf("%s: the answer to a body that timed out: %q", path, answer)
		}
	}
}

// TestBodyDeadlineLiftedAfterRead: a request whose body has arrived may
// wait much longer than BodyTimeout (an MCP call waiting for a person, a
// long poll): its context is not cancelled by the body's deadline; the body
// is capped before any handler reads it.
func TestBodyDeadlineLiftedAfterRead(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	b := setup(t, options{tune: func(c *ui.Config) {
		c.BodyTimeout = timeout
		c.MaxBodyBytes, c.MaxRunBodyBytes = 1000, 1000
	}})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "capped", http.StatusRequestEntityTooLarge)
			return
		}
		wait := time.NewTimer(5 * timeout)
		defer wait.Stop()
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled: "+context.Cause(r.Context()).Error(), http.StatusGatewayTimeout)
		case <-wait.C:
			fmt.Fprintf(w, "waited, body %d bytes", len(body))
		}
	})
	hs := httptest.NewServer(b.srv.Protect(ui.ScopeSubmit, h))
	defer hs.Close()
	post := func(body string) (int, string) {
		req, _ := http.NewRequest("POST", hs.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if code, got := post(`{"jsonrpc":"2.0"}`); code != http.StatusOK || got != "waited, body 17 bytes" {
		t.Fatalf("a request that waits after its body = %d %q", code, got)
	}
	if code, got := post(strings.Repeat("x", 1001)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the cap = %d %q", code, got)
	}
}

// TestWebSocketOutlivesBodyTimeout: a WebSocket stays open and live past
// BodyTimeout (an upgrade has no body; the connection's deadline is gone).
func TestWebSocketOutlivesBodyTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.BodyTimeout = 100 * time.Millisecond }})
	conn, resp, err := b.dialer().Dial(b.wsURL("/v1/ws"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatalf("dial: %v %v", err, resp)
	}
	defer conn.Close()
	time.Sleep(500 * time.Millisecond) // several body timeouts pass
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "late", "plan": onboardingPlan(t)}, nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d", code)
	}
	conn.SetReadDeadline(time.Now().Add(generous))
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("the socket broke after the body timeout: %v", err)
		}
		if bytes.Contains(msg, []byte(`"late"`)) {
			return
		}
	}
}

// serveCapped serves b's handler with hcfg (its Logger discarding) on a
// listener capped by LimitListener, until the test ends.
func serveCapped(t *testing.T, b *bundle, hcfg ui.HTTPConfig) net.Listener {
	t.Helper()
	hcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := ui.NewHTTPServer(b.srv.Handler(), hcfg)
	go hs.Serve(ui.LimitListener(ln, hcfg))
	t.Cleanup(func() { hs.Close() })
	return ln
}

// TestConnectionsPerClientCapped: one client address holds at most
// MaxConnsPerClient connections; one more is closed at once, and once one
// of the first closes, a new one is served. Connections that never send a
// request are closed after ReadHeaderTimeout, and kept-alive ones after
// IdleTimeout.
func TestConnectionsPerClientCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	const max = 3
	ln := serveCapped(t, b, ui.HTTPConfig{MaxConnsPerClient: max, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := make([]net.Conn, max)
	for i := range held {
		held[i] = dial()
	}
	// The first ones are served: a request on one of them is answered.
	fmt.Fprintf(held[0], "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", ln.Addr())
	held[0].SetReadDeadline(time.Now().Add(generous))
	if line, err := bufio.NewReader(held[0]).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("a connection within the cap: %q %v", line, err)
	}
	extra := dial()
	// A request on it gets no answer: it was closed when accepted (without
	// the cap it would be answered 200).
	fmt.Fprintf(extra, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", ln.Addr())
	if closed, got := closedByServer(extra); !closed || got != "" {
		t.Fatalf("a connection past the cap of %d was not closed (answer %q)", max, got)
	}
	// The idle ones are closed by the server: the kept-alive one after
	// IdleTimeout, the silent ones after ReadHeaderTimeout.
	for i, c := range held {
		if closed, _ := closedByServer(c); !closed {
			t.Fatalf("idle connection %d still open after %v", i, generous)
		}
		c.Close()
	}
	// Their places are free again.
	c := dial()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", ln.Addr())
	if closed, got := closedByServer(c); !closed || !strings.Contains(got, "200 OK") {
		t.Fatalf("after the idle connections closed, a new one: %q", got)
	}
}

// TestHostAllowlist: a request whose Host names something other than this
// service (a rebinding page: evil.example resolving to 127.0.0.1) is
// refused with 421, even with a valid token and a matching Origin; IP
// addresses, localhost, Hosts and the hosts of Origins are served.
func TestHostAllowlist(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) {
		c.Hosts = []string{"docket.example.com"}
		c.Origins = []string{"https://review.example.org"}
	}})
	_, port, _ := net.SplitHostPort(b.hs.Listener.Addr().String())
	get := func(host, path string, header map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", b.hs.URL+path, nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+testToken)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := b.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "docket.example.com.evil:" + port} {
		for _, path := range []string{"/v1/runs", "/", "/healthz"} {
			code, body := get(host, path, map[string]string{"Origin": "http://" + host})
			var e struct {
				Error struct{ Code, Message string }
			}
			json.Unmarshal([]byte(body), &e)
			if code != http.StatusMisdirectedRequest || e.Error.Code != "bad_host" || !strings.Contains(e.Error.Message, "--host") {
				t.Fatalf("Host %s %s = %d %s", host, path, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "10.1.2.3:" + port, "docket.example.com:" + port, "DOCKET.example.com.", "review.example.org"} {
		if code, body := get(host, "/v1/runs", nil); code != http.StatusOK {
			t.Fatalf("Host %s = %d %s", host, code, body)
		}
	}
	// A rebinding page's WebSocket: its Origin matches its Host, both the
	// attacker's name.
	if !b.secure() {
		d := b.dialer()
		d.NetDial = func(network, _ string) (net.Conn, error) { return net.Dial(network, b.hs.Listener.Addr().String()) }
		h := http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {"http://evil.example:" + port}}
		conn, resp, err := d.Dial("ws://evil.example:"+port+"/v1/ws", h)
		if err == nil {
			conn.Close()
			t.Fatal("a WebSocket under a foreign Host was opened")
		}
		if resp == nil || resp.StatusCode != http.StatusMisdirectedRequest {
			t.Fatalf("a WebSocket under a foreign Host: %v %v", err, resp)
		}
	}
	if _, err := newServer(b, func(c *ui.Config) { c.Hosts = []string{"https://docket.example.com"} }); err == nil || !strings.Contains(err.Error(), "host name without scheme") {
		t.Fatalf("a Hosts entry with a scheme: %v", err)
	}
}

// newServer builds another server over b's ledger and tools with cfg tuned.
func newServer(b *bundle, tune func(*ui.Config)) (*ui.Server, error) {
	cfg := ui.Config{Ledger: b.led, Tools: b.reg, Tokens: map[string]string{"alice": testToken}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tune(&cfg)
	srv, err := ui.New(cfg)
	if err == nil {
		srv.Shutdown(context.Background())
	}
	return srv, err
}

// signIn posts the token for a session and returns the answer and its
// session cookie (nil when none).
func signIn(t *testing.T, b *bundle, tok string, header map[string]string) (*http.Response, *http.Cookie) {
	t.Helper()
	req, _ := http.NewRequest("POST", b.hs.URL+"/v1/session", strings.NewReader(`{"token":"`+tok+`"}`))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if isSessionCookie(c) {
			return resp, c
		}
	}
	return resp, nil
}

// TestSessionCookieHostPrefixed: over HTTPS (directly, or behind a trusted
// proxy that says X-Forwarded-Proto: https) the session cookie is
// __Host-prefixed (Secure, Path=/, no Domain) and answers carry
// Strict-Transport-Security; an untrusted X-Forwarded-Proto changes
// nothing.
func TestSessionCookieHostPrefixed(t *testing.T) {
	t.Parallel()
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{tls: true})
		resp, c := signIn(t, b, testToken, nil)
		if c == nil || c.Name != "__Host-docket_session" || !c.Secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly {
			t.Fatalf("session cookie over TLS: %+v", c)
		}
		if hsts := resp.Header.Get("Strict-Transport-Security"); !strings.Contains(hsts, "max-age=") {
			t.Fatalf("no Strict-Transport-Security over TLS: %q", hsts)
		}
		if code := b.callWith("GET", "/v1/session", nil, nil, map[string]string{"Cookie": c.Name + "=" + c.Value}); code != http.StatusOK {
			t.Fatalf("GET /v1/session with the __Host- cookie = %d", code)
		}
	})
	t.Run("trusted-proxy", func(t *testing.T) {
		t.Parallel()
		if allTLS {
			t.Skip("the proxy case is plain HTTP behind the proxy")
		}
		b := setup(t, options{tune: func(c *ui.Config) { c.TrustProxy = true }})
		https := map[string]string{"X-Forwarded-Proto": "https"}
		resp, c := signIn(t, b, testToken, https)
		if c == nil || !strings.HasPrefix(c.Name, "__Host-") || !c.Secure || c.Path != "/" || c.Domain != "" {
			t.Fatalf("session cookie behind a trusted TLS proxy: %+v", c)
		}
		if resp.Header.Get("Strict-Transport-Security") == "" {
			t.Fatal("no Strict-Transport-Security behind a trusted TLS proxy")
		}
		if code := b.callWith("GET", "/v1/session", nil, nil, map[string]string{"Cookie": c.Name + "=" + c.Value, "X-Forwarded-Proto": "https"}); code != http.StatusOK {
			t.Fatalf("GET /v1/session with the cookie through the proxy = %d", code)
		}
		// Plain HTTP through the same proxy: no Secure cookie, no HSTS.
		resp, c = signIn(t, b, testToken, map[string]string{"X-Forwarded-Proto": "http"})
		if c == nil || c.Secure || strings.HasPrefix(c.Name, "__Host-") || resp.Header.Get("Strict-Transport-Security") != "" {
			t.Fatalf("plain HTTP through the proxy: cookie %+v, HSTS %q", c, resp.Header.Get("Strict-Transport-Security"))
		}
	})
	t.Run("untrusted-header", func(t *testing.T) {
		t.Parallel()
		if allTLS {
			t.Skip("plain HTTP only")
		}
		b := setup(t, options{})
		resp, c := signIn(t, b, testToken, map[string]string{"X-Forwarded-Proto": "https"})
		if c == nil || c.Secure || resp.Header.Get("Strict-Transport-Security") != "" {
			t.Fatalf("X-Forwarded-Proto without TrustProxy: cookie %+v, HSTS %q", c, resp.Header.Get("Strict-Transport-Security"))
		}
		if c.Name != "docket_session" {
			t.Fatalf("plain-HTTP cookie name %q, want docket_session", c.Name)
		}
	})
}

// TestSignInThrottledPerClient: wrong tokens from one client address are
// allowed SignInBurst times, then every sign-in from that address (even
// with the right token) is refused 429 with Retry-After, logged once, while
// another address (behind a trusted proxy) is not affected.
func TestSignInThrottledPerClient(t *testing.T) {
	t.Parallel()
	var logs lockedLog
	b := setup(t, options{tune: func(c *ui.Config) {
		c.SignInBurst = 5
		c.SignInRate = 0.001
		c.TrustProxy = true
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}})
	from := func(addr string, extra map[string]string) map[string]string {
		h := map[string]string{"X-Forwarded-For": "198.51.100.1, " + addr}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	attacker := "203.0.113.7"
	for i := range 5 {
		var code int
		if i%2 == 0 {
			code = b.callWith("GET", "/v1/runs", nil, nil, from(attacker, bearerOf(fmt.Sprintf("guess-%016d", i))))
		} else {
			resp, _ := signIn(t, b, fmt.Sprintf("guess-%016d", i), from(attacker, nil))
			code = resp.StatusCode
		}
		if code != http.StatusUnauthorized {
			t.Fatalf("guess %d = %d", i, code)
		}
	}
	resp, c := signIn(t, b, testToken, from(attacker, nil))
	if resp.StatusCode != http.StatusTooManyRequests || c != nil {
		t.Fatalf("sign-in past the allowance = %d", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if code := b.callWith("GET", "/v1/runs", nil, nil, from(attacker, bearerOf(testToken))); code != http.StatusTooManyRequests {
		t.Fatalf("a bearer request past the allowance = %d", code)
	}
	if code := b.callWith("GET", "/v1/runs", nil, nil, from("192.0.2.9", bearerOf(testToken))); code != http.StatusOK {
		t.Fatalf("another address = %d", code)
	}
	if n := strings.Count(logs.String(), "authentication failed"); n != 1 {
		t.Fatalf("%d log records for one address's guesses, want 1:\n%s", n, logs.String())
	}
}

// TestSessionsPerTokenCapped: a token holds at most MaxSessionsPerToken
// sessions; signing in once more ends the oldest. POST /v1/session counts
// against the token's rate limit.
func TestSessionsPerTokenCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.MaxSessionsPerToken = 2 }})
	var cookies []*http.Cookie
	for i := range 3 {
		resp, c := signIn(t, b, testToken, nil)
		if resp.StatusCode != http.StatusOK || c == nil {
			t.Fatalf("sign-in %d = %d", i, resp.StatusCode)
		}
		cookies = append(cookies, c)
	}
	for i, c := range cookies {
		want := http.StatusOK
		if i == 0 {
			want = http.StatusUnauthorized
		}
		if code := b.callWith("GET", "/v1/session", nil, nil, map[string]string{"Cookie": c.Name + "=" + c.Value}); code != want {
			t.Fatalf("session %d = %d, want %d", i, code, want)
		}
	}

	r := setup(t, options{tune: func(c *ui.Config) { c.RateLimit, c.RateBurst = 0.001, 1 }})
	if resp, _ := signIn(t, r, testToken, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("first sign-in = %d", resp.StatusCode)
	}
	if resp, _ := signIn(t, r, testToken, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a sign-in over the token's rate limit = %d", resp.StatusCode)
	}
}

// TestShortTokensRefused: a token shorter than 16 characters is refused,
// naming the token.
func TestShortTokensRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, tune := range []func(*ui.Config){
		func(c *ui.Config) { c.Tokens = map[string]string{"short": "12345678"} },
		func(c *ui.Config) {
			c.ScopedTokens = []ui.Token{{Name: "short", Scopes: []ui.Scope{ui.ScopeRead}, Secret: "0123456789abcde"}}
		},
	} {
		if _, err := newServer(b, tune); err == nil || !strings.Contains(err.Error(), `"short"`) || !strings.Contains(err.Error(), "16 characters") {
			t.Fatalf("a short token: %v", err)
		}
	}
	raw := []byte(`{"version": 1, "tokens": [{"name": "agent", "scopes": ["read"], "env": "T"}]}`)
	if _, err := ui.ParseTokensFile(raw, func(string) string { return "abcdefgh" }); err == nil || !strings.Contains(err.Error(), "agent") || !strings.Contains(err.Error(), "16") {
		t.Fatalf("a short token in a tokens file: %v", err)
	}
}

// TestSubmittedPlanProvenance: the provenance keys of a submitted plan's
// meta (model, planner, source, submitter) are the server's: what the
// client claimed is kept as claimed_KEY, source and submitted_by are set;
// other keys stay.
func TestSubmittedPlanProvenance(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var p map[string]any
	if err := json.Unmarshal(onboardingPlan(t), &p); err != nil {
		t.Fatal(err)
	}
	p["meta"] = map[string]string{"model": "gpt-approved-by-security", "planner": "docket-planner/1", "source": "mcp", "submitted_by": "token:root", "note": "kept"}
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "claims", "plan": p, "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d", code)
	}
	var got struct {
		Meta map[string]string `json:"meta"`
	}
	if code := b.call("GET", "/v1/runs/claims/plan", nil, &got); code != http.StatusOK {
		t.Fatalf("GET plan = %d", code)
	}
	m := got.Meta
	if _, ok := m["model"]; ok || m["planner"] != "" || m["source"] != "api" || m["submitted_by"] != "token:alice" || m["note"] != "kept" || m["claimed_model"] != "gpt-approved-by-security" || m["claimed_submitted_by"] != "token:root" {
		t.Fatalf("the recorded plan's meta: %v", m)
	}
}

// TestSubmitBytesPerToken: the bytes of submitted plans are budgeted per
// token: past its allowance a POST /v1/runs is refused with 429 and
// Retry-After before its body is read (nothing recorded), another token is
// not affected, and the allowance comes back with time.
func TestSubmitBytesPerToken(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const max = 64 << 10
	b := setup(t, options{tune: func(c *ui.Config) {
		withScopedTokens(c)
		c.MaxRunBodyBytes, c.SubmitBytesBurst, c.SubmitBytesPerSecond = max, max, 1024
		c.Now = clock
	}})
	submit := func(runID, token string) (int, string) {
		t.Helper()
		pad := strings.Repeat("x", 40<<10)
		body, _ := json.Marshal(map[string]any{"run_id": runID, "approve": "none", "plan": map[string]any{
			"goal": "pad " + pad, "actions": []any{map[string]any{"id": "p", "tool": "catalogue_price", "args": map[string]any{"plan": "pro"}}}}})
		req, _ := http.NewRequest("POST", b.hs.URL+"/v1/runs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := b.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	if code, _ := submit("sb-1", agentToken); code != http.StatusCreated {
		t.Fatalf("first plan = %d", code)
	}
	code, after := submit("sb-2", agentToken)
	if code != http.StatusTooManyRequests || after == "" {
		t.Fatalf("second plan past the budget = %d, Retry-After %q", code, after)
	}
	if code := b.call("GET", "/v1/runs/sb-2", nil, nil); code != http.StatusNotFound {
		t.Fatalf("the refused plan was recorded: GET = %d", code)
	}
	if code, _ := submit("sb-3", testToken); code != http.StatusCreated {
		t.Fatalf("another token's plan = %d", code)
	}
	secs, _ := strconv.Atoi(after)
	mu.Lock()
	now = now.Add(time.Duration(secs) * time.Second)
	mu.Unlock()
	if code, _ := submit("sb-2", agentToken); code != http.StatusCreated {
		t.Fatalf("after Retry-After = %d", code)
	}
}

// TestConnectionPlaceFreeWhenClosed: a client that sees the server close
// its connection may open another at once: the place is given back before
// the socket closes, not after (a client at its cap would otherwise be
// refused now and then, right after an answer with Connection: close).
func TestConnectionPlaceFreeWhenClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ln := serveCapped(t, b, ui.HTTPConfig{MaxConnsPerClient: 1})
	for i := range 300 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", ln.Addr())
		closed, got := closedByServer(c)
		c.Close()
		if !closed || !strings.Contains(got, "200 OK") {
			t.Fatalf("connection %d, opened right after the server closed the one before: %q", i, got)
		}
	}
}
