package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// want is one expected problem: Action and Field exactly, Msg by substring.
type want struct {
	action, field, msg string
}

func checkProblems(t *testing.T, err error, wants []want) {
	t.Helper()
	var got Errors
	if !errors.As(err, &got) {
		t.Fatalf("error = %v (%T), want plan.Errors", err, err)
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(wants), strings.ReplaceAll(got.Error(), "; ", "\n"))
	}
	for i, w := range wants {
		p := got[i]
		if p.Action != w.action || p.Field != w.field || !strings.Contains(p.Msg, w.msg) {
			t.Errorf("problem %d = {Action:%q Field:%q Msg:%q}, want {Action:%q Field:%q Msg containing %q}", i, p.Action, p.Field, p.Msg, w.action, w.field, w.msg)
		}
	}
}

func TestDecodeFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file  string
		wants []want // nil: the plan must decode without error
	}{
		{"valid", nil},
		{"ref_transitive", nil},
		{"unknown_plan_field", []want{{"", "priority", "unknown field"}}},
		{"unknown_action_field", []want{{"a1", "retries", "unknown field"}}},
		{"trailing_data", []want{{"", "", "unexpected data after the JSON value (line 1, column 16)"}}},
		{"duplicate_ids", []want{{"a1", "id", "duplicate id: a1 is also the id of actions[0]"}}},
		{"empty_id", []want{{"", "actions[0].id", "required"}}},
		{"missing_id", []want{{"", "actions[0].id", "required"}}},
		{"id_with_dot", []want{{"", "actions[0].id", `"a.1" contains a character outside [A-Za-z0-9_-]`}}},
		{"id_with_space", []want{{"", "actions[0].id", `"a 1" contains a character outside`}}},
		{"id_with_ref", []want{{"", "actions[0].id", `"${a1}" contains a character outside`}}},
		{"id_too_long", []want{{"", "actions[0].id", "is 129 bytes long: ids are at most 128 bytes"}}},
		{"empty_tool", []want{{"a1", "tool", "required"}}},
		{"missing_tool", []want{{"a1", "tool", "required"}}},
		{"missing_args", []want{{"a1", "args", "required, must be a JSON object"}}},
		{"args_array", []want{{"a1", "args", "must be a JSON object, got array"}}},
		{"args_string", []want{{"a1", "args", "must be a JSON object, got string"}}},
		{"args_null", []want{{"a1", "args", "must be a JSON object, got null"}}},
		{"unknown_dependency", []want{{"a1", "depends_on", `names "a9", which is not an action of this plan`}}},
		{"self_dependency", []want{{"a1", "depends_on", "depends on itself"}}},
		{"duplicate_dependency", []want{{"a2", "depends_on", `lists "a1" more than once`}}},
		{"cycle", []want{{"a1", "depends_on", "dependency cycle: a1 -> a3 -> a2 -> a1"}}},
		{"ref_not_dependency", []want{{"a2", "args.customer_id", "reference ${a1.output.id} names a1, which is not among its dependencies"}}},
		{"ref_unknown_action", []want{{"a1", "args.x", "reference ${zz.output} names zz, which is not an action of this plan"}}},
		{"ref_self", []want{{"a1", "args.x", "names the action itself"}}},
		{"ref_interpolation", []want{{"a2", "args.note", "is not exactly one reference"}}},
		{"ref_in_key", []want{{"a2", `args["${a1.output.id}"]`, "keys are never resolved"}}},
		{"ref_malformed", []want{{"a2", "args.items[0].x", "must have the form ${ACTION.output}"}}},
		{"big_integer", []want{{"a1", "args.order.id", "number 9007199254740993 is beyond ±2^53"}}},
		{"truncated", []want{{"", "actions[0].args.x", "unexpected end of input (truncated JSON?)"}}},
		{"wrong_types", []want{
			{"", "goal", "must be a string, got number"},
			{"a1", "tool", "must be a string, got number"},
			{"a1", "why", "must be a string, got boolean"},
			{"a1", "depends_on", "must be an array of action ids, got string"},
		}},
		{"action_not_object", []want{{"", "actions[0]", "an action must be a JSON object, got a string"}}},
		{"id_not_string", []want{{"", "actions[0].id", "must be a string, got number"}}},
		{"non_utf8", []want{{"", "goal", "invalid UTF-8 byte 0xe9 in string (line 1, column 13)"}}},
		{"nan", []want{{"", "actions[0].args.amount", "NaN and Infinity are not JSON numbers"}}},
		{"infinity", []want{{"", "actions[0].args.amount", "NaN and Infinity are not JSON numbers"}}},
		{"duplicate_key", []want{{"", "actions[0].args", `duplicate key "x"`}}},
		{"not_object", []want{{"", "", "a plan must be a JSON object, got an array"}}},
		{"missing_actions", []want{{"", "actions", "required"}}},
		{"null_goal", []want{{"", "goal", "must be a string, got null"}}},
		{"bad_created_at", []want{{"", "created_at", "must be an RFC 3339 time"}}},
		{"lone_surrogate", []want{{"", "goal", `high surrogate \ud800 not followed by a low surrogate`}}},
		{"empty", []want{{"", "", "empty input"}}},
		{"multiple_problems", []want{
			{"", "extra", "unknown field"},
			{"a1", "tool", "required"},
			{"a1", "id", "duplicate id"},
			{"a1", "args", "must be a JSON object, got array"},
			{"a3", "depends_on", `names "nope"`},
			{"a3", "args.x", "reference ${a1.output} names a1, which is not among its dependencies"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", "decode", tt.file+".json"))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Decode(data)
			if tt.wants == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if p == nil {
					t.Fatal("Decode returned a nil plan without error")
				}
				return
			}
			checkProblems(t, err, tt.wants)
		})
	}
}

