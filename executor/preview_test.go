package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/tooltest"
)

// previewWorld is the world of the replay-preview tests: a keyed "pay"
// under a rule over the run's totals (deny past 50 in one run) and one
// that asks two people past 1000, an idempotent "note", an at-most-once
// "charge", a keyed "book" undone by "cancel", and a "fee" under a budget
// of two per run (deny past it). A call whose args say "fail": true is
// rejected (a definite failure); a charge whose args say "lose": true
// loses its reply (outcome unknown). It records which keys were called
// while calls are counted.
type previewWorld struct {
	mu       sync.Mutex
	counting bool
	called   map[string]int
}

func previewSetup(t *testing.T, parallelism int) (*bundle, *previewWorld) {
	t.Helper()
	rules := []policy.Rule{
		{Name: "run-cap", Where: "policy[0]", When: `has(run.totals.pay) && run.totals.pay.sum.amount + action.args.amount > 50`,
			Outcome: policy.Deny, Message: "no more than 50 in one run"},
		{Name: "four-eyes", Where: "policy[1]", When: "action.args.amount > 1000", Outcome: policy.Approve, Approvers: 2, Message: "two people"},
	}
	if err := policy.Compile(rules); err != nil {
		t.Fatal(err)
	}
	budgets := []policy.Budget{{Name: "fees", Where: "budgets[0]", Tools: []string{"fee"}, Per: policy.PerRun, Limit: "2",
		Outcome: policy.Deny, Message: "two fees per run"}}
	if err := policy.CheckBudgets(budgets, nil); err != nil {
		t.Fatal(err)
	}
	pw := &previewWorld{called: map[string]int{}}
	b := setup(t, nil, func(c *Config) { c.Parallelism = parallelism })
	b.world.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
		pw.mu.Lock()
		if pw.counting {
			pw.called[call.Key]++
		}
		pw.mu.Unlock()
		var args struct {
			Fail bool `json:"fail"`
			Lose bool `json:"lose"`
		}
		_ = json.Unmarshal(call.Args, &args)
		switch {
		case args.Fail:
			return tooltest.Reject
		case args.Lose:
			return tooltest.LoseReply
		}
		return tooltest.NoFault
	}
	pay := spec("pay", tools.Keyed)
	pay.Policy = rules
	book := spec("book", tools.Keyed)
	book.Compensate = &tools.Compensation{Tool: "cancel", Args: json.RawMessage(`{"booking":"${output.id}"}`)}
	b.useTools(budgets, b.world.Tool(pay), b.world.Tool(spec("note", tools.Idempotent)), b.world.Tool(spec("charge", tools.AtMostOnce)),
		b.world.Tool(book), b.world.Tool(spec("cancel", tools.Idempotent)), b.world.Tool(spec("fee", tools.Idempotent)))
	return b, pw
}

// observed is what the replay did with a row, in the preview's words: the
// outcome the preview must have said (runs with people to wait for is
// "awaits").
func (pw *previewWorld) observed(r ledger.Action) string {
	pw.mu.Lock()
	called := pw.called[r.Key] > 0
	pw.mu.Unlock()
	switch {
	case r.Status == ledger.StatusCompensated && called:
		return PreviewRuns + ", undone"
	case r.Status == ledger.StatusCompensated:
		return PreviewKeeps + ", undone"
	case r.Status == ledger.StatusSucceeded && called:
		return PreviewRuns
	case r.Status == ledger.StatusSucceeded:
		return PreviewKeeps
	case r.Status == ledger.StatusFailed && !called:
		return PreviewFails
	case r.Status == ledger.StatusNeedsReview && !called:
		return PreviewReview
	case r.Status == ledger.StatusRejected && strings.HasPrefix(r.Error, deniedPrefix):
		return PreviewDenied
	case r.Status == ledger.StatusSkipped:
		return PreviewSkipped
	case (r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved) && r.Attempts == 0:
		return "held" // not started: it waits for a person, or for an action that does
	}
	return "unexpected: " + string(r.Status) + " (" + r.Error + ")"
}

