package temporalstep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/temporalstep"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/tools"
)

const welcomePlan = `{"goal": "welcome", "actions": [{"id": "welcome", "tool": "email_send", "args": {"to": "ann@example.com"}}]}`

// workflowEnv is a test environment running temporalstep.Workflow, its
// activities served by the bundle's workers (ws.current), so a test can
// crash a worker mid-call.
func (b *bundle) workflowEnv() *testsuite.TestWorkflowEnvironment {
	ws := b.ws
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(temporalstep.Workflow)
	env.RegisterActivityWithOptions(func(ctx context.Context, req temporalstep.Request) (temporalstep.Result, error) {
		a, err := ws.current(ctx)
		if err != nil {
			return temporalstep.Result{}, err
		}
		return a.RunPlan(ctx, req)
	}, activity.RegisterOptions{Name: temporalstep.ActivityRunPlan})
	env.RegisterActivityWithOptions(func(ctx context.Context, runID string, actions []string, by string) error {
		a, err := ws.current(ctx)
		if err != nil {
			return err
		}
		return a.Approve(ctx, runID, actions, by)
	}, activity.RegisterOptions{Name: temporalstep.ActivityApprove})
	env.RegisterActivityWithOptions(func(ctx context.Context, r temporalstep.Resolution) error {
		a, err := ws.current(ctx)
		if err != nil {
			return err
		}
		return a.Resolve(ctx, r)
	}, activity.RegisterOptions{Name: temporalstep.ActivityResolve})
	return env
}

// outcome is what became of an update: nil until it was rejected or done.
type outcome struct {
	mu   sync.Mutex
	done bool
	err  error
}

func (o *outcome) get() (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done, o.err
}

// update sends an update; its outcome is known once the environment ran it
// (the workflow waits for its handlers before it ends).
func update(env *testsuite.TestWorkflowEnvironment, name string, arg any) *outcome {
	o := &outcome{}
	set := func(err error) { o.mu.Lock(); o.done, o.err = true, err; o.mu.Unlock() }
	env.UpdateWorkflow(name, fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { set(fmt.Errorf("rejected: %w", err)) },
		OnComplete: func(_ any, err error) { set(err) },
	}, arg)
	return o
}

// result waits for nothing: it reads an update's outcome after the workflow
// completed, failing the test when the update never finished.
func (o *outcome) result(t *testing.T, what string) error {
	t.Helper()
	done, err := o.get()
	if !done {
		t.Fatalf("%s: the update never finished", what)
	}
	return err
}

