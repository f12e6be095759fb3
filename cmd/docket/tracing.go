package main

import (
	"context"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ledger"
)

// startTracing starts OpenTelemetry tracing when the standard OTEL_*
// variables name an OTLP endpoint (oteltrace.FromEnv): the returned env's
// engines trace their runs (Env.Tune sets executor.Config.Tracer). Without an
// endpoint nothing is started and env comes back unchanged. stop flushes
// what is buffered (a few seconds at most) and is always safe to call.
func startTracing(ctx context.Context, env Env) (_ Env, tr *oteltrace.Tracing, stop func(), err error) {
	tr, err = oteltrace.FromEnv(ctx, env.Getenv)
	if err != nil {
		return env, nil, func() {}, usageError("tracing: %v", err)
	}
	if tr == nil {
		return env, nil, func() {}, nil
	}
	prev := env.Tune
	env.Tune = func(cfg *executor.Config) {
		if prev != nil {
			prev(cfg)
		}
		cfg.Tracer = tr.Tracer()
	}
	return env, tr, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tr.Close(sctx)
	}, nil
}

// traced is doc with its trace id when tracing is on.
func traced(tr *oteltrace.Tracing, doc ledger.RunDoc) ledger.RunDoc {
	if tr != nil && doc.Run.ID != "" {
		doc.TraceID = oteltrace.TraceID(doc.Run.ID)
	}
	return doc
}

// traceIDs is ui.Config.TraceID: the run's trace id when tracing is on.
func traceIDs(tr *oteltrace.Tracing) func(string) string {
	if tr == nil {
		return nil
	}
	return oteltrace.TraceID
}
