package oteltrace

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/tools/httpspan"
)

// Config builds a Tracing. Zero values take the documented defaults; the
// OTEL_* environment variables the OpenTelemetry SDK and exporter read
// (OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, ...) apply as well.
type Config struct {
	// EndpointURL is the OTLP/HTTP traces endpoint, e.g.
	// "http://127.0.0.1:4318/v1/traces". Empty: the exporter's own reading
	// of OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT.
	EndpointURL string
	// ServiceName is service.name unless OTEL_SERVICE_NAME says otherwise.
	// Default "docket".
	ServiceName string
	// Sync exports every span as it ends (tests); default: batched.
	Sync bool
	// Propagator carries the trace context across HTTP: injected into the
	// requests to tools and to the model, extracted from the API's
	// requests. Default: W3C tracecontext and baggage.
	Propagator propagation.TextMapPropagator
}

// Tracing holds a tracer provider that exports over OTLP/HTTP. Close it to
// flush what is buffered.
type Tracing struct {
	tp       *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	warnings []string
}

// ErrUnsupported is wrapped by FromEnv's error when the environment asks
// for an exporter or protocol docket does not ship (OTEL_TRACES_EXPORTER
// other than otlp, an OTLP protocol other than http/protobuf): the caller
// warns once and runs without traces.
var ErrUnsupported = errors.New("oteltrace: not supported")

// FromEnv builds a Tracing from the standard environment variables. The
// endpoint, the protocol, the propagators and the switches are read through
// getenv (the exporter's other settings, such as OTEL_EXPORTER_OTLP_HEADERS,
// from the process environment): nil (and no error) when neither
// OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
// when OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is "none".
// OTEL_TRACES_EXPORTER other than otlp, and an OTLP protocol other than
// http/protobuf, give nil and an error wrapping ErrUnsupported that says so.
// OTEL_PROPAGATORS (tracecontext, baggage, none; default
// "tracecontext,baggage") sets Propagator; other names are skipped with a
// warning (Warnings).
func FromEnv(ctx context.Context, getenv func(string) string) (*Tracing, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s: docket exports traces with otlp (or none)", ErrUnsupported, exp)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return nil, nil
	}
	if endpoint == "" {
		endpoint = strings.TrimRight(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%s: docket exports traces over http/protobuf (port 4318 on a collector)", ErrUnsupported, proto)
	}
	prop, warnings := propagatorsFromEnv(getenv("OTEL_PROPAGATORS"))
	t, err := New(ctx, Config{EndpointURL: endpoint, Propagator: prop})
	if err != nil {
		return nil, err
	}
	t.warnings = warnings
	return t, nil
}

// propagatorsFromEnv reads OTEL_PROPAGATORS: a comma-separated list of
// tracecontext, baggage and none (which alone turns propagation off).
// Empty: tracecontext and baggage.
func propagatorsFromEnv(v string) (propagation.TextMapPropagator, []string) {
	if strings.TrimSpace(v) == "" {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), nil
	}
	var ps []propagation.TextMapPropagator
	var warnings []string
	seen := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		switch name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
			return propagation.NewCompositeTextMapPropagator(), nil
		default:
			warnings = append(warnings, fmt.Sprintf("OTEL_PROPAGATORS: %q is not supported (tracecontext, baggage, none): skipped", name))
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), warnings
}

// New builds a Tracing exporting to cfg's endpoint (or the environment's).
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	var opts []otlptracehttp.Option
	if cfg.EndpointURL != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(cfg.EndpointURL))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("oteltrace: OTLP exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "docket"
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("oteltrace: resource: %w", err)
	}
	var proc sdktrace.SpanProcessor
	if cfg.Sync {
		proc = sdktrace.NewSimpleSpanProcessor(exp)
	} else {
		proc = sdktrace.NewBatchSpanProcessor(exp)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(proc),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(newIDs()))
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return &Tracing{tp: tp, tracer: tp.Tracer("github.com/docketrun/docket"), prop: prop}, nil
}

// Close flushes buffered spans and stops the exporter.
func (t *Tracing) Close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Provider is the tracer provider, for the planner's model calls
// (planner.Config.TracerProvider).
func (t *Tracing) Provider() trace.TracerProvider { return t.tp }

// Propagator is the text map propagator OTEL_PROPAGATORS chose (Config.Propagator).
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.prop }

// Warnings are what FromEnv skipped in the environment, for the caller to
// print once.
func (t *Tracing) Warnings() []string { return t.warnings }

// Tracer is the engine's tracer (executor.Config.Tracer).
func (t *Tracing) Tracer() executor.Tracer { return engineTracer{t.tracer, t.tp, t.prop} }

// TraceID is the trace id (32 lowercase hex digits) of every span of run
// runID: the first 16 bytes of SHA-256("docket.trace\x00" + runID).
func TraceID(runID string) string { return runTraceID(runID).String() }

