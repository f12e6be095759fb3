package plan

import (
	"encoding/json"
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
}

// Validator checks one action's arguments against its tool's schema. tools.Registry
// implements it. Arguments may still contain references: implementations must accept
// a reference string wherever a value is expected.
type Validator interface {
	ValidateArgs(tool string, args json.RawMessage) error
}
