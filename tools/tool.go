package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/docketrun/docket/tools/policy"
)

// Class is a tool's effect class: how it stays safe when it may run again.
// See tools/README.md, "Effect classes".
type Class string

// The effect classes. Every tool declares exactly one.
const (
	ReadOnly   Class = "read_only"    // may run freely, also during planning
	Idempotent Class = "idempotent"   // repeating it changes nothing more
	Keyed      Class = "keyed"        // the provider deduplicates by our key
	Lookup     Class = "lookup"       // can be searched before a write
	AtMostOnce Class = "at_most_once" // never retried automatically
)

// Classes lists every valid class, safest first.
var Classes = []Class{ReadOnly, Idempotent, Keyed, Lookup, AtMostOnce}

// Valid reports whether c is one of the defined classes.
func (c Class) Valid() bool {
	for _, k := range Classes {
		if c == k {
			return true
		}
	}
	return false
}

// RetrySafe reports whether an attempt whose outcome is unknown may simply be
// made again (read_only, idempotent, keyed within key_ttl).
func (c Class) RetrySafe() bool { return c == ReadOnly || c == Idempotent || c == Keyed }

// Approval is the tools file's approval rule for a tool.
type Approval struct {
	// Always requires a person for every call of the tool ("approval": "always").
	Always bool `json:"always,omitempty"`
	// Above requires a person when a numeric argument exceeds the limit
	// ("approve_above": {"amount": 100}). Keys are top-level argument names.
	Above map[string]json.Number `json:"above,omitempty"`
}

// Compensation names the tool that undoes an action and how to build its
// arguments: a JSON object whose string values may be exactly "${input.PATH}"
// (the original action's resolved arguments) or "${output.PATH}" (its output),
// replaced by that value, type preserved.
type Compensation struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

// Retry bounds how often and for how long the executor retries a tool's
// attempts that may be retried. Zero fields take the executor's settings
// (executor.RetryPolicy); none may be negative.
type Retry struct {
	// Attempts is the most attempts per action within one drive, the first
	// included (1: never retried automatically).
	Attempts int
	// MaxBackoff is the longest wait between two attempts (a server's
	// Retry-After may ask for longer).
	MaxBackoff time.Duration
	// Budget is how long after the first attempt started a retry may still
	// start: no wait reaches past it, and a Retry-After that would is not
	// waited for (the action fails, saying so).
	Budget time.Duration
}

// Limits bounds the calls of one tool across every run of a process and
// every process of a shared ledger (the tools file's max_in_flight and
// rate): the ledger refuses a claim that would pass them and the executor
// waits for a slot. Zero fields: no limit of that kind.
type Limits struct {
	// MaxInFlight is the most calls of the tool in flight at once.
	MaxInFlight int
	// Rate is the most calls that start in any window of Per (a sliding
	// window, at most 1000).
	Rate int
	Per  time.Duration
}

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l.MaxInFlight == 0 && l.Rate == 0 }

// Spec describes a tool. Zero durations mean "use the executor's default".
type Spec struct {
	Name         string          // registry name (for MCP tools "server.tool")
	Description  string          // for the model
	Class        Class           // effect class
	InputSchema  json.RawMessage // JSON Schema of the arguments (an object schema)
	OutputSchema json.RawMessage // optional JSON Schema of the output
	Timeout      time.Duration   // per-call timeout
	KeyTTL       time.Duration   // keyed: how long the provider remembers a key (0: forever)
	// VisibilityLag is how long a created object may stay invisible to the lookup.
	VisibilityLag time.Duration
	Approval      Approval
	// Policy is the tool's own policy rules, compiled (policy.Compile);
	// the executor evaluates them with the global ones before each claim.
	Policy     []policy.Rule
	Compensate *Compensation
	// Retry is the tool's own retry budget (the tools file's "retry"); its
	// zero fields take the executor's. It changes when and how often an
	// attempt is retried, never whether it may be: that is the effect
	// class's rule. Not part of Registry.Hash.
	Retry Retry
	// Limits bounds how many calls of the tool run at once and start per
	// window (the tools file's max_in_flight and rate). Like Retry, it
	// changes when a call starts, never what it does: not part of
	// Registry.Hash.
	Limits Limits
	// Binding is, as JSON, whatever else decides what a call does or how it
	// is protected: an HTTP tool's request, output pointer, key header and
	// lookup templates (as the file writes them); an MCP tool's server (its
	// command or URL) and the file's output and lookup for it. It is part of
	// Registry.Hash and is never shown: it holds no environment value, and a
	// header or variable named like a credential appears only as a digest of
	// its template. Nil for tools with nothing beyond the fields above (Go
	// functions).
	Binding json.RawMessage
}