func runTraceID(runID string) trace.TraceID {
	sum := sha256.Sum256([]byte("docket.trace\x00" + runID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	if !id.IsValid() { // all zero: not a valid W3C trace id
		id[15] = 1
	}
	return id
}

// runKey marks a context whose root span belongs to a run's trace.
type runKey struct{}

// ids makes span ids at random and the trace ids of root spans from the run
// id their context names (runKey), at random otherwise.
type ids struct {
	mu  sync.Mutex
	rnd *mrand.Rand
}

func newIDs() *ids {
	var seed [16]byte
	rand.Read(seed[:])
	return &ids{rnd: mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))}
}

func (g *ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if runID, ok := ctx.Value(runKey{}).(string); ok {
		return runTraceID(runID), g.NewSpanID(ctx, trace.TraceID{})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], g.rnd.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], g.rnd.Uint64())
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.LittleEndian.PutUint64(sid[:], g.rnd.Uint64())
	}
	return tid, sid
}

func (g *ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.LittleEndian.PutUint64(sid[:], g.rnd.Uint64())
	}
	return sid
}

// engineTracer implements executor.Tracer.
type engineTracer struct {
	tr   trace.Tracer
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// TracerProvider is the provider of the engine's spans: an HTTP server in
// front of the engine (ui) makes its request spans with it.
func (t engineTracer) TracerProvider() trace.TracerProvider { return t.tp }

// Propagator is the propagator the HTTP requests made under the engine's
// spans inject (and an HTTP server in front of it extracts).
func (t engineTracer) Propagator() propagation.TextMapPropagator { return t.prop }

var _ executor.Tracer = engineTracer{}

// Attribute keys of docket's spans.
const (
	attrRunID        = "docket.run.id"
	attrRunStatus    = "docket.run.status"
	attrActionID     = "docket.action.id"
	attrActionStatus = "docket.action.status"
	attrTool         = "docket.tool"
	attrClass        = "docket.effect_class"
	attrKey          = "docket.key"
	attrAttempt      = "docket.attempt"
	attrOutcome      = "docket.outcome"
	attrFailure      = "docket.failure_class"
	attrAdopted      = "docket.adopted"
	attrFound        = "docket.lookup.found"
)

func (t engineTracer) Start(ctx context.Context, w executor.Work) (context.Context, func(executor.Done)) {
	ctx = httpspan.WithPropagator(ctx, t.prop)
	run := attribute.String(attrRunID, w.RunID)
	switch w.Kind {
	case executor.WorkRun, executor.WorkPlan:
		// A root span in the run's trace (one trace for all of a run's
		// drives); a span the caller's context carried (the API request's
		// server span, say) is linked, not the parent.
		var links []trace.Link
		sc := trace.SpanContextFromContext(ctx)
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
		// The caller of the API request that started this drive (the
		// traceparent it sent), when it is not that span already.
		if caller := httpspan.Caller(ctx); caller.IsValid() && !caller.Equal(sc) {
			links = append(links, trace.Link{SpanContext: caller})
		}
		name := "docket.run"
		if w.Kind == executor.WorkPlan {
			name = "docket.plan"
		}
		ctx, span := t.tr.Start(context.WithValue(ctx, runKey{}, w.RunID), name,
			trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(run))
		return ctx, func(d executor.Done) {
			if d.RunStatus != "" {
				span.SetAttributes(attribute.String(attrRunStatus, string(d.RunStatus)))
			}
			endWith(span, d.Err)
		}
	case executor.WorkAction:
		ctx, span := t.tr.Start(ctx, "docket.action", trace.WithAttributes(run,
			attribute.String(attrActionID, w.ActionID), attribute.String(attrTool, w.Tool),
			attribute.String(attrClass, string(w.Class))))
		return ctx, func(d executor.Done) {
			span.SetAttributes(attribute.String(attrActionStatus, string(d.Status)), attribute.Bool(attrAdopted, d.Adopted))
			if w.Key != "" {
				span.SetAttributes(attribute.String(attrKey, w.Key))
			}
			endWith(span, d.Err)
		}
	case executor.WorkAttempt, executor.WorkLookup:
		name := "docket.attempt"
		if w.Kind == executor.WorkLookup {
			name = "docket.lookup"
		}
		ctx, span := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(run,
			attribute.String(attrActionID, w.ActionID), attribute.String(attrTool, w.Tool),
			attribute.String(attrClass, string(w.Class)), attribute.String(attrKey, w.Key),
			attribute.Int(attrAttempt, w.Attempt)))
		return ctx, func(d executor.Done) {
			if w.Kind == executor.WorkLookup {
				span.SetAttributes(attribute.Bool(attrFound, d.Found))
				endWith(span, d.Err)
				return
			}
			outcome := "ok"
			if !d.Result.OK {
				outcome = d.Result.Failure.String()
				span.SetAttributes(attribute.String(attrFailure, outcome))
			}
			span.SetAttributes(attribute.String(attrOutcome, outcome))
			endWith(span, d.Err)
		}
	}
	return ctx, func(executor.Done) {}
}

// endWith ends span, marking it failed with err's message when err is set.
func endWith(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
