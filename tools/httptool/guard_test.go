package httptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// recorder is a real HTTP server that records what reaches it.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t testing.TB, handler http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, seen{req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Clone(), string(body)})
		r.mu.Unlock()
		if handler != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
			handler(w, req)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) requests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

// port is the recorder's port.
func (r *recorder) port() string {
	u, _ := url.Parse(r.srv.URL)
	return u.Port()
}

// loadTools parses a file of the given tools with env.
func loadTools(t testing.TB, toolsJSON string, env map[string]string) map[string]tools.Tool {
	t.Helper()
	f, err := Parse([]byte(`{"version":1,"tools":`+toolsJSON+`}`), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.CloseIdleConnections)
	out := map[string]tools.Tool{}
	for _, tl := range f.Tools {
		out[tl.Spec().Name] = tl
	}
	return out
}

// refused asserts err is a definite failure naming arg (and none of the
// hidden strings).
func refused(t *testing.T, what string, err error, arg string, hidden ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: not refused", what)
		return
	}
	if o, _ := tools.Classify(err); o != tools.Definite {
		t.Errorf("%s: outcome %v, want definite: %v", what, o, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%q", arg)) || !strings.Contains(err.Error(), "nothing sent") {
		t.Errorf("%s: the error does not name argument %q or say nothing was sent: %v", what, arg, err)
	}
	for _, h := range hidden {
		if strings.Contains(err.Error(), h) {
			t.Errorf("%s: the error shows %q: %v", what, h, err)
		}
	}
}

// TestURLArgumentCannotChangeHost: an argument right after an environment
// value holding a bare origin may not add user information ("@other:port"),
// a port (":port") or a host suffix (".1:port"): the call is refused as a
// definite failure, and neither the tool's API nor the other host receives
// anything (nor the tool's Authorization header). An argument after a "/"
// reaches the API as before.
func TestURLArgumentCannotChangeHost(t *testing.T) {
	t.Parallel()
	api := newRecorder(t, nil)
	other := newRecorder(t, nil)
	const item = `{"name":"item","effect":"read_only","input_schema":{"type":"object","properties":{"id":{"type":"string"}}},
	  "request":{"method":"GET","url":"{{env \"API_HOST\"}}/items/{{.id}}","headers":{"Authorization":"Bearer {{env \"TOKEN\"}}"}}}`
	const def = `[{"name":"get","effect":"read_only","input_schema":{"type":"object","properties":{"path":{"type":"string"}}},
	  "request":{"method":"GET","url":"{{env \"API_HOST\"}}{{.path}}","headers":{"Authorization":"Bearer {{env \"TOKEN\"}}"}}},
	 ` + item + `,
	 {"name":"split","effect":"read_only","input_schema":{"type":"object","properties":{"host":{"type":"string"}}},
	  "request":{"method":"GET","url":"{{env \"SCHEME\"}}//{{.host}}/x","headers":{"Authorization":"Bearer {{env \"TOKEN\"}}"}}}]`
	cases := []struct {
		name, host, tool, args, arg string
	}{
		{"userinfo", "http://127.0.0.1", "get", `{"path":"@127.0.0.1:` + other.port() + `"}`, "path"},
		{"port", "http://127.0.0.1", "get", `{"path":":` + other.port() + `"}`, "path"},
		{"host suffix", "http://localhos", "get", `{"path":"t:` + other.port() + `"}`, "path"},
		{"host from an argument", "http://127.0.0.1", "split", `{"host":"127.0.0.1:` + other.port() + `"}`, "host"},
	}
	for _, c := range cases {
		ts := loadTools(t, def, map[string]string{"API_HOST": c.host, "TOKEN": secret, "SCHEME": "http:"})
		_, err := call(t, ts[c.tool], c.args)
		refused(t, c.name, err, c.arg, secret)
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("the other host received %d requests: %+v", n, other.requests())
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("the API received %d requests for refused calls", n)
	}
	ts := loadTools(t, "["+item+"]", map[string]string{"API_HOST": api.srv.URL, "TOKEN": secret})
	if _, err := call(t, ts["item"], `{"id":"@127.0.0.1:`+other.port()+`"}`); err != nil {
		t.Fatalf("an argument after a \"/\": %v", err)
	}
	if r := api.requests(); len(r) != 1 || r[0].Path != "/items/@127.0.0.1:"+other.port() || r[0].Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("the API received %+v", r)
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("the other host received %d requests", n)
	}
}

