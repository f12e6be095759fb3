package main

import (
	"strings"
	"testing"
)

// FuzzStepRequest: the request on stdin is untrusted input. readStepRequest
// never panics, and what it accepts has a run id, at most one of plan and
// goal, and a valid policy.
func FuzzStepRequest(f *testing.F) {
	f.Add(`{"run_id": "r", "plan": {"goal": "g", "actions": []}, "approve": "all"}`)
	f.Add(`{"run_id": "r", "goal": "g"}`)
	f.Add(`{"run_id": ""}`)
	f.Add(`{"run_id": "r", "plan": null, "goal": ""} {}`)
	f.Add(`[1, 2]`)
	f.Fuzz(func(t *testing.T, in string) {
		req, err := readStepRequest(strings.NewReader(in))
		if err != nil {
			if exitCode(err) != exitBad {
				t.Fatalf("refused %q with exit %d, want 2: %v", in, exitCode(err), err)
			}
			return
		}
		if req.RunID == "" || (req.Goal != "" && len(req.Plan) > 0) {
			t.Fatalf("accepted %q as %+v", in, req)
		}
		if _, err := parsePolicy(req.Approve); err != nil {
			t.Fatalf("accepted policy %q", req.Approve)
		}
	})
}
