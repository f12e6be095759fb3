package oteltrace_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/memory"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// receiver is an in-process OTLP/HTTP traces endpoint: it decodes every
// ExportTraceServiceRequest it is really sent (protobuf, gzip or not).
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	res   []*commonpb.KeyValue
	got   chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("exporter sent %s %s (%s)", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				t.Errorf("gzip: %v", err)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &msg); err != nil {
			t.Errorf("not an ExportTraceServiceRequest: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			r.res = rs.GetResource().GetAttributes()
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		select {
		case r.got <- struct{}{}:
		default:
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			switch v := kv.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_IntValue:
				return fmt.Sprint(v.IntValue)
			case *commonpb.AnyValue_BoolValue:
				return fmt.Sprint(v.BoolValue)
			}
		}
	}
	return ""
}

// service is the HTTP API the tools call: it keeps the traceparent header
// of every request, and its CRM commits the first write then answers 500
// (outcome unknown: the next attempt looks it up first and finds it).
type service struct {
	srv     *httptest.Server
	mu      sync.Mutex
	parents map[string][]string // path → traceparent headers received
	crm     map[string]bool
}

func newService(t *testing.T) *service {
	s := &service{parents: map[string][]string{}, crm: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.parents[r.URL.Path] = append(s.parents[r.URL.Path], r.Header.Get("traceparent"))
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/crm/find":
			if s.crm[r.URL.Query().Get("key")] {
				fmt.Fprint(w, `[{"id":"c1"}]`)
				return
			}
			fmt.Fprint(w, `[]`)
		case "/crm":
			first := !s.crm[r.Header.Get("Idempotency-Key")]
			s.crm[r.Header.Get("Idempotency-Key")] = true
			if first {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, `{"id":"c1"}`)
		default:
			fmt.Fprint(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *service) toolsFile() string {
	return `{"version": 1, "tools": [
	 {"name": "put", "effect": "idempotent", "input_schema": {"type": "object"},
	  "request": {"method": "PUT", "url": "` + s.srv.URL + `/put"}},
	 {"name": "crm", "effect": "lookup", "input_schema": {"type": "object"}, "visibility_lag": "0s",
	  "request": {"method": "POST", "url": "` + s.srv.URL + `/crm", "headers": {"Idempotency-Key": "{{key}}"}},
	  "lookup": {"method": "GET", "url": "` + s.srv.URL + `/crm/find?key={{key}}", "found": "nonempty"}}]}`
}

// TestSpansReachAnOTLPReceiver drives a run with tracing on and checks what
// an OTLP/HTTP receiver really got: the run, action, attempt and lookup
// spans with their attributes and parent/child links, all in the run's
// trace (oteltrace.TraceID), and that the tool's HTTP server received a
// traceparent naming the attempt span (or the lookup span) it was called
// under.
func TestSpansReachAnOTLPReceiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rcv := newReceiver(t)
	svc := newService(t)
	tr, err := oteltrace.New(ctx, oteltrace.Config{EndpointURL: rcv.srv.URL + "/v1/traces", Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := httptool.Parse([]byte(svc.toolsFile()), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		t.Fatal(err)
	}
	led, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := executor.New(executor.Config{Ledger: led, Tools: reg, Tracer: tr.Tracer(), Logger: slog.New(slog.DiscardHandler),
		Retry: executor.RetryPolicy{Base: time.Millisecond, Max: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Goal: "traced", Actions: []plan.Action{
		{ID: "p", Tool: "put", Args: json.RawMessage(`{"v":1}`)},
		{ID: "c", Tool: "crm", Args: json.RawMessage(`{"name":"acme"}`), DependsOn: []string{"p"}},
	}}
	// Planning (as the service does it): a docket.plan root span in the
	// run's trace; a model call made under it (the planner's span) is its
	// child.
	pctx, endPlan := tr.Tracer().Start(ctx, executor.Work{Kind: executor.WorkPlan, AttemptInfo: executor.AttemptInfo{RunID: "traced-run"}})
	_, model := tr.Provider().Tracer("planner").Start(pctx, "chat gpt-test")
	model.End()
	endPlan(executor.Done{})
	doc, err := eng.Run(ctx, "traced-run", p, &executor.RunOptions{Policy: executor.PolicyAll})
	if err != nil || doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("run: %v %s", err, doc.Run.Status)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}

	traceID := oteltrace.TraceID("traced-run")
	if len(traceID) != 32 || traceID == strings.Repeat("0", 32) {
		t.Fatalf("trace id %q", traceID)
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		ss := rcv.named(name)
		if len(ss) != 1 {
			t.Fatalf("%d %s spans, want 1", len(ss), name)
		}
		return ss[0]
	}
	run := one("docket.run")
	if hex.EncodeToString(run.TraceId) != traceID || len(run.ParentSpanId) != 0 {
		t.Errorf("run span: trace %x parent %x; want trace %s, no parent", run.TraceId, run.ParentSpanId, traceID)
	}
	if attr(run, "docket.run.id") != "traced-run" || attr(run, "docket.run.status") != "completed" {
		t.Errorf("run span attributes: %v", run.Attributes)
	}
	planSpan, chat := one("docket.plan"), one("chat gpt-test")
	if len(planSpan.ParentSpanId) != 0 || !bytes.Equal(chat.ParentSpanId, planSpan.SpanId) {
		t.Errorf("plan span parent %x, model call parent %x (want none, the plan span)", planSpan.ParentSpanId, chat.ParentSpanId)
	}
	actions := map[string]*tracepb.Span{}
	for _, s := range rcv.named("docket.action") {
		actions[attr(s, "docket.action.id")] = s
		if !bytes.Equal(s.ParentSpanId, run.SpanId) {
			t.Errorf("action %s: parent %x, want the run span %x", attr(s, "docket.action.id"), s.ParentSpanId, run.SpanId)
		}
		if attr(s, "docket.action.status") != "succeeded" {
			t.Errorf("action %s: status %q", attr(s, "docket.action.id"), attr(s, "docket.action.status"))
		}
	}
	if len(actions) != 2 || attr(actions["c"], "docket.effect_class") != "lookup" || attr(actions["p"], "docket.tool") != "put" {
		t.Fatalf("action spans: %v", actions)
	}
	// Attempts: p once (ok); c twice (unknown, then the lookup found it and
	// no second write was made).
	attempts := rcv.named("docket.attempt")
	var crmUnknown *tracepb.Span
	for _, s := range attempts {
		id := attr(s, "docket.action.id")
		if !bytes.Equal(s.ParentSpanId, actions[id].SpanId) {
			t.Errorf("attempt of %s: parent %x, want its action span", id, s.ParentSpanId)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || !strings.HasPrefix(attr(s, "docket.key"), "dk1_") {
			t.Errorf("attempt of %s: kind %v key %q", id, s.Kind, attr(s, "docket.key"))
		}
		if id == "c" {
			crmUnknown = s
		}
	}
	if len(attempts) != 2 || crmUnknown == nil {
		t.Fatalf("%d attempt spans, want 2 (p ok, c unknown)", len(attempts))
	}
	if attr(crmUnknown, "docket.outcome") != "unknown" || attr(crmUnknown, "docket.failure_class") != "unknown" ||
		attr(crmUnknown, "docket.attempt") != "1" || crmUnknown.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("c's attempt: outcome %q failure %q attempt %q status %v", attr(crmUnknown, "docket.outcome"),
			attr(crmUnknown, "docket.failure_class"), attr(crmUnknown, "docket.attempt"), crmUnknown.Status)
	}
	lookup := one("docket.lookup")
	if attr(lookup, "docket.lookup.found") != "true" || attr(lookup, "docket.attempt") != "2" || !bytes.Equal(lookup.ParentSpanId, actions["c"].SpanId) {
		t.Errorf("lookup span: found %q attempt %q parent %x", attr(lookup, "docket.lookup.found"), attr(lookup, "docket.attempt"), lookup.ParentSpanId)
	}
	for _, s := range rcv.named("") {
		t.Errorf("a span without a name: %v", s)
	}
	rcv.mu.Lock()
	for _, s := range rcv.spans {
		if hex.EncodeToString(s.TraceId) != traceID {
			t.Errorf("span %s in trace %x, not the run's %s", s.Name, s.TraceId, traceID)
		}
	}
	svcName := ""
	for _, kv := range rcv.res {
		if kv.Key == "service.name" {
			svcName = kv.Value.GetStringValue()
		}
	}
	rcv.mu.Unlock()
	if svcName != "docket" {
		t.Errorf("service.name %q", svcName)
	}

	// Every request is a client span (HTTP semantic conventions), a child
	// of the attempt's (or the lookup's) span; the tool's server got that
	// HTTP span as parent.
	u, _ := url.Parse(svc.srv.URL)
	httpSpans := map[string]*tracepb.Span{} // parent span id → its HTTP span
	for _, method := range []string{"PUT", "POST", "GET"} {
		for _, s := range rcv.named(method) {
			if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || attr(s, "http.request.method") != method ||
				attr(s, "server.address") != u.Hostname() || attr(s, "server.port") != u.Port() ||
				!strings.HasPrefix(attr(s, "url.full"), svc.srv.URL+"/") {
				t.Errorf("HTTP span %s: kind %v attributes %v", s.Name, s.Kind, s.Attributes)
			}
			httpSpans[string(s.ParentSpanId)] = s
		}
	}
	if s := httpSpans[string(crmUnknown.SpanId)]; s == nil || attr(s, "http.response.status_code") != "500" ||
		attr(s, "error.type") != "500" || s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the HTTP span of c's first attempt: %v", s)
	}
	if s := httpSpans[string(lookup.SpanId)]; s == nil || attr(s, "http.response.status_code") != "200" ||
		attr(s, "error.type") != "" || attr(s, "url.full") != svc.srv.URL+"/crm/find?key=REDACTED" {
		t.Errorf("the HTTP span of c's lookup: %v", s)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	want := func(path string, spans ...*tracepb.Span) {
		t.Helper()
		got := svc.parents[path]
		if len(got) != len(spans) {
			t.Fatalf("%s got %d requests (%q), want %d", path, len(got), got, len(spans))
		}
		for i, s := range spans {
			h := httpSpans[string(s.SpanId)]
			if h == nil {
				t.Fatalf("%s request %d: no HTTP span under %s %x", path, i+1, s.Name, s.SpanId)
			}
			if w := fmt.Sprintf("00-%x-%x-01", h.TraceId, h.SpanId); got[i] != w {
				t.Errorf("%s request %d: traceparent %q, want %q", path, i+1, got[i], w)
			}
		}
	}
	var put *tracepb.Span
	for _, s := range attempts {
		if attr(s, "docket.action.id") == "p" {
			put = s
		}
	}
	want("/put", put)
	want("/crm", crmUnknown)
	want("/crm/find", lookup)
}

// TestFromEnvOffWithoutEndpoint: with no OTLP endpoint in the environment
// there is no Tracing at all (no exporter, no goroutine); unsupported
// exporters and protocols are refused, not ignored.
func TestFromEnvOffWithoutEndpoint(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		name string
		env  func(string) string
		on   bool
		bad  string
	}{
		{"unset", env(), false, ""},
		{"service name only", env("OTEL_SERVICE_NAME", "x"), false, ""},
		{"disabled", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_SDK_DISABLED", "true"), false, ""},
		{"exporter none", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER", "none"), false, ""},
		{"endpoint", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"), true, ""},
		{"traces endpoint", env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces"), true, ""},
		{"grpc", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), false, "http/protobuf"},
		{"console", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER", "console"), false, "otlp"},
		{"zipkin", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER", "zipkin"), false, "otlp"},
	} {
		tr, err := oteltrace.FromEnv(context.Background(), c.env)
		switch {
		case c.bad != "":
			if err == nil || !strings.Contains(err.Error(), c.bad) || !errors.Is(err, oteltrace.ErrUnsupported) || tr != nil {
				t.Errorf("%s: err %v, want ErrUnsupported naming %s", c.name, err, c.bad)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case (tr != nil) != c.on:
			t.Errorf("%s: tracing on = %v, want %v", c.name, tr != nil, c.on)
		}
		if tr != nil {
			tr.Close(context.Background())
		}
	}
}

// TestPropagatorsFromEnv: OTEL_PROPAGATORS chooses what the trace context
// travels in: tracecontext and baggage by default, only what is named, or
// nothing for none; a name docket does not know is skipped with a warning.
func TestPropagatorsFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value  string
		fields []string
		warn   bool
	}{
		{"", []string{"traceparent", "tracestate", "baggage"}, false},
		{"tracecontext", []string{"traceparent", "tracestate"}, false},
		{"baggage", []string{"baggage"}, false},
		{" tracecontext , baggage ", []string{"traceparent", "tracestate", "baggage"}, false},
		{"none", nil, false},
		{"b3,tracecontext", []string{"traceparent", "tracestate"}, true},
	} {
		tr, err := oteltrace.FromEnv(context.Background(), func(k string) string {
			switch k {
			case "OTEL_EXPORTER_OTLP_ENDPOINT":
				return "http://127.0.0.1:1"
			case "OTEL_PROPAGATORS":
				return c.value
			}
			return ""
		})
		if err != nil || tr == nil {
			t.Fatalf("%q: %v %v", c.value, tr, err)
		}
		got := tr.Propagator().Fields()
		slices.Sort(got)
		slices.Sort(c.fields)
		if !slices.Equal(got, c.fields) {
			t.Errorf("OTEL_PROPAGATORS=%q: fields %q, want %q", c.value, got, c.fields)
		}
		if w := tr.Warnings(); (len(w) > 0) != c.warn || (c.warn && !strings.Contains(w[0], "b3")) {
			t.Errorf("OTEL_PROPAGATORS=%q: warnings %q", c.value, w)
		}
		tr.Close(context.Background())
	}
}

// TestPropagatorNoneSendsNoTraceparent: with propagation turned off
// (OTEL_PROPAGATORS=none) the spans are still exported, but no request to a
// tool carries trace context.
func TestPropagatorNoneSendsNoTraceparent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rcv := newReceiver(t)
	svc := newService(t)
	tr, err := oteltrace.FromEnv(ctx, func(k string) string {
		switch k {
		case "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
			return rcv.srv.URL + "/v1/traces"
		case "OTEL_PROPAGATORS":
			return "none"
		}
		return ""
	})
	if err != nil || tr == nil {
		t.Fatalf("FromEnv: %v %v", tr, err)
	}
	f, err := httptool.Parse([]byte(svc.toolsFile()), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		t.Fatal(err)
	}
	led, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := executor.New(executor.Config{Ledger: led, Tools: reg, Tracer: tr.Tracer(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Goal: "quiet", Actions: []plan.Action{{ID: "p", Tool: "put", Args: json.RawMessage(`{"v":1}`)}}}
	if doc, err := eng.Run(ctx, "quiet-run", p, &executor.RunOptions{Policy: executor.PolicyAll}); err != nil || doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("run: %v %s", err, doc.Run.Status)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rcv.named("docket.attempt")) != 1 || len(rcv.named("PUT")) != 1 {
		t.Errorf("spans: %d attempts, %d PUT", len(rcv.named("docket.attempt")), len(rcv.named("PUT")))
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if got := svc.parents["/put"]; len(got) != 1 || got[0] != "" {
		t.Errorf("the tool received traceparent %q with propagation off", got)
	}
}