// Every fixture is used by the table: a new fixture without expectations
// would silently test nothing.
func TestDecodeFixturesAllListed(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("decode_test.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "decode", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if !bytes.Contains(src, []byte(`{"`+name+`", `)) {
			t.Errorf("fixture %s has no entry in TestDecodeFixtures", f)
		}
	}
}

func TestDecodeValidPlanContents(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "decode", "valid.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if p.Goal != "Create the customer and charge them" || p.Meta["model"] != "test-model" || p.CreatedAt.IsZero() {
		t.Errorf("plan fields not decoded: goal=%q meta=%v created_at=%v", p.Goal, p.Meta, p.CreatedAt)
	}
	if len(p.Actions) != 3 {
		t.Fatalf("got %d actions, want 3", len(p.Actions))
	}
	a2, ok := p.Action("a2")
	if !ok || a2.Tool != "payments.charge" || len(a2.DependsOn) != 1 || a2.DependsOn[0] != "a1" {
		t.Fatalf("Action(a2) = %+v, %v", a2, ok)
	}
	// The number is kept as written, not as a float64.
	if !bytes.Contains(a2.Args, []byte(`"amount": 1250`)) {
		t.Errorf("args not kept verbatim: %s", a2.Args)
	}
	if p.Actions[0].Why != "new customer" {
		t.Errorf("why = %q", p.Actions[0].Why)
	}
	if _, ok := p.Action("nope"); ok {
		t.Error("Action(nope) found something")
	}
}

func TestDecodeReturnsPlanWithCheckProblems(t *testing.T) {
	t.Parallel()
	p, err := Decode([]byte(`{"actions":[{"id":"a1","tool":"","args":{}}]}`))
	if err == nil || p == nil || len(p.Actions) != 1 {
		t.Fatalf("Decode = %v, %v; want the plan and its problems", p, err)
	}
}

func TestDecodeDeepNesting(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	for name, doc := range map[string]string{
		"in args":   `{"actions":[{"id":"a1","tool":"t","args":{"x":` + deep + `}}]}`,
		"whole doc": strings.Repeat("[", 100000),
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Decode([]byte(doc))
			if p != nil {
				t.Errorf("got a plan for a too deep document")
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Msg, "nest deeper than 64 levels") {
				t.Fatalf("Decode error = %v, want one problem about nesting deeper than 64", err)
			}
		})
	}
	// Exactly at the limit is fine: plan object, actions array, action
	// object and args object use 4 levels.
	ok := `{"actions":[{"id":"a1","tool":"t","args":{"x":` + strings.Repeat("[", 60) + strings.Repeat("]", 60) + `}}]}`
	if _, err := Decode([]byte(ok)); err != nil {
		t.Fatalf("64 levels refused: %v", err)
	}
	tooDeep := `{"actions":[{"id":"a1","tool":"t","args":{"x":` + strings.Repeat("[", 61) + strings.Repeat("]", 61) + `}}]}`
	if _, err := Decode([]byte(tooDeep)); err == nil {
		t.Fatal("65 levels accepted")
	}
}

func TestDecodeTooLarge(t *testing.T) {
	t.Parallel()
	// A syntactically valid 50 MiB plan: refused for its size, before parsing.
	big := make([]byte, 0, 50<<20)
	big = append(big, `{"goal":"`...)
	big = append(big, bytes.Repeat([]byte("x"), 50<<20-len(`{"goal":"","actions":[]}`))...)
	big = append(big, `","actions":[]}`...)
	p, err := Decode(big)
	if p != nil {
		t.Error("got a plan for a 50 MiB document")
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Msg, "the limit is 16777216 bytes (16 MiB)") {
		t.Fatalf("Decode error = %v, want a size problem", err)
	}
	if !strings.Contains(err.Error(), ErrTooLarge.Error()) {
		t.Errorf("error %q does not say the input is too large", err)
	}
}

// Decoding must not go through float64: a number in args is kept exactly as
// written, even one a float64 would round.
func TestDecodeKeepsNumbersAsWritten(t *testing.T) {
	t.Parallel()
	p, err := Decode([]byte(`{"actions":[{"id":"a1","tool":"t","args":{"a":9007199254740991,"b":0.1000000000000000055511151231257827,"c":1E2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":9007199254740991,"b":0.1000000000000000055511151231257827,"c":1E2}`
	if string(p.Actions[0].Args) != want {
		t.Errorf("args = %s, want %s", p.Actions[0].Args, want)
	}
	var n map[string]json.Number
	if err := json.Unmarshal(p.Actions[0].Args, &n); err != nil || n["a"] != "9007199254740991" {
		t.Errorf("json.Number a = %q, %v", n["a"], err)
	}
}

func TestErrorsFormat(t *testing.T) {
	t.Parallel()
	e := Errors{
		{Field: "goal", Msg: "must be a string"},
		{Action: "a2", Field: "args.customer_id", Msg: "bad"},
		{Msg: "plain"},
	}
	want := `invalid plan: 3 problems: field "goal": must be a string; action "a2", field "args.customer_id": bad; plain`
	if e.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", e.Error(), want)
	}
	one := Errors{{Action: "a1", Field: "tool", Msg: "required"}}
	if got := one.Error(); got != `invalid plan: action "a1", field "tool": required` {
		t.Errorf("Error() = %q", got)
	}
}
