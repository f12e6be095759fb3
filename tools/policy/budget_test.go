package policy

import (
	"strings"
	"testing"
	"time"
)

func TestBudgetMeasure(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 13, 45, 0, 0, time.FixedZone("CET", 3600))
	sum := Budget{Name: "spend", Tools: []string{"pay"}, Sum: "payment.amount", GroupBy: "currency", Window: 24 * time.Hour, Limit: "100", Outcome: Deny}
	count := Budget{Name: "calls", Tools: []string{"pay"}, Per: PerRun, Window: time.Hour, Limit: "1", Outcome: Deny}
	all := Budget{Name: "all", Tools: []string{"pay"}, Per: PerAll, Limit: "1", Outcome: Deny}
	cases := []struct {
		name, args, creator string
		b                   Budget
		want                Measure
		err                 string
	}{
		{"sum exact", `{"payment": {"amount": 1200.10}, "currency": "EUR"}`, "token:alice", sum,
			Measure{Scope: "tenant:token:alice", Window: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), Group: "EUR", Amount: "1200.1"}, ""},
		{"amount in a string", `{"payment": {"amount": "0.10"}, "currency": "EUR"}`, "", sum,
			Measure{Scope: "tenant:-", Window: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), Group: "EUR", Amount: "0.1"}, ""},
		{"exponent kept exact", `{"payment": {"amount": 1e2}, "currency": 978}`, "cli:bob", sum,
			Measure{Scope: "tenant:cli:bob", Window: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), Group: "978", Amount: "100"}, ""},
		{"count per run per hour", `{}`, "x", count,
			Measure{Scope: "run:r1", Window: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), Amount: "1"}, ""},
		{"all, no window", `{}`, "x", all, Measure{Scope: "all", Amount: "1"}, ""},
		{"missing amount", `{"currency": "EUR"}`, "", sum, Measure{}, "argument payment.amount is missing"},
		{"null amount", `{"payment": {"amount": null}, "currency": "EUR"}`, "", sum, Measure{}, "argument payment.amount is missing"},
		{"not a number", `{"payment": {"amount": true}, "currency": "EUR"}`, "", sum, Measure{}, "is not a number"},
		{"negative", `{"payment": {"amount": -5}, "currency": "EUR"}`, "", sum, Measure{}, "is negative"},
		{"missing group", `{"payment": {"amount": 5}}`, "", sum, Measure{}, "currency (group_by) is missing"},
		{"object group", `{"payment": {"amount": 5}, "currency": {}}`, "", sum, Measure{}, "not a string, number or boolean"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, err := c.b.Measure([]byte(c.args), "r1", c.creator, now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || m != c.want {
				t.Fatalf("Measure = %+v, %v; want %+v", m, err, c.want)
			}
		})
	}
}
