package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// fakeRuns is a RunReader over one run in memory.
type fakeRuns struct {
	run   ledger.Run
	first *plan.Plan
}

func (f *fakeRuns) GetRun(_ context.Context, id string) (ledger.Run, error) {
	if f.run.ID != id {
		return ledger.Run{}, fmt.Errorf("run %s: %w", id, ledger.ErrNotFound)
	}
	return f.run, nil
}

func (f *fakeRuns) Plan(_ context.Context, id string, rev int) (*plan.Plan, error) {
	if f.run.ID != id || rev != 1 {
		return nil, fmt.Errorf("run %s revision %d: %w", id, rev, ledger.ErrNotFound)
	}
	return f.first, nil
}

func decodePlan(t *testing.T, s string) *plan.Plan {
	t.Helper()
	p, err := plan.Decode([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recorded makes the fake hold run "r" as created by req (stamped) or, with
// stamp false, as an older docket recorded it (no identity).
func recorded(t *testing.T, req Request, p *plan.Plan, policy Policy, stamp bool) *fakeRuns {
	t.Helper()
	if stamp {
		if err := req.Stamp(p); err != nil {
			t.Fatal(err)
		}
	}
	h, err := plan.Hash(p)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRuns{run: ledger.Run{ID: "r", Policy: string(policy), PlanHash: h, Goal: p.Goal}, first: p}
}

func TestRequestHash(t *testing.T) {
	t.Parallel()
	hash := func(r Request) string {
		t.Helper()
		h, err := r.Hash()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a := decodePlan(t, `{"goal":"g","actions":[{"id":"a","tool":"t","args":{"n":1,"s":"x"}}]}`)
	// Formatting, key order and number spelling are not the request.
	a2 := decodePlan(t, `{ "actions":[{"args":{"s":"x","n":1.0},"tool":"t","id":"a"}], "goal":"g"}`)
	b := decodePlan(t, `{"goal":"g","actions":[{"id":"a","tool":"t","args":{"n":2,"s":"x"}}]}`)
	if hash(Request{Plan: a}) != hash(Request{Plan: a2}) {
		t.Fatal("the same plan spelled differently hashes differently")
	}
	if hash(Request{Plan: a}) == hash(Request{Plan: b}) {
		t.Fatal("different plans hash the same")
	}
	if hash(Request{Plan: a}) != hash(Request{Plan: a, Policy: PolicyAll}) {
		t.Fatal("the policy is part of the hash (it is recorded with the run instead)")
	}
	if hash(Request{Goal: "g"}) == hash(Request{Plan: a}) {
		t.Fatal("a goal and a plan with that goal hash the same")
	}
	m1 := Request{Goal: "g", Messages: json.RawMessage(`[{"role":"user","content":"hi","n":10}]`)}
	m2 := Request{Goal: "g", Messages: json.RawMessage(` [ {"content":"hi","n":1e1,"role":"user"} ]`)}
	if hash(m1) != hash(m2) {
		t.Fatal("the same conversation spelled differently hashes differently")
	}
	if hash(m1) == hash(Request{Goal: "g"}) || hash(Request{Goal: "g", Messages: json.RawMessage("null")}) != hash(Request{Goal: "g"}) {
		t.Fatal("messages are not (or null messages are) part of the hash")
	}
	if h := hash(Request{Goal: "g"}); !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+64 {
		t.Fatalf("hash %q", h)
	}

	for name, r := range map[string]Request{
		"nothing":              {},
		"plan and goal":        {Plan: a, Goal: "g"},
		"a number beyond 2^53": {Goal: "g", Messages: json.RawMessage(`[{"n":9007199254740993}]`)},
		"invalid UTF-8 goal":   {Goal: "g\xff"},
		"messages not JSON":    {Goal: "g", Messages: json.RawMessage(`[{`)},
	} {
		if _, err := r.Hash(); !errors.Is(err, ErrInvalidPlan) {
			t.Errorf("%s: err = %v, want ErrInvalidPlan", name, err)
		}
	}
}

func TestSameRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const planA = `{"goal":"g","actions":[{"id":"a","tool":"t","args":{"n":1}}]}`
	const planB = `{"goal":"g","actions":[{"id":"a","tool":"t","args":{"n":2}}]}`
	msgs := json.RawMessage(`[{"role":"user","content":"g"}]`)
	type tc struct {
		name    string
		runs    func(t *testing.T) *fakeRuns
		req     func(t *testing.T) Request
		want    error  // nil, ErrRequestMismatch or ledger.ErrNotFound
		message string // in the error
	}
	planRun := func(policy Policy, stamp bool) func(t *testing.T) *fakeRuns {
		return func(t *testing.T) *fakeRuns {
			return recorded(t, Request{Plan: decodePlan(t, planA)}, decodePlan(t, planA), policy, stamp)
		}
	}
	goalRun := func(stamp bool, m json.RawMessage) func(t *testing.T) *fakeRuns {
		return func(t *testing.T) *fakeRuns { // the model planned planA for the goal
			return recorded(t, Request{Goal: "g", Messages: m}, decodePlan(t, planA), PolicySafe, stamp)
		}
	}
	withPlan := func(s string, pol Policy) func(t *testing.T) Request {
		return func(t *testing.T) Request { return Request{Plan: decodePlan(t, s), Policy: pol} }
	}
	withGoal := func(g string, m json.RawMessage, pol Policy) func(t *testing.T) Request {
		return func(*testing.T) Request { return Request{Goal: g, Messages: m, Policy: pol} }
	}
	for _, c := range []tc{
		{"same plan", planRun(PolicyNone, true), withPlan(planA, ""), nil, ""},
		{"same plan, same policy named", planRun(PolicyNone, true), withPlan(planA, PolicyNone), nil, ""},
		{"same plan, another policy named", planRun(PolicyNone, true), withPlan(planA, PolicyAll), ErrRequestMismatch, `policy "none", not "all"`},
		{"another plan", planRun(PolicySafe, true), withPlan(planB, ""), ErrRequestMismatch, "different request"},
		{"a goal for a plan's run", planRun(PolicySafe, true), withGoal("g", nil, ""), ErrRequestMismatch, "different request"},
		{"same goal", goalRun(true, nil), withGoal("g", nil, PolicySafe), nil, ""},
		{"the planned plan for a goal's run", goalRun(true, nil), withPlan(planA, ""), ErrRequestMismatch, "different request"},
		{"same conversation", goalRun(true, msgs), withGoal("g", msgs, ""), nil, ""},
		{"another conversation", goalRun(true, msgs), withGoal("g", json.RawMessage(`[{"role":"user","content":"h"}]`), ""), ErrRequestMismatch, "different request"},
		{"no run", func(*testing.T) *fakeRuns { return &fakeRuns{} }, withPlan(planA, ""), ledger.ErrNotFound, ""},
		// Runs recorded before identities were: judged by plan hash or goal.
		{"old run, same plan", planRun(PolicySafe, false), withPlan(planA, PolicySafe), nil, ""},
		{"old run, another plan", planRun(PolicySafe, false), withPlan(planB, ""), ErrRequestMismatch, "different plan"},
		{"old run, same goal", goalRun(false, nil), withGoal("g", nil, ""), nil, ""},
		{"old run, another goal", goalRun(false, nil), withGoal("h", nil, ""), ErrRequestMismatch, `another goal ("g")`},
		{"old run, a conversation", goalRun(false, msgs), withGoal("g", msgs, ""), ErrRequestMismatch, "older docket"},
		{"old run, another policy", planRun(PolicySafe, false), withPlan(planA, PolicyNone), ErrRequestMismatch, "policy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runs := c.runs(t)
			_, err := SameRequest(ctx, runs, "r", c.req(t))
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("err = %v, want the same request", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("err = %v, want %v", err, c.want)
			case c.message != "" && !strings.Contains(err.Error(), c.message):
				t.Fatalf("err = %v, want it to say %q", err, c.message)
			}
			if errors.Is(err, ErrRequestMismatch) && !errors.Is(err, ErrPlanMismatch) {
				t.Fatal("a request mismatch is not a plan mismatch to older callers")
			}
		})
	}
}