// said is the preview's outcome in observed's words.
func said(s PreviewStep) string {
	switch {
	case s.Outcome == PreviewRuns && s.Approval != nil && s.Approval.Need > 0:
		return "held"
	case s.Outcome == PreviewWaits:
		return "held"
	case s.Undone:
		return s.Outcome + ", undone"
	}
	return s.Outcome
}

// TestPreviewMatchesReplay previews a replay, then performs it on the same
// Badger ledger, and checks that each action did what the preview said
// (and the run ended as the preview implies). Actions that refer to an
// output the replay produces ("follows") are decided only then: the table
// says what they did.
func TestPreviewMatchesReplay(t *testing.T) {
	t.Parallel()
	type step = plan.Action
	cases := []struct {
		name  string
		pol   Policy
		first []step // revision 1, run to its end first
		prep  func(t *testing.T, b *bundle)
		next  []step
		want  map[string]string // the preview's outcome per action
		// follows: what an action the preview says "follows" did.
		follows map[string]string
		// parallel: run with many actions in flight (otherwise one at a
		// time, the order the preview walks).
		parallel bool
	}{{
		name:  "chain with an unchanged failed key",
		first: []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 10, "fail": true}`, "a"), pa("c", "note", `{"x": 2}`, "b")},
		next:  []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 10, "fail": true}`, "a"), pa("c", "note", `{"x": 3}`, "b")},
		want:  map[string]string{"a": PreviewKeeps, "b": PreviewFails, "c": PreviewSkipped},
	}, {
		name:  "failed key first, a succeeded key after it is linked",
		first: []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 10, "fail": true}`, "a")},
		next:  []step{pa("b", "pay", `{"amount": 10, "fail": true}`), pa("a", "note", `{"x": 1}`), pa("n", "note", `{"x": 9}`)},
		want:  map[string]string{"b": PreviewFails, "a": PreviewKeeps, "n": PreviewSkipped},
	}, {
		name:  "chain under a rule over the run's totals",
		first: []step{pa("p1", "pay", `{"amount": 40}`)},
		next:  []step{pa("p1", "pay", `{"amount": 40}`), pa("p2", "pay", `{"amount": 20}`, "p1"), pa("n", "note", `{"x": 1}`, "p2")},
		want:  map[string]string{"p1": PreviewKeeps, "p2": PreviewDenied, "n": PreviewSkipped},
	}, {
		name:  "chain under the totals rule within it",
		first: []step{pa("p1", "pay", `{"amount": 40}`)},
		next:  []step{pa("p1", "pay", `{"amount": 30}`), pa("p2", "pay", `{"amount": 20}`, "p1"), pa("p3", "pay", `{"amount": 1}`, "p2")},
		want:  map[string]string{"p1": PreviewRuns, "p2": PreviewRuns, "p3": PreviewDenied},
	}, {
		name:  "independent siblings under the totals rule, one at a time",
		first: []step{pa("n", "note", `{"x": 1}`)},
		next:  []step{pa("n", "note", `{"x": 1}`), pa("p1", "pay", `{"amount": 40}`), pa("p2", "pay", `{"amount": 20}`)},
		want:  map[string]string{"n": PreviewKeeps, "p1": PreviewRuns, "p2": PreviewDenied},
	}, {
		name:     "independent siblings under the totals rule, claimed together",
		first:    []step{pa("n", "note", `{"x": 1}`)},
		next:     []step{pa("p1", "pay", `{"amount": 40}`), pa("p2", "pay", `{"amount": 20}`)},
		want:     map[string]string{"p1": PreviewRuns, "p2": PreviewDenied},
		parallel: true,
	}, {
		name: "diamond with a join",
		first: []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 10}`, "a"), pa("c", "pay", `{"amount": 10}`, "a"),
			pa("d", "note", `{"x": 2}`, "b", "c"), pa("e", "note", `{"from": "${b.output.id}"}`, "b", "c")},
		next: []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 15}`, "a"), pa("c", "pay", `{"amount": 10}`, "a"),
			pa("d", "note", `{"x": 2}`, "b", "c"), pa("e", "note", `{"from": "${b.output.id}"}`, "b", "c")},
		want:     map[string]string{"a": PreviewKeeps, "b": PreviewRuns, "c": PreviewKeeps, "d": PreviewKeeps, "e": PreviewFollows},
		follows:  map[string]string{"e": PreviewRuns},
		parallel: true,
	}, {
		name:  "diamond whose join passes the run's cap",
		first: []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 10}`, "a"), pa("c", "pay", `{"amount": 10}`, "a"), pa("d", "pay", `{"amount": 5}`, "b", "c")},
		next:  []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 20}`, "a"), pa("c", "pay", `{"amount": 20}`, "a"), pa("d", "pay", `{"amount": 5}`, "b", "c")},
		want:  map[string]string{"a": PreviewKeeps, "b": PreviewRuns, "c": PreviewRuns, "d": PreviewKeeps},
	}, {
		name:  "diamond whose join is denied by the run's cap",
		first: []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 10}`, "a"), pa("c", "pay", `{"amount": 10}`, "a"), pa("d", "pay", `{"amount": 5}`, "b", "c")},
		next:  []step{pa("a", "note", `{"x": 1}`), pa("b", "pay", `{"amount": 20}`, "a"), pa("c", "pay", `{"amount": 20}`, "a"), pa("d", "pay", `{"amount": 15}`, "b", "c")},
		want:  map[string]string{"a": PreviewKeeps, "b": PreviewRuns, "c": PreviewRuns, "d": PreviewDenied},
	}, {
		name:     "approval holds its dependents, a sibling runs",
		first:    []step{pa("n", "note", `{"x": 1}`)},
		next:     []step{pa("p1", "pay", `{"amount": 2000}`), pa("n", "note", `{"x": 1}`, "p1"), pa("f", "fee", `{"x": 1}`)},
		want:     map[string]string{"p1": PreviewRuns, "n": PreviewWaits, "f": PreviewRuns},
		parallel: true,
	}, {
		name:  "a denial skips what waits for approval",
		first: []step{pa("n", "note", `{"x": 1}`)},
		next:  []step{pa("p1", "pay", `{"amount": 2000}`), pa("n", "note", `{"x": 1}`, "p1"), pa("f1", "fee", `{"x": 1}`), pa("f2", "fee", `{"x": 2}`), pa("f3", "fee", `{"x": 3}`)},
		// n waits for p1, never started: its key succeeded, so it is linked.
		want:     map[string]string{"p1": PreviewSkipped, "n": PreviewKeeps, "f1": PreviewRuns, "f2": PreviewRuns, "f3": PreviewDenied},
		parallel: true,
	}, {
		name:  "a denial skips what waits for approval, one at a time",
		first: []step{pa("n", "note", `{"x": 1}`)},
		next:  []step{pa("p1", "pay", `{"amount": 2000}`), pa("n", "note", `{"x": 1}`, "p1"), pa("f1", "fee", `{"x": 1}`), pa("f2", "fee", `{"x": 2}`), pa("f3", "fee", `{"x": 3}`)},
		want:  map[string]string{"p1": PreviewSkipped, "n": PreviewKeeps, "f1": PreviewRuns, "f2": PreviewRuns, "f3": PreviewDenied},
	}, {
		name:  "over a budget: unchanged fees keep their share",
		first: []step{pa("f1", "fee", `{"x": 1}`), pa("f2", "fee", `{"x": 2}`)},
		next:  []step{pa("f1", "fee", `{"x": 1}`), pa("f2", "fee", `{"x": 2}`), pa("f3", "fee", `{"x": 3}`)},
		want:  map[string]string{"f1": PreviewKeeps, "f2": PreviewKeeps, "f3": PreviewDenied},
	}, {
		name:  "compensated, then changed: runs again",
		first: []step{pa("bk", "book", `{"n": 1}`), pa("x", "pay", `{"amount": 1, "fail": true}`, "bk")},
		next:  []step{pa("bk", "book", `{"n": 2}`), pa("x", "pay", `{"amount": 1}`, "bk")},
		want:  map[string]string{"bk": PreviewRuns, "x": PreviewRuns},
	}, {
		name:  "a failed key after a run: succeeded actions are compensated",
		first: []step{pa("x", "pay", `{"amount": 1, "fail": true}`)},
		next:  []step{pa("bk", "book", `{"n": 1}`), pa("x", "pay", `{"amount": 1, "fail": true}`, "bk")},
		want:  map[string]string{"bk": PreviewRuns, "x": PreviewFails},
	}, {
		name:  "a person skipped it: its dependents are skipped",
		first: []step{pa("c", "charge", `{"lose": true}`), pa("n", "note", `{"x": 1}`, "c")},
		prep: func(t *testing.T, b *bundle) {
			if err := b.eng.Resolve(context.Background(), "r", "c", ledger.Resolution{Skip: true, By: "token:bob"}); err != nil {
				t.Fatal(err)
			}
		},
		next: []step{pa("c", "charge", `{"lose": true}`), pa("n", "note", `{"x": 2}`, "c"), pa("m", "note", `{"x": 3}`)},
		pol:  PolicyAll,
		want: map[string]string{"c": PreviewSkipped, "n": PreviewSkipped, "m": PreviewRuns},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			par := 1
			if c.parallel {
				par = DefaultParallelism
			}
			b, pw := previewSetup(t, par)
			ctx := context.Background()
			pol := cmp.Or(c.pol, PolicySafe)
			if _, err := b.eng.Run(ctx, "r", mkPlan(t, c.first...), &RunOptions{Policy: pol, Creator: "token:alice"}); err != nil {
				t.Fatalf("run revision 1: %v", err)
			}
			if c.prep != nil {
				c.prep(t, b)
			}
			next := mkPlan(t, c.next...)
			before := len(b.events("r"))
			steps, err := b.eng.PreviewReplay(ctx, "r", next)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(b.events("r")); n != before {
				t.Fatalf("the preview recorded %d events", n-before)
			}
			said := map[string]PreviewStep{}
			for _, s := range steps {
				said[s.ActionID] = s
				if want := c.want[s.ActionID]; s.Outcome != want {
					t.Errorf("preview %s: %s (%s), want %s", s.ActionID, s.Outcome, s.Why, want)
				}
			}

			pw.mu.Lock()
			pw.counting = true
			pw.mu.Unlock()
			doc, err := b.eng.Replay(ctx, "r", next, nil)
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			for _, a := range c.next {
				s, r := said[a.ID], row(t, doc, a.ID)
				want := previewSaid(s)
				if s.Outcome == PreviewFollows {
					want = c.follows[a.ID]
				}
				if got := pw.observed(r); got != want {
					t.Errorf("replay %s: %s, but the preview said %s (%s); actions: %s", a.ID, got, s.Outcome, s.Why, docString(doc))
				}
				if s.Key != "" && r.Key != "" && s.Key != r.Key {
					t.Errorf("%s: preview key %s, replay key %s", a.ID, s.Key, r.Key)
				}
			}
			if want := previewRunStatus(steps); doc.Run.Status != want {
				t.Errorf("replay ended %s (%s), the preview implies %s", doc.Run.Status, doc.Run.Error, want)
			}
		})
	}
}

