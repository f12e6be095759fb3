// Package httpspan makes the HTTP spans of docket's traces, named and
// attributed as the OpenTelemetry semantic conventions for HTTP say: a
// client span around every request to a tool or to the model (Start,
// Transport), and a server span around every request to the API (Handler),
// joining the caller's trace context.
//
// The text map propagator (W3C tracecontext, baggage, or none, as
// OTEL_PROPAGATORS chose) travels in the context (WithPropagator); without
// one, W3C tracecontext. No package state: the tracer provider is the one of
// the span the request's context carries (client) or the one given
// (server). When tracing is off the context carries no recording span and
// nothing is made or sent.
//
// Imports: the OpenTelemetry API only.
package httpspan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys (semantic conventions for HTTP, stable).
const (
	AttrMethod         = "http.request.method"
	AttrMethodOriginal = "http.request.method_original"
	AttrStatusCode     = "http.response.status_code"
	AttrRoute          = "http.route"
	AttrURLFull        = "url.full"
	AttrURLPath        = "url.path"
	AttrURLScheme      = "url.scheme"
	AttrServerAddress  = "server.address"
	AttrServerPort     = "server.port"
	AttrErrorType      = "error.type"
)

const scope = "github.com/docketrun/docket/tools/httpspan"

type propKey struct{}

// WithPropagator returns ctx carrying p, the propagator requests made under
// ctx inject.
func WithPropagator(ctx context.Context, p propagation.TextMapPropagator) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, propKey{}, p)
}

// Propagator is the propagator ctx carries: W3C tracecontext when none.
func Propagator(ctx context.Context) propagation.TextMapPropagator {
	if p, ok := ctx.Value(propKey{}).(propagation.TextMapPropagator); ok {
		return p
	}
	return propagation.TraceContext{}
}

// Start begins the client span of req, a child of the span req's context
// carries, and returns req with that span in its context and the trace
// context headers set (by the context's propagator). redact, when set,
// scrubs url.full's path and query further (a tool's secrets in the path). Call end with the
// response or the error. Without a recording span in req's context nothing
// is started; the headers are still set from the context.
func Start(req *http.Request, redact func(string) string) (_ *http.Request, end func(*http.Response, error)) {
	ctx := req.Context()
	prop := Propagator(ctx)
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() || !parent.IsRecording() {
		prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
		return req, func(*http.Response, error) {}
	}
	full := FullURL(req.URL)
	if redact != nil {
		// The scheme and host stay (server.address names the host anyway).
		origin := req.URL.Scheme + "://" + req.URL.Host
		if rest, ok := strings.CutPrefix(full, origin); ok {
			full = origin + redact(rest)
		} else {
			full = redact(full)
		}
	}
	host, port := hostPort(req.URL)
	attrs := append(methodAttrs(req.Method),
		attribute.String(AttrURLFull, full),
		attribute.String(AttrServerAddress, host))
	if port > 0 {
		attrs = append(attrs, attribute.Int(AttrServerPort, port))
	}
	ctx, span := parent.TracerProvider().Tracer(scope).Start(ctx, spanMethod(req.Method),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	req = req.WithContext(ctx)
	prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return req, func(resp *http.Response, err error) {
		switch {
		case err != nil:
			span.SetAttributes(attribute.String(AttrErrorType, errorType(err)))
			msg := err.Error()
			if redact != nil {
				msg = redact(msg)
			}
			span.SetStatus(codes.Error, msg)
		case resp != nil:
			span.SetAttributes(attribute.Int(AttrStatusCode, resp.StatusCode))
			if resp.StatusCode >= 400 {
				span.SetAttributes(attribute.String(AttrErrorType, strconv.Itoa(resp.StatusCode)))
				span.SetStatus(codes.Error, "")
			}
		}
		span.End()
	}
}

// Transport is an http.RoundTripper that makes every request's client span
// (Start) around Base (default http.DefaultTransport).
type Transport struct {
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	// A RoundTripper must not modify the request: headers go on a clone.
	req = req.Clone(req.Context())
	req, end := Start(req, nil)
	resp, err := base.RoundTrip(req)
	end(resp, err)
	return resp, err
}

// FullURL is u as url.full may record it: no userinfo, no fragment, and
// every query value replaced by REDACTED (keys kept: an API key or a
// signature is often a query value).
func FullURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.Fragment, c.RawFragment = "", ""
	if c.RawQuery != "" {
		q := c.Query()
		for k, vs := range q {
			for i := range vs {
				vs[i] = "REDACTED"
			}
			q[k] = vs
		}
		c.RawQuery = q.Encode()
	}
	return c.String()
}

func hostPort(u *url.URL) (string, int) {
	host := u.Hostname()
	if p := u.Port(); p != "" {
		n, _ := strconv.Atoi(p)
		return host, n
	}
	switch u.Scheme {
	case "http":
		return host, 80
	case "https":
		return host, 443
	}
	return host, 0
}

// methodAttrs: http.request.method is one of the known methods, else
// "_OTHER" with the original beside it.
func methodAttrs(m string) []attribute.KeyValue {
	if known(m) {
		return []attribute.KeyValue{attribute.String(AttrMethod, m)}
	}
	return []attribute.KeyValue{attribute.String(AttrMethod, "_OTHER"), attribute.String(AttrMethodOriginal, m)}
}

func spanMethod(m string) string {
	if known(m) {
		return m
	}
	return "HTTP"
}

func known(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// errorType is a low-cardinality name of a failed request's error.
func errorType(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return "net." + op.Op // dial, read, write
	}
	return fmt.Sprintf("%T", err)
}

// Inject is an http.RoundTripper that only sets the trace context headers
// of the span in each request's context (by the context's propagator)
// around Base (default http.DefaultTransport): for a client whose calls
// already have spans of their own (the planner's "chat MODEL").
type Inject struct {
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Inject) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if trace.SpanContextFromContext(req.Context()).IsValid() {
		req = req.Clone(req.Context()) // a RoundTripper must not modify the request
		Propagator(req.Context()).Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	return base.RoundTrip(req)
}
