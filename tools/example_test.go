package tools_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/docketrun/docket/tools"
)

type refundIn struct {
	Charge string `json:"charge"`
	Amount int64  `json:"amount" jsonschema:"minimum=1"`
	Reason string `json:"reason,omitempty"`
}

type refundOut struct {
	ID string `json:"id"`
}

// A typed tool from a Go function, registered and checked like any other.
func ExampleFunc() {
	refund := tools.Func(tools.Spec{Name: "refund", Description: "Refund a charge.", Class: tools.Keyed},
		func(ctx context.Context, call tools.Call, in refundIn) (refundOut, error) {
			return refundOut{ID: "re_" + in.Charge}, nil
		})
	reg, err := tools.NewRegistry(refund)
	if err != nil {
		panic(err)
	}
	// Planned arguments may hold references to earlier outputs.
	fmt.Println(reg.ValidateArgs("refund", json.RawMessage(`{"charge": "${a1.output.id}", "amount": 5}`)))
	fmt.Println(reg.ValidateArgs("refund", json.RawMessage(`{"charge": "ch_1", "amount": 0}`)))

	out, err := refund.Call(context.Background(), tools.Call{Key: "dk1_x", Args: json.RawMessage(`{"charge": "ch_1", "amount": 5}`)})
	fmt.Println(string(out), err)
	// Output:
	// <nil>
	// invalid arguments for tool "refund": at /amount: minimum: got 0, want 1
	// {"id":"re_ch_1"} <nil>
}

func ExampleNeedsApproval() {
	spec := tools.Spec{Name: "pay", Approval: tools.Approval{Above: map[string]json.Number{"amount": "100"}}}
	fmt.Println(tools.NeedsApproval(spec, json.RawMessage(`{"amount": 1200}`)))
	fmt.Println(tools.NeedsApproval(spec, json.RawMessage(`{"amount": 99.5}`)))
	// Output:
	// true amount 1200 > 100
	// false
}

func ExampleCompensationArgs() {
	c := tools.Compensation{Tool: "refund", Args: json.RawMessage(`{"charge": "${output.id}", "amount": "${input.amount}"}`)}
	args, err := tools.CompensationArgs(c, json.RawMessage(`{"amount": 250, "to": "bob"}`), json.RawMessage(`{"id": "ch_9"}`))
	fmt.Println(string(args), err)
	// Output: {"amount":250,"charge":"ch_9"} <nil>
}
