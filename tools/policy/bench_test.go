package policy

import "testing"

// BenchmarkEval is one action's policy decision with three rules (the cost
// added before each claim): go test -run '^$' -bench Eval ./tools/policy/
func BenchmarkEval(b *testing.B) {
	rules := []Rule{
		{Name: "small", Where: "policy[0]", When: "action.args.amount <= 100", Outcome: Allow},
		{Name: "four-eyes", Where: "policy[1]", When: "action.args.amount > 1000 || (has(run.totals.pay) && run.totals.pay.sum.amount + action.args.amount > 5000)", Outcome: Approve, Approvers: 2},
		{Name: "no-crypto", Where: "policy[2]", When: "action.args.currency in ['BTC', 'ETH']", Outcome: Deny},
	}
	if err := Compile(rules); err != nil {
		b.Fatal(err)
	}
	input := in(`{"amount": 1200.10, "currency": "EUR", "customer": "c_1", "reference": "inv-7"}`)
	b.ReportAllocs()
	for b.Loop() {
		if d := Eval(rules, input); d.Rule != "four-eyes" {
			b.Fatal(d)
		}
	}
}
