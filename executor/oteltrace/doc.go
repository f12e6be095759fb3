// Package oteltrace traces docket's work with OpenTelemetry
// (go.opentelemetry.io/otel and its SDK), exported over OTLP/HTTP
// (otlptracehttp) to whatever the standard OTEL_* environment variables
// name. When none names an endpoint, FromEnv returns nil: nothing is
// exported, no exporter or goroutine is started, and the engine runs with
// no tracer at all.
//
// Spans (every one carries docket.run.id):
//
//   - docket.run: one drive of a run (root; attributes: docket.run.status).
//   - docket.plan: planning a run with the model (root, in the run's trace);
//     the planner's model calls ("chat MODEL", GenAI semantic conventions)
//     are its children.
//   - docket.action: one action in a drive (docket.action.id, docket.tool,
//     docket.effect_class, docket.action.status, docket.adopted).
//   - docket.attempt: one tool call (docket.key, docket.attempt,
//     docket.outcome: ok or the failure class; docket.failure_class), a
//     client span whose context the tool propagates (traceparent header,
//     MCP _meta).
//   - docket.lookup: one lookup before a write (docket.lookup.found).
//   - METHOD (GET, POST, ...): each HTTP request of a tool call or lookup, a
//     client span under docket.attempt or docket.lookup with the HTTP
//     semantic conventions' attributes (http.request.method, url.full with
//     every query value and the tool's secrets redacted and no userinfo,
//     server.address, server.port, http.response.status_code, error.type
//     on a failure or a status of 400 or more); the tool's server receives
//     this span in traceparent (package httpspan).
//   - METHOD ROUTE (POST /v1/runs, ...): each request to the API (ui), a
//     server span with http.request.method, http.route (the route
//     pattern), url.path, url.scheme and http.response.status_code, the
//     child of the caller's span when the request carried traceparent. A
//     run started by such a request links its docket.run (and docket.plan)
//     span to the request's span and to the caller's.
//
// The model call ("chat MODEL") sends its span in traceparent too. What
// travels is set by OTEL_PROPAGATORS: tracecontext and baggage by default,
// none for nothing; other names are skipped with a warning.
//
// Every span of a run is in one trace whose id is derived from the run id
// (TraceID): drives in other processes, after a restart or on other nodes,
// add to the same trace, and the Run JSON's trace_id names it without
// anything stored.
//
// An exporter other than otlp (OTEL_TRACES_EXPORTER=zipkin, console, ...)
// or an OTLP protocol other than http/protobuf (grpc) is not shipped:
// FromEnv says so with an error wrapping ErrUnsupported, and the command
// warns once and runs without traces.
//
// Imports: executor, ledger, httpspan and OpenTelemetry; nothing imports it
// but cmd (which wires it) and tests.
package oteltrace
