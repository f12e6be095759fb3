package planner

import (
	"context"
	"encoding/json"

	"github.com/docketrun/docket/plan"
)

// ProgressKind says what a Progress reports.
type ProgressKind string

// Progress kinds, in the order a planning produces them.
const (
	ProgressRound     ProgressKind = "round"     // a model request starts (Round)
	ProgressText      ProgressKind = "text"      // a piece of the model's text (Text; streamed)
	ProgressReasoning ProgressKind = "reasoning" // a piece of a reasoning model's thinking (Text; streamed)
	ProgressCall      ProgressKind = "call"      // a tool call the model finished writing (Tool, Args as written)
	ProgressRead      ProgressKind = "read"      // a read_only call ran while planning (Tool, Args)
	ProgressAction    ProgressKind = "action"    // a call was queued as a plan action (Action)
	ProgressRejected  ProgressKind = "rejected"  // a call was rejected and answered with the problem (Tool, Msg)
	ProgressWarning   ProgressKind = "warning"   // a server quirk was worked around (Msg)
)

// Progress is one step of a planning as it happens, for a person watching
// (docket plan and chat on a terminal, the review page over the WebSocket).
// Nothing in it is recorded: the plan is recorded only when planning ends,
// so a crash while the model thinks still records nothing. Its JSON is what
// the WebSocket carries (ui's "planning" messages).
type Progress struct {
	Kind  ProgressKind `json:"kind"`
	Round int          `json:"round"`
	// Text is a piece of the model's text or thinking: concatenate the
	// pieces of a round to show it.
	Text string `json:"text,omitempty"`
	// Tool is the registry name of the tool called; Args the arguments as
	// the model wrote them (ProgressCall) or as they run (ProgressRead).
	Tool string          `json:"tool,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
	// Action is the queued action, with its id, validated arguments and
	// depends_on (ProgressAction).
	Action *plan.Action `json:"action,omitempty"`
	Msg    string       `json:"message,omitempty"`
}

type progressKey struct{}

// WithProgress returns a context under which Plan reports each step of the
// planning to fn: the model's text as it streams, each tool call as soon as
// the model finished writing it, each queued action. fn is
// called from the planning's goroutine, one call at a time; it must not
// block for long (hand the value to a channel or a buffer). With a
// progress function the planner streams replies (Config.Stream "auto").
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

func progressOf(ctx context.Context) func(Progress) {
	fn, _ := ctx.Value(progressKey{}).(func(Progress))
	return fn
}

// emit reports a step to the planning's progress function, if any.
func (s *session) emit(pr Progress) {
	if s.progress == nil {
		return
	}
	if pr.Round == 0 {
		pr.Round = s.rounds
	}
	s.progress(pr)
}
