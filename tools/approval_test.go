package tools

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/docketrun/docket/plan"
)

func TestNeedsApproval(t *testing.T) {
	t.Parallel()
	limits := Spec{Name: "pay", Approval: Approval{Above: map[string]json.Number{"amount": "100", "fee": "0.5"}}}
	cases := []struct {
		spec   Spec
		args   string
		need   bool
		reason string
	}{
		{Spec{}, `{"amount": 1e9}`, false, ""},
		{Spec{Approval: Approval{Always: true}}, `{}`, true, "approval: always"},
		{limits, `{"amount": 100}`, false, ""},
		{limits, `{"amount": 100.000}`, false, ""},
		{limits, `{"amount": 1200}`, true, "amount 1200 > 100"},
		{limits, `{"amount": 100.0000000000000000001}`, true, "amount 100.0000000000000000001 > 100"},
		{limits, `{"amount": 1.01e2}`, true, "amount 1.01e2 > 100"},
		{limits, `{"amount": 9007199254740993123}`, true, "amount 9007199254740993123 > 100"},
		{limits, `{"amount": -5000}`, false, ""},
		{limits, `{"amount": 99.99, "fee": 0.51}`, true, "fee 0.51 > 0.5"},
		{limits, `{"amount": 101, "fee": 1}`, true, "amount 101 > 100; fee 1 > 0.5"},
		{limits, `{"amount": "1200.50"}`, true, "amount 1200.50 > 100"},
		{limits, `{"amount": "12"}`, false, ""},
		{limits, `{"amount": null}`, false, ""},
		{limits, `{"other": 1e999999999}`, false, ""},
		{limits, `{"amount": 1e999999999}`, true, "amount 1e999999999 > 100"},
		{limits, `{"amount": 1e-999999999}`, false, ""},
		{limits, `{"amount": "${a1.output.total}"}`, true, "amount is not known until ${a1.output.total} resolves"},
		{limits, `{"amount": "lots"}`, true, "amount is not a number"},
		{limits, `{"amount": [1]}`, true, "amount is not a number"},
		{limits, `not json`, true, "arguments are not a JSON object"},
	}
	for _, c := range cases {
		need, reason := NeedsApproval(c.spec, json.RawMessage(c.args))
		if need != c.need || !strings.Contains(reason, c.reason) || (!c.need && reason != "") {
			t.Errorf("%s: got (%v, %q), want (%v, %q)", c.args, need, reason, c.need, c.reason)
		}
	}
}

func TestDecimalCompare(t *testing.T) {
	t.Parallel()
	order := []string{"-1e3", "-100", "-99.5", "-0.001", "0", "-0", "0.0e5", "1e-7", "0.5", "5e-1", "1", "100", "1e2", "100.5", "9007199254740993", "9007199254740994", "1e400"}
	prev, _ := parseDecimal(order[0])
	for _, s := range order[1:] {
		d, err := parseDecimal(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if d.cmp(prev) < 0 {
			t.Errorf("%s sorted before its predecessor", s)
		}
		prev = d
	}
	eq := [][2]string{{"0", "-0"}, {"0.5", "5e-1"}, {"100", "1e2"}, {"100", "100.000"}, {"1.5E+3", "1500"}}
	for _, p := range eq {
		a, _ := parseDecimal(p[0])
		b, _ := parseDecimal(p[1])
		if a.cmp(b) != 0 || b.cmp(a) != 0 {
			t.Errorf("%s != %s", p[0], p[1])
		}
	}
	for _, bad := range []string{"", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1x", "NaN", "1e99999999999999999999"} {
		if _, err := parseDecimal(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCompensationArgs(t *testing.T) {
	t.Parallel()
	c := Compensation{Tool: "refund", Args: json.RawMessage(`{
		"payment": "${output.id}", "amount": "${input.amount}", "first": "${output.items.0}",
		"all": "${input}", "fixed": "reason: undo", "n": 7, "nested": {"list": ["${output.items.1.sku}", true]}}`)}
	got, err := CompensationArgs(c, json.RawMessage(`{"amount": 12345678901234567890123}`),
		json.RawMessage(`{"id": "p_1", "items": ["a", {"sku": 42}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"all":{"amount":12345678901234567890123},"amount":12345678901234567890123,"first":"a","fixed":"reason: undo","n":7,"nested":{"list":[42,true]},"payment":"p_1"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	bad := []struct{ tmpl, want string }{
		{`{"id": "refund ${output.id}"}`, `at /id: "refund ${output.id}": a string containing "${" must be exactly`},
		{`{"id": "${a1.output.id}"}`, `must start with "input" or "output"`},
		{`{"id": "${output.missing}"}`, "at /id: output.missing: no such field"},
		{`{"id": "${output.items.7}"}`, "output.items.7: no such array index (length 2)"},
		{`{"id": "${output.id.x}"}`, "output.id.x: cannot index into a string"},
		{`{"id": "${output..id}"}`, "empty path segment"},
		{`["${output.id}"]`, "must be a JSON object"},
		{`{"id": `, "args template"},
	}
	for _, b := range bad {
		_, err := CompensationArgs(Compensation{Tool: "refund", Args: json.RawMessage(b.tmpl)}, json.RawMessage(`{}`), json.RawMessage(`{"id":"p","items":[1,2]}`))
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), `"refund"`) {
			t.Errorf("%s: error %v, want it to contain %q", b.tmpl, err, b.want)
		}
	}
	if _, err := CompensationArgs(Compensation{Tool: "r", Args: json.RawMessage(`{"id":"${output.id}"}`)}, nil, json.RawMessage(`{oops`)); err == nil || !strings.Contains(err.Error(), "output is not valid JSON") {
		t.Errorf("bad output: %v", err)
	}
}

// TestCompensationTemplateIsPlanReferenceGrammar: compensation templates are
// read with plan's reference parser, so what plan refuses as "not exactly one
// reference" is refused here with plan.ErrReference, and what it splits the
// same way works.
func TestCompensationTemplateIsPlanReferenceGrammar(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"refund ${output.id}", "${output.id} ", "${output.{id}}", "${output.id}${input.x}"} {
		_, planErr := plan.Refs(json.RawMessage(`{"x": ` + strconv.Quote(s) + `}`))
		err := Compensation{Tool: "refund", Args: json.RawMessage(`{"x": ` + strconv.Quote(s) + `}`)}.Check()
		if !errors.Is(planErr, plan.ErrReference) || !errors.Is(err, plan.ErrReference) {
			t.Errorf("%q: plan says %v, compensation says %v; want both plan.ErrReference", s, planErr, err)
		}
	}
	c := Compensation{Tool: "refund", Args: json.RawMessage(`{"id": "${output.items.1}", "all": "${input}"}`)}
	got, err := CompensationArgs(c, json.RawMessage(`{"a": 1}`), json.RawMessage(`{"items": ["x", "y"]}`))
	if err != nil || string(got) != `{"all":{"a":1},"id":"y"}` {
		t.Errorf("got %s, %v", got, err)
	}
}
