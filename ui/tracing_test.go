package ui_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ui"
)

// otlpReceiver is an in-process OTLP/HTTP traces endpoint decoding every
// export request it is sent.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	got   chan struct{}
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{got: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(raw, &msg) != nil {
			t.Errorf("the exporter sent %s %s", req.Method, req.URL.Path)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		select {
		case r.got <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// wait returns the first span received that match says yes to, waiting for
// more exports until one does.
func (r *otlpReceiver) wait(t *testing.T, what string, match func(*tracepb.Span) bool) *tracepb.Span {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		r.mu.Lock()
		for _, s := range r.spans {
			if match(s) {
				r.mu.Unlock()
				return s
			}
		}
		r.mu.Unlock()
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("no %s span received", what)
		}
	}
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if _, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return fmt.Sprint(kv.Value.GetIntValue())
			}
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestAPIServerSpansJoinTheCaller: with tracing on, every API request is a
// server span named and attributed as the HTTP semantic conventions say
// (http.route is the route pattern, not the path), a child of the caller's
// span when the request carries traceparent; a run submitted inside a
// trace joins it: its run span links to the request's span and to the
// caller's.
func TestAPIServerSpansJoinTheCaller(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	tr, err := oteltrace.New(t.Context(), oteltrace.Config{EndpointURL: rcv.srv.URL + "/v1/traces", Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(t.Context()) })
	b := setup(t, options{tune: func(c *ui.Config) {
		c.TraceID = oteltrace.TraceID
		c.Executor.Tracer = tr.Tracer()
	}})
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if code := b.callWith("POST", "/v1/runs", map[string]any{"run_id": "joined", "plan": onboardingPlan(t), "approve": "none"}, nil,
		map[string]string{"Authorization": "Bearer " + testToken, "traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	if code := b.call("GET", "/v1/runs/joined", nil, nil); code != http.StatusOK {
		t.Fatalf("get = %d", code)
	}

	post := rcv.wait(t, "POST /v1/runs", func(s *tracepb.Span) bool { return s.Name == "POST /v1/runs" })
	if hex.EncodeToString(post.TraceId) != callerTrace || hex.EncodeToString(post.ParentSpanId) != callerSpan ||
		post.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("POST /v1/runs span: trace %x parent %x kind %v; want the caller's trace %s and span %s, server",
			post.TraceId, post.ParentSpanId, post.Kind, callerTrace, callerSpan)
	}
	for k, v := range map[string]string{"http.request.method": "POST", "http.route": "/v1/runs", "url.path": "/v1/runs",
		"http.response.status_code": "201", "url.scheme": scheme(b)} {
		if got := spanAttr(post, k); got != v {
			t.Errorf("POST /v1/runs span: %s = %q, want %q", k, got, v)
		}
	}
	get := rcv.wait(t, "GET /v1/runs/{id}", func(s *tracepb.Span) bool { return s.Name == "GET /v1/runs/{id}" })
	if len(get.ParentSpanId) != 0 || spanAttr(get, "http.route") != "/v1/runs/{id}" || spanAttr(get, "url.path") != "/v1/runs/joined" ||
		spanAttr(get, "http.response.status_code") != "200" {
		t.Errorf("GET /v1/runs/{id} span: parent %x attributes %v", get.ParentSpanId, get.Attributes)
	}

	run := rcv.wait(t, "docket.run", func(s *tracepb.Span) bool {
		return s.Name == "docket.run" && spanAttr(s, "docket.run.id") == "joined"
	})
	if hex.EncodeToString(run.TraceId) != oteltrace.TraceID("joined") {
		t.Errorf("run span in trace %x, want the run's %s", run.TraceId, oteltrace.TraceID("joined"))
	}
	var toRequest, toCaller bool
	for _, l := range run.Links {
		toRequest = toRequest || bytes.Equal(l.SpanId, post.SpanId) && bytes.Equal(l.TraceId, post.TraceId)
		toCaller = toCaller || hex.EncodeToString(l.SpanId) == callerSpan && hex.EncodeToString(l.TraceId) == callerTrace
	}
	if !toRequest || !toCaller {
		t.Errorf("run span links %v: want the POST's span (%v) and the caller's (%v)", run.Links, toRequest, toCaller)
	}
}

func scheme(b *bundle) string {
	if b.secure() {
		return "https"
	}
	return "http"
}
