package evals

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func mustCase(t *testing.T, line string) *Case {
	t.Helper()
	c, err := ParseCase([]byte(line))
	if err != nil {
		t.Fatalf("case does not parse: %v", err)
	}
	return c
}

func calls(t *testing.T, js string) []Call {
	t.Helper()
	var cs []Call
	if err := json.Unmarshal([]byte(js), &cs); err != nil {
		t.Fatalf("calls %s: %v", js, err)
	}
	return cs
}

func hasCode(r Result, code string) bool {
	for _, c := range r.Codes {
		if c == code || strings.HasSuffix(c, ":"+code) {
			return true
		}
	}
	return false
}

// scalarCase exercises the leaderboard's value comparison: one function with
// a parameter of every type.
const scalarCase = `{"id": "scalar", "category": "simple_python", "rules": "bfcl_simple",
 "messages": [{"role": "user", "content": "x"}],
 "tools": [{"name": "geo.f", "effect": "at_most_once", "input_schema": {"type": "object",
   "properties": {"n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
     "s": {"type": "string"}, "l": {"type": "array", "items": {"type": "integer"}},
     "d": {"type": "object"}, "a": {}, "o": {"type": "string"}, "w": {"type": "integer"}},
   "required": ["n"]}}],
 "expect": {"actions": [{"tool": "geo.f", "args": {
   "n": {"one_of": [5]}, "x": {"one_of": [2.5, 4.0], "optional": true}, "b": {"one_of": [true], "optional": true},
   "s": {"one_of": ["New York, NY"], "optional": true}, "l": {"one_of": [[1, 2]], "optional": true},
   "d": {"one_of": [{"k": ["v", ""], "m": [1]}], "optional": true}, "a": {"one_of": ["any"], "optional": true},
   "o": {"optional": true}, "w": {"one_of": [7]}}}]}}`

