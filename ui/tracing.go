package ui

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/docketrun/docket/tools/httpspan"
)

// httpTracer is what an engine tracer offers an HTTP server in front of
// it (executor/oteltrace's does): the provider to make request spans with
// and the propagator to read the caller's trace context by.
type httpTracer interface {
	TracerProvider() trace.TracerProvider
	Propagator() propagation.TextMapPropagator
}

// traced wraps h with a server span per request (httpspan.Handler) when
// the engine traces with a tracer that offers one; else h as it is.
func (s *Server) traced(h http.Handler) http.Handler {
	ht, ok := s.cfg.Executor.Tracer.(httpTracer)
	if !ok {
		return h
	}
	return httpspan.Handler(h, ht.TracerProvider(), ht.Propagator())
}

// withCaller is drive, a drive's context, carrying the span of the request
// that started the drive (its server span, a child of the caller's span
// when the caller sent traceparent) and the caller's span: the drive's run
// span links to both.
func withCaller(drive, req context.Context) context.Context {
	drive = httpspan.WithCaller(drive, httpspan.Caller(req))
	if sc := trace.SpanContextFromContext(req); sc.IsValid() {
		drive = trace.ContextWithSpanContext(drive, sc)
	}
	return drive
}