// previewSaid is said, by another name inside the test (said is a local there).
func previewSaid(s PreviewStep) string { return said(s) }

// previewRunStatus is how a replay ends that does what steps say.
func previewRunStatus(steps []PreviewStep) ledger.RunStatus {
	held := false
	for _, s := range steps {
		switch said(s) {
		case PreviewDenied, PreviewFails, PreviewRefused:
			return ledger.RunFailed
		case "held":
			held = true
		case PreviewReview:
			return ledger.RunPaused
		}
	}
	if held {
		return ledger.RunAwaitingApproval
	}
	return ledger.RunCompleted
}

// A replay that Replay refuses, the preview refuses the same way: an
// unchanged action whose effect was undone (ErrUndone), and a revision
// with an action whose outcome is unknown (ErrBusy).
func TestPreviewRefusesAsReplay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		first []plan.Action
		next  []plan.Action
		want  error
	}{
		{"compensated and unchanged",
			[]plan.Action{pa("bk", "book", `{"n": 1}`), pa("x", "pay", `{"amount": 1, "fail": true}`, "bk")},
			[]plan.Action{pa("bk", "book", `{"n": 1}`), pa("x", "pay", `{"amount": 1}`, "bk")}, ErrUndone},
		{"needs review",
			[]plan.Action{pa("c", "charge", `{"lose": true}`)},
			[]plan.Action{pa("c", "charge", `{"lose": true}`), pa("n", "note", `{"x": 1}`)}, ErrBusy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, _ := previewSetup(t, 1)
			ctx := context.Background()
			if _, err := b.eng.Run(ctx, "r", mkPlan(t, c.first...), &RunOptions{Policy: PolicyAll}); err != nil {
				t.Fatal(err)
			}
			next := mkPlan(t, c.next...)
			if _, err := b.eng.PreviewReplay(ctx, "r", next); !errors.Is(err, c.want) {
				t.Errorf("preview: %v, want %v", err, c.want)
			}
			if _, err := b.eng.Replay(ctx, "r", next, nil); !errors.Is(err, c.want) {
				t.Errorf("replay: %v, want %v", err, c.want)
			}
		})
	}
}

