package planner

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Problem is one thing that kept the model's reply from becoming a valid plan.
type Problem struct {
	Round  int    `json:"round,omitempty"`  // the model turn (1-based) it came from, 0 for the final check
	Call   string `json:"call,omitempty"`   // tool call id, when it is about one call
	Tool   string `json:"tool,omitempty"`   // the tool name as the model wrote it
	Action string `json:"action,omitempty"` // plan action id, when one was assigned
	Field  string `json:"field,omitempty"`  // "args", "args.amount", "depends_on", ...
	Msg    string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Round > 0 {
		fmt.Fprintf(&b, "round %d: ", p.Round)
	}
	switch {
	case p.Action != "":
		fmt.Fprintf(&b, "action %s", p.Action)
		if p.Tool != "" {
			fmt.Fprintf(&b, " (%s)", p.Tool)
		}
		b.WriteString(": ")
	case p.Tool != "":
		fmt.Fprintf(&b, "call of %q: ", p.Tool)
	}
	if p.Field != "" {
		fmt.Fprintf(&b, "%s: ", p.Field)
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Reason says why planning stopped without a plan.
type Reason string

const (
	ReasonInvalid       Reason = "invalid"         // still invalid after the allowed repairs
	ReasonTruncated     Reason = "truncated"       // finish_reason "length": the reply hit its token limit
	ReasonContentFilter Reason = "content_filter"  // finish_reason "content_filter"
	ReasonRefused       Reason = "refused"         // the model refused (a refusal message)
	ReasonRounds        Reason = "rounds"          // Config.MaxRounds model turns without a finished plan
	ReasonTokens        Reason = "tokens"          // Config.TokenBudget exceeded
	ReasonEmpty         Reason = "empty"           // the model replied with nothing usable
	ReasonTextCalls     Reason = "text_tool_calls" // tool calls written as text that are not calls
)

// PlanningError says that the model did not produce a valid plan, and lists
// every problem still standing. Nothing was recorded.
type PlanningError struct {
	Reason   Reason
	Msg      string    // one line: what happened
	Problems []Problem // every problem of the last reply that had any
	Rounds   int
	Repairs  int
}

func (e *PlanningError) Error() string {
	var b strings.Builder
	b.WriteString("planner: no valid plan: ")
	b.WriteString(e.Msg)
	if len(e.Problems) > 0 {
		fmt.Fprintf(&b, " (%d problem", len(e.Problems))
		if len(e.Problems) != 1 {
			b.WriteString("s")
		}
		b.WriteString(")")
		for _, p := range e.Problems {
			b.WriteString("\n  ")
			b.WriteString(p.String())
		}
	}
	return b.String()
}

// ErrModel is wrapped by every *ModelError.
var ErrModel = errors.New("planner: model request failed")

// ModelError reports a request to the model that failed for good: an answer
// that will not change by retrying (400, 401, 403, 404, ...), or retryable
// failures that ran out of retries.
type ModelError struct {
	Status   int           // HTTP status of the last answer, 0 when there was none
	Attempts int           // requests made
	After    time.Duration // the last Retry-After, when it exceeded Config.RetryMax
	Msg      string        // what the server or the transport said (redacted)
}

func (e *ModelError) Error() string {
	s := "planner: model request failed"
	if e.Status != 0 {
		s += fmt.Sprintf(" with HTTP %d", e.Status)
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	return s + ": " + e.Msg
}

// Is makes errors.Is(err, ErrModel) true.
func (e *ModelError) Is(target error) bool { return target == ErrModel }

// Retryable reports whether a later attempt might succeed (rate limit, server
// error, timeout) as opposed to a configuration problem (bad key, unknown
// model, a request the server refuses).
func (e *ModelError) Retryable() bool {
	return e.Status == 0 || e.Status == 408 || e.Status == 429 || e.Status >= 500
}
