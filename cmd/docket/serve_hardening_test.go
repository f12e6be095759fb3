package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/executor/mcpserve/mcpservetest"
	"github.com/docketrun/docket/ledger/postgres"
)

// hangGuard bounds a wait for the service to close a connection: not a
// speed assertion, a guard against a test that would hang.
const hangGuard = 30 * time.Second

// serverClosed reads c until the service closes it (true) or hangGuard
// passes (false), and returns what it answered first.
func serverClosed(c net.Conn) (bool, string) {
	c.SetReadDeadline(time.Now().Add(hangGuard))
	var got strings.Builder
	_, err := io.Copy(&got, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, got.String()
	}
	return true, got.String()
}

func hostOf(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestServeSlowClientsCutOff: docket serve closes a connection whose POST
// /v1/session body is dribbled a byte at a time (never authenticated) once
// --body-timeout has passed, and holds at most --max-conns-per-client
// connections of one address: one more is closed at once.
func TestServeSlowClientsCutOff(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--data", t.TempDir(), "--body-timeout", "300ms", "--max-conns-per-client", "3")
	addr := hostOf(t, s.base)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/session HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", addr)
	stop := make(chan struct{})
	go func() {
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
	closed, got := serverClosed(c)
	close(stop)
	if !closed {
		t.Fatalf("a dribbled body held its connection for %v (answer so far %q)", hangGuard, got)
	}
	c.Close()

	// The cap: three idle connections held (the slow one above is closed
	// and its place given back), a fourth refused.
	held := make([]net.Conn, 3)
	for i := range held {
		if held[i], err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		defer held[i].Close()
	}
	// A request on the last one is answered: all three were accepted (the
	// listener takes them in order).
	fmt.Fprintf(held[2], "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	held[2].SetReadDeadline(time.Now().Add(hangGuard))
	buf := make([]byte, 64)
	if n, err := held[2].Read(buf); err != nil || !strings.Contains(string(buf[:n]), "200 OK") {
		t.Fatalf("a connection within the cap: %q %v", buf[:n], err)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	// A request on it gets no answer (without the cap: 200).
	fmt.Fprintf(extra, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if closed, got := serverClosed(extra); !closed || got != "" {
		t.Fatalf("a fourth connection of one address with --max-conns-per-client 3: closed %v, answer %q", closed, got)
	}
}

// TestServeHostAllowlistAndProxy: docket serve refuses a Host it was not
// started with (421, naming --host), serves the --host name; with
// --trust-proxy a request the proxy marks https gets the __Host- Secure
// session cookie and Strict-Transport-Security.
func TestServeHostAllowlistAndProxy(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--data", t.TempDir(), "--host", "docket.example.com", "--trust-proxy")
	do := func(method, host, path, body string, header map[string]string) *http.Response {
		req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
		req.Host = host
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	auth := map[string]string{"Authorization": "Bearer " + s.token}
	resp := do("GET", "rebound.example:8080", "/v1/runs", "", auth)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(raw), "--host") {
		t.Fatalf("a foreign Host = %d %s", resp.StatusCode, raw)
	}
	if resp := do("GET", "docket.example.com", "/v1/runs", "", auth); resp.StatusCode != http.StatusOK {
		t.Fatalf("the --host name = %d", resp.StatusCode)
	}
	resp = do("POST", "docket.example.com", "/v1/session", `{"token":"`+s.token+`"}`, map[string]string{"X-Forwarded-Proto": "https"})
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if resp.StatusCode != http.StatusOK || cookie == nil || cookie.Name != "__Host-docket_session" || !cookie.Secure || cookie.Path != "/" || cookie.Domain != "" {
		t.Fatalf("a session through a trusted TLS proxy = %d, cookie %+v", resp.StatusCode, cookie)
	}
	if resp.Header.Get("Strict-Transport-Security") == "" {
		t.Fatal("no Strict-Transport-Security through a trusted TLS proxy")
	}
}

// TestServeTightensDataDir: an existing data directory open to others is
// made its owner's alone at start.
func TestServeTightensDataDir(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(data, 0o755) // whatever the umask
	startServe(t, nil, "--data", data)
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("the data directory is %v after start, want -rwx------", fi.Mode().Perm())
	}
}

// TestMCPAddrIdleTimeoutAndWarning: docket mcp --addr closes a kept-alive
// connection after --idle-timeout, and warns that a non-loopback address
// serves plain HTTP (checked with a short-lived start on 0.0.0.0).
func TestMCPAddrIdleTimeoutAndWarning(t *testing.T) {
	t.Parallel()
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(addr string, stderr io.Writer, extra ...string) (string, func()) {
		stdout := &lineWriter{want: "MCP (streamable HTTP) at ", found: make(chan string, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		args := append([]string{"mcp", "--tools", toolsPath, "--data", filepath.Join(dir, "data-"+strings.ReplaceAll(addr, ":", "_")), "--addr", addr, "--token", "mcp-idle-test-token-0123"}, extra...)
		go func() { done <- runEnv(ctx, args, testEnv(stdout, stderr)) }()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("docket mcp: %v", err)
			}
		}
		select {
		case line := <-stdout.found:
			_, endpoint, _ := strings.Cut(line, "MCP (streamable HTTP) at http://")
			host, _, _ := strings.Cut(endpoint, "/")
			return host, stop
		case err := <-done:
			t.Fatalf("docket mcp ended: %v", err)
		case <-time.After(hangGuard):
			t.Fatal("docket mcp never said where it listens")
		}
		return "", stop
	}
	addr, stop := start("127.0.0.1:0", io.Discard, "--idle-timeout", "300ms")
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	closed, got := serverClosed(c)
	if !strings.Contains(got, "200 OK") || !closed {
		t.Fatalf("a kept-alive connection to docket mcp --addr: closed %v after %q", closed, got)
	}

	var stderr lockedBuffer
	_, stop2 := start("0.0.0.0:0", &stderr)
	stop2()
	if !strings.Contains(stderr.String(), "docket mcp: warning: plain HTTP on a non-loopback address") {
		t.Fatalf("docket mcp --addr 0.0.0.0:0 gave no plain-HTTP warning:\n%s", stderr.String())
	}
}

// TestSharedLedgerKeepsTokenHash: on a shared ledger without --token, the
// generated token is kept as its SHA-256 only; a second node accepts the
// token the first one showed.
func TestSharedLedgerKeepsTokenHash(t *testing.T) {
	t.Parallel()
	url, _ := sharedLedger(t)
	a := startServe(t, nil, "--ledger", url)
	if a.token == "" {
		t.Fatalf("the first node showed no generated token:\n%s", strings.Join(a.lines, "\n"))
	}
	b := startServe(t, nil, "--ledger", url)
	if b.token != "" {
		t.Fatalf("the second node generated a token of its own")
	}
	req, _ := http.NewRequest("GET", b.base+"/v1/runs", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the second node refused the first node's token: %d", resp.StatusCode)
	}
	// What the ledger holds: the hash under its memo, no token anywhere.
	pg, err := postgres.Open(context.Background(), postgres.Config{URL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	sum := sha256.Sum256([]byte(a.token))
	probe := json.RawMessage(`"probe"`)
	v, err := pg.Memo(context.Background(), sharedTokenRun, sharedTokenMemo, probe)
	if err != nil {
		t.Fatal(err)
	}
	if string(v) != `"`+hex.EncodeToString(sum[:])+`"` {
		t.Fatalf("memo %s/%s = %s, want the token's SHA-256", sharedTokenRun, sharedTokenMemo, v)
	}
	if v, err := pg.Memo(context.Background(), sharedTokenRun, "token", probe); err != nil || string(v) != string(probe) {
		t.Fatalf("the token is kept in clear (memo %s/token = %s, %v)", sharedTokenRun, v, err)
	}
}
