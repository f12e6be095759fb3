package httptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// TestClientSpanKeepsNoSecret: the client span of a tool's request records
// url.full without the environment values the tool's URL holds (in the path
// or as a query value) and without the query's values, and the service
// receives that span as traceparent.
func TestClientSpanKeepsNoSecret(t *testing.T) {
	t.Parallel()
	const secret = "hook-s3cret-7f3a"
	got := make(chan string, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		fmt.Fprint(w, `{"ok": true}`)
	}))
	defer api.Close()
	file := `{"version": 1, "tools": [{
	  "name": "hook", "effect": "idempotent", "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
	  "request": {"method": "PUT", "url": "{{env \"HOOK_URL\"}}/hooks/{{env \"HOOK_TOKEN\"}}/fire?token={{env \"HOOK_TOKEN\"}}&who={{.who}}"}}]}`
	env := map[string]string{"HOOK_URL": api.URL, "HOOK_TOKEN": secret}
	f, err := httptool.Parse([]byte(file), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, attempt := tp.Tracer("test").Start(context.Background(), "docket.attempt")
	if _, err := f.Tools[0].Call(ctx, tools.Call{Key: "dk1_k", Args: json.RawMessage(`{"who": "ada"}`)}); err != nil {
		t.Fatal(err)
	}
	attempt.End()
	header := <-got
	var span sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "PUT" {
			span = s
		}
	}
	if span == nil || span.Parent().SpanID() != attempt.SpanContext().SpanID() {
		t.Fatalf("no PUT span under the attempt: %v", rec.Ended())
	}
	var full string
	for _, kv := range span.Attributes() {
		if strings.Contains(kv.Value.String(), secret) {
			t.Errorf("%s holds the secret: %s", kv.Key, kv.Value.String())
		}
		if kv.Key == "url.full" {
			full = kv.Value.String()
		}
	}
	if want := api.URL + "/hooks/[redacted]/fire?token=REDACTED&who=REDACTED"; full != want {
		t.Errorf("url.full %q, want %q", full, want)
	}
	if want := fmt.Sprintf("00-%s-%s-01", span.SpanContext().TraceID(), span.SpanContext().SpanID()); header != want {
		t.Errorf("traceparent %q, want %q", header, want)
	}
}
