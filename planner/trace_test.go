package planner_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/docketrun/docket/planner"
)

// TestModelCallSpans: every model call is a client span "chat MODEL" with
// the GenAI semantic conventions' attributes, a child of the planning
// context's span; a refused call is marked as an error with its status.
func TestModelCallSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, _ := setup(t, planner.Config{TracerProvider: tp},
		toolCalls("", call{"call_s1", "crm_search", `{"query":"Ada","limit":null}`}),
		text("Nothing to do."),
	)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "docket.plan")
	if _, err := p.Plan(ctx, planner.Request{Goal: "look Ada up"}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "chat gpt-test" {
			calls = append(calls, s)
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d model call spans, want 2", len(calls))
	}
	for i, s := range calls {
		a := attrs(s.Attributes())
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind().String() != "client" {
			t.Errorf("call %d: parent %v kind %v", i+1, s.Parent().SpanID(), s.SpanKind())
		}
		wantFinish := []string{"tool_calls"}
		if i == 1 {
			wantFinish = []string{"stop"}
		}
		if a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.request.model"].AsString() != "gpt-test" ||
			a["gen_ai.response.model"].AsString() != "gpt-test-2026-01-01" || a["gen_ai.usage.input_tokens"].AsInt64() != 100 ||
			a["gen_ai.usage.output_tokens"].AsInt64() == 0 || !slices.Equal(a["gen_ai.response.finish_reasons"].AsStringSlice(), wantFinish) {
			t.Errorf("call %d attributes: %v", i+1, s.Attributes())
		}
	}

	// A refused call: an error span with the HTTP status as error.type.
	rec2 := tracetest.NewSpanRecorder()
	p2, _ := setup(t, planner.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2))},
		apiError(401, "bad key", "invalid_request_error", nil))
	if _, err := p2.Plan(context.Background(), planner.Request{Goal: "x"}); err == nil {
		t.Fatal("a 401 planned")
	}
	ended := rec2.Ended()
	if len(ended) != 1 || ended[0].Status().Code != codes.Error || attrs(ended[0].Attributes())["error.type"].AsString() != "401" {
		t.Fatalf("refused call spans: %d", len(ended))
	}
}

func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}
