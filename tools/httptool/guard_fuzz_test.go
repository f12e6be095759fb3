package httptool

import (
	"context"
	"encoding/json"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/docketrun/docket/tools"
)

// guardCase is a URL template with what every request built from it must
// keep: the origin, and (segs > 0) how many path segments it has.
type guardCase struct {
	url          string
	scheme, host string
	segs         int  // 0: not fixed by the template
	safeWorks    bool // arguments of plain letters and digits are sent
}

var guardCases = []guardCase{
	{`{{env "BASE"}}/users/{{.a}}/profile`, "http", "127.0.0.1:8080", 3, true},
	{`{{env "HOST"}}{{.a}}`, "http", "127.0.0.1", 0, false},
	{`{{env "BASE"}}/files/%2E{{.a}}/x/{{.b}}?q={{.b}}`, "http", "127.0.0.1:8080", 4, true},
	{`https://api.example.com/v1/{{.a}}{{.b}}/items`, "https", "api.example.com", 3, true},
	{`{{env "SCHEME"}}//{{.a}}/x`, "https", "", 0, false},
	{`{{env "BASE"}}/{{.a}}.{{.b}}`, "http", "127.0.0.1:8080", 1, true},
	{`{{env "BASE"}}/a/{{key}}/{{.b}}#{{.a}}`, "http", "127.0.0.1:8080", 3, true},
}

var (
	encodedDot = regexp.MustCompile(`(?i)%2e`)
	plain      = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// FuzzURLGuard fills URL templates with arbitrary argument strings and
// builds the request (nothing is sent): a request that is built keeps the
// template's scheme, host and port and has no user information, and its
// path, with %2e read as "." as proxies do, is unchanged by path.Clean (no
// "." or ".." segment, no empty one) and has the template's number of
// segments (a "/" in an argument stays escaped); a refused one is a definite
// failure; plain arguments are never refused.
func FuzzURLGuard(f *testing.F) {
	for _, s := range [][2]string{
		{"x", "y"}, {"..", "x"}, {".", ""}, {"", ""}, {"@127.0.0.1:9", "x"}, {":9", ""}, {".evil.example", "x"},
		{"%2e%2e", "%2E"}, {"a/b", "../c"}, {"..;x", "..\\x"}, {"é", "?#"}, {"/", "//"}, {"127.0.0.1:9/", "x"},
	} {
		for i := range guardCases {
			f.Add(uint8(i), s[0], s[1])
		}
	}
	env := map[string]string{"BASE": "http://127.0.0.1:8080", "HOST": "http://127.0.0.1", "SCHEME": "https:"}
	built := make([]*Tool, len(guardCases))
	for i, c := range guardCases {
		def, _ := json.Marshal(c.url)
		ts := loadTools(f, `[{"name":"t","effect":"read_only","input_schema":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}}},
		  "request":{"method":"GET","url":`+string(def)+`}}]`, env)
		built[i] = ts["t"].(*Tool)
	}
	f.Fuzz(func(t *testing.T, sel uint8, a, b string) {
		c := guardCases[int(sel)%len(guardCases)]
		tl := built[int(sel)%len(guardCases)]
		args, _ := json.Marshal(map[string]string{"a": a, "b": b})
		req, err := tl.build(context.Background(), tl.def.Request, tools.Call{Key: "dk1_k", Args: args}, true)
		if err != nil {
			if o, _ := tools.Classify(err); o != tools.Definite {
				t.Fatalf("%s with a=%q b=%q: refused as %v, want definite: %v", c.url, a, b, o, err)
			}
			if c.safeWorks && plain.MatchString(a) && plain.MatchString(b) {
				t.Fatalf("%s with a=%q b=%q: plain arguments refused: %v", c.url, a, b, err)
			}
			return
		}
		u := req.URL
		if u.Scheme != c.scheme || u.Host != c.host || req.Host != c.host || u.User != nil || u.Opaque != "" {
			t.Fatalf("%s with a=%q b=%q: sent to %s://%s (user %v), want %s://%s", c.url, a, b, u.Scheme, u.Host, u.User, c.scheme, c.host)
		}
		p := u.EscapedPath()
		if c.segs == 0 {
			return
		}
		norm := encodedDot.ReplaceAllString(p, ".")
		if path.Clean(norm) != norm {
			t.Fatalf("%s with a=%q b=%q: path %s normalises to %s", c.url, a, b, p, path.Clean(norm))
		}
		if n := len(strings.Split(strings.TrimPrefix(norm, "/"), "/")); n != c.segs {
			t.Fatalf("%s with a=%q b=%q: path %s has %d segments, want %d", c.url, a, b, p, n, c.segs)
		}
	})
}
