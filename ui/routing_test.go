package ui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// rawAnswer is an answer as it came, redirects not followed.
type rawAnswer struct {
	code int
	head http.Header
	body []byte
}

// raw sends method path (as written: not cleaned) with the admin token and
// returns the answer without following a redirect.
func (b *bundle) raw(method, path string) rawAnswer {
	b.t.Helper()
	c := *b.client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequest(method, b.hs.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return rawAnswer{resp.StatusCode, resp.Header, body}
}

// jsonError decodes a JSON error answer, failing when it is not one.
func (a rawAnswer) jsonError(t *testing.T, what string) errorBody {
	t.Helper()
	var e errorBody
	if ct := a.head.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: %d with content type %q: %s", what, a.code, ct, a.body)
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("%s: %d is not a JSON error (%v): %s", what, a.code, err, a.body)
	}
	return e
}

// A method a path does not serve is answered 405 in our JSON envelope with
// Allow listing what it serves (ServeMux's own answer is plain text); a
// path nothing serves under /v1/ is 404 JSON whatever the method.
// (FuzzAPIRoutes found the plain-text 405.)
func TestUnknownMethodIs405JSON(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/v1/runs", "GET, HEAD, POST"},
		{"DELETE", "/v1/runs/r1", "GET, HEAD"},
		{"PATCH", "/v1/runs/r1/approve", "POST"},
		{"PUT", "/v1/session", "GET, HEAD, POST, DELETE"},
		{"POST", "/metrics", "GET, HEAD"},
		{"OPTIONS", "/healthz", "GET, HEAD"},
		{"DELETE", "/", "GET, HEAD"},
	} {
		a := b.raw(c.method, c.path)
		if a.code != http.StatusMethodNotAllowed || a.head.Get("Allow") != c.allow {
			t.Fatalf("%s %s = %d Allow %q, want 405 Allow %q: %s", c.method, c.path, a.code, a.head.Get("Allow"), c.allow, a.body)
		}
		if e := a.jsonError(t, c.method+" "+c.path); e.Error.Code != "method_not_allowed" || !strings.Contains(e.Error.Message, c.allow) {
			t.Fatalf("%s %s: %+v", c.method, c.path, e.Error)
		}
	}
	for _, c := range []struct{ method, path string }{{"PUT", "/v1/nope"}, {"DELETE", "/v1/"}, {"GET", "/v1"}, {"PATCH", "/v1/runs/r1/nope"}} {
		a := b.raw(c.method, c.path)
		if e := a.jsonError(t, c.method+" "+c.path); a.code != http.StatusNotFound || e.Error.Code != "not_found" {
			t.Fatalf("%s %s = %d %+v, want 404 not_found", c.method, c.path, a.code, e.Error)
		}
	}
	// What is served is still served.
	if a := b.raw("HEAD", "/v1/runs"); a.code != http.StatusOK {
		t.Fatalf("HEAD /v1/runs = %d", a.code)
	}
}

// An API path that is not clean (repeated slashes, . or ..) is answered 404
// in JSON naming the clean path, never a redirect: a client following it
// would resend a POST as GET, and ServeMux's redirect has an HTML body.
// (FuzzAPIRoutes found the HTML redirect.) The page's paths keep
// ServeMux's redirect.
func TestUncleanAPIPathIs404JSON(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, c := range []struct{ method, path, clean string }{
		{"GET", "/v1//runs", "/v1/runs"},
		{"POST", "//v1/runs", "/v1/runs"},
		{"GET", "/v1/runs/../tools", "/v1/tools"},
		{"GET", "/v1/./tools", "/v1/tools"},
		{"POST", "/v1/runs/r1/actions/a//approve", "/v1/runs/r1/actions/a/approve"},
		{"GET", "/x/../metrics", "/metrics"},
		{"PUT", "/v1//runs/", "/v1/runs/"},
	} {
		a := b.raw(c.method, c.path)
		e := a.jsonError(t, c.method+" "+c.path)
		var details struct {
			CleanPath string `json:"clean_path"`
		}
		json.Unmarshal(e.Error.Details, &details)
		if a.code != http.StatusNotFound || e.Error.Code != "not_found" || details.CleanPath != c.clean || a.head.Get("Location") != "" {
			t.Fatalf("%s %s = %d %+v Location %q, want 404 naming %s", c.method, c.path, a.code, e.Error, a.head.Get("Location"), c.clean)
		}
	}
	if a := b.raw("GET", "/static/../index.html"); a.code/100 != 3 {
		t.Fatalf("the page's unclean path = %d, want ServeMux's redirect", a.code)
	}
}

// A page path that io/fs refuses (not UTF-8) is 404, not the embedded file
// server's 500. (FuzzAPIRoutes found the 500.)
func TestPagePathNotUTF8Is404(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, p := range []string{"/%FF", "/app%C3.js", "/%ED%A0%80/x"} {
		if a := b.raw("GET", p); a.code != http.StatusNotFound {
			t.Fatalf("GET %s = %d, want 404: %s", p, a.code, a.body)
		}
	}
	if a := b.raw("GET", "/"); a.code != http.StatusOK {
		t.Fatalf("GET / = %d", a.code)
	}
}
