package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/tools"
)

const secret = "s3cr3t-token-value"

// seen is one request as the fake server received it.
type seen struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   string
}

// bundle is what an HTTP tool test needs: a fake API and the loaded tools.
type bundle struct {
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []seen
	tools map[string]tools.Tool
}

func (b *bundle) requests() []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]seen(nil), b.reqs...)
}

// setup starts a fake API answering with handler (after recording the
// request) and loads toolsJSON (a JSON array of tool definitions) with
// BASE=the server's URL and TOKEN=secret.
func setup(t testing.TB, toolsJSON string, handler http.HandlerFunc, opts ...func(*Options)) *bundle {
	t.Helper()
	b := &bundle{tools: map[string]tools.Tool{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), string(body)})
		b.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(b.srv.Close)
	o := Options{Env: func(k string) string {
		return map[string]string{"BASE": b.srv.URL, "TOKEN": secret}[k]
	}}
	for _, f := range opts {
		f(&o)
	}
	f, err := ParseOptions([]byte(`{"version":1,"tools":`+toolsJSON+`}`), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.CloseIdleConnections)
	for _, tl := range f.Tools {
		b.tools[tl.Spec().Name] = tl
	}
	return b
}

func call(t *testing.T, tl tools.Tool, args string) (json.RawMessage, error) {
	t.Helper()
	return tl.Call(context.Background(), tools.Call{Key: "dk1_key", RunID: "r", Action: "a1", Attempt: 1, Args: json.RawMessage(args)})
}

