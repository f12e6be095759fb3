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
//
// Every span of a run is in one trace whose id is derived from the run id
// (TraceID): drives in other processes, after a restart or on other nodes,
// add to the same trace, and the Run JSON's trace_id names it without
// anything stored.
//
// Imports: executor, ledger and OpenTelemetry; nothing imports it but
// cmd (which wires it) and tests.
package oteltrace