func query(t *testing.T, env *testsuite.TestWorkflowEnvironment) temporalstep.Result {
	t.Helper()
	v, err := env.QueryWorkflow(temporalstep.QueryResult)
	if err != nil {
		t.Fatal(err)
	}
	var r temporalstep.Result
	if err := v.Get(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// The worker dies during the at-most-once email's call: the retry finds the
// call's outcome unknown and the run waits in needs_review. The workflow
// tells that from waiting for approval (approving it is refused), and the
// "resolve" update settles it: done (with the output the person saw), skip,
// or retry (a second send, on purpose).
func TestWorkflowResolvesNeedsReview(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		resolution temporalstep.Resolution
		status     string // the email's status after the resolution
		emails     int
	}{
		{"done", temporalstep.Resolution{ActionID: "welcome", Done: json.RawMessage(`{"to": "ann@example.com"}`), By: "ann"}, "succeeded", 1},
		{"skip", temporalstep.Resolution{ActionID: "welcome", Skip: true, By: "ann"}, "skipped", 1},
		{"retry", temporalstep.Resolution{ActionID: "welcome", Retry: true, By: "ann"}, "succeeded", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "welcome")
			env := b.workflowEnv()
			var waiting temporalstep.Result
			var approveU, badResolveU, resolveU *outcome
			env.RegisterDelayedCallback(func() {
				waiting = query(t, env)
				approveU = update(env, temporalstep.UpdateApprove, temporalstep.ApproveRequest{Actions: []string{"welcome"}})
				badResolveU = update(env, temporalstep.UpdateResolve, temporalstep.Resolution{ActionID: "welcome", Retry: true, Skip: true})
				resolveU = update(env, temporalstep.UpdateResolve, c.resolution)
			}, time.Hour)
			env.ExecuteWorkflow(temporalstep.Workflow, temporalstep.WorkflowRequest{
				Request: temporalstep.Request{Plan: json.RawMessage(welcomePlan), Approve: "all"}, MaxAttempts: 5})
			if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
				t.Fatalf("workflow: completed %v, error %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
			}
			if !waiting.NeedsReview() || waiting.WaitingForApproval() || !slices.Equal(waiting.InReview, []string{"welcome"}) {
				t.Fatalf("after the crash: %+v, want needs_review of welcome and nothing awaiting approval", waiting)
			}
			approveErr, badResolveErr, resolveErr := approveU.result(t, "approve"), badResolveU.result(t, "bad resolve"), resolveU.result(t, "resolve")
			var ae *temporal.ApplicationError
			if !errors.As(approveErr, &ae) || ae.Type() != temporalstep.ErrTypeBadRequest {
				t.Errorf("approving an action in needs_review = %v, want %s", approveErr, temporalstep.ErrTypeBadRequest)
			}
			if badResolveErr == nil || !strings.Contains(badResolveErr.Error(), "exactly one") {
				t.Errorf("resolve with retry and skip = %v, want rejected", badResolveErr)
			}
			if resolveErr != nil {
				t.Fatalf("resolve: %v", resolveErr)
			}
			var res temporalstep.Result
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			if res.Status != "completed" || len(res.Actions) != 1 || res.Actions[0].Status != c.status {
				t.Fatalf("result %+v, want completed with welcome %s", res, c.status)
			}
			if n := b.world.effect("email/ann@example.com"); n != c.emails {
				t.Errorf("the email was sent %d times, want %d", n, c.emails)
			}
			// The Resolve activity again with the same decision (Temporal
			// retrying it after it committed) is success; another decision
			// is refused.
			a, err := b.ws.current(activityContext(t))
			if err != nil {
				t.Fatal(err)
			}
			r := c.resolution
			r.RunID = res.RunID
			if c.name != "retry" {
				if err := a.Resolve(context.Background(), r); err != nil {
					t.Errorf("the same resolution again = %v, want success", err)
				}
			}
			other := temporalstep.Resolution{RunID: res.RunID, ActionID: "welcome", Done: json.RawMessage(`{"to": "bob@example.com"}`)}
			if c.name == "done" {
				other = temporalstep.Resolution{RunID: res.RunID, ActionID: "welcome", Skip: true}
			}
			if err := a.Resolve(context.Background(), other); !errors.As(err, &ae) || ae.Type() != temporalstep.ErrTypeBadRequest {
				t.Errorf("another resolution after %s = %v, want %s", c.name, err, temporalstep.ErrTypeBadRequest)
			}
		})
	}
}

// activityContext is a context the workers harness accepts outside an
// activity (it records the attempt number).
func activityContext(t *testing.T) context.Context {
	t.Helper()
	var env testsuite.WorkflowTestSuite
	ae := env.NewTestActivityEnvironment()
	var ctx context.Context
	ae.RegisterActivityWithOptions(func(c context.Context) error { ctx = c; return nil }, activity.RegisterOptions{Name: "grab"})
	if _, err := ae.ExecuteActivity("grab"); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// Under the safe policy the email waits for approval: the workflow says so
// (not needs_review), a resolution is refused, an approval continues it.
func TestWorkflowApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	env := b.workflowEnv()
	var waiting temporalstep.Result
	var resolveU, approveU *outcome
	env.RegisterDelayedCallback(func() {
		waiting = query(t, env)
		if n := b.world.effect("email/ann@example.com"); n != 0 {
			t.Errorf("the email was sent %d times before the approval", n)
		}
		resolveU = update(env, temporalstep.UpdateResolve, temporalstep.Resolution{ActionID: "welcome", Skip: true})
		approveU = update(env, temporalstep.UpdateApprove, temporalstep.ApproveRequest{Actions: []string{"welcome"}, By: "ann"})
	}, time.Hour)
	env.ExecuteWorkflow(temporalstep.Workflow, temporalstep.WorkflowRequest{Request: temporalstep.Request{Plan: json.RawMessage(welcomePlan)}, MaxAttempts: 3})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if !waiting.WaitingForApproval() || waiting.NeedsReview() || !slices.Equal(waiting.AwaitingApproval, []string{"welcome"}) {
		t.Fatalf("waiting: %+v, want welcome awaiting approval", waiting)
	}
	resolveErr, approveErr := resolveU.result(t, "resolve"), approveU.result(t, "approve")
	var ae *temporal.ApplicationError
	if !errors.As(resolveErr, &ae) || ae.Type() != temporalstep.ErrTypeBadRequest {
		t.Errorf("resolving an action that awaits approval = %v, want %s", resolveErr, temporalstep.ErrTypeBadRequest)
	}
	if approveErr != nil {
		t.Fatal(approveErr)
	}
	var res temporalstep.Result
	env.GetWorkflowResult(&res)
	if res.Status != "completed" || b.world.effect("email/ann@example.com") != 1 {
		t.Fatalf("after approval: %+v; emails %d", res, b.world.effect("email/ann@example.com"))
	}
}

