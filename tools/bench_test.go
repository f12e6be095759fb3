package tools

import (
	"encoding/json"
	"testing"
)

func BenchmarkValidateArgs(b *testing.B) {
	r, err := NewRegistry(payTool())
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"amount":"${a1.output.total}","currency":"EUR","to":{"iban":"DE12345678"},"tags":["a","b"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ValidateArgs("pay", args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNeedsApproval(b *testing.B) {
	s := Spec{Approval: Approval{Above: map[string]json.Number{"amount": "100"}}}
	args := json.RawMessage(`{"amount": 1200.50, "currency": "EUR"}`)
	b.ReportAllocs()
	for b.Loop() {
		if need, _ := NeedsApproval(s, args); !need {
			b.Fatal("no approval needed")
		}
	}
}

// FuzzValidateArgs feeds arbitrary arguments (as a model might produce) to
// ValidateArgs and ValidateResolved: never a panic, and a refusal is always an
// *ArgsError with at least one problem.
func FuzzValidateArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"amount":1,"currency":"EUR"}`, `{"amount":"${a1.output.x}"}`, `{"note":"${"}`, `[]`, `{"to":{"iban":"${a.output}"}}`, `{"amount":1e999}`} {
		f.Add(s)
	}
	r, err := NewRegistry(payTool())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, err := range []error{r.ValidateArgs("pay", json.RawMessage(s)), r.ValidateResolved("pay", json.RawMessage(s))} {
			if err == nil {
				continue
			}
			ae, ok := err.(*ArgsError)
			if !ok || len(ae.Problems) == 0 {
				t.Fatalf("%s: %T %v", s, err, err)
			}
		}
	})
}
