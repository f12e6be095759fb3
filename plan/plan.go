package plan

import (
	"encoding/json"
	"fmt"
	"time"
)

// Plan is an ordered set of actions that a model (or a person) proposed for one
// run. It is pure data: decoding, validation, references and keys are pure
// functions of it.
type Plan struct {
	// ID identifies this plan document (optional; set by the planner).
	ID string `json:"id,omitempty"`
	// RunID is the run this plan belongs to (optional in files; the executor sets it).
	RunID string `json:"run_id,omitempty"`
	// Goal is the request the plan answers.
	Goal string `json:"goal,omitempty"`
	// Actions in the order they were proposed. Execution order comes from DependsOn.
	Actions []Action `json:"actions"`
	// Meta holds provenance such as "model" and "prompt_hash". Not part of Hash.
	Meta map[string]string `json:"meta,omitempty"`
	// CreatedAt is supplied by the caller (plan never reads the clock). Not part of Hash.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// Transcript records what the model saw while planning (read-only tool results). Not part of Hash.
	Transcript json.RawMessage `json:"transcript,omitempty"`
}

// Action is one tool call of a plan.
type Action struct {
	// ID is unique within the plan ("a1", "create_contact"). It must not contain
	// '.', whitespace or "${" so that references stay unambiguous.
	ID string `json:"id"`
	// Tool is the registry name of the tool to call.
	Tool string `json:"tool"`
	// Args is a JSON object; string values may be references ("${a1.output.id}").
	Args json.RawMessage `json:"args"`
	// DependsOn lists action ids that must succeed before this one runs.
	DependsOn []string `json:"depends_on,omitempty"`
	// Why is a short human explanation. Not part of Hash.
	Why string `json:"why,omitempty"`
	// NotBefore, when set, is an RFC 3339 time before which the action
	// does not start ("2026-03-01T09:00:00Z").
	NotBefore string `json:"not_before,omitempty"`
	// After, when set, is a duration (ParseDuration: "2d", "90m") counted
	// from the moment the action's dependencies all succeeded (from the
	// run's creation when it has none). The action is due at the later of
	// NotBefore and that moment plus After.
	After string `json:"after,omitempty"`
}

// Timer returns the action's NotBefore and After as values (zero when
// unset), or the first problem with them. Check reports the same problems.
func (a Action) Timer() (notBefore time.Time, after time.Duration, err error) {
	if a.NotBefore != "" {
		if notBefore, err = parseNotBefore(a.NotBefore); err != nil {
			return time.Time{}, 0, err
		}
	}
	if a.After != "" {
		if after, err = ParseDuration(a.After); err != nil {
			return time.Time{}, 0, err
		}
	}
	return notBefore, after, nil
}

// HasTimer reports whether the action waits for a time (NotBefore or After set).
func (a Action) HasTimer() bool { return a.NotBefore != "" || a.After != "" }

// parseNotBefore reads an RFC 3339 time with a zone ("Z" or an offset).
func parseNotBefore(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %s", quoteShort(s))
	}
	return t.UTC(), nil
}

// Validator checks one action's arguments against its tool's schema. tools.Registry
// implements it. Arguments may still contain references: implementations must accept
// a reference string wherever a value is expected.
type Validator interface {
	ValidateArgs(tool string, args json.RawMessage) error
}