// slowWorld has one tool whose call lasts until the test has seen the
// activity heartbeat several times with the call in flight.
type slowWorld struct {
	mu          sync.Mutex
	calls, busy int
	maxBusy     int
	release     chan struct{}
	once        sync.Once
}

func (w *slowWorld) registry(t *testing.T) *tools.Registry {
	t.Helper()
	put := tools.Func(tools.Spec{Name: "slow_put", Description: "A slow upsert.", Class: tools.Idempotent},
		func(ctx context.Context, call tools.Call, in struct {
			Key string `json:"key"`
		}) (map[string]string, error) {
			w.mu.Lock()
			w.calls++
			w.busy++
			w.maxBusy = max(w.maxBusy, w.busy)
			w.mu.Unlock()
			defer func() { w.mu.Lock(); w.busy--; w.mu.Unlock() }()
			select {
			case <-w.release:
			case <-time.After(15 * time.Second): // the test failed to see heartbeats; let the attempt end
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return map[string]string{"key": in.Key}, nil
		})
	reg, err := tools.NewRegistry(put)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// A call that lasts longer than the activity's HeartbeatTimeout: RunPlan
// heartbeats throughout (with the call in flight in its Progress), so the
// attempt stays alive, Temporal starts no second attempt, and the tool is
// never called twice at once. Without the heartbeats the attempt times out
// and a second one calls again.
func TestHeartbeatsWhileCalling(t *testing.T) {
	t.Parallel()
	w := &slowWorld{release: make(chan struct{})}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	led, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: filepath.Join(t.TempDir(), "data"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	acts, err := temporalstep.New(context.Background(), temporalstep.Config{Ledger: led, Tools: w.registry(t), Executor: func(c *executor.Config) {
		c.SkewMargin = 50 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Minute) // the call lasts seconds on purpose
	env.RegisterWorkflow(temporalstep.Workflow)
	acts.Register(env)
	var mu sync.Mutex
	var attempts []int32
	beats := 0
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, info.Attempt)
	})
	env.SetOnActivityHeartbeatListener(func(info *activity.Info, details converter.EncodedValues) {
		var p temporalstep.Progress
		if err := details.Get(&p); err != nil {
			t.Errorf("heartbeat details: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if slices.Contains(p.InFlight, "put") && p.Total == 1 {
			// The SDK sends a heartbeat at most every 0.8 × HeartbeatTimeout
			// (1.6s here): the third arrives 3.2s into the call, well past
			// the 2s timeout.
			if beats++; beats == 3 {
				w.once.Do(func() { close(w.release) })
			}
		}
	})
	env.ExecuteWorkflow(temporalstep.Workflow, temporalstep.WorkflowRequest{
		Request:   temporalstep.Request{RunID: "slow", Plan: json.RawMessage(`{"actions": [{"id": "put", "tool": "slow_put", "args": {"key": "k"}}]}`)},
		Heartbeat: 2 * time.Second, MaxAttempts: 3,
	})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if beats < 3 {
		t.Errorf("%d heartbeats with the call in flight, want 3 or more", beats)
	}
	if !slices.Equal(attempts, []int32{1}) || w.calls != 1 || w.maxBusy != 1 {
		t.Fatalf("activity attempts %v, tool calls %d (at most %d at once); want one attempt and one call", attempts, w.calls, w.maxBusy)
	}
}

// A Result carries each action's summary and the output's size, not the
// output: a 1 MiB model output stays out of the workflow's history unless
// the request asks for the whole run.
func TestResultLeavesOutputsOut(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1<<20)
	gen := tools.Func(tools.Spec{Name: "generate", Description: "A large output.", Class: tools.ReadOnly},
		func(ctx context.Context, call tools.Call, in struct{}) (map[string]string, error) {
			return map[string]string{"text": big}, nil
		})
	reg, err := tools.NewRegistry(gen)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := temporalstep.New(context.Background(), temporalstep.Config{DataDir: filepath.Join(t.TempDir(), "data"), Tools: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acts.Close() })
	for _, include := range []bool{false, true} {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		acts.Register(env)
		val, err := env.ExecuteActivity(temporalstep.ActivityRunPlan, temporalstep.Request{
			RunID: "big", Plan: json.RawMessage(`{"actions": [{"id": "g", "tool": "generate", "args": {}}]}`), IncludeRun: include})
		if err != nil {
			t.Fatal(err)
		}
		var res temporalstep.Result
		if err := val.Get(&res); err != nil {
			t.Fatal(err)
		}
		enc, _ := json.Marshal(res)
		switch {
		case res.Status != "completed" || len(res.Actions) != 1 || res.Actions[0].OutputBytes < 1<<20:
			t.Fatalf("result %+v", res)
		case !include && len(enc) > 4096:
			t.Errorf("the summary is %d bytes, want under 4 KiB", len(enc))
		case include && !strings.Contains(string(res.Run), big):
			t.Errorf("IncludeRun: the Run JSON lacks the output")
		}
	}
}

// twoDrives runs RunPlan twice at once for the same run: what a second
// attempt that Temporal started while the first was still calling (a worker
// it gave up on too early, in the same process) does.
func twoDrives(ctx workflow.Context, req temporalstep.Request) ([]temporalstep.Result, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: 2 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	f1 := workflow.ExecuteActivity(ctx, temporalstep.ActivityRunPlan, req)
	f2 := workflow.ExecuteActivity(ctx, temporalstep.ActivityRunPlan, req)
	out := make([]temporalstep.Result, 2)
	for i, f := range []workflow.Future{f1, f2} {
		if err := f.Get(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Two drives of one run at once (a second attempt started while the first
// is still calling): the tool is called once; the other drive waits for the
// call's outcome, heartbeating meanwhile, and both answer the run completed.
func TestSecondAttemptWaitsForFirstCall(t *testing.T) {
	t.Parallel()
	w := &slowWorld{release: make(chan struct{})}
	acts, err := temporalstep.New(context.Background(), temporalstep.Config{DataDir: filepath.Join(t.TempDir(), "data"), Tools: w.registry(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acts.Close() })
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Minute)
	env.RegisterWorkflow(twoDrives)
	acts.Register(env)
	var mu sync.Mutex
	beats := map[string]int{} // activity id → heartbeats with the call in flight
	env.SetOnActivityHeartbeatListener(func(info *activity.Info, details converter.EncodedValues) {
		var p temporalstep.Progress
		if details.Get(&p) != nil || !slices.Contains(p.InFlight, "put") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		beats[info.ActivityID]++
		// Both drives alive with the call in flight for two heartbeats each
		// (the SDK sends one at most every 1.6s here): the one that did not
		// call had that long to call; end the call.
		if len(beats) == 2 && min(beats[keys(beats)[0]], beats[keys(beats)[1]]) >= 2 {
			w.once.Do(func() { close(w.release) })
		}
	})
	env.ExecuteWorkflow(twoDrives, temporalstep.Request{RunID: "twice", Plan: json.RawMessage(`{"actions": [{"id": "put", "tool": "slow_put", "args": {"key": "k"}}]}`)})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res []temporalstep.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != "completed" {
			t.Errorf("drive %d: %+v", i+1, r)
		}
	}
	mu.Lock()
	if len(beats) != 2 {
		t.Errorf("heartbeats with the call in flight came from %d drives (%v), want both", len(beats), beats)
	}
	mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls != 1 || w.maxBusy != 1 {
		t.Fatalf("the tool was called %d times (at most %d at once), want once", w.calls, w.maxBusy)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
