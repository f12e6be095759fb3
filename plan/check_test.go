package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func act(id string, deps ...string) Action {
	return Action{ID: id, Tool: "t", Args: json.RawMessage(`{}`), DependsOn: deps}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		actions []Action
		want    []string
	}{
		{"no deps keeps position", []Action{act("c"), act("a"), act("b")}, []string{"c", "a", "b"}},
		{"deps first", []Action{act("a3", "a2"), act("a2", "a1"), act("a1")}, []string{"a1", "a2", "a3"}},
		{"ties by position", []Action{act("x", "z"), act("y"), act("z"), act("w", "y")}, []string{"y", "z", "x", "w"}},
		{"diamond", []Action{act("d", "b", "c"), act("c", "a"), act("b", "a"), act("a")}, []string{"a", "c", "b", "d"}},
		{"cycle last", []Action{act("p", "q"), act("q", "p"), act("r")}, []string{"r", "p", "q"}},
		{"unknown dep ignored", []Action{act("a", "nope"), act("b")}, []string{"a", "b"}},
		{"empty", nil, []string{}},
	}
	for _, tt := range tests {
		p := &Plan{Actions: tt.actions}
		got := p.Order()
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Order = %q, want %q", tt.name, got, tt.want)
		}
		// Deterministic: the same answer every time.
		for range 5 {
			if again := p.Order(); !reflect.DeepEqual(again, got) {
				t.Fatalf("%s: Order not deterministic: %q then %q", tt.name, got, again)
			}
		}
	}
}

func TestCheckProgrammaticPlan(t *testing.T) {
	t.Parallel()
	if err := (&Plan{Actions: []Action{act("a1"), act("a2", "a1")}}).Check(); err != nil {
		t.Fatalf("valid plan: %v", err)
	}
	p := &Plan{Actions: []Action{
		{ID: "a1", Tool: "t", Args: json.RawMessage(`{"n":1e17}`)},
		{ID: "a2", Tool: "t\xff", Args: json.RawMessage(`{"x":"${a1.output}"}`), DependsOn: []string{"a1"}},
		{ID: "a3", Tool: "t", Args: json.RawMessage(`{"x":"${a2.output}"}`)},
		{ID: "a 4", Tool: "t", Args: json.RawMessage(`{`)},
	}}
	checkProblems(t, p.Check(), []want{
		{"a1", "args.n", "beyond ±2^53"},
		{"a2", "tool", "not valid UTF-8"},
		{"a3", "args.x", "names a2, which is not among its dependencies"},
		{"", "actions[3].id", `"a 4" contains a character outside`},
		{"", "actions[3].args", "truncated"},
	})
}

func TestNilPlan(t *testing.T) {
	t.Parallel()
	var p *Plan
	if err := p.Check(); err == nil {
		t.Error("Check of a nil plan succeeded")
	}
	if err := p.Validate(nil); err == nil {
		t.Error("Validate of a nil plan succeeded")
	}
	if got := p.Order(); got != nil {
		t.Errorf("Order of a nil plan = %q", got)
	}
	if _, ok := p.Action("a1"); ok {
		t.Error("Action found in a nil plan")
	}
}

func TestCheckCycles(t *testing.T) {
	t.Parallel()
	// Two separate cycles and an action stuck behind one: each cycle is
	// reported once, on its first action by position.
	p := &Plan{Actions: []Action{
		act("a", "b"), act("b", "a"),
		act("c", "e"), act("d", "c"), act("e", "d"),
		act("f", "a"),
	}}
	checkProblems(t, p.Check(), []want{
		{"a", "depends_on", "dependency cycle: a -> b -> a"},
		{"c", "depends_on", "dependency cycle: c -> e -> d -> c"},
	})
}

func TestCheckTooManyActions(t *testing.T) {
	t.Parallel()
	p := &Plan{Actions: make([]Action, MaxActions+1)}
	checkProblems(t, p.Check(), []want{{"", "actions", "10001 actions, the limit is 10000"}})
}

// A long chain where the last action references the first: the transitive
// dependency is found without quadratic blow-up in problem reporting.
func TestCheckTransitiveChain(t *testing.T) {
	t.Parallel()
	var actions []Action
	for i := range 500 {
		a := act(fmt.Sprintf("a%d", i))
		if i > 0 {
			a.DependsOn = []string{fmt.Sprintf("a%d", i-1)}
		}
		actions = append(actions, a)
	}
	actions[499].Args = json.RawMessage(`{"first":"${a0.output.id}"}`)
	if err := (&Plan{Actions: actions}).Check(); err != nil {
		t.Fatal(err)
	}
	actions[0].Args = json.RawMessage(`{"last":"${a499.output.id}"}`)
	checkProblems(t, (&Plan{Actions: actions}).Check(), []want{{"a0", "args.last", "names a499, which is not among its dependencies"}})
}

type fakeValidator struct {
	ValidateArgsFunc func(tool string, args json.RawMessage) error
	calls            []string
}

func (f *fakeValidator) ValidateArgs(tool string, args json.RawMessage) error {
	f.calls = append(f.calls, tool)
	if f.ValidateArgsFunc == nil {
		return nil
	}
	return f.ValidateArgsFunc(tool, args)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	v := &fakeValidator{ValidateArgsFunc: func(tool string, args json.RawMessage) error {
		if tool == "pay" && !strings.Contains(string(args), "amount") {
			return errors.New(`tool pay: "amount" is required`)
		}
		if tool == "unknown" {
			return errors.New(`unknown tool "unknown"`)
		}
		return nil
	}}
	p := &Plan{Actions: []Action{
		{ID: "a1", Tool: "pay", Args: json.RawMessage(`{"to":"x"}`)},
		{ID: "a2", Tool: "pay", Args: json.RawMessage(`{"amount":1}`)},
		{ID: "a3", Tool: "unknown", Args: json.RawMessage(`{}`)},
		{ID: "a4", Tool: "pay", Args: json.RawMessage(`[]`)}, // Check's problem; not passed on
		{ID: "a5", Tool: "", Args: json.RawMessage(`{}`)},    // Check's problem; not passed on
	}}
	checkProblems(t, p.Validate(v), []want{
		{"a1", "args", `tool pay: "amount" is required`},
		{"a3", "args", `unknown tool "unknown"`},
		{"a4", "args", "must be a JSON object, got array"},
		{"a5", "tool", "required"},
	})
	if want := []string{"pay", "pay", "unknown"}; !reflect.DeepEqual(v.calls, want) {
		t.Errorf("validator called for %q, want %q", v.calls, want)
	}
	if err := (&Plan{Actions: []Action{act("a1")}}).Validate(&fakeValidator{}); err != nil {
		t.Errorf("valid plan: %v", err)
	}
	if err := (&Plan{Actions: []Action{act("a1")}}).Validate(nil); err != nil {
		t.Errorf("nil validator: %v", err)
	}
}
