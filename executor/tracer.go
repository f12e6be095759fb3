package executor

import (
	"context"

	"github.com/docketrun/docket/ledger"
)

// Tracer wraps the engine's work in spans (executor/oteltrace implements
// it with OpenTelemetry; the engine itself imports no tracing library). The
// context Start returns is the one the work runs in: a tool call's context
// carries its attempt's span, so tools that propagate trace context
// (tools/httptool's traceparent header, tools/mcptool's _meta) make the
// called service's work a child of the attempt. Start must return quickly
// and be safe for concurrent use; end is called exactly once.
type Tracer interface {
	Start(ctx context.Context, w Work) (context.Context, func(Done))
}

// WorkKind names what a span covers.
type WorkKind string

const (
	// WorkRun is one drive of a run: from loading its rows until nothing
	// more can progress (completed, paused, waiting, failed). A run that
	// waits for a person and is driven again later has one such span per
	// drive, all in the run's trace.
	WorkRun WorkKind = "run"
	// WorkPlan is planning a run with the model (the service's goal and
	// chat runs): its model calls are children. The engine does not plan;
	// the caller that does (ui) starts it.
	WorkPlan WorkKind = "plan"
	// WorkAction is one action within a drive: its claims, attempts,
	// lookups and waits until its outcome is recorded (or the drive stops).
	WorkAction WorkKind = "action"
	// WorkAttempt is one call of the action's tool (attempt n of its key).
	WorkAttempt WorkKind = "attempt"
	// WorkLookup is one lookup before a write (for attempt n).
	WorkLookup WorkKind = "lookup"
)

// Work is what a span is about. For WorkRun only RunID is set; for an
// action Attempt may be 0 (not yet claimed).
type Work struct {
	Kind WorkKind
	AttemptInfo
}

// Done is how the work ended.
type Done struct {
	// Err: the work stopped with an error (a run drive's error; a tool
	// call's or a lookup's error, its message as the tool gave it).
	Err error
	// RunStatus: the run's status when its drive ended.
	RunStatus ledger.RunStatus
	// Status: the action's status when its span ended ("" when the drive
	// stopped before anything was recorded for it).
	Status ledger.Status
	// Adopted: the action's key had already succeeded; its output was
	// taken and the tool not called.
	Adopted bool
	// Result: how an attempt's call ended.
	Result AttemptResult
	// Found: whether a lookup found the effect.
	Found bool
}

type nopTracer struct{}

func (nopTracer) Start(ctx context.Context, _ Work) (context.Context, func(Done)) {
	return ctx, func(Done) {}
}
