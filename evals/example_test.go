package evals_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/docketrun/docket/evals"
)

// A case with one expected action, scored against a plan that gets the
// amount wrong.
func ExampleScore() {
	c, err := evals.ParseCase([]byte(`{"id": "pay-1", "category": "payments",
	  "goal": "Invoice cus_7 for 450 EUR",
	  "tools": [{"name": "invoice", "effect": "keyed", "input_schema": {"type": "object",
	    "properties": {"customer": {"type": "string"}, "amount": {"type": "number"}, "currency": {"type": "string"}}}}],
	  "expect": {"actions": [{"tool": "invoice", "args": {
	    "customer": "cus_7", "amount": {"number": 450, "tolerance": 0.01}, "currency": {"one_of": ["EUR", "eur"]}}}]}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := evals.Score(c, []evals.Call{{Tool: "invoice", Args: json.RawMessage(`{"customer": "cus_7", "amount": 540, "currency": "EUR"}`)}})
	fmt.Println(r.Pass)
	for _, reason := range r.Reasons {
		fmt.Println(reason)
	}
	fmt.Printf("argument accuracy %.2f\n", r.Metrics.ArgAccuracy)
	// Output:
	// false
	// action c1 (invoice): argument amount is 540, expected 450 ± 0.01
	// argument accuracy 0.67
}

// A leaderboard case: the verdict follows the leaderboard's AST checker.
func ExampleImportBFCL() {
	in := evals.BFCLImport{
		QuestionsName: "BFCL_v4_simple_python.json",
		Questions: strings.NewReader(`{"id": "simple_python_1", "question": [[{"role": "user", "content": "Calculate the factorial of 5."}]], ` +
			`"function": [{"name": "math.factorial", "description": "Factorial.", "parameters": {"type": "dict", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}]}`),
		AnswersName: "possible_answer/BFCL_v4_simple_python.json",
		Answers:     strings.NewReader(`{"id": "simple_python_1", "ground_truth": [{"math.factorial": {"number": [5]}}]}`),
	}
	var out bytes.Buffer
	if _, err := evals.ImportBFCL(in, &out); err != nil {
		fmt.Println(err)
		return
	}
	c, _ := evals.ParseCase(out.Bytes())
	for _, args := range []string{`{"number": 5}`, `{"number": 5.0}`, `{"number": 6}`} {
		// a model saw the tool as "math_factorial"; the name is mapped back
		r := evals.Score(c, []evals.Call{{Tool: "math_factorial", Args: json.RawMessage(args)}})
		fmt.Println(args, r.Pass, r.Codes)
	}
	// Output:
	// {"number": 5} true []
	// {"number": 5.0} false [type_error:simple]
	// {"number": 6} false [value_error:others]
}
