package temporalstep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/temporalstep"
	"github.com/docketrun/docket/tools"
)

// world is the external systems the plan touches, counting every effect
// per logical request (business data, never docket's key), so that a second
// effect under another key would show.
type world struct {
	mu       sync.Mutex
	invoices map[string]string // idempotency key → invoice reference (the provider's key store)
	contacts map[string]string // external_ref (docket's key) → email
	emails   int
	effects  map[string]int // "invoice/<reference>", "contact/<email>", "email/<to>"
}

func newWorld() *world {
	return &world{invoices: map[string]string{}, contacts: map[string]string{}, effects: map[string]int{}}
}

type contactIn struct {
	Email string `json:"email"`
}
type contactOut struct {
	ID    string `json:"id"`
	Email string `json:"email"`
}
type invoiceIn struct {
	Customer  string `json:"customer"`
	Amount    int64  `json:"amount"`
	Reference string `json:"reference"`
}
type invoiceOut struct {
	ID string `json:"id"`
}
type emailIn struct {
	To string `json:"to"`
}

func (w *world) registry(t *testing.T) *tools.Registry {
	t.Helper()
	contact := tools.FuncLooker(tools.Spec{Name: "crm_create_contact", Description: "Create a CRM contact.", Class: tools.Lookup},
		func(ctx context.Context, call tools.Call, in contactIn) (contactOut, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.contacts[call.Key] = in.Email // the contact carries docket's key as external_ref
			w.effects["contact/"+in.Email]++
			return contactOut{ID: "c_" + in.Email, Email: in.Email}, nil
		},
		func(ctx context.Context, call tools.Call, in contactIn) (contactOut, bool, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			email, ok := w.contacts[call.Key]
			return contactOut{ID: "c_" + email, Email: email}, ok, nil
		})
	invoice := tools.Func(tools.Spec{Name: "payments_create_invoice", Description: "Invoice a customer.", Class: tools.Keyed},
		func(ctx context.Context, call tools.Call, in invoiceIn) (invoiceOut, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if _, seen := w.invoices[call.Key]; !seen { // the provider honours the idempotency key
				w.invoices[call.Key] = in.Reference
				w.effects["invoice/"+in.Reference]++
			}
			return invoiceOut{ID: "inv_" + in.Reference}, nil
		})
	email := tools.Func(tools.Spec{Name: "email_send", Description: "Send an email.", Class: tools.AtMostOnce},
		func(ctx context.Context, call tools.Call, in emailIn) (map[string]string, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.effects["email/"+in.To]++
			return map[string]string{"to": in.To}, nil
		})
	reg, err := tools.NewRegistry(contact, invoice, email)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func (w *world) effect(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.effects[name]
}

const onboardingPlan = `{"goal": "onboard ACME", "actions": [
  {"id": "contact", "tool": "crm_create_contact", "args": {"email": "billing@acme.example"}},
  {"id": "invoice", "tool": "payments_create_invoice", "depends_on": ["contact"],
   "args": {"customer": "${contact.output.id}", "amount": 1200, "reference": "onboarding-acme"}}]}`

// PlanWorkflow is how a workflow uses the activity: run the plan; while the
// run waits for a person, wait for the "approved" signal and continue.
func PlanWorkflow(ctx workflow.Context, req temporalstep.Request) (temporalstep.Result, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5},
	})
	approved := workflow.GetSignalChannel(ctx, "approved")
	for {
		var res temporalstep.Result
		if err := workflow.ExecuteActivity(ctx, "RunPlan", req).Get(ctx, &res); err != nil {
			return res, err
		}
		if !res.Waiting() {
			return res, nil
		}
		var actions []string
		approved.Receive(ctx, &actions)
		req.RunID = res.RunID
		req.Plan = nil // continue the recorded run
		if err := workflow.ExecuteActivity(ctx, "Approve", res.RunID, actions).Get(ctx, nil); err != nil {
			return res, err
		}
	}
}

