package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ledger"
)

// startTracing starts OpenTelemetry tracing for one command when the
// standard OTEL_* variables name an OTLP endpoint (oteltrace.FromEnv): the
// returned env's engines trace their runs (Env.Tune sets
// executor.Config.Tracer), its planners their model calls, and the Run JSON
// it prints carries trace_id. Without an endpoint nothing is started and env
// comes back unchanged; an exporter or protocol docket does not ship
// (OTEL_TRACES_EXPORTER=zipkin, OTEL_EXPORTER_OTLP_PROTOCOL=grpc) is a
// warning on stderr and the command runs untraced. stop flushes what is buffered (a few seconds at
// most) and is always safe to call.
func startTracing(ctx context.Context, env Env) (_ Env, stop func(), err error) {
	tr, err := oteltrace.FromEnv(ctx, env.Getenv)
	if errors.Is(err, oteltrace.ErrUnsupported) {
		// An exporter or protocol docket does not ship: the command runs,
		// untraced, and says so once.
		fmt.Fprintf(env.Stderr, "docket: warning: tracing off: %v\n", err)
		return env, func() {}, nil
	}
	if err != nil {
		return env, func() {}, usageError("tracing: %v", err)
	}
	if tr == nil {
		return env, func() {}, nil
	}
	for _, w := range tr.Warnings() {
		fmt.Fprintf(env.Stderr, "docket: warning: tracing: %s\n", w)
	}
	prev := env.Tune
	env.Tune = func(cfg *executor.Config) {
		if prev != nil {
			prev(cfg)
		}
		cfg.Tracer = tr.Tracer()
	}
	env.tracing = tr
	return env, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tr.Close(sctx)
	}, nil
}

// traced is doc with its trace id when the command traces.
func (env Env) traced(doc ledger.RunDoc) ledger.RunDoc {
	if env.tracing != nil && doc.Run.ID != "" {
		doc.TraceID = oteltrace.TraceID(doc.Run.ID)
	}
	return doc
}

// traceIDs is ui.Config.TraceID: the run's trace id when the command traces.
func (env Env) traceIDs() func(string) string {
	if env.tracing == nil {
		return nil
	}
	return oteltrace.TraceID
}

// planSpan starts the span of planning run runID with the model (a root in
// the run's trace; the planner's model calls are its children).
func (env Env) planSpan(ctx context.Context, runID string) (context.Context, func(error)) {
	if env.tracing == nil {
		return ctx, func(error) {}
	}
	ctx, end := env.tracing.Tracer().Start(ctx, executor.Work{Kind: executor.WorkPlan, AttemptInfo: executor.AttemptInfo{RunID: runID}})
	return ctx, func(err error) { end(executor.Done{Err: err}) }
}
