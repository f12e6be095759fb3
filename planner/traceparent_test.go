package planner_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools/httpspan"
)

// TestModelCallCarriesTraceparent: every request to the model carries the
// W3C trace context of its "chat MODEL" span, so the model server's (or a
// gateway's) spans join the run's trace; with the propagator turned off
// (OTEL_PROPAGATORS=none) nothing is sent, and without tracing neither.
func TestModelCallCarriesTraceparent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		traced bool
		prop   propagation.TextMapPropagator
		want   bool
	}{
		{"default", true, nil, true},
		{"tracecontext", true, propagation.TraceContext{}, true},
		{"none", true, propagation.NewCompositeTextMapPropagator(), false},
		{"untraced", false, nil, false},
	} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		cfg := planner.Config{}
		if c.traced {
			cfg.TracerProvider = tp
		}
		p, b := setup(t, cfg, text("Nothing to do."))
		ctx := httpspan.WithPropagator(context.Background(), c.prop)
		ctx, root := tp.Tracer("test").Start(ctx, "docket.plan")
		if !c.traced {
			ctx = context.Background()
		}
		if _, err := p.Plan(ctx, planner.Request{Goal: "nothing"}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		root.End()
		b.model.mu.Lock()
		got := b.model.reqs[0].header.Get("traceparent")
		b.model.mu.Unlock()
		if !c.want {
			if got != "" {
				t.Errorf("%s: traceparent %q sent", c.name, got)
			}
			continue
		}
		var chat sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == "chat gpt-test" {
				chat = s
			}
		}
		if chat == nil {
			t.Fatalf("%s: no model call span", c.name)
		}
		if want := fmt.Sprintf("00-%s-%s-01", chat.SpanContext().TraceID(), chat.SpanContext().SpanID()); got != want {
			t.Errorf("%s: traceparent %q, want the model call span's %q", c.name, got, want)
		}
	}
}