// workers simulates the worker processes that serve the activity one after
// the other on one persistent volume: crash() closes the current worker's
// ledger at once, as the death of its process would (what was not yet
// recorded is lost); the next attempt is served by a new worker, which opens
// the same data directory as a new ledger incarnation.
type workers struct {
	t       *testing.T
	dir     string
	reg     *tools.Registry
	crashAt string // action id whose AfterCall hook crashes the first worker

	mu       sync.Mutex
	cur      *temporalstep.Activities
	started  int
	crashed  bool
	attempts []int32
}

func (ws *workers) current(ctx context.Context) (*temporalstep.Activities, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.attempts = append(ws.attempts, activity.GetInfo(ctx).Attempt)
	if ws.cur != nil {
		return ws.cur, nil
	}
	var a *temporalstep.Activities
	hook := func(id string) {
		ws.mu.Lock()
		crash := id == ws.crashAt && !ws.crashed
		if crash {
			ws.crashed = true
			ws.cur = nil
		}
		ws.mu.Unlock()
		if crash {
			if err := a.Close(); err != nil {
				ws.t.Errorf("closing the crashed worker's ledger: %v", err)
			}
		}
	}
	var err error
	a, err = temporalstep.New(ctx, temporalstep.Config{DataDir: ws.dir, Tools: ws.reg, Executor: func(c *executor.Config) {
		c.Hooks.AfterCall = hook
		c.SkewMargin = 50 * time.Millisecond
	}})
	if err != nil {
		return nil, err
	}
	ws.started++
	ws.cur = a
	return a, nil
}

func (ws *workers) close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.cur != nil {
		ws.cur.Close()
		ws.cur = nil
	}
}

type bundle struct {
	world *world
	ws    *workers
	env   *testsuite.TestWorkflowEnvironment
}

func setup(t *testing.T, crashAt string) *bundle {
	t.Helper()
	w := newWorld()
	ws := &workers{t: t, dir: filepath.Join(t.TempDir(), "data"), reg: w.registry(t), crashAt: crashAt}
	t.Cleanup(ws.close)
	b := &bundle{world: w, ws: ws}
	b.newEnv()
	return b
}

// newEnv starts a new test environment (one per workflow execution) served
// by the same workers.
func (b *bundle) newEnv() {
	ws := b.ws
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(PlanWorkflow)
	env.RegisterActivityWithOptions(func(ctx context.Context, req temporalstep.Request) (temporalstep.Result, error) {
		a, err := ws.current(ctx)
		if err != nil {
			return temporalstep.Result{}, err
		}
		return a.RunPlan(ctx, req)
	}, activity.RegisterOptions{Name: "RunPlan"})
	env.RegisterActivityWithOptions(func(ctx context.Context, runID string, actions []string) error {
		a, err := ws.current(ctx)
		if err != nil {
			return err
		}
		return a.Approve(ctx, runID, actions, "temporal-signal")
	}, activity.RegisterOptions{Name: "Approve"})
	b.env = env
}

