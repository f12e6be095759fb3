package tools

// SCAFFOLD: the tools helper replaces this file with the real implementation
// (same signatures, more allowed). It exists so that other packages compile meanwhile.

import (
	"context"
	"encoding/json"
)

// Registry holds tools by name and validates their arguments. Safe for concurrent use.
type Registry struct{}

// NewRegistry checks every tool (valid class, a Lookup tool implements Looker,
// schemas compile, names unique) and reports every problem at once.
func NewRegistry(ts ...Tool) (*Registry, error) { panic("scaffold") }

// Get returns the tool registered under name.
func (r *Registry) Get(name string) (Tool, bool) { panic("scaffold") }

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { panic("scaffold") }

// ValidateArgs implements plan.Validator: args must satisfy the tool's input
// schema, except that a reference string ("${a1.output.id}") is accepted wherever
// a value is expected. Unknown tool: error wrapping ErrUnknownTool. Invalid: *ArgsError.
func (r *Registry) ValidateArgs(tool string, args json.RawMessage) error { panic("scaffold") }

// ValidateResolved validates fully resolved arguments (no references allowed).
func (r *Registry) ValidateResolved(tool string, args json.RawMessage) error { panic("scaffold") }

// ValidateOutput validates an output against the tool's output schema, if any.
func (r *Registry) ValidateOutput(tool string, output json.RawMessage) error { panic("scaffold") }

// Hash is a stable digest of every tool's definition (name, class, schemas,
// approval, timeouts, compensation); a change means "the tools changed".
func (r *Registry) Hash() string { panic("scaffold") }

// NeedsApproval applies the spec's approval rules to resolved (or planned)
// arguments: Always, or a numeric argument above its limit. reason says why.
func NeedsApproval(s Spec, args json.RawMessage) (need bool, reason string) { panic("scaffold") }

// CompensationArgs builds the compensating call's arguments from the template,
// the original action's resolved arguments (input) and its output.
func CompensationArgs(c Compensation, input, output json.RawMessage) (json.RawMessage, error) {
	panic("scaffold")
}

// Func builds a typed tool from a Go function: the input schema is generated
// from In (invopop/jsonschema, inlined, additionalProperties false), the
// arguments are validated and decoded into In before fn runs, and Out is
// encoded as the output. spec.Name, Description and Class must be set;
// InputSchema/OutputSchema are filled in.
func Func[In, Out any](spec Spec, fn func(ctx context.Context, call Call, in In) (Out, error)) Tool {
	panic("scaffold")
}
