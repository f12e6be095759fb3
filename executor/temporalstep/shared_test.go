package temporalstep_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/temporalstep"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/ledger/postgres/pgtest"
)

// pg is this package's throwaway PostgreSQL cluster (the shared-ledger test).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// The case a worker-local ledger cannot handle: a worker dies after an
// at-most-once action took effect and before docket recorded it, and
// Temporal retries the activity on another machine. With the shared ledger
// the second worker sees the first one's claim, whose owner is gone: the
// email goes to needs_review (a person decides), never out a second time,
// while the keyed invoice completes once.
func TestSharedLedgerRetryOnAnotherWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pg.Get(t)
	url, err := c.CreateDatabase(ctx, "temporal")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld()
	reg := w.registry(t)
	worker := func(onCall func(id string)) (*temporalstep.Activities, *postgres.Store) {
		l, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		a, err := temporalstep.New(ctx, temporalstep.Config{Ledger: l, Tools: reg, Executor: func(c *executor.Config) {
			c.Hooks.AfterCall = onCall
			c.Clock = l // claim times and lookup windows by the database's clock
		}})
		if err != nil {
			t.Fatal(err)
		}
		return a, l
	}
	var first *postgres.Store
	a1, first := worker(func(id string) {
		if id == "welcome" {
			first.Close() // the worker's process dies: its lease ends with it
		}
	})
	req := temporalstep.Request{RunID: "wf-1/activity-1", Approve: "all", Plan: json.RawMessage(`{"goal": "welcome ACME", "actions": [
  {"id": "invoice", "tool": "payments_create_invoice", "args": {"customer": "c_acme", "amount": 1200, "reference": "onboarding-acme"}},
  {"id": "welcome", "tool": "email_send", "depends_on": ["invoice"], "args": {"to": "billing@acme.example"}}]}`)}
	// Each worker runs the activity in an activity context (RunPlan heartbeats).
	runPlan := func(a *temporalstep.Activities, req temporalstep.Request) (temporalstep.Result, error) {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.RegisterActivityWithOptions(a.RunPlan, activity.RegisterOptions{Name: "RunPlan"})
		v, err := env.ExecuteActivity("RunPlan", req)
		var res temporalstep.Result
		if err == nil {
			err = v.Get(&res)
		}
		return res, err
	}
	if _, err := runPlan(a1, req); err == nil {
		t.Fatal("the first worker's attempt succeeded although its process died")
	}
	// Temporal retries the activity on a worker of another machine.
	a2, _ := worker(nil)
	res, err := runPlan(a2, req)
	if err != nil {
		t.Fatalf("the retry on the second worker: %v", err)
	}
	status := map[string]string{}
	for _, a := range res.Actions {
		status[a.ID] = a.Status
	}
	if len(res.InReview) != 1 || res.InReview[0] != "welcome" || status["invoice"] != "succeeded" || status["welcome"] != "needs_review" {
		t.Fatalf("after the retry: in review %v, actions %v", res.InReview, status)
	}
	if n := w.effect("email/billing@acme.example"); n != 1 {
		t.Fatalf("the email went out %d times, want 1 (and a person asked)", n)
	}
	if n := w.effect("invoice/onboarding-acme"); n != 1 {
		t.Fatalf("%d invoices", n)
	}
}
