package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func compiled(t *testing.T, rules ...Rule) []Rule {
	t.Helper()
	for i := range rules {
		if rules[i].Where == "" {
			rules[i].Where = "policy[" + string(rune('0'+i)) + "]"
		}
	}
	if err := Compile(rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

func in(args string) Input {
	return Input{ActionID: "a1", Tool: "pay", Class: "keyed", Key: "dk1_x", Args: json.RawMessage(args),
		Run: Run{ID: "r1", Goal: "pay the invoice", Creator: "token:alice", Revision: 1,
			Totals: map[string]Total{"pay": {Count: 2, Sums: map[string]string{"amount": "900.05"}}}},
		Now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
}

func TestEvalOutcomes(t *testing.T) {
	t.Parallel()
	big := Rule{Name: "big", When: "action.args.amount > 1000", Outcome: Approve, Approvers: 2, ExcludeCreator: true}
	crypto := Rule{Name: "no-crypto", When: `action.args.currency == "BTC"`, Outcome: Deny, Message: "no crypto payments"}
	small := Rule{Name: "small", When: "action.args.amount <= 1000", Outcome: Allow}
	cases := []struct {
		name    string
		rules   []Rule
		args    string
		matched bool
		outcome Outcome
		rule    string
		n       int
	}{
		{"nothing matches", []Rule{big}, `{"amount": 10, "currency": "EUR"}`, false, "", "", 0},
		{"allow", []Rule{big, small}, `{"amount": 10, "currency": "EUR"}`, true, Allow, "small", 0},
		{"approve two", []Rule{big, small}, `{"amount": 1200.10, "currency": "EUR"}`, true, Approve, "big", 2},
		{"deny beats approve", []Rule{big, crypto}, `{"amount": 5000, "currency": "BTC"}`, true, Deny, "no-crypto", 0},
		{"deny beats allow", []Rule{small, crypto}, `{"amount": 5, "currency": "BTC"}`, true, Deny, "no-crypto", 0},
		{"more approvers win", []Rule{
			{Name: "one", When: "true", Outcome: Approve},
			{Name: "three", When: "action.tool == 'pay'", Outcome: Approve, Approvers: 3},
		}, `{"amount": 1}`, true, Approve, "three", 3},
		{"run fields", []Rule{{Name: "creator", When: `run.creator == "token:alice" && run.revision == 1 && run.goal.contains("invoice")`, Outcome: Deny}}, `{}`, true, Deny, "creator", 0},
		{"totals", []Rule{{Name: "daily", When: `run.totals.pay.sum.amount + action.args.amount > 1000`, Outcome: Approve}}, `{"amount": 99.96}`, true, Approve, "daily", 1},
		{"totals under", []Rule{{Name: "daily", When: `run.totals.pay.sum.amount + action.args.amount > 1000`, Outcome: Approve}}, `{"amount": 99.95}`, false, "", "", 0},
		{"count", []Rule{{Name: "count", When: `run.totals.pay.count >= 2`, Outcome: Deny}}, `{}`, true, Deny, "count", 0},
		{"time", []Rule{{Name: "office", When: `now.getHours() < 8`, Outcome: Deny}}, `{}`, false, "", "", 0},
		{"builtin", []Rule{{Name: "approval: always", Func: func(json.RawMessage) (bool, string) { return true, "always" }, Outcome: Approve}}, `{}`, true, Approve, "approval: always", 1},
		{"has", []Rule{{Name: "memo", When: `has(action.args.memo) && action.args.memo.startsWith("urgent")`, Outcome: Approve}}, `{"memo": "urgent: pay"}`, true, Approve, "memo", 1},
		{"has not", []Rule{{Name: "memo", When: `has(action.args.memo) && action.args.memo.startsWith("urgent")`, Outcome: Approve}}, `{}`, false, "", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := Eval(compiled(t, c.rules...), in(c.args))
			if d.Matched != c.matched || d.Outcome != c.outcome || d.Rule != c.rule || d.Approvers != c.n || d.Err != "" {
				t.Fatalf("got %+v, want matched=%v outcome=%q rule=%q approvers=%d", d, c.matched, c.outcome, c.rule, c.n)
			}
		})
	}
}

// Decimals are exact: no amount becomes another through a double.
func TestDecimalsExact(t *testing.T) {
	t.Parallel()
	cases := []struct {
		when string
		args string
		want bool
	}{
		{"action.args.amount > 1200.1", `{"amount": 1200.10}`, false},
		{"action.args.amount == 1200.1", `{"amount": 1200.10}`, true},
		{"action.args.amount >= 1200.10", `{"amount": 1200.10}`, true},
		{"action.args.amount > 1200", `{"amount": 1200.10}`, true},
		{"action.args.amount > 1200", `{"amount": 1200.00}`, false},
		{"action.args.amount == 1200", `{"amount": 1200.00}`, true},
		{"1200 == action.args.amount", `{"amount": 1200.0}`, true},
		// 0.1 + 0.2 is 0.3 exactly, which doubles get wrong.
		{`action.args.a + action.args.b == decimal("0.3")`, `{"a": 0.1, "b": 0.2}`, true},
		{`action.args.a + action.args.b > 0.3`, `{"a": 0.1, "b": 0.2}`, false},
		// Beyond a double's 17 digits.
		{`action.args.amount > decimal("9007199254740993.01")`, `{"amount": 9007199254740993.02}`, true},
		{`action.args.amount > decimal("9007199254740993.02")`, `{"amount": 9007199254740993.02}`, false},
		{`decimal(action.args.amount) > decimal("1200.09")`, `{"amount": "1200.10"}`, true},
		{`decimal(action.args.amount) > 1200.1`, `{"amount": "1200.10"}`, false},
		{`action.args.amount < 0.0000001`, `{"amount": 1e-8}`, true},
	}
	for _, c := range cases {
		r := compiled(t, Rule{Name: "r", When: c.when, Outcome: Deny})
		d := Eval(r, in(c.args))
		if d.Err != "" {
			t.Errorf("%s with %s: error %s", c.when, c.args, d.Err)
			continue
		}
		if d.Matched != c.want {
			t.Errorf("%s with %s: matched %v, want %v", c.when, c.args, d.Matched, c.want)
		}
	}
}

// A rule that fails at run time denies and says why.
func TestRuntimeErrorDenies(t *testing.T) {
	t.Parallel()
	cases := []struct{ when, args, says string }{
		{"action.args.amount > 1000", `{}`, "no such key"},
		{"1000 < action.args.amount", `{"amount": 1200.5}`, "argument on the left"},
		{"action.args.amount > 10", `{"amount": "lots"}`, ""},
		{"action.args.amount > 10", `{"amount": 1e999999}`, "exponent"},
		{`decimal(action.args.memo) > 1`, `{"memo": "x"}`, "not a decimal"},
		{"action.args.flag", `{"flag": "yes"}`, "not a bool"},
	}
	for _, c := range cases {
		r := compiled(t, Rule{Name: "r", When: c.when, Outcome: Allow})
		d := Eval(r, in(c.args))
		if d.Outcome != Deny || d.Err == "" || !strings.Contains(d.Message, "fail closed") || !strings.Contains(d.Message, c.says) {
			t.Errorf("%s with %s: %+v, want a deny saying %q", c.when, c.args, d, c.says)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	rules := []Rule{
		{Where: `tool "pay" policy[0]`, When: "action.args.amount >", Outcome: Approve},
		{Where: `policy[1]`, When: `action.tool + "x"`, Outcome: Deny},
		{Where: `policy[2]`, When: "true", Outcome: "maybe"},
		{Where: `policy[3]`, When: "", Outcome: Deny},
		{Where: `policy[4]`, When: "true", Outcome: Allow, Approvers: 2},
		{Where: `policy[5]`, When: "nosuchvar == 1", Outcome: Deny},
		{Where: `policy[6]`, When: "true", Outcome: Approve, Approvers: 3, ApproverNames: []string{"token:a", "token:b"}},
	}
	err := Compile(rules)
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want *Error", err)
	}
	want := []string{
		`tool "pay" policy[0].when: ERROR: <input>:1:21`,
		`policy[1].when: must be a bool expression`,
		`policy[2].outcome`,
		`policy[3].when: missing`,
		`policy[4].outcome: approvers`,
		`policy[5].when: ERROR: <input>:1:1: undeclared reference to 'nosuchvar'`,
		`policy[6].approver_names`,
	}
	if len(pe.Problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(pe.Problems), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(pe.Problems[i].String(), w) {
			t.Errorf("problem %d: %q, want prefix %q", i, pe.Problems[i], w)
		}
	}
}

func TestMayApprove(t *testing.T) {
	t.Parallel()
	d := Decision{Rule: "big", ExcludeCreator: true, ApproverNames: []string{"token:finance-*", "cli:carol"}}
	for _, c := range []struct {
		by   string
		want bool
	}{{"token:finance-bob", true}, {"cli:carol", true}, {"token:alice", false}, {"token:finance-alice", false}} {
		ok, why := d.MayApprove(c.by, nil, "token:finance-alice")
		if ok != c.want || (!ok && why == "") {
			t.Errorf("%s: %v %q, want %v", c.by, ok, why, c.want)
		}
	}
}

// A rule's approver_groups let members of a group approve (whatever their
// name); with approver_names too, either admits; the creator stays out.
func TestMayApproveGroups(t *testing.T) {
	t.Parallel()
	r := compiled(t, Rule{Name: "finance", When: "true", Outcome: Approve, Approvers: 2, ApproverGroups: []string{"finance"}, ExcludeCreator: true})
	d := Eval(r, in(`{}`))
	if d.Outcome != Approve || d.Approvers != 2 || len(d.ApproverGroups) != 1 {
		t.Fatalf("decision %+v", d)
	}
	both := d
	both.ApproverNames = []string{"cli:carol"}
	for _, c := range []struct {
		d      Decision
		by     string
		groups []string
		want   bool
		says   string
	}{
		{d, "token:bob", []string{"finance"}, true, ""},
		{d, "token:bob", []string{"sales", "finance"}, true, ""},
		{d, "token:eve", []string{"sales"}, false, "rule finance lets only members of group finance approve, not token:eve (groups: sales)"},
		{d, "token:eve", nil, false, "not token:eve (no groups)"},
		{d, "token:alice", []string{"finance"}, false, "creator"},
		{both, "cli:carol", nil, true, ""},
		{both, "token:eve", nil, false, "lets only cli:carol or members of group finance approve"},
	} {
		ok, why := c.d.MayApprove(c.by, c.groups, "token:alice")
		if ok != c.want || !strings.Contains(why, c.says) {
			t.Errorf("%s %v: %v %q, want %v saying %q", c.by, c.groups, ok, why, c.want, c.says)
		}
	}
}

// Groups are checked like the rest of a rule: only on approve, well formed,
// none twice; with groups, fewer names than approvers is fine.
func TestCompileGroups(t *testing.T) {
	t.Parallel()
	if err := Compile([]Rule{{When: "true", Outcome: Approve, Approvers: 3, ApproverNames: []string{"token:a"}, ApproverGroups: []string{"finance"}}}); err != nil {
		t.Fatalf("names and a group: %v", err)
	}
	err := Compile([]Rule{
		{Where: "policy[0]", When: "true", Outcome: Deny, ApproverGroups: []string{"finance"}},
		{Where: "policy[1]", When: "true", Outcome: Approve, ApproverGroups: []string{"fin ance"}},
		{Where: "policy[2]", When: "true", Outcome: Approve, ApproverGroups: []string{"a", "a"}},
	})
	want := []string{"policy[0].approver_groups: belongs to an approve rule", `policy[1].approver_groups: group "fin ance"`, `policy[2].approver_groups: group "a" is listed twice`}
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != len(want) {
		t.Fatalf("got %v, want %d problems", err, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(pe.Problems[i].String(), w) {
			t.Errorf("problem %d: %q, want prefix %q", i, pe.Problems[i], w)
		}
	}
	berr := CheckBudgets([]Budget{
		{Where: "budgets[0]", Name: "a", Tools: []string{"pay"}, Limit: "1", Outcome: Deny, ApproverGroups: []string{"finance"}},
		{Where: "budgets[1]", Name: "b", Tools: []string{"pay"}, Limit: "1", Outcome: Approve, ApproverGroups: []string{"*"}},
	}, nil)
	if berr == nil || !strings.Contains(berr.Error(), "budgets[0].approver_groups: belongs to an approve budget") ||
		!strings.Contains(berr.Error(), `budgets[1].approver_groups: group "*"`) {
		t.Fatalf("budgets: %v", berr)
	}
}

func TestDecimalString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"1200.10": "1200.1", "1e2": "100", "-0.05": "-0.05", "12.5e-3": "0.0125", "0": "0"} {
		d, err := ParseDecimal(in)
		if err != nil || d.String() != want {
			t.Errorf("%s: %q %v, want %q", in, d.String(), err, want)
		}
	}
	for _, bad := range []string{"", "01", "1.", ".5", "+1", "1e", "1e401", " 1", "NaN"} {
		if _, err := ParseDecimal(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The README's example rules compile and decide as the README says.
func TestReadmeExample(t *testing.T) {
	t.Parallel()
	rules := compiled(t,
		Rule{Name: "no-crypto", When: "action.tool == 'pay' && action.args.currency in ['BTC', 'ETH']", Outcome: Deny},
		Rule{Name: "office-hours", When: "action.class == 'at_most_once' && (now.getHours('Europe/Berlin') < 8 || now.getHours('Europe/Berlin') >= 18)", Outcome: Approve},
		Rule{Name: "small", When: "action.args.amount <= 100", Outcome: Allow},
		Rule{Name: "four-eyes", When: "action.args.amount > 1000 || (has(run.totals.pay) && run.totals.pay.sum.amount + action.args.amount > 5000)",
			Outcome: Approve, Approvers: 2, ApproverNames: []string{"token:finance-*"}, ExcludeCreator: true})
	for _, c := range []struct {
		args   string
		totals map[string]Total
		want   string
	}{
		{`{"amount": 50, "currency": "EUR"}`, nil, "small"},
		{`{"amount": 500, "currency": "EUR"}`, nil, ""},
		{`{"amount": 1000.01, "currency": "EUR"}`, nil, "four-eyes"},
		{`{"amount": 500, "currency": "EUR"}`, map[string]Total{"pay": {Count: 5, Sums: map[string]string{"amount": "4500"}}}, ""},
		{`{"amount": 500.5, "currency": "EUR"}`, map[string]Total{"pay": {Count: 5, Sums: map[string]string{"amount": "4500"}}}, "four-eyes"},
		{`{"amount": 50, "currency": "BTC"}`, nil, "no-crypto"},
	} {
		input := in(c.args)
		input.Run.Totals = c.totals
		d := Eval(rules, input)
		if d.Err != "" || d.Rule != c.want {
			t.Errorf("%s with totals %v: %+v, want rule %q", c.args, c.totals, d, c.want)
		}
	}
}
