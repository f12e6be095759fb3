package plan_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/docketrun/docket/plan"
)

// Decode a plan, resolve the second action's references against the first
// action's recorded output, and derive its idempotency key.
func Example() {
	p, err := plan.Decode([]byte(`{
		"goal": "Create Ann and charge her 12.50 EUR",
		"actions": [
			{"id": "a1", "tool": "crm.create_contact", "args": {"email": "ann@example.com"}},
			{"id": "a2", "tool": "payments.charge", "depends_on": ["a1"],
			 "args": {"customer_id": "${a1.output.id}", "amount": 1250, "currency": "EUR"}}
		]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("order:", p.Order())

	a2, _ := p.Action("a2")
	outputs := map[string]json.RawMessage{"a1": json.RawMessage(`{"id": "cus_42", "email": "ann@example.com"}`)}
	args, err := plan.Resolve(a2.Args, outputs)
	if err != nil {
		fmt.Println(err)
		return
	}
	canonical, _ := plan.Canonical(args)
	fmt.Println("resolved:", string(canonical))

	key, err := plan.Key("run-1", a2.ID, a2.Tool, args)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("key:", key)
	// Output:
	// order: [a1 a2]
	// resolved: {"amount":1250,"currency":"EUR","customer_id":"cus_42"}
	// key: dk1_8ef27fbc317d284d1acecb1d7e8e714ceece9305522d28ce55d713085d8fb2b0
}

// Problems name the action and the field.
func ExampleDecode_problems() {
	_, err := plan.Decode([]byte(`{"actions": [
		{"id": "a1", "tool": "crm.create_contact", "args": {"email": "ann@example.com"}},
		{"id": "a2", "tool": "payments.charge", "args": {"customer_id": "${a1.output.id}", "note": "for ${a1.output.email}"}}
	]}`))
	var problems plan.Errors
	if errors.As(err, &problems) {
		for _, p := range problems {
			fmt.Println(p)
		}
	}
	// Output:
	// action "a2", field "args.note": bad reference: "for ${a1.output.email}" contains "${" but is not exactly one reference: docket does not interpolate text into strings; make the whole value a reference such as ${a1.output.id}
	// action "a2", field "args.customer_id": reference ${a1.output.id} names a1, which is not among its dependencies: add "a1" to depends_on
}

// A reference keeps the type of the value it points to.
func ExampleResolve() {
	args := json.RawMessage(`{"total": "${a1.output.total}", "lines": "${a1.output.lines}", "first": "${a1.output.lines.0.sku}"}`)
	out := map[string]json.RawMessage{"a1": json.RawMessage(`{"total": 12.5, "lines": [{"sku": "A-1"}]}`)}
	resolved, err := plan.Resolve(args, out)
	fmt.Println(string(resolved), err)

	_, err = plan.Resolve(json.RawMessage(`{"x": "${a1.output.lines.3}"}`), out)
	fmt.Println(err)
	// Output:
	// {"total": 12.5, "lines": [{"sku": "A-1"}], "first": "A-1"} <nil>
	// resolve args at "x": bad reference: ${a1.output.lines.3}: a1's output at "lines" has only 1 item
}
