package plan

import (
	"errors"
	"fmt"
	"strings"
)

// Errors callers can test with errors.Is. Errors from [Canonical], [Key],
// [Resolve] and [Refs] wrap one of them; [Problem] messages describe them.
var (
	// ErrInvalidJSON: the input is not one well-formed JSON value (syntax,
	// invalid UTF-8, duplicate object keys, trailing data, NaN/Infinity).
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrTooLarge: the input is larger than MaxDocumentSize.
	ErrTooLarge = errors.New("input too large")
	// ErrTooDeep: arrays and objects nest deeper than MaxDepth.
	ErrTooDeep = errors.New("nesting too deep")
	// ErrNumberRange: a number's magnitude exceeds 2^53, so canonical JSON
	// cannot keep it exact.
	ErrNumberRange = errors.New("number out of range")
	// ErrReference: a reference is malformed, or cannot be resolved.
	ErrReference = errors.New("bad reference")
)

// Problem is one thing wrong with a plan, naming the action and the field.
//
// Action is the action's id when it has a non-empty string id. For an action
// without one, Action is empty and Field starts with its position
// ("actions[3].tool"). Field is a path into the plan (for plan-level
// problems) or into the action: "id", "tool", "args", "args.customer.id",
// "args.items[2]", "depends_on".
type Problem struct {
	Action string `json:"action,omitempty"` // action id ("" for plan-level problems)
	Field  string `json:"field,omitempty"`  // "id", "tool", "args", "args.amount", "depends_on"
	Msg    string `json:"message"`
}

// String renders the problem as `action "a2", field "args.x": message`.
func (p Problem) String() string {
	var b strings.Builder
	if p.Action != "" {
		fmt.Fprintf(&b, "action %q", p.Action)
	}
	if p.Field != "" {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "field %q", p.Field)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Errors lists every problem found; it is the error Decode, Check and
// Validate return. Problems come in document order: plan-level fields first,
// then each action in position order.
type Errors []Problem

// Error joins the problems with "; ", in order.
func (e Errors) Error() string {
	if len(e) == 0 {
		return "invalid plan: no problems recorded"
	}
	parts := make([]string, len(e))
	for i, p := range e {
		parts[i] = p.String()
	}
	if len(e) == 1 {
		return "invalid plan: " + parts[0]
	}
	return fmt.Sprintf("invalid plan: %d problems: %s", len(e), strings.Join(parts, "; "))
}

// jsonError is a problem found while scanning a JSON value: where it is (a
// path and a byte offset) and what is wrong.
type jsonError struct {
	kind   error  // one of the sentinels above
	path   string // path of the value inside the scanned document as pathString renders it ("" at the root)
	offset int    // byte offset in the scanned document
	line   int
	column int
	msg    string
}

func (e *jsonError) Error() string {
	where := fmt.Sprintf("line %d, column %d", e.line, e.column)
	if e.path != "" {
		where = fmt.Sprintf("%q (%s)", strings.TrimPrefix(e.path, "."), where)
	}
	return fmt.Sprintf("%s at %s: %s", e.kind, where, e.msg)
}

func (e *jsonError) Unwrap() error { return e.kind }

// problemMsg is the message of a Problem made from e: the field names the
// path already, so only the position and the message remain.
func (e *jsonError) problemMsg() string {
	return fmt.Sprintf("%s: %s (line %d, column %d)", e.kind, e.msg, e.line, e.column)
}
