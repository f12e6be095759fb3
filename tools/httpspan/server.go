package httpspan

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Handler wraps h with a server span per request, named "METHOD ROUTE"
// (http.route: the path of the ServeMux pattern that took the request,
// read once h has run). A request carrying trace context (prop extracts
// it: traceparent for tracecontext) makes the span a child of the caller's
// span. Attributes: http.request.method, url.path, url.scheme,
// http.route, http.response.status_code, and error.type for a 5xx.
// Handlers see the span in the request's context.
func Handler(h http.Handler, tp trace.TracerProvider, prop propagation.TextMapPropagator) http.Handler {
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	tr := tp.Tracer(scope)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx = WithCaller(ctx, trace.SpanContextFromContext(ctx))
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		attrs := append(methodAttrs(r.Method),
			attribute.String(AttrURLPath, r.URL.Path),
			attribute.String(AttrURLScheme, scheme))
		ctx, span := tr.Start(WithPropagator(ctx, prop), spanMethod(r.Method),
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		sw := &StatusWriter{ResponseWriter: w}
		r = r.WithContext(ctx)
		h.ServeHTTP(sw, r)
		if _, route, ok := strings.Cut(r.Pattern, " "); ok || r.Pattern != "" {
			if !ok {
				route = r.Pattern
			}
			if i := strings.IndexByte(route, '/'); i > 0 { // a host in the pattern
				route = route[i:]
			}
			span.SetAttributes(attribute.String(AttrRoute, route))
			span.SetName(spanMethod(r.Method) + " " + route)
		}
		code := sw.code
		if code == 0 && !sw.hijacked {
			code = http.StatusOK
		}
		if code > 0 {
			span.SetAttributes(attribute.Int(AttrStatusCode, code))
		}
		if code >= 500 {
			span.SetAttributes(attribute.String(AttrErrorType, http.StatusText(code)))
			span.SetStatus(codes.Error, "")
		}
	})
}

type callerKey struct{}

// WithCaller returns ctx remembering sc, the span of the caller of an API
// request (the traceparent it sent), for work that outlives the request
// (a run's drives) to link to.
func WithCaller(ctx context.Context, sc trace.SpanContext) context.Context {
	if !sc.IsValid() {
		return ctx
	}
	return context.WithValue(ctx, callerKey{}, sc)
}

// Caller is the caller's span WithCaller remembered in ctx (invalid when
// none).
func Caller(ctx context.Context) trace.SpanContext {
	sc, _ := ctx.Value(callerKey{}).(trace.SpanContext)
	return sc
}

// StatusWriter wraps a handler's ResponseWriter and records the status
// code written (Code) and whether the connection was hijacked (Hijacked),
// passing Flush and Hijack through (event streams, WebSockets). The API's
// spans and its metrics both read it.
type StatusWriter struct {
	http.ResponseWriter
	code     int
	hijacked bool
}

// Code is the status written: 0 when nothing was, 101 for a hijacked
// connection (a WebSocket).
func (w *StatusWriter) Code() int { return w.code }

// Hijacked reports whether the handler took the connection over.
func (w *StatusWriter) Hijacked() bool { return w.hijacked }

func (w *StatusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *StatusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be hijacked")
	}
	c, rw, err := h.Hijack()
	if err == nil {
		w.hijacked = true
		if w.code == 0 {
			w.code = http.StatusSwitchingProtocols
		}
	}
	return c, rw, err
}

func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
