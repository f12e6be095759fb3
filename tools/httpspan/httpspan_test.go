package httpspan_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/docketrun/docket/tools/httpspan"
)

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func named(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// TestClientSpans: a request made under a span is a client span, its
// child, with the HTTP semantic conventions' attributes; url.full keeps no
// userinfo and no query value; the server receives the HTTP span as its
// parent; a failed request names its error.type; without a span in the
// context nothing is made and no header is sent.
func TestClientSpans(t *testing.T) {
	t.Parallel()
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		if r.URL.Path == "/busy" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "docket.attempt")
	client := &http.Client{Transport: &httpspan.Transport{}}
	u, _ := url.Parse(srv.URL)

	req, _ := http.NewRequestWithContext(ctx, "POST", "http://alice:s3cret-pass@"+u.Host+"/busy?api_key=s3cret-key&page=2#frag", strings.NewReader("{}"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	header := <-got
	spans := named(rec, "POST")
	if len(spans) != 1 {
		t.Fatalf("%d POST spans", len(spans))
	}
	s := spans[0]
	a := attrs(s)
	want := map[string]string{
		"http.request.method": "POST", "server.address": u.Hostname(), "server.port": u.Port(),
		"http.response.status_code": "503", "error.type": "503",
		"url.full": "http://" + u.Host + "/busy?api_key=REDACTED&page=REDACTED",
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() || s.Status().Code != codes.Error {
		t.Errorf("span kind %v parent %v status %v", s.SpanKind(), s.Parent().SpanID(), s.Status())
	}
	if w := fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID()); header != w {
		t.Errorf("traceparent %q, want the HTTP span's %q", header, w)
	}

	// A request that never reaches a server.
	req, _ = http.NewRequestWithContext(ctx, "GET", closed.URL+"/x", nil)
	if _, err := client.Do(req); err == nil {
		t.Fatal("a closed server answered")
	}
	if spans := named(rec, "GET"); len(spans) != 1 || attrs(spans[0])["error.type"] == "" ||
		attrs(spans[0])["http.response.status_code"] != "" || spans[0].Status().Code != codes.Error {
		t.Errorf("failed request spans: %v", spans)
	}

	// A method outside the registry.
	req, _ = http.NewRequestWithContext(ctx, "PURGE", srv.URL+"/x", nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-got
	if spans := named(rec, "HTTP"); len(spans) != 1 || attrs(spans[0])["http.request.method"] != "_OTHER" ||
		attrs(spans[0])["http.request.method_original"] != "PURGE" {
		t.Errorf("PURGE spans: %v", spans)
	}

	// Tracing off: no span, no header.
	n := len(rec.Ended())
	req, _ = http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/y", nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-got; h != "" || len(rec.Ended()) != n {
		t.Errorf("untraced request: traceparent %q, %d spans made", h, len(rec.Ended())-n)
	}
}

// TestServerSpans: the server span of a request is named after its route
// pattern, joins the caller's trace when it sent traceparent (by the
// propagator given), records the status (error.type on a 5xx), and a
// handler that takes the connection over (WebSocket) still can.
func TestServerSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mux := http.NewServeMux()
	callers := make(chan trace.SpanContext, 1)
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		callers <- httpspan.Caller(r.Context())
		w.WriteHeader(http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
	})
	srv := httptest.NewServer(httpspan.Handler(mux, tp, propagation.TraceContext{}))
	defer srv.Close()

	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest("GET", srv.URL+"/items/42", nil)
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if sc := <-callers; sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
		t.Errorf("the handler's caller: %v", sc)
	}
	spans := named(rec, "GET /items/{id}")
	if len(spans) != 1 {
		t.Fatalf("spans: %d", len(rec.Ended()))
	}
	s := spans[0]
	a := attrs(s)
	for k, v := range map[string]string{"http.request.method": "GET", "http.route": "/items/{id}", "url.path": "/items/42",
		"url.scheme": "http", "http.response.status_code": "500", "error.type": "Internal Server Error"} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if s.SpanKind() != trace.SpanKindServer || s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.Status().Code != codes.Error {
		t.Errorf("span kind %v parent %v status %v", s.SpanKind(), s.Parent(), s.Status())
	}

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, "101") {
		t.Fatalf("upgrade answer %q %v", line, err)
	}
}