// TestURLDotSegments: an argument that makes a path segment "." or ".."
// (also percent-encoded, with a ";" parameter, or split at an escaped "/"
// or "\"), or an empty one, is refused before anything is sent; a "/" in an
// argument stays inside its segment (%2F); dots inside a name are fine.
func TestURLDotSegments(t *testing.T) {
	t.Parallel()
	api := newRecorder(t, nil)
	ts := loadTools(t, `[{"name":"profile","effect":"read_only","input_schema":{"type":"object","properties":{"id":{"type":"string"},"n":{"type":"integer"}}},
	  "request":{"method":"GET","url":"{{env \"BASE\"}}/users/{{.id}}/profile"}},
	 {"name":"enc","effect":"read_only","input_schema":{"type":"object","properties":{"id":{"type":"string"}}},
	  "request":{"method":"DELETE","url":"{{env \"BASE\"}}/files/%2E{{.id}}/x"}}]`, map[string]string{"BASE": api.srv.URL})
	for _, c := range []struct{ tool, args string }{
		{"profile", `{"id":".."}`},
		{"profile", `{"id":"."}`},
		{"profile", `{"id":""}`},
		{"profile", `{}`},
		{"profile", `{"id":"%2e%2e"}`},
		{"profile", `{"id":"%2E%2e"}`},
		{"profile", `{"id":"..;jsessionid=1"}`},
		{"profile", `{"id":"a/../../admin"}`},
		{"profile", `{"id":"..\\admin"}`},
		{"enc", `{"id":"."}`},
		{"enc", `{"id":""}`},
	} {
		_, err := call(t, ts[c.tool], c.args)
		refused(t, c.tool+" "+c.args, err, "id")
	}
	if r := api.requests(); len(r) != 0 {
		t.Errorf("refused calls reached the API: %+v", r)
	}
	for _, c := range []struct{ args, path string }{
		{`{"id":"a/b"}`, "/users/a%2Fb/profile"},
		{`{"id":"a.b"}`, "/users/a.b/profile"},
		{`{"id":"..."}`, "/users/.../profile"},
		{`{"id":".x"}`, "/users/.x/profile"},
		{`{"id":"/"}`, "/users/%2F/profile"},
	} {
		if _, err := call(t, ts["profile"], c.args); err != nil {
			t.Errorf("%s: %v", c.args, err)
			continue
		}
		r := api.requests()
		if got := r[len(r)-1].Path; got != c.path {
			t.Errorf("%s: the API saw %s, want %s", c.args, got, c.path)
		}
	}
}

// TestArgumentNames: the arguments of a tool whose request sends them as
// its body may not add properties the schema does not declare, nor names
// that differ from another only in letter case ("cuſtomer" with a long s is
// "customer" to Go's encoding/json): refused before anything is sent. The
// API here decodes with encoding/json, as a Go service would.
func TestArgumentNames(t *testing.T) {
	t.Parallel()
	type charge struct {
		Amount   int
		Customer string
		Admin    bool
		Meta     map[string]string
	}
	var mu sync.Mutex
	var got []charge
	api := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		var c charge
		if r.Method != "POST" {
			io.WriteString(w, `[]`)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
		io.WriteString(w, `{"id":"ch_1"}`)
	})
	ts := loadTools(t, `[{"name":"charge","effect":"keyed","key_header":"Idempotency-Key",
	  "input_schema":{"type":"object","properties":{"amount":{"type":"integer"},"customer":{"type":"string"},"meta":{"type":"object"}}},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/charges"}},
	 {"name":"open","effect":"keyed","key_header":"Idempotency-Key",
	  "input_schema":{"type":"object","properties":{"amount":{"type":"integer"},"customer":{"type":"string"}},"additionalProperties":true},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/charges"}},
	 {"name":"find","effect":"read_only",
	  "input_schema":{"type":"object","properties":{"customer":{"type":"string"}}},
	  "request":{"method":"GET","url":"{{env \"BASE\"}}/charges?customer={{.customer}}"}}]`, map[string]string{"BASE": api.srv.URL})
	for _, c := range []struct{ tool, args, arg string }{
		{"charge", `{"amount":1,"customer":"alice","cuſtomer":"mallory"}`, "cuſtomer"},
		{"charge", `{"amount":1,"cuſtomer":"mallory"}`, "cuſtomer"},
		{"charge", `{"amount":1,"customer":"alice","Customer":"mallory"}`, "Customer"},
		{"charge", `{"amount":1,"customer":"alice","admin":true}`, "admin"},
		{"charge", `{"amount":1,"customer":"alice","meta":{"role":"user","Role":"admin"}}`, "role"},
		{"open", `{"amount":1,"customer":"alice","CUSTOMER":"mallory"}`, "CUSTOMER"},
		{"find", `{"customer":"alice","cuſtomer":"mallory"}`, "cuſtomer"},
	} {
		_, err := call(t, ts[c.tool], c.args)
		refused(t, c.tool+" "+c.args, err, c.arg)
	}
	if r := api.requests(); len(r) != 0 {
		t.Errorf("refused calls reached the API: %+v", r)
	}
	for _, c := range []struct {
		tool, args string
		want       charge
	}{
		{"charge", `{"amount":1,"customer":"alice","meta":{"role":"user"}}`, charge{Amount: 1, Customer: "alice", Meta: map[string]string{"role": "user"}}},
		{"open", `{"amount":2,"customer":"bob","admin":true}`, charge{Amount: 2, Customer: "bob", Admin: true}},
	} {
		if _, err := call(t, ts[c.tool], c.args); err != nil {
			t.Fatalf("%s %s: %v", c.tool, c.args, err)
		}
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if fmt.Sprint(last) != fmt.Sprint(c.want) {
			t.Errorf("%s: the API decoded %+v, want %+v", c.args, last, c.want)
		}
	}
	// A tool whose request names its arguments sends only those: an
	// undeclared one is left out, not refused.
	if _, err := call(t, ts["find"], `{"customer":"alice","admin":true}`); err != nil {
		t.Fatal(err)
	}
	if r := api.requests(); r[len(r)-1].RawQuery != "customer=alice" {
		t.Errorf("find sent %q", r[len(r)-1].RawQuery)
	}
}