func reply(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

const createTool = `{"name":"create","effect":"keyed","key_header":"Idempotency-Key",
 "input_schema":{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array"},"opt":{"type":"string"},"obj":{"type":"object"}}},
 "request":{"method":"POST","url":"{{env \"BASE\"}}/items/{{.name}}?tag={{.name}}&token={{env \"TOKEN\"}}",
   "headers":{"Authorization":"Bearer {{env \"TOKEN\"}}","X-Name":"{{.name}}"},
   "body":{"name":"{{.name}}","n":"{{.n}}","tags":"{{.tags}}","opt":"{{.opt}}","obj":"{{.obj}}","text":"n={{.n}} \"{{.name}}\" {{.obj}}","ref":"{{key}}","fixed":[1,"{{.opt}}",true]}},
 "output":"/item/id"}`

func TestCallRendersRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, "["+createTool+"]", reply(201, `{"item":{"id":"it_1","big":12345678901234567890}}`))
	out, err := call(t, b.tools["create"], `{"name":"a/b c&d","n":12345678901234567890,"tags":["x",1.50],"obj":{"k":null}}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `"it_1"` {
		t.Errorf("output = %s", out)
	}
	r := b.requests()[0]
	if r.Method != "POST" || r.Path != "/items/a%2Fb%20c&d" || r.RawQuery != "tag=a%2Fb+c%26d&token="+secret {
		t.Errorf("request line: %s %s ? %s", r.Method, r.Path, r.RawQuery)
	}
	if r.Header.Get("Authorization") != "Bearer "+secret || r.Header.Get("X-Name") != "a/b c&d" ||
		r.Header.Get("Idempotency-Key") != "dk1_key" || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers: %v", r.Header)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	want := map[string]string{
		"name":  `"a/b c&d"`,
		"n":     `12345678901234567890`,
		"tags":  `["x",1.50]`,
		"obj":   `{"k":null}`,
		"text":  `"n=12345678901234567890 \"a/b c&d\" {\"k\":null}"`,
		"ref":   `"dk1_key"`,
		"fixed": `[1,null,true]`,
	}
	for k, v := range want {
		if string(body[k]) != v {
			t.Errorf("body %s = %s, want %s", k, body[k], v)
		}
	}
	if _, ok := body["opt"]; ok || len(body) != len(want) {
		t.Errorf("absent argument not dropped: %s", r.Body)
	}
}

func TestCallBodyFromArgumentsAndOutputs(t *testing.T) {
	t.Parallel()
	defs := `[
	 {"name":"put","effect":"idempotent","input_schema":{"type":"object","properties":{"id":{"type":"string"},"value":{"type":"number"}}},
	  "request":{"method":"PUT","url":"{{env \"BASE\"}}/things/{{.id}}"}},
	 {"name":"get","effect":"read_only","input_schema":{"type":"object","properties":{"id":{"type":"string"}}},
	  "request":{"method":"GET","url":"{{env \"BASE\"}}/things/{{.id}}"}, "output":"/data/0/a~1b"}
	]`
	var mode string
	b := setup(t, defs, func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "text":
			io.WriteString(w, "OK done")
		case "empty":
			w.WriteHeader(204)
		default:
			io.WriteString(w, `{"data":[{"a/b":{"x":1}}]}`)
		}
	})
	out, err := call(t, b.tools["put"], `{"id":"t1","value":1e400}`)
	if err != nil || string(out) != `{"data":[{"a/b":{"x":1}}]}` {
		t.Fatalf("put = %s, %v", out, err)
	}
	if got := b.requests()[0].Body; got != `{"id":"t1","value":1e400}` {
		t.Errorf("arguments as body = %s", got)
	}
	out, err = call(t, b.tools["get"], `{"id":"t1"}`)
	if err != nil || string(out) != `{"x":1}` {
		t.Errorf("get with pointer = %s, %v", out, err)
	}
	if r := b.requests()[1]; r.Body != "" || r.Header.Get("Content-Type") != "" {
		t.Errorf("GET sent a body: %+v", r)
	}
	mode = "text"
	out, err = call(t, b.tools["put"], `{"id":"t1"}`)
	if err != nil || string(out) != `{"body":"OK done","status":200}` {
		t.Errorf("text answer = %s, %v", out, err)
	}
	_, err = call(t, b.tools["get"], `{"id":"t1"}`)
	if o, _ := tools.Classify(err); err == nil || o != tools.Unknown || !strings.Contains(err.Error(), "not JSON, cannot select /data/0/a~1b") {
		t.Errorf("pointer into text = %v", err)
	}
	mode = "empty"
	out, err = call(t, b.tools["put"], `{"id":"t1"}`)
	if err != nil || string(out) != `{"body":"","status":204}` {
		t.Errorf("204 = %s, %v", out, err)
	}
	mode = ""
	b2 := setup(t, `[{"name":"get","effect":"read_only","input_schema":{"type":"object"},"request":{"method":"GET","url":"{{env \"BASE\"}}/"},"output":"/nope"}]`, reply(200, `{"data":1}`))
	if _, err := call(t, b2.tools["get"], `{}`); err == nil || !strings.Contains(err.Error(), "the response has nothing at /nope") {
		t.Errorf("missing pointer = %v", err)
	}
}

func TestCallClassifiesStatuses(t *testing.T) {
	t.Parallel()
	defs := `[
	 {"name":"keyed","effect":"keyed","key_header":"Idempotency-Key","input_schema":{"type":"object"},"request":{"method":"POST","url":"{{env \"BASE\"}}/k"}},
	 {"name":"once","effect":"at_most_once","input_schema":{"type":"object"},"request":{"method":"POST","url":"{{env \"BASE\"}}/o"}}
	]`
	date := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		name    string
		tool    string
		h       http.HandlerFunc
		outcome tools.Outcome
		after   time.Duration // exact unless afterMin
		min     bool
		text    string
	}{
		{"400", "once", reply(400, `{"error":"bad email"}`), tools.Definite, 0, false, `400 Bad Request: {"error":"bad email"}`},
		{"404", "once", reply(404, ``), tools.Definite, 0, false, "404 Not Found: (empty body)"},
		{"422 long body", "once", reply(422, strings.Repeat("x", 2000)), tools.Definite, 0, false, "…(truncated)"},
		{"429 seconds", "once", reply(429, "slow down", "Retry-After", "7"), tools.NotProcessed, 7 * time.Second, false, "429"},
		{"429 no header", "once", reply(429, ""), tools.NotProcessed, 0, false, "429"},
		{"503 date", "once", reply(503, "", "Retry-After", date), tools.NotProcessed, 58 * time.Minute, true, "503"},
		{"503 no header", "once", reply(503, "down"), tools.Unknown, 0, false, "503 Service Unavailable: down"},
		{"503 bad header", "once", reply(503, "", "Retry-After", "soon"), tools.Unknown, 0, false, "503"},
		{"500", "keyed", reply(500, "oops"), tools.Unknown, 0, false, "500 Internal Server Error: oops"},
		{"408", "once", reply(408, ""), tools.Unknown, 0, false, "408"},
		{"425", "once", reply(425, ""), tools.Unknown, 0, false, "425"},
		{"409 keyed", "keyed", reply(409, "in progress", "Retry-After", "2"), tools.KeyInFlight, 2 * time.Second, false, "409 Conflict"},
		{"409 not keyed", "once", reply(409, "conflict"), tools.Unknown, 0, false, "409"},
		{"303", "once", reply(303, "", "Location", "/elsewhere"), tools.Unknown, 0, false, "redirects are not followed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, defs, c.h)
			_, err := call(t, b.tools[c.tool], `{}`)
			if err == nil {
				t.Fatal("no error")
			}
			o, after := tools.Classify(err)
			if o != c.outcome || (!c.min && after != c.after) || (c.min && (after < c.after || after > time.Hour)) {
				t.Errorf("outcome %v after %v, want %v after %v", o, after, c.outcome, c.after)
			}
			if !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), `tool "`+c.tool+`": POST {{env "BASE"}}/`) {
				t.Errorf("error %q lacks %q", err, c.text)
			}
		})
	}
}

func TestRetryAfterParsing(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"0": 0, "120": 2 * time.Minute, "99999999999999999": time.Duration(1<<63-1) / time.Second * time.Second,
		"Fri, 02 Jan 2026 03:05:05 GMT": time.Minute, "Fri, 02 Jan 2026 03:00:00 GMT": 0,
	} {
		if d, ok := retryAfter(v, now); !ok || d != want {
			t.Errorf("%q: %v %v, want %v", v, d, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "1.5", "tomorrow"} {
		if _, ok := retryAfter(v, now); ok {
			t.Errorf("%q accepted", v)
		}
	}
}

func TestCallTransportFailures(t *testing.T) {
	t.Parallel()
	defs := `[{"name":"once","effect":"at_most_once","input_schema":{"type":"object"},"timeout":"200ms",
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/o?token={{env \"TOKEN\"}}"}}]`

	t.Run("server gone before connect: not sent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defs, reply(200, "{}"))
		b.srv.Close()
		_, err := call(t, b.tools["once"], `{}`)
		if o, _ := tools.Classify(err); o != tools.NotSentOutcome {
			t.Fatalf("outcome %v: %v", o, err)
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "not sent") {
			t.Errorf("error = %v", err)
		}
	})

	t.Run("connection dropped after the request: unknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defs, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
		})
		_, err := call(t, b.tools["once"], `{"x":1}`)
		if o, _ := tools.Classify(err); err == nil || o != tools.Unknown {
			t.Fatalf("outcome %v: %v", o, err)
		}
		if len(b.requests()) != 1 || strings.Contains(err.Error(), secret) {
			t.Errorf("requests %d, error %v", len(b.requests()), err)
		}
	})

	t.Run("timeout after sending: unknown", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		b := setup(t, defs, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		_, err := call(t, b.tools["once"], `{}`)
		if o, _ := tools.Classify(err); o != tools.Unknown || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("outcome %v: %v", o, err)
		}
	})

	t.Run("cancelled before sending: not sent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, defs, reply(200, "{}"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := b.tools["once"].Call(ctx, tools.Call{Key: "k", Args: json.RawMessage(`{}`)})
		if o, _ := tools.Classify(err); o != tools.NotSentOutcome || len(b.requests()) != 0 {
			t.Fatalf("outcome %v: %v", o, err)
		}
	})

	t.Run("dial never answers: not sent", func(t *testing.T) {
		t.Parallel()
		// A listener that never accepts: the dial completes in the kernel
		// backlog, but a transport that cannot dial at all must say not sent.
		// We refuse the dial with a custom dialer instead, which is deterministic.
		b := setup(t, defs, reply(200, "{}"), func(o *Options) {
			o.Client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("no route to host")}
			}}}
		})
		_, err := call(t, b.tools["once"], `{}`)
		if o, _ := tools.Classify(err); o != tools.NotSentOutcome || !strings.Contains(err.Error(), "no route to host") {
			t.Fatalf("outcome %v: %v", o, err)
		}
	})
}

func TestCallResponseSizeCap(t *testing.T) {
	t.Parallel()
	defs := `[{"name":"get","effect":"read_only","input_schema":{"type":"object"},"request":{"method":"GET","url":"{{env \"BASE\"}}/"}},
	  {"name":"post","effect":"at_most_once","input_schema":{"type":"object"},"request":{"method":"POST","url":"{{env \"BASE\"}}/"}}]`
	big := `"` + strings.Repeat("a", 200) + `"`
	status := 200
	b := setup(t, defs, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, big)
	}, func(o *Options) { o.MaxResponseBytes = 100 })
	// A 2xx over the cap took effect and would answer the same again: a
	// definite failure naming the cap and the size (issue 13.7), which the
	// executor never retries.
	_, err := call(t, b.tools["get"], `{}`)
	if o, _ := tools.Classify(err); o != tools.Definite || !errors.Is(err, tools.ErrOutputTooLarge) ||
		!strings.Contains(err.Error(), "202 bytes") || !strings.Contains(err.Error(), "output cap (100 bytes)") {
		t.Errorf("2xx over the cap: %v %v", o, err)
	}
	status = 400
	_, err = call(t, b.tools["post"], `{}`)
	if o, _ := tools.Classify(err); o != tools.Definite || !strings.Contains(err.Error(), "400") {
		t.Errorf("4xx over the cap: %v %v", o, err)
	}
	if def := (Options{}).withDefaults(); def.MaxResponseBytes != 8<<20 {
		t.Errorf("default cap = %d", def.MaxResponseBytes)
	}
}

func TestCallBadArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, "["+createTool+"]", reply(200, "{}"))
	for _, args := range []string{`[1]`, `{"name":`, `{"name":"x\ny"}`} {
		_, err := call(t, b.tools["create"], args)
		if o, _ := tools.Classify(err); o != tools.Definite {
			t.Errorf("%s: outcome %v: %v", args, o, err)
		}
	}
	if n := len(b.requests()); n != 0 {
		t.Errorf("%d requests sent for bad arguments", n)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	defs := `[
	 {"name":"mk","effect":"lookup","input_schema":{"type":"object","properties":{"email":{"type":"string"}}},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/contacts","body":{"email":"{{.email}}","external_id":"{{key}}"}},"output":"/contact",
	  "lookup":{"method":"GET","url":"{{env \"BASE\"}}/contacts?external_id={{key}}&email={{.email}}","found":"nonempty","output":"/results"}},
	 {"name":"put","effect":"keyed","key_header":"Idempotency-Key","key_ttl":"1h","input_schema":{"type":"object","properties":{"id":{"type":"string"}}},
	  "request":{"method":"PUT","url":"{{env \"BASE\"}}/docs/{{.id}}"},
	  "lookup":{"method":"GET","url":"{{env \"BASE\"}}/docs/{{.id}}","found":"status_200"}}
	]`
	var status int
	var body string
	b := setup(t, defs, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	})
	cases := []struct {
		tool, body string
		status     int
		found      bool
		out        string
		outcome    tools.Outcome // for errors
		err        string
	}{
		{"mk", `{"results":[{"id":"c1","n":12345678901234567890},{"id":"c2"}]}`, 200, true, `{"id":"c1","n":12345678901234567890}`, 0, ""},
		{"mk", `{"results":[]}`, 200, false, "", 0, ""},
		{"mk", `{"results":[{}]}`, 200, false, "", 0, ""},
		{"mk", `{"results":null}`, 200, false, "", 0, ""},
		{"mk", `not found`, 404, false, "", 0, ""},
		{"mk", `{"other":1}`, 200, false, "", tools.Unknown, "the response has nothing at /results"},
		{"mk", `boom`, 500, false, "", tools.Unknown, "500 Internal Server Error: boom"},
		{"mk", ``, 401, false, "", tools.Definite, "401"},
		{"put", `{"id":"d1"}`, 200, true, `{"id":"d1"}`, 0, ""},
		{"put", `[]`, 200, true, `[]`, 0, ""},
		{"put", ``, 404, false, "", 0, ""},
		{"put", `{}`, 202, false, "", tools.Unknown, "lookup answered 202"},
		{"put", ``, 429, false, "", tools.NotProcessed, "429"},
	}
	for _, c := range cases {
		status, body = c.status, c.body
		l := b.tools[c.tool].(tools.Looker)
		out, found, err := l.Lookup(context.Background(), tools.Call{Key: "dk1_k", Args: json.RawMessage(`{"email":"a+b@x.org","id":"d1"}`)})
		name := fmt.Sprintf("%s %d %s", c.tool, c.status, c.body)
		if c.err != "" {
			o, _ := tools.Classify(err)
			if err == nil || o != c.outcome || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v (%v), want %q (%v)", name, err, o, c.err, c.outcome)
			}
			continue
		}
		if err != nil || found != c.found || string(out) != c.out {
			t.Errorf("%s: got %s %v %v, want %s %v", name, out, found, err, c.out, c.found)
		}
	}
	r := b.requests()[0]
	if r.Method != "GET" || r.RawQuery != "external_id=dk1_k&email=a%2Bb%40x.org" || r.Header.Get("Idempotency-Key") != "" {
		t.Errorf("lookup request: %+v", r)
	}
	if r := b.requests()[len(b.requests())-1]; r.Header.Get("Idempotency-Key") != "" {
		t.Errorf("the key header was sent with a lookup: %v", r.Header)
	}
}

func TestSecretsNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	defs := `[{"name":"once","effect":"at_most_once","input_schema":{"type":"object"},
	  "request":{"method":"POST","url":"{{env \"BASE\"}}/o/{{env \"TOKEN\"}}?token={{env \"TOKEN\"}}","headers":{"Authorization":"Bearer {{env \"TOKEN\"}}"}}}]`
	// The server echoes our headers and URL back in its error body.
	b := setup(t, defs, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		fmt.Fprintf(w, "bad request %s %s auth=%s", r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"))
	})
	tl := b.tools["once"]
	_, err := call(t, tl, `{}`)
	if err == nil || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("error = %v", err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("calling", "tool", tl, "err", err)
	texts := []string{err.Error(), logs.String(), fmt.Sprintf("%v %+v %#v %s", tl, tl, tl, tl)}
	for _, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("secret leaked: %s", s)
		}
	}
	if !strings.Contains(logs.String(), `"tool":{"tool":"once","class":"at_most_once","method":"POST"`) {
		t.Errorf("log = %s", logs.String())
	}
	// The secret did reach the server: redaction is ours, not the request's.
	if r := b.requests()[0]; r.Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("request headers = %v", r.Header)
	}
}

// TestLookupIndexedPointer: a lookup whose output pointer indexes an array
// says "not found" for an index past the end of the array it found, and
// "/results" and "/results/0" select alike (the first element).
func TestLookupIndexedPointer(t *testing.T) {
	t.Parallel()
	var body string
	def := func(name, found, output string) string {
		return `{"name":"` + name + `","effect":"lookup","input_schema":{"type":"object"},
		  "request":{"method":"POST","url":"{{env \"BASE\"}}/contacts"},
		  "lookup":{"method":"GET","url":"{{env \"BASE\"}}/contacts?note={{key}}","found":"` + found + `","output":"` + output + `"}}`
	}
	b := setup(t, "["+def("whole", "nonempty", "/results")+","+def("first", "nonempty", "/results/0")+","+
		def("deep", "nonempty", "/results/0/contact")+","+def("by_id", "status_200", "/results/0")+"]",
		func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	cases := []struct {
		tools []string
		body  string
		found bool
		out   string
		err   string
	}{
		{[]string{"whole", "first", "deep"}, `{"results":[]}`, false, "", ""},
		{[]string{"whole", "first"}, `{"results":[{"id":"c1"},{"id":"c2"}]}`, true, `{"id":"c1"}`, ""},
		{[]string{"whole", "first"}, `{"results":[{}]}`, false, "", ""},
		{[]string{"whole", "first"}, `{"results":[["a","b"]]}`, true, `["a","b"]`, ""},
		{[]string{"deep"}, `{"results":[{"contact":{"id":"c1"}}]}`, true, `{"id":"c1"}`, ""},
		{[]string{"deep"}, `{"results":[{"other":1}]}`, false, "", "the response has nothing at /results/0/contact"},
		{[]string{"whole", "first"}, `{"other":1}`, false, "", "the response has nothing at /results"},
		{[]string{"first"}, `{"results":{"x":1}}`, false, "", "the response has nothing at /results/0"},
		{[]string{"by_id"}, `{"results":[{"id":"c1"}]}`, true, `{"id":"c1"}`, ""},
		{[]string{"by_id"}, `{"results":[]}`, false, "", "the response has nothing at /results/0 (array of 0)"},
	}
	for _, c := range cases {
		body = c.body
		for _, name := range c.tools {
			out, found, err := b.tools[name].(tools.Looker).Lookup(context.Background(), tools.Call{Key: "dk1_k", Args: json.RawMessage(`{}`)})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("%s on %s: error %v, want %q", name, c.body, err, c.err)
				}
				continue
			}
			if err != nil || found != c.found || string(out) != c.out {
				t.Errorf("%s on %s: got %s %v %v, want %s %v", name, c.body, out, found, err, c.out, c.found)
			}
		}
	}
}