func (b *bundle) run(t *testing.T, req temporalstep.Request) temporalstep.Result {
	t.Helper()
	b.env.ExecuteWorkflow(PlanWorkflow, req)
	if !b.env.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	if err := b.env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var res temporalstep.Result
	if err := b.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

type runDoc struct {
	Status  string `json:"status"`
	Actions []struct {
		ID       string          `json:"id"`
		Status   string          `json:"status"`
		Attempts int             `json:"attempts"`
		Output   json.RawMessage `json:"output"`
	} `json:"actions"`
}

func decodeRun(t *testing.T, res temporalstep.Result) runDoc {
	t.Helper()
	var d runDoc
	if err := json.Unmarshal(res.Run, &d); err != nil {
		t.Fatalf("Run JSON: %v\n%s", err, res.Run)
	}
	return d
}

// TestWorkerCrashRetried: the worker dies right after an external system
// acted and before docket recorded it; Temporal retries the activity on a new
// worker over the same volume, which resumes the run: each external effect
// happened once.
func TestWorkerCrashRetried(t *testing.T) {
	t.Parallel()
	for _, crashAt := range []string{"contact", "invoice"} {
		t.Run("after the call of "+crashAt, func(t *testing.T) {
			t.Parallel()
			b := setup(t, crashAt)
			res := b.run(t, temporalstep.Request{Plan: json.RawMessage(onboardingPlan), Approve: "all", IncludeRun: true})
			if res.Status != "completed" || !strings.HasPrefix(res.RunID, "temporal/") {
				t.Fatalf("result: %+v\n%s", res, res.Run)
			}
			if !b.ws.crashed || b.ws.started != 2 {
				t.Fatalf("crashed=%v workers started=%d, want a crash and a second worker", b.ws.crashed, b.ws.started)
			}
			if got := fmt.Sprint(b.ws.attempts); got != "[1 2]" {
				t.Errorf("activity attempts %s, want [1 2] (Temporal retried the crashed attempt)", got)
			}
			for _, e := range []string{"contact/billing@acme.example", "invoice/onboarding-acme"} {
				if n := b.world.effect(e); n != 1 {
					t.Errorf("effect %s happened %d times, want 1", e, n)
				}
			}
			d := decodeRun(t, res)
			for _, a := range d.Actions {
				if a.Status != "succeeded" {
					t.Errorf("action %s %s", a.ID, a.Status)
				}
			}
		})
	}
}

// TestRetriedAfterCompletion: the workflow runs the same plan under the same
// run id again (a replayed or re-run step): the recorded result comes back
// and nothing is repeated.
func TestRetriedAfterCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	req := temporalstep.Request{RunID: "order-4711/onboard", Plan: json.RawMessage(onboardingPlan), Approve: "all", IncludeRun: true}
	first := b.run(t, req)
	b.newEnv() // a second execution of the step, served by the same worker
	second := b.run(t, req)
	if first.Status != "completed" || second.Status != "completed" || string(first.Run) != string(second.Run) {
		t.Fatalf("first %s\nsecond %s", first.Run, second.Run)
	}
	for _, e := range []string{"contact/billing@acme.example", "invoice/onboarding-acme"} {
		if n := b.world.effect(e); n != 1 {
			t.Errorf("effect %s happened %d times, want 1", e, n)
		}
	}
}

// TestWaitsForApproval: an at_most_once action under the safe policy waits
// for a person; the workflow waits for the "approved" signal, approves through
// an activity and continues the same run.
func TestWaitsForApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	p := `{"goal": "welcome", "actions": [{"id": "welcome", "tool": "email_send", "args": {"to": "ann@example.com"}}]}`
	b.env.RegisterDelayedCallback(func() {
		if n := b.world.effect("email/ann@example.com"); n != 0 {
			t.Errorf("the email was sent %d times before the approval", n)
		}
		b.env.SignalWorkflow("approved", []string{"welcome"})
	}, time.Hour)
	res := b.run(t, temporalstep.Request{Plan: json.RawMessage(p)})
	if res.Status != "completed" || b.world.effect("email/ann@example.com") != 1 {
		t.Fatalf("after approval: %+v %s; emails %d", res, res.Run, b.world.effect("email/ann@example.com"))
	}
}

func TestBadRequestIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.env.ExecuteWorkflow(PlanWorkflow, temporalstep.Request{Plan: json.RawMessage(`{"actions": [{"id": "x", "tool": "nope", "args": {}}]}`)})
	err := b.env.GetWorkflowError()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != temporalstep.ErrTypeBadRequest || !ae.NonRetryable() {
		t.Fatalf("invalid plan: %v, want a non-retryable %s", err, temporalstep.ErrTypeBadRequest)
	}
	if got := fmt.Sprint(b.ws.attempts); got != "[1]" {
		t.Errorf("attempts %s, want [1]", got)
	}
}
