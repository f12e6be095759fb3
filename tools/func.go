package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/invopop/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

// Func builds a typed tool from a Go function: the input schema is generated
// from In (invopop/jsonschema, inlined, no root $ref, additionalProperties
// false, a field is required unless it is `json:",omitempty"`), the output
// schema from Out. Arguments are validated against the input schema before fn
// runs, unless the call says they were (Call.ArgsValidated: the executor
// validated them against the same schema); failures are Permanent
// *ArgsError values naming each path. They are decoded
// into In (unknown fields refused, numbers in `any` fields as json.Number).
// Errors from fn pass through unchanged, so fn can return Permanent,
// RetryAfter, NotSent or InFlight. Out is encoded as the output.
//
// spec.Name, Description and Class must be set; InputSchema and OutputSchema
// are filled in. In must be a struct (or pointer to one) for the tool to pass
// NewRegistry, and must not be recursive.
func Func[In, Out any](spec Spec, fn func(ctx context.Context, call Call, in In) (Out, error)) Tool {
	t := &funcTool[In, Out]{fn: fn}
	t.spec = spec
	t.spec.InputSchema, t.schemaErr = reflectSchema(reflect.TypeFor[In]())
	if out, err := reflectSchema(reflect.TypeFor[Out]()); err == nil {
		t.spec.OutputSchema = out
	}
	if t.schemaErr == nil {
		t.input, t.schemaErr = compileSchema(spec.Name+"/input", t.spec.InputSchema)
	}
	return t
}

// FuncLooker is Func for tools of class Lookup: lookup searches for the effect
// of a call (ideally by call.Key) and reports whether it was found.
func FuncLooker[In, Out any](spec Spec, fn func(ctx context.Context, call Call, in In) (Out, error),
	lookup func(ctx context.Context, call Call, in In) (Out, bool, error)) Tool {
	return &funcLooker[In, Out]{funcTool: Func(spec, fn).(*funcTool[In, Out]), lookup: lookup}
}

type funcTool[In, Out any] struct {
	spec      Spec
	input     *sjs.Schema
	schemaErr error
	fn        func(ctx context.Context, call Call, in In) (Out, error)
}

func (t *funcTool[In, Out]) Spec() Spec { return t.spec }

func (t *funcTool[In, Out]) decode(call Call) (In, error) {
	var in In
	if t.schemaErr != nil {
		return in, Permanent(fmt.Errorf("tool %q: input schema: %w", t.spec.Name, t.schemaErr))
	}
	if !call.ArgsValidated {
		if err := validateArgs(t.spec.Name, t.input, call.Args, false); err != nil {
			return in, Permanent(err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(call.Args))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return in, Permanent(&ArgsError{Tool: t.spec.Name, Problems: []ArgProblem{{Path: "", Msg: "decoding arguments: " + err.Error()}}})
	}
	return in, nil
}

func (t *funcTool[In, Out]) Call(ctx context.Context, call Call) (json.RawMessage, error) {
	in, err := t.decode(call)
	if err != nil {
		return nil, err
	}
	out, err := t.fn(ctx, call, in)
	if err != nil {
		return nil, err
	}
	return encodeOutput(t.spec.Name, out)
}

func encodeOutput(name string, out any) (json.RawMessage, error) {
	data, err := json.Marshal(out)
	if err != nil {
		// The effect happened; only its description failed: outcome unknown.
		return nil, fmt.Errorf("tool %q: encoding output: %w", name, err)
	}
	return data, nil
}

type funcLooker[In, Out any] struct {
	*funcTool[In, Out]
	lookup func(ctx context.Context, call Call, in In) (Out, bool, error)
}

func (t *funcLooker[In, Out]) Lookup(ctx context.Context, call Call) (json.RawMessage, bool, error) {
	in, err := t.decode(call)
	if err != nil {
		return nil, false, err
	}
	out, found, err := t.lookup(ctx, call, in)
	if err != nil || !found {
		return nil, false, err
	}
	data, err := encodeOutput(t.spec.Name, out)
	return data, err == nil, err
}

// reflectSchema generates an inlined JSON Schema for t.
func reflectSchema(t reflect.Type) (json.RawMessage, error) {
	r := &jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}
	s := r.ReflectFromType(t)
	s.Version = ""
	s.ID = ""
	data, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("generating schema for %v: %w", t, err)
	}
	return data, nil
}