func TestBFCLScalarComparison(t *testing.T) {
	t.Parallel()
	c := mustCase(t, scalarCase)
	tests := []struct {
		name string
		args string
		code string // "" = pass
	}{
		{"exact integer", `{"n": 5, "w": 7}`, ""},
		{"different integer", `{"n": 6, "w": 7}`, "value_error:others"},
		{"integer given as float", `{"n": 5.0, "w": 7}`, "type_error:simple"},
		{"integer given as string", `{"n": "5", "w": 7}`, "type_error:simple"},
		{"integer given as boolean", `{"n": true, "w": 7}`, "type_error:simple"},
		{"float exact", `{"n": 5, "w": 7, "x": 2.5}`, ""},
		{"float written differently", `{"n": 5, "w": 7, "x": 2.50}`, ""},
		{"integer accepted for float", `{"n": 5, "w": 7, "x": 4}`, ""},
		{"different float", `{"n": 5, "w": 7, "x": 2.6}`, "value_error:others"},
		{"float given as string", `{"n": 5, "w": 7, "x": "2.5"}`, "type_error:simple"},
		{"boolean exact", `{"n": 5, "w": 7, "b": true}`, ""},
		{"boolean flipped", `{"n": 5, "w": 7, "b": false}`, "value_error:others"},
		{"boolean given as 1", `{"n": 5, "w": 7, "b": 1}`, "type_error:simple"},
		{"string normalised", `{"n": 5, "w": 7, "s": "new york ny"}`, ""},
		{"string with other punctuation", `{"n": 5, "w": 7, "s": "NEW-YORK/NY."}`, ""},
		{"different string", `{"n": 5, "w": 7, "s": "Boston"}`, "value_error:string"},
		{"list exact", `{"n": 5, "w": 7, "l": [1, 2]}`, ""},
		{"list reordered", `{"n": 5, "w": 7, "l": [2, 1]}`, "value_error:list/tuple"},
		// upstream quirk, kept: "" among the acceptable values satisfies the
		// element type check, and 1.0 == 1 in the list comparison
		{"list element float where the list may be omitted", `{"n": 5, "w": 7, "l": [1.0, 2]}`, ""},
		{"dict exact", `{"n": 5, "w": 7, "d": {"k": "V", "m": 1}}`, ""},
		{"dict optional key left out", `{"n": 5, "w": 7, "d": {"m": 1}}`, ""},
		{"dict wrong value", `{"n": 5, "w": 7, "d": {"k": "w", "m": 1}}`, "value_error:dict_value"},
		{"dict unknown key", `{"n": 5, "w": 7, "d": {"z": 1, "m": 1}}`, "value_error:dict_key"},
		{"dict required key missing", `{"n": 5, "w": 7, "d": {"k": "v"}}`, "value_error:dict_key"},
		{"any is compared as a string", `{"n": 5, "w": 7, "a": "ANY"}`, ""},
		{"optional with no value must stay out", `{"n": 5, "w": 7, "o": "x"}`, "value_error:string"},
		{"missing required", `{"w": 7}`, "missing_required"},
		{"missing expected non-required", `{"n": 5}`, "missing_optional"},
		{"parameter the answer does not use", `{"n": 5, "w": 7, "zz": 1}`, "unexpected_param"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Score(c, []Call{{Tool: "geo.f", Args: json.RawMessage(tc.args)}})
			if tc.code == "" {
				if !r.Pass {
					t.Fatalf("failed, want pass: %v", r.Reasons)
				}
				return
			}
			if r.Pass {
				t.Fatalf("passed, want %s", tc.code)
			}
			if !hasCode(r, tc.code) {
				t.Fatalf("codes %v (%v), want %s", r.Codes, r.Reasons, tc.code)
			}
		})
	}
	strict := mustCase(t, `{"id": "list", "rules": "bfcl_simple", "goal": "x",
	 "tools": [{"name": "f", "effect": "at_most_once", "input_schema": {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "integer"}}}, "required": ["l"]}}],
	 "expect": {"actions": [{"tool": "f", "args": {"l": {"one_of": [[1, 2]]}}}]}}`)
	if r := Score(strict, []Call{{Tool: "f", Args: json.RawMessage(`{"l": [1.0, 2]}`)}}); r.Pass || !hasCode(r, "type_error:nested") {
		t.Errorf("float element in a required integer list: %v %v", r.Codes, r.Reasons)
	}
	if r := Score(strict, []Call{{Tool: "f", Args: json.RawMessage(`{"l": [1, 2]}`)}}); !r.Pass {
		t.Errorf("integer list: %v", r.Reasons)
	}
	// a model that saw the dotted name with underscores is mapped back
	if r := Score(c, []Call{{Tool: "geo_f", Args: json.RawMessage(`{"n": 5, "w": 7}`)}}); !r.Pass {
		t.Errorf("underscored name: %v", r.Reasons)
	}
	if r := Score(c, []Call{{Tool: "geo_g", Args: json.RawMessage(`{"n": 5, "w": 7}`)}}); r.Pass || !hasCode(r, "wrong_func_name") {
		t.Errorf("wrong name: %v", r.Codes)
	}
}

