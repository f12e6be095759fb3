package ui_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	pathpkg "path"
	"strings"
	"testing"

	"github.com/docketrun/docket/ui"
)

// FuzzAPIRoutes sends arbitrary methods, paths, bodies and tokens through
// the real mux of a server over a real ledger: no answer is a panic or a
// 500; every answer under /v1/ (its path cleaned or not) is JSON and none a
// redirect; nothing but a public route answers
// 2xx without a valid token; and a submit-only token never gets a review or
// control route (nor a read) past 403.
func FuzzAPIRoutes(f *testing.F) {
	b := setup(f, options{tune: withScopedTokens})
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "fz", "plan": onboardingPlan(f), "approve": "none"}, nil); code != http.StatusCreated {
		f.Fatalf("create = %d", code)
	}
	routes := ui.Routes()
	for i, rt := range routes {
		path := strings.NewReplacer("{id}", "fz", "{action}", "welcome").Replace(rt.Path)
		f.Add(uint8(i), uint8(i%3), path, []byte(`{"all":true}`))
	}
	f.Add(uint8(0), uint8(1), "/v1/runs/fz/actions/welcome/resolve", []byte(`{"done":{"id":1}}`))
	f.Add(uint8(0), uint8(2), "/v1/runs", []byte(`{"plan":{"actions":[{"id":"a","tool":"email_send","args":{}}]},"approve":"all"}`))
	f.Add(uint8(1), uint8(0), "/v1/runs/%2e%2e/approve", []byte(`{`))
	f.Add(uint8(2), uint8(1), "//v1/runs?status=\x00", []byte(nil))
	// What it found: a 405 in plain text, an HTML redirect, a 500 from the
	// page's file server.
	f.Add(uint8(3), uint8(2), "/v1/runs", []byte(nil))
	f.Add(uint8(0), uint8(2), "/v1//runs", []byte(nil))
	f.Add(uint8(0), uint8(0), "/\xff", []byte(nil))
	methods := []string{"GET", "POST", "DELETE", "PUT", "HEAD"}
	tokens := []string{"", botToken, testToken, "not-a-token-0123456789"}
	f.Fuzz(func(t *testing.T, m, tk uint8, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n#") || len(path) > 512 {
			return
		}
		method := methods[int(m)%len(methods)]
		tok := tokens[int(tk)%len(tokens)]
		r := httptest.NewRequest(method, "http://example.com/", bytes.NewReader(body))
		r.URL.Path, r.URL.RawPath, r.RequestURI = "", "", ""
		if u, err := r.URL.Parse(path); err == nil {
			r.URL = u
		} else {
			return
		}
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(rec, r)
		code := rec.Code
		// No path, the page's included, gets a 500 (a 503 or 501 is a
		// state of the service).
		if code >= 500 && code != http.StatusServiceUnavailable && code != http.StatusNotImplemented {
			t.Fatalf("%s %s (%q): %d %s", method, path, body, code, rec.Body)
		}
		// Every answer on an API path, cleaned or not, is JSON: 405 with
		// Allow, and 404 for a path that is not clean, never a redirect.
		clean := pathpkg.Clean(r.URL.EscapedPath())
		api := strings.HasPrefix(clean, "/v1/") || clean == "/v1" || clean == "/metrics" || clean == "/healthz" || clean == "/readyz"
		if api && code >= 300 && code < 400 {
			t.Fatalf("%s %s: redirected (%d to %s)", method, path, code, rec.Header().Get("Location"))
		}
		if api && method != "HEAD" && rec.Body.Len() > 0 && (clean != "/metrics" || code != http.StatusOK) {
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("%s %s: %d with content type %q", method, path, code, ct)
			}
		}
		if code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
			t.Fatalf("%s %s: 405 without Allow", method, path)
		}
		public := r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/v1/openapi.json" || r.URL.Path == "/v1/session" ||
			!strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/metrics"
		if code < 300 && !public && (tok == "" || tok == "not-a-token-0123456789") {
			t.Fatalf("%s %s without a valid token: %d", method, path, code)
		}
		if tok == botToken && code < 300 && strings.HasPrefix(r.URL.Path, "/v1/runs/") {
			t.Fatalf("%s %s with a submit-only token: %d %s", method, path, code, rec.Body)
		}
	})
}