// TestTypedSecretsRedacted: a credential typed into the file (a header value
// or a query value named like one) never appears in an error, even when the
// API echoes it back, nor in the tool's String, log value or view.
func TestTypedSecretsRedacted(t *testing.T) {
	t.Parallel()
	const typedHeader, typedQuery, typedBody = "sk_live_typed_4242", "typedquery9876", "bodypass5555"
	api := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "bad credentials: %q %q %s", r.Header.Get("Authorization"), r.URL.RawQuery, body)
	})
	ts := loadTools(t, `[{"name":"t","effect":"idempotent","input_schema":{"type":"object","properties":{"id":{"type":"string"}}},
	  "request":{"method":"PUT","url":"{{env \"BASE\"}}/x/{{.id}}?api_key=`+typedQuery+`&id={{.id}}",
	    "headers":{"Authorization":"Bearer `+typedHeader+`"},
	    "body":{"id":"{{.id}}","password":"`+typedBody+`"}}}]`, map[string]string{"BASE": api.srv.URL})
	_, err := call(t, ts["t"], `{"id":"a"}`)
	if err == nil || !strings.Contains(err.Error(), "bad credentials") {
		t.Fatalf("want the 401 with its body: %v", err)
	}
	tl := ts["t"].(*Tool)
	view, _ := json.Marshal(tl.View())
	for what, s := range map[string]string{"error": err.Error(), "String": tl.String(), "GoString": fmt.Sprintf("%#v", tl),
		"LogValue": tl.LogValue().String(), "View": string(view)} {
		for _, typed := range []string{typedHeader, typedQuery, typedBody} {
			if strings.Contains(s, typed) {
				t.Errorf("%s shows %q: %s", what, typed, s)
			}
		}
	}
	if r := api.requests(); len(r) != 1 || r[0].Header.Get("Authorization") != "Bearer "+typedHeader || !strings.Contains(r[0].RawQuery, typedQuery) {
		t.Errorf("the API did not receive the credentials: %+v", r)
	}
}

// TestDestination: where a call would go, for the approval view: the origin
// with its port, the path as sent with environment values redacted, no
// query; refused arguments give the call's refusal; nothing is sent.
func TestDestination(t *testing.T) {
	t.Parallel()
	api := newRecorder(t, nil)
	ts := loadTools(t, `[{"name":"item","effect":"keyed","key_header":"Idempotency-Key",
	  "input_schema":{"type":"object","properties":{"id":{"type":"string"}},"additionalProperties":false},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/acct/{{env \"ACCT\"}}/items/{{.id}}?token={{env \"TOKEN\"}}"},
	  "lookup":{"method":"GET","url":"https://lookup.example/items?key={{key}}","found":"nonempty"}},
	 {"name":"open","effect":"read_only","input_schema":{"type":"object","properties":{"path":{"type":"string"}}},
	  "request":{"method":"GET","url":"{{env \"HOST\"}}{{.path}}"}}]`,
		map[string]string{"BASE": api.srv.URL, "ACCT": "acct_private_77", "TOKEN": secret, "HOST": "http://127.0.0.1"})
	item := ts["item"].(*LookupTool)
	d, err := item.Destination(tools.Call{Key: "dk1_k", Args: json.RawMessage(`{"id":"a b"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Destination{Method: "POST", Origin: "http://127.0.0.1:" + api.port(), Path: "/acct/[redacted]/items/a%20b"}); d != want {
		t.Errorf("destination %+v, want %+v", d, want)
	}
	if d, err := item.LookupDestination(tools.Call{Key: "dk1_k", Args: json.RawMessage(`{"id":"x"}`)}); err != nil ||
		d != (Destination{Method: "GET", Origin: "https://lookup.example:443", Path: "/items"}) {
		t.Errorf("lookup destination %+v, %v", d, err)
	}
	_, err = ts["open"].(*Tool).Destination(tools.Call{Key: "dk1_k", Args: json.RawMessage(`{"path":"@evil.example"}`)})
	if !errors.Is(err, toolsfile.ErrURLArgument) {
		t.Errorf("a changed host: %v", err)
	}
	refused(t, "destination", err, "path")
	if _, err := item.Destination(tools.Call{Key: "dk1_k", Args: json.RawMessage(`{"id":"x","extra":1}`)}); err == nil {
		t.Error("an undeclared argument: no error")
	}
	if r := api.requests(); len(r) != 0 {
		t.Errorf("Destination sent %+v", r)
	}
}
