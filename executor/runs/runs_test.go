package runs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bundle is what a test needs: a real Badger ledger, an engine over it and
// a world that counts effects.
type bundle struct {
	l     *badgerdb.Ledger
	eng   *executor.Engine
	world *tooltest.World
}

func setup(t *testing.T) bundle {
	t.Helper()
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	w := tooltest.NewWorld()
	reg, err := tools.NewRegistry(w.Tool(tools.Spec{Name: "set", Class: tools.Idempotent}))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{l: l, eng: eng, world: w}
}

func setPlan(goal, args string) *plan.Plan {
	return &plan.Plan{Goal: goal, Actions: []plan.Action{{ID: "a1", Tool: "set", Args: json.RawMessage(args)}}}
}

// countingPlanner plans setPlan(goal, args) and counts its calls.
func countingPlanner(n *atomic.Int32, goal, args string) func(context.Context) (*plan.Plan, error) {
	return func(context.Context) (*plan.Plan, error) {
		n.Add(1)
		return setPlan(goal, args), nil
	}
}

// A run planned from a goal is planned once: the plan is recorded with the
// request's identity, read back by every later request, and its action
// takes effect once however often the request comes.
func TestPlannedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var planned atomic.Int32
	ident := executor.Request{Goal: "set x"}
	req := runs.Request{RunID: "r1", Identity: &ident, Planner: countingPlanner(&planned, "set x", `{"x":1}`)}

	res, doc, err := runs.Run(ctx, b.eng, b.l, req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Planned || !res.Created || planned.Load() != 1 || doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("first: planned %v (%d calls), created %v, status %s", res.Planned, planned.Load(), res.Created, doc.Run.Status)
	}
	first, err := b.l.Plan(ctx, "r1", 1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ident.Hash()
	if got := first.Meta[executor.RequestMeta]; got != want {
		t.Fatalf("recorded identity %q, want %q", got, want)
	}
	for i := range 2 {
		res, doc, err := runs.Run(ctx, b.eng, b.l, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Planned || res.Created || planned.Load() != 1 {
			t.Fatalf("again %d: planned %v (%d calls), created %v", i+2, res.Planned, planned.Load(), res.Created)
		}
		if res.Plan == nil || len(res.Plan.Actions) != 1 || string(res.Plan.Actions[0].Args) != `{"x":1}` {
			t.Fatalf("again %d: plan read back %+v", i+2, res.Plan)
		}
		if doc.Run.Status != ledger.RunCompleted || len(doc.Actions) != 1 || b.world.Effects(doc.Actions[0].Key) != 1 {
			t.Fatalf("again %d: status %s, effects %d", i+2, doc.Run.Status, b.world.Effects(doc.Actions[0].Key))
		}
	}
}

// A crash while the planner thinks leaves nothing recorded: the next
// request plans again.
func TestPlannerErrorRecordsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ident := executor.Request{Goal: "set x"}
	boom := errors.New("the model went away")
	_, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident,
		Planner: func(context.Context) (*plan.Plan, error) { return nil, boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the planner's error as it is", err)
	}
	if _, err := b.l.GetRun(ctx, "r1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a run was recorded while planning failed: %v", err)
	}
	var planned atomic.Int32
	res, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident, Planner: countingPlanner(&planned, "set x", `{"x":1}`)})
	if err != nil || !res.Planned || !res.Created || planned.Load() != 1 {
		t.Fatalf("replan: %v, planned %v, created %v", err, res.Planned, res.Created)
	}
}

// Another request under a run's id is refused without planning; a request
// that names the run's policy, or none, is the same request.
func TestAnotherRequestRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var planned atomic.Int32
	create := func(ident executor.Request) (runs.Result, error) {
		return runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident,
			Options: &executor.RunOptions{Policy: executor.PolicyNone}, Planner: countingPlanner(&planned, ident.Goal, `{"x":1}`)})
	}
	if _, err := create(executor.Request{Goal: "set x", Policy: executor.PolicyNone}); err != nil {
		t.Fatal(err)
	}
	for _, ident := range []executor.Request{
		{Goal: "set y"},
		{Goal: "set x", Policy: executor.PolicySafe},
		{Plan: setPlan("set x", `{"x":1}`)}, // the same plan, but given: another request
	} {
		if _, err := create(ident); !errors.Is(err, executor.ErrRequestMismatch) || !errors.Is(err, executor.ErrPlanMismatch) {
			t.Errorf("%+v: err = %v, want ErrRequestMismatch", ident, err)
		}
	}
	for _, ident := range []executor.Request{{Goal: "set x"}, {Goal: "set x", Policy: executor.PolicyNone}} {
		if res, err := create(ident); err != nil || res.Created || res.Planned {
			t.Errorf("%+v: %v, created %v, planned %v", ident, err, res.Created, res.Planned)
		}
	}
	if planned.Load() != 1 {
		t.Errorf("the planner was called %d times, want once", planned.Load())
	}
}