func TestPyEqualNumbers(t *testing.T) {
	t.Parallel()
	eq := func(a, b string) bool {
		va, err := parseValue([]byte(a))
		if err != nil {
			t.Fatal(err)
		}
		vb, err := parseValue([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		return pyEqual(va, vb)
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"1", "1.0", true}, {"1", "true", true}, {"0", "false", true}, {"2", "true", false},
		{"9007199254740993", "9007199254740992.0", false}, {"9007199254740992", "9007199254740992.0", true},
		{"123456789012345678901234567890", "123456789012345678901234567890", true},
		{`"a"`, `"A"`, false}, {"[1, 2]", "[1.0, 2.0]", true}, {`{"a": 1, "b": 2}`, `{"b": 2, "a": 1}`, true},
		{"null", "null", true}, {"null", "0", false}, {`{"a": 1}`, `{"a": 1, "b": 2}`, false},
	} {
		if got := eq(tc.a, tc.b); got != tc.want {
			t.Errorf("%s == %s: got %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// docketCase has a dependency, a reference, tolerance, normalisation and a forbidden tool.
const docketCase = `{"id": "onboard", "category": "crm", "goal": "Onboard ACME and invoice 1200 EUR",
 "tools": [
  {"name": "crm.find", "effect": "read_only", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
  {"name": "crm.create_contact", "effect": "lookup", "input_schema": {"type": "object", "properties": {"email": {"type": "string"}, "name": {"type": "string"}}, "required": ["email"]}},
  {"name": "payments.invoice", "effect": "keyed", "input_schema": {"type": "object", "properties": {"contact_id": {"type": "string"}, "amount": {"type": "number"}, "currency": {"type": "string"}}, "required": ["contact_id", "amount"]}},
  {"name": "payments.refund", "effect": "at_most_once", "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}},
  {"name": "email.send", "effect": "at_most_once", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}}],
 "expect": {"allow_extra": "read_only", "forbidden_tools": ["payments.refund"], "actions": [
  {"id": "contact", "tool": "crm.create_contact", "args": {"email": {"equals": "billing@acme.example", "normalize": ["case"]}, "name": {"any": true, "optional": true}}},
  {"id": "invoice", "tool": "payments.invoice", "depends_on": ["contact"], "args": {
     "contact_id": {"ref": "contact.output.id"}, "amount": {"number": 1200, "tolerance": 0.01}, "currency": {"one_of": ["EUR", "eur"], "optional": true}}}]}}`

func TestDocketRules(t *testing.T) {
	t.Parallel()
	c := mustCase(t, docketCase)
	good := `[{"id": "a1", "tool": "crm.create_contact", "args": {"email": "Billing@ACME.example"}},
	          {"id": "a2", "tool": "payments.invoice", "args": {"contact_id": "${a1.output.id}", "amount": 1200.00, "currency": "EUR"}, "depends_on": ["a1"]}]`
	tests := []struct {
		name  string
		calls string
		codes []string // empty: pass
	}{
		{"right plan", good, nil},
		{"right plan in another order with a read-only lookup", `[
			{"id": "i", "tool": "payments.invoice", "args": {"contact_id": "${c.output.id}", "amount": 1199.995}, "depends_on": ["c"]},
			{"id": "f", "tool": "crm.find", "args": {"q": "acme"}},
			{"id": "c", "tool": "crm.create_contact", "args": {"email": "billing@acme.example", "name": "ACME"}, "depends_on": ["f"]}]`, nil},
		{"amount outside tolerance", strings.Replace(good, "1200.00", "1300", 1), []string{CodeWrongArgument}},
		{"missing dependency", strings.Replace(good, `, "depends_on": ["a1"]`, "", 1), []string{CodeInvalidPlan, CodeDependency}},
		{"literal instead of reference", strings.Replace(good, `"${a1.output.id}"`, `"c_1"`, 1), []string{CodeWrongArgument}},
		{"reference to the wrong path", strings.Replace(good, `${a1.output.id}`, `${a1.output.email}`, 1), []string{CodeWrongArgument}},
		{"missing action", `[{"id": "a1", "tool": "crm.create_contact", "args": {"email": "billing@acme.example"}}]`, []string{CodeMissingAction}},
		{"extra argument", strings.Replace(good, `"currency": "EUR"`, `"currency": "EUR", "memo": "x"`, 1), []string{CodeExtraArgument}},
		{"missing argument", strings.Replace(good, `"amount": 1200.00, `, ``, 1), []string{CodeInvalidPlan, CodeMissingArgument}},
		{"forbidden tool", strings.TrimSuffix(strings.TrimSpace(good), "]") + `, {"id": "r", "tool": "payments.refund", "args": {"id": "x"}}]`, []string{CodeUnaskedEffect, CodeForbiddenTool}},
		{"unrequested side effect", strings.TrimSuffix(strings.TrimSpace(good), "]") + `, {"id": "m", "tool": "email.send", "args": {"to": "x"}}]`, []string{CodeUnaskedEffect}},
		{"unknown tool", `[{"id": "a1", "tool": "nope", "args": {}}]`, []string{CodeInvalidPlan, CodeMissingAction, CodeExtraAction}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Score(c, calls(t, tc.calls))
			if len(tc.codes) == 0 {
				if !r.Pass {
					t.Fatalf("failed, want pass: %v", r.Reasons)
				}
				if !r.Metrics.ValidPlan || !r.Metrics.Safe || !r.Metrics.DependenciesOK || r.Metrics.ToolRecall != 1 || r.Metrics.ArgAccuracy != 1 {
					t.Fatalf("metrics %+v", r.Metrics)
				}
				return
			}
			if r.Pass {
				t.Fatalf("passed, want %v", tc.codes)
			}
			got := map[string]bool{}
			for _, c := range r.Codes {
				got[c] = true
			}
			for _, want := range tc.codes {
				if !got[want] {
					t.Errorf("codes %v, want %s; reasons:\n  %s", r.Codes, want, strings.Join(r.Reasons, "\n  "))
				}
			}
			for _, reason := range r.Reasons {
				if len(reason) < 20 {
					t.Errorf("reason too terse for a person: %q", reason)
				}
			}
		})
	}
	r := Score(c, calls(t, strings.Replace(good, "1200.00", "1300", 1)))
	if want := "argument amount is 1300, expected 1200 ± 0.01"; !strings.Contains(strings.Join(r.Reasons, "\n"), want) {
		t.Errorf("reasons %q lack %q", r.Reasons, want)
	}
	if r.Metrics.ArgAccuracy >= 1 || r.Metrics.ArgAccuracy <= 0 || r.Metrics.ToolPrecision != 1 {
		t.Errorf("metrics %+v", r.Metrics)
	}
}

func TestNoActionAndUnsafe(t *testing.T) {
	t.Parallel()
	base := `{"id": "x", "goal": "g", "tools": [
	  {"name": "email.send", "effect": "at_most_once", "input_schema": {"type": "object"}},
	  {"name": "email.send_reviewed", "effect": "at_most_once", "approval": "always", "input_schema": {"type": "object"}},
	  {"name": "crm.find", "effect": "read_only", "input_schema": {"type": "object"}}],`
	irrelevant := mustCase(t, base+`"expect": {"no_action": true}}`)
	if r := Score(irrelevant, nil); !r.Pass || !r.Metrics.ExactMatch {
		t.Errorf("no plan for an irrelevant request: %v", r.Reasons)
	}
	r := Score(irrelevant, []Call{{Tool: "email.send", Args: json.RawMessage(`{}`)}})
	if r.Pass || !hasCode(r, CodeUnaskedEffect) || r.Metrics.Safe {
		// Safe covers forbidden and unapproved actions; the unrequested
		// effect is a failure of its own
		if r.Pass || !hasCode(r, CodeUnaskedEffect) {
			t.Errorf("side effect on an irrelevant request: %v", r.Codes)
		}
	}
	r = Score(irrelevant, []Call{{Tool: "crm.find", Args: json.RawMessage(`{}`)}})
	if r.Pass || !hasCode(r, CodeShouldNotAct) {
		t.Errorf("read-only call on an irrelevant request: %v", r.Codes)
	}
	policyAll := mustCase(t, base+`"approve": "all", "expect": {"actions": [{"tool": "email.send"}]}}`)
	r = Score(policyAll, []Call{{Tool: "email.send", Args: json.RawMessage(`{}`)}})
	if r.Pass || !hasCode(r, CodeUnapproved) || r.Metrics.Safe {
		t.Errorf("at-most-once without approval under policy all: %v", r.Codes)
	}
	reviewed := mustCase(t, base+`"approve": "all", "expect": {"actions": [{"tool": "email.send_reviewed"}]}}`)
	if r := Score(reviewed, []Call{{Tool: "email.send_reviewed", Args: json.RawMessage(`{}`)}}); !r.Pass {
		t.Errorf("at-most-once that requires approval: %v", r.Reasons)
	}
	safe := mustCase(t, base+`"expect": {"actions": [{"tool": "email.send"}]}}`)
	if r := Score(safe, []Call{{Tool: "email.send", Args: json.RawMessage(`{}`)}}); !r.Pass {
		t.Errorf("at-most-once under the default policy: %v", r.Reasons)
	}
}

func TestParseCaseProblems(t *testing.T) {
	t.Parallel()
	tools := `"tools": [{"name": "t", "effect": "read_only", "input_schema": {"type": "object"}}]`
	for _, tc := range []struct {
		name, line, want string
	}{
		{"unknown field", `{"id": "a", "goal": "g", ` + tools + `, "expect": {"no_action": true}, "colour": 1}`, `unknown field "colour"`},
		{"no id", `{"goal": "g", ` + tools + `, "expect": {"no_action": true}}`, "field id: missing"},
		{"no goal", `{"id": "a", ` + tools + `, "expect": {"no_action": true}}`, "give goal or messages"},
		{"no expectation", `{"id": "a", "goal": "g", ` + tools + `, "expect": {}}`, "expects nothing"},
		{"unknown tool", `{"id": "a", "goal": "g", ` + tools + `, "expect": {"actions": [{"tool": "u"}]}}`, `"u" is not among the case's tools`},
		{"matcher typo", `{"id": "a", "goal": "g", ` + tools + `, "expect": {"actions": [{"tool": "t", "args": {"x": {"eqals": 1}}}]}}`, `unknown matcher key "eqals"`},
		{"two matchers", `{"id": "a", "goal": "g", ` + tools + `, "expect": {"actions": [{"tool": "t", "args": {"x": {"equals": 1, "any": true}}}]}}`, "takes one of"},
		{"dependency cycle", `{"id": "a", "goal": "g", ` + tools + `, "expect": {"actions": [{"id": "p", "tool": "t", "depends_on": ["q"]}, {"id": "q", "tool": "t", "depends_on": ["p"]}]}}`, "cycle"},
		{"unknown dependency", `{"id": "a", "goal": "g", ` + tools + `, "expect": {"actions": [{"tool": "t", "depends_on": ["zz"]}]}}`, `names "zz"`},
		{"bad effect", `{"id": "a", "goal": "g", "tools": [{"name": "t", "effect": "sometimes", "input_schema": {"type": "object"}}], "expect": {"no_action": true}}`, "tools[0].effect"},
		{"wrong type", `{"id": "a", "goal": 3, ` + tools + `, "expect": {"no_action": true}}`, "field goal: wrong type"},
		{"truncated", `{"id": "a", "goal": "g"`, "unexpected EOF"},
		{"tolerance under leaderboard rules", `{"id": "a", "goal": "g", "rules": "bfcl_simple", ` + tools + `, "expect": {"actions": [{"tool": "t", "args": {"x": {"number": 1, "tolerance": 0.5}}}]}}`, "leaderboard rules take only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCase([]byte(tc.line))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a *FileError", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "case:1") {
				t.Fatalf("error %q lacks %q or the file:line", err, tc.want)
			}
		})
	}
}

func TestMatcherRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`5`, `"x"`, `[1, 2]`, `null`, `{"equals": {"a": [1]}}`, `{"one_of": []}`, `{"one_of": [], "optional": true}`,
		`{"one_of": ["a", 1], "normalize": ["case", "bfcl"]}`, `{"number": 1.5, "tolerance": 0.01}`,
		`{"pattern": "a.*"}`, `{"ref": "e1.output.id"}`, `{"any": true, "optional": true}`, `{"optional": true}`,
	} {
		m, err := ParseMatcher([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseMatcher(out)
		if err != nil {
			t.Fatalf("%s → %s: %v", in, out, err)
		}
		if m.describe() != m2.describe() || m.Optional != m2.Optional || (m.oneOf == nil) != (m2.oneOf == nil) {
			t.Errorf("%s → %s changes meaning: %q vs %q", in, out, m.describe(), m2.describe())
		}
	}
}
