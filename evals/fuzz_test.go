package evals

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseCase: no input makes the dataset parser panic, and every case it
// accepts can be scored.
func FuzzParseCase(f *testing.F) {
	f.Add([]byte(scalarCase))
	f.Add([]byte(docketCase))
	f.Add([]byte(`{"id": "a", "goal": "g", "tools": [], "expect": {"no_action": true}}`))
	f.Add([]byte(`{"id": "a", "goal": "g", "tools": [{"name": "t", "effect": "read_only", "input_schema": {"type": "object"}}], "expect": {"actions": [{"tool": "t", "args": {"x": {"ref": "e1.output.id"}}}]}}`))
	f.Add([]byte(`{"id": "a", "goal": "g"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCase(data)
		if err != nil {
			return
		}
		for _, calls := range [][]Call{nil, GroundTruthCalls(c, 0), c.Reference} {
			r := Score(c, calls)
			if r.Pass && len(r.Codes) > 0 && !isBFCL(c.Rules) {
				t.Fatalf("passed with reasons %v", r.Reasons)
			}
		}
	})
}

// FuzzScoreArgs: any arguments, under both rule sets, score without panic,
// and a failure always says why.
func FuzzScoreArgs(f *testing.F) {
	f.Add("geo.f", `{"n": 5, "w": 7}`)
	f.Add("geo_f", `{"n": 5.0, "l": [1, "2"], "d": {"k": null}}`)
	f.Add("crm.create_contact", `{"email": "${a0.output.id}"}`)
	f.Add("payments.invoice", `{"contact_id": "${c1.output}", "amount": 1e400}`)
	f.Add("x", `[1, 2]`)
	f.Add("x", `{"a": {"b": {"c": [[[[{}]]]]}}}`)
	scalar, err := ParseCase([]byte(scalarCase))
	if err != nil {
		f.Fatal(err)
	}
	docket, err := ParseCase([]byte(docketCase))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		calls := []Call{{Tool: tool, Args: json.RawMessage(args)}, {ID: "c9", Tool: tool, Args: json.RawMessage(args), DependsOn: []string{"c1"}}}
		for _, c := range []*Case{scalar, docket} {
			for n := 0; n <= len(calls); n++ {
				r := Score(c, calls[:n])
				if !r.Pass && len(r.Reasons) == 0 {
					t.Fatalf("failed without a reason: %+v", r)
				}
			}
		}
	})
}

// FuzzParsePlans: no plans file makes the reader panic.
func FuzzParsePlans(f *testing.F) {
	f.Add([]byte(`{"id": "a", "calls": [{"tool": "t", "args": {"x": 1}}]}` + "\n" + `{"id": "a", "calls": []}`))
	f.Add([]byte(`{"id": "a", "calls": [{"tool": 3}]}`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParsePlans(bytes.NewReader(data), "fuzz")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, id := range ps.Order {
			if len(ps.ByID[id]) == 0 {
				t.Fatalf("id %s without lines", id)
			}
		}
	})
}

// FuzzImportBFCL: leaderboard lines of any shape import or fail cleanly, and
// what imports loads and scores.
func FuzzImportBFCL(f *testing.F) {
	f.Add(`{"id": "simple_python_0", "question": [[{"role": "user", "content": "x"}]], "function": [{"name": "a.b", "parameters": {"type": "dict", "properties": {"n": {"type": "float"}, "t": {"type": "tuple", "items": {"type": "any"}}}, "required": ["n"]}}]}`,
		`{"id": "simple_python_0", "ground_truth": [{"a.b": {"n": [1.5, ""], "t": [[1, "x"]]}}]}`)
	f.Add(`{"id": "x", "question": [], "function": []}`, `{"id": "x", "ground_truth": [{}]}`)
	f.Add(`{"id": "x", "question": [[{"role": "user", "content": "x"}]], "function": [{"name": "f"}]}`, `{"id": "x", "ground_truth": [{"f": {"a": []}}]}`)
	f.Fuzz(func(t *testing.T, q, a string) {
		var out bytes.Buffer
		_, err := ImportBFCL(BFCLImport{Questions: strings.NewReader(q), QuestionsName: "BFCL_v4_simple_python.json", Answers: strings.NewReader(a), AnswersName: "answers.json"}, &out)
		if err != nil {
			return
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			c, err := ParseCase([]byte(line))
			if err != nil {
				continue // e.g. a schema that does not compile
			}
			Score(c, GroundTruthCalls(c, 0))
		}
	})
}