// decideStart over every kind of key record and gate.
func TestDecideStart(t *testing.T) {
	t.Parallel()
	allow := ledger.Gate{Outcome: string(policy.Allow)}
	approve := ledger.Gate{Rule: "four-eyes", Outcome: string(policy.Approve), Need: 2}
	deny := ledger.Gate{Rule: "no", Outcome: string(policy.Deny)}
	rec := func(s ledger.Status) *ledger.KeyRecord {
		return &ledger.KeyRecord{State: s, Attempt: 1, ClaimedAt: time.Unix(0, 0)}
	}
	cases := []struct {
		name     string
		gate     ledger.Gate
		approved bool
		rec      *ledger.KeyRecord
		want     startVerdict
	}{
		{"new key, allowed", allow, true, nil, startRun},
		{"new key, needs people", approve, false, nil, startAwait},
		{"new key, approved", approve, true, nil, startRun},
		{"new key, denied", deny, true, nil, startDeny},
		{"succeeded key", allow, true, rec(ledger.StatusSucceeded), startKeep},
		{"succeeded key, needs people: nothing is called", approve, false, rec(ledger.StatusSucceeded), startKeep},
		{"succeeded key, denied", deny, false, rec(ledger.StatusSucceeded), startDeny},
		{"failed key", allow, true, rec(ledger.StatusFailed), startMirrorFailed},
		{"failed key, needs people", approve, false, rec(ledger.StatusFailed), startMirrorFailed},
		{"key needs review", allow, true, rec(ledger.StatusNeedsReview), startMirrorReview},
		{"skipped key", allow, true, rec(ledger.StatusSkipped), startMirrorSkipped},
		{"compensated key", allow, true, rec(ledger.StatusCompensated), startRefuse},
		{"pending key (another attempt)", allow, true, rec(ledger.StatusPending), startRun},
		{"pending key, needs people", approve, false, rec(ledger.StatusPending), startAwait},
	}
	for _, c := range cases {
		if got := decideStart(startFacts{gate: c.gate, approved: c.approved, rec: c.rec}); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