// A given plan is the request; an identical one again continues the run.
func TestGivenPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := setPlan("set x", `{"x":1}`)
	ident := executor.Request{Plan: p}
	res, doc, err := runs.Run(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident})
	if err != nil || !res.Created || res.Planned || doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("%v: created %v, planned %v, status %s", err, res.Created, res.Planned, doc.Run.Status)
	}
	again := executor.Request{Plan: setPlan("set x", `{"x":1}`)}
	res, doc, err = runs.Run(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &again})
	if err != nil || res.Created || b.world.Effects(doc.Actions[0].Key) != 1 {
		t.Fatalf("again: %v, created %v, effects %d", err, res.Created, b.world.Effects(doc.Actions[0].Key))
	}
	other := executor.Request{Plan: setPlan("set x", `{"x":2}`)}
	if _, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &other}); !errors.Is(err, executor.ErrRequestMismatch) {
		t.Fatalf("another plan: %v", err)
	}
}

// Without an identity (MCP calls, chat turns) the plan is recorded as given,
// with no request identity in its Meta, and judged by the plan alone.
func TestWithoutIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Plan: setPlan("set x", `{"x":1}`)})
	if err != nil || !res.Created {
		t.Fatalf("%v, created %v", err, res.Created)
	}
	first, err := b.l.Plan(ctx, "r1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.Meta[executor.RequestMeta]; ok {
		t.Fatalf("a request identity was recorded: %v", first.Meta)
	}
	if res, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Plan: setPlan("set x", `{"x":1}`)}); err != nil || res.Created {
		t.Fatalf("the same plan again: %v, created %v", err, res.Created)
	}
	_, err = runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Plan: setPlan("set x", `{"x":2}`)})
	if !errors.Is(err, executor.ErrPlanMismatch) || errors.Is(err, executor.ErrRequestMismatch) {
		t.Fatalf("another plan: %v, want ErrPlanMismatch", err)
	}
}

// A run recorded with the identity that planner.Request.Identity made
// before run creation moved here (the hashes below were computed by that
// code) is recognised: the same goal and conversation continue it without
// planning, so existing ledgers' idempotent replays keep working.
func TestOldIdentityRecognised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		req  planner.Request
		hash string
	}{
		{"goal", planner.Request{Goal: "mail Ann"}, "sha256:07fc8d2ce054031b5c6457795a000acc881159ed7d2307b89d586332205ecb82"},
		{"conversation", planner.Request{Goal: "and now pay", Messages: []planner.Message{
			{Role: planner.RoleUser, Content: "hi <b> & ü"}, {Role: planner.RoleAssistant, Content: "hello"},
		}}, "sha256:3bdb0c6644e7500fea19a7c67baddfb8c88abcb641bd410cb29ba68b25b1eeac"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			old := setPlan(c.req.Goal, `{"x":1}`)
			old.Meta = map[string]string{executor.RequestMeta: c.hash}
			if _, _, err := b.eng.Record(ctx, "r1", old, &executor.RunOptions{Policy: executor.PolicyNone}); err != nil {
				t.Fatal(err)
			}
			conv, err := c.req.Conversation()
			if err != nil {
				t.Fatal(err)
			}
			ident := executor.Request{Goal: c.req.Goal, Messages: conv, Policy: executor.PolicyNone}
			var planned atomic.Int32
			res, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident, Planner: countingPlanner(&planned, c.req.Goal, `{"x":2}`)})
			if err != nil || res.Created || res.Planned || planned.Load() != 0 {
				t.Fatalf("%v: created %v, planned %v", err, res.Created, res.Planned)
			}
		})
	}
}

// Requests no caller should make are refused before anything is read.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ident := executor.Request{Goal: "g"}
	plans := func(context.Context) (*plan.Plan, error) { return setPlan("g", `{}`), nil }
	for name, req := range map[string]runs.Request{
		"no run id":            {Plan: setPlan("g", `{}`)},
		"no plan, no planner":  {RunID: "r1", Identity: &ident},
		"planner, no identity": {RunID: "r1", Planner: plans},
	} {
		if _, err := runs.Create(ctx, b.eng, b.l, req); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := runs.Create(ctx, nil, b.l, runs.Request{RunID: "r1", Plan: setPlan("g", `{}`)}); err == nil {
		t.Error("no engine: no error")
	}
	nilPlan := func(context.Context) (*plan.Plan, error) { return nil, nil }
	if _, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident, Planner: nilPlan}); err == nil {
		t.Error("a planner that returns no plan: no error")
	}
	if _, err := b.l.GetRun(ctx, "r1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("a refused request recorded a run: %v", err)
	}
}

// Check refuses another request's run before anything is written or
// planned, and lets a new run, the same request and no identity through.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ident := executor.Request{Plan: setPlan("set x", `{"x":1}`)}
	if err := runs.Check(ctx, b.l, runs.Request{RunID: "r1", Identity: &ident}); err != nil {
		t.Fatalf("a new run: %v", err)
	}
	if _, err := runs.Create(ctx, b.eng, b.l, runs.Request{RunID: "r1", Identity: &ident}); err != nil {
		t.Fatal(err)
	}
	same := executor.Request{Plan: setPlan("set x", `{"x":1}`)}
	other := executor.Request{Plan: setPlan("set x", `{"x":2}`)}
	for name, c := range map[string]struct {
		req      runs.Request
		mismatch bool
	}{
		"same":        {runs.Request{RunID: "r1", Identity: &same}, false},
		"other":       {runs.Request{RunID: "r1", Identity: &other}, true},
		"no identity": {runs.Request{RunID: "r1", Plan: setPlan("set x", `{"x":2}`)}, false},
	} {
		if err := runs.Check(ctx, b.l, c.req); errors.Is(err, executor.ErrRequestMismatch) != c.mismatch || (err != nil && !c.mismatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
