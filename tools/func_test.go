package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type transferIn struct {
	Amount int64          `json:"amount" jsonschema:"minimum=1"`
	To     string         `json:"to"`
	Note   string         `json:"note,omitempty"`
	Meta   map[string]any `json:"meta,omitempty"`
}

type transferOut struct {
	ID string `json:"id"`
}

func TestFunc(t *testing.T) {
	t.Parallel()
	var got transferIn
	tool := Func(Spec{Name: "transfer", Class: Keyed}, func(ctx context.Context, call Call, in transferIn) (transferOut, error) {
		got = in
		if in.To == "blocked" {
			return transferOut{}, Permanent(errors.New("account blocked"))
		}
		return transferOut{ID: "t-" + in.To}, nil
	})
	s := tool.Spec()
	var schema map[string]any
	if err := json.Unmarshal(s.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if schema["type"] != "object" || schema["additionalProperties"] != false || schema["$ref"] != nil || schema["$schema"] != nil {
		t.Errorf("input schema = %s", s.InputSchema)
	}
	if req, _ := json.Marshal(schema["required"]); string(req) != `["amount","to"]` {
		t.Errorf("required = %s", req)
	}
	if !strings.Contains(string(s.OutputSchema), `"id"`) {
		t.Errorf("output schema = %s", s.OutputSchema)
	}
	r, err := NewRegistry(tool)
	if err != nil {
		t.Fatalf("Func tool refused by the registry: %v", err)
	}
	if err := r.ValidateResolved("transfer", json.RawMessage(`{"amount": 0, "to": "x"}`)); err == nil {
		t.Error("minimum from the jsonschema tag not enforced")
	}

	out, err := tool.Call(context.Background(), Call{Key: "k", Args: json.RawMessage(`{"amount": 5, "to": "bob", "meta": {"n": 12345678901234567890}}`)})
	if err != nil || string(out) != `{"id":"t-bob"}` {
		t.Fatalf("Call = %s, %v", out, err)
	}
	if got.Amount != 5 || got.Meta["n"] != json.Number("12345678901234567890") {
		t.Errorf("decoded %+v (numbers in any fields must be json.Number)", got)
	}

	_, err = tool.Call(context.Background(), Call{Args: json.RawMessage(`{"amount": "5", "extra": 1}`)})
	var ae *ArgsError
	if o, _ := Classify(err); o != Definite || !errors.As(err, &ae) {
		t.Fatalf("invalid args: %v (outcome %v)", err, o)
	}
	paths := map[string]bool{}
	for _, p := range ae.Problems {
		paths[p.Path] = true
	}
	for _, p := range []string{"/amount", "/to", "/extra"} {
		if !paths[p] {
			t.Errorf("no problem at %s: %v", p, ae)
		}
	}

	_, err = tool.Call(context.Background(), Call{Args: json.RawMessage(`{"amount": 5, "to": "blocked"}`)})
	if o, _ := Classify(err); o != Definite || err.Error() != "account blocked" {
		t.Errorf("fn error not passed through: %v", err)
	}

	// Arguments the caller validated are not validated again: the schema's
	// minimum is not checked, decoding still is.
	below := json.RawMessage(`{"amount": 0, "to": "carol"}`)
	if _, err := tool.Call(context.Background(), Call{Args: below}); !errors.As(err, &ae) {
		t.Fatalf("amount 0 without ArgsValidated: %v, want an ArgsError", err)
	}
	if out, err := tool.Call(context.Background(), Call{Args: below, ArgsValidated: true}); err != nil || string(out) != `{"id":"t-carol"}` {
		t.Fatalf("amount 0 with ArgsValidated: %s, %v, want fn to run", out, err)
	}
	if _, err := tool.Call(context.Background(), Call{Args: json.RawMessage(`{"amount": 1, "to": "x", "extra": 1}`), ArgsValidated: true}); !errors.As(err, &ae) {
		t.Fatalf("an unknown field with ArgsValidated: %v, want the decoding's ArgsError", err)
	}
}

func TestFuncNonObjectInput(t *testing.T) {
	t.Parallel()
	tool := Func(Spec{Name: "n", Class: ReadOnly}, func(context.Context, Call, int) (int, error) { return 1, nil })
	if _, err := NewRegistry(tool); err == nil || !strings.Contains(err.Error(), "not an object schema") {
		t.Errorf("NewRegistry = %v", err)
	}
}

func TestFuncLooker(t *testing.T) {
	t.Parallel()
	tool := FuncLooker(Spec{Name: "mk", Class: Lookup},
		func(context.Context, Call, transferIn) (transferOut, error) { return transferOut{ID: "new"}, nil },
		func(_ context.Context, call Call, in transferIn) (transferOut, bool, error) {
			return transferOut{ID: "old-" + call.Key}, in.To == "known", nil
		})
	if _, err := NewRegistry(tool); err != nil {
		t.Fatal(err)
	}
	l := tool.(Looker)
	out, found, err := l.Lookup(context.Background(), Call{Key: "k1", Args: json.RawMessage(`{"amount":1,"to":"known"}`)})
	if err != nil || !found || string(out) != `{"id":"old-k1"}` {
		t.Errorf("Lookup = %s %v %v", out, found, err)
	}
	out, found, err = l.Lookup(context.Background(), Call{Key: "k1", Args: json.RawMessage(`{"amount":1,"to":"new"}`)})
	if err != nil || found || out != nil {
		t.Errorf("Lookup not found = %s %v %v", out, found, err)
	}
}