// Call is one invocation of a tool.
type Call struct {
	Key     string          // the action's idempotency key (always set by the executor)
	RunID   string          // the run
	Action  string          // the action id
	Attempt int             // 1 for the first attempt
	Args    json.RawMessage // resolved arguments
	// ArgsValidated says Args were validated against this tool's input
	// schema before the call (the executor sets it when it did so), so a
	// tool need not validate them again (Func does not).
	ArgsValidated bool
}

// Tool is something the executor can call. Implementations must be safe for
// concurrent use. A tool never touches the ledger.
type Tool interface {
	Spec() Spec
	// Call performs the effect and returns its output (a JSON value). Errors are
	// classified with Classify; return Permanent, RetryAfter, NotSent or InFlight
	// to say what happened, anything else counts as "outcome unknown".
	Call(ctx context.Context, call Call) (json.RawMessage, error)
}

// Looker is implemented by tools of class Lookup: it searches for the effect of
// call (ideally by call.Key). found=false with a nil error is a trusted "not found"
// only after the visibility rules hold (executor/README.md, Decisions); the executor checks them.
type Looker interface {
	Lookup(ctx context.Context, call Call) (output json.RawMessage, found bool, err error)
}

// Outcome is how a failed call is to be treated.
type Outcome int

const (
	// Unknown: the request may have taken effect (timeout, reset, 5xx, 408).
	Unknown Outcome = iota
	// NotSentOutcome: nothing reached the other side; safe to retry for every class.
	NotSentOutcome
	// NotProcessed: the other side answered that it did not process the request
	// and when to come back (429 or 503 with Retry-After). Safe to retry.
	NotProcessed
	// Definite: the other side answered that it did not and will not happen (4xx).
	Definite
	// KeyInFlight: a keyed provider says the key is being processed (409).
	KeyInFlight
)

func (o Outcome) String() string {
	switch o {
	case NotSentOutcome:
		return "not_sent"
	case NotProcessed:
		return "not_processed"
	case Definite:
		return "definite"
	case KeyInFlight:
		return "key_in_flight"
	default:
		return "unknown"
	}
}

// ControlError carries a tool's verdict about a failure to the executor.
type ControlError struct {
	Outcome Outcome
	After   time.Duration // RetryAfter / KeyInFlight: wait at least this long
	Err     error
}

func (e *ControlError) Error() string {
	if e.Err == nil {
		return e.Outcome.String()
	}
	return e.Err.Error()
}

func (e *ControlError) Unwrap() error { return e.Err }

// Permanent marks err as a definite failure: it did not happen and retrying
// will not help.
func Permanent(err error) error { return &ControlError{Outcome: Definite, Err: err} }

// RetryAfter marks err as "not processed, come back after d".
func RetryAfter(d time.Duration, err error) error {
	return &ControlError{Outcome: NotProcessed, After: d, Err: err}
}

// NotSent marks err as a failure before anything was sent.
func NotSent(err error) error { return &ControlError{Outcome: NotSentOutcome, Err: err} }

// InFlight marks err as "the provider is still processing this key" (HTTP 409
// on a keyed call): retry later, and past a bound ask a person.
func InFlight(d time.Duration, err error) error {
	return &ControlError{Outcome: KeyInFlight, After: d, Err: err}
}

// Classify returns how the executor must treat err. Errors without a
// ControlError in their chain are Unknown, except context.Canceled before
// anything was sent, which the tool itself must mark NotSent.
func Classify(err error) (Outcome, time.Duration) {
	var ce *ControlError
	if errors.As(err, &ce) {
		return ce.Outcome, ce.After
	}
	return Unknown, 0
}

// ErrOutputTooLarge is returned (wrapped, inside Permanent) by a tool whose
// call was answered with success but with more output than the tool may
// return (tools/httptool: its response cap): the call took effect, only its
// answer is lost, and calling again would give the same answer. The executor
// never calls again: read_only and idempotent actions fail; keyed, lookup and
// at_most_once actions go to needs_review (their effect exists).
var ErrOutputTooLarge = errors.New("output too large")

// ErrUnknownTool is returned (wrapped) for a tool name that is not registered.
var ErrUnknownTool = errors.New("unknown tool")

// ArgsError reports arguments that fail a tool's input schema.
type ArgsError struct {
	Tool     string
	Problems []ArgProblem
}

// ArgProblem is one schema violation at a JSON path of the arguments ("/amount").
type ArgProblem struct {
	Path string `json:"path"`
	Msg  string `json:"message"`
}

func (e *ArgsError) Error() string {
	s := fmt.Sprintf("invalid arguments for tool %q:", e.Tool)
	for _, p := range e.Problems {
		path := p.Path
		if path == "" {
			path = "/"
		}
		s += fmt.Sprintf(" at %s: %s;", path, p.Msg)
	}
	return s[:len(s)-1]
}
