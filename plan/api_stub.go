package plan

// SCAFFOLD: the plan helper replaces this file with the real implementation
// (same signatures). It exists so that other packages compile meanwhile.

import "encoding/json"

// Problem is one thing wrong with a plan, naming the action and the field.
type Problem struct {
	Action string `json:"action,omitempty"` // action id ("" for plan-level problems)
	Field  string `json:"field,omitempty"`  // "id", "tool", "args", "args.amount", "depends_on"
	Msg    string `json:"message"`
}

// Errors lists every problem found; it is the error Decode and Validate return.
type Errors []Problem

func (e Errors) Error() string { panic("scaffold") }

// Decode strictly parses a plan document and runs Check on it.
func Decode(data []byte) (*Plan, error) { panic("scaffold") }

// Check verifies the plan's structure: ids, tools, args objects, dependencies,
// cycles, references (each must name a transitive dependency). Returns Errors.
func (p *Plan) Check() error { panic("scaffold") }

// Validate runs Check and then v.ValidateArgs on every action, collecting all problems.
func (p *Plan) Validate(v Validator) error { panic("scaffold") }

// Order returns the action ids in a deterministic topological order
// (dependencies first; ties broken by position in Actions).
func (p *Plan) Order() []string { panic("scaffold") }

// Action returns the action with the given id.
func (p *Plan) Action(id string) (Action, bool) { panic("scaffold") }

// Canonical returns the RFC 8785 canonical form of a JSON value. Integers beyond
// ±2^53 are refused.
func Canonical(data []byte) ([]byte, error) { panic("scaffold") }

// Key derives the idempotency key of an action, as DESIGN.md defines it:
// "dk1_" + hex(sha256(JCS([runID, actionID, tool, resolvedArgs]))).
func Key(runID, actionID, tool string, resolvedArgs json.RawMessage) (string, error) {
	panic("scaffold")
}

// Hash is a stable digest ("sha256:<hex>") of the canonical plan: goal and actions
// (id, tool, canonical args, depends_on). Not Meta, CreatedAt, Why, Transcript.
func Hash(p *Plan) (string, error) { panic("scaffold") }

// Ref is one reference "${ACTION.output[.PATH]}".
type Ref struct {
	Action string   // referenced action id
	Path   []string // keys and array indexes after "output"
	Text   string   // the reference as written
}

// ParseRef parses s as a reference. ok is false when s contains no "${"; err is
// non-nil when s contains "${" but is not exactly one valid reference.
func ParseRef(s string) (ref Ref, ok bool, err error) { panic("scaffold") }

// Refs lists every reference inside args (a JSON object), in document order.
func Refs(args json.RawMessage) ([]Ref, error) { panic("scaffold") }

// Resolve replaces every reference in args by the JSON value it points to in
// outputs (action id -> recorded output), type preserved. Errors name the
// reference and what was missing.
func Resolve(args json.RawMessage, outputs map[string]json.RawMessage) (json.RawMessage, error) {
	panic("scaffold")
}
