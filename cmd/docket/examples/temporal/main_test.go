package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/docketrun/docket/executor/temporalstep"
)

// The example's loop, in Temporal's test environment (the example itself
// needs a Temporal server): the email waits for approval, its answer is
// lost after it was sent, the run waits in needs_review, the resolution
// completes it, and one email went out.
func TestExampleLoop(t *testing.T) {
	world := NewWorld()
	reg, err := world.Tools()
	if err != nil {
		t.Fatal(err)
	}
	acts, err := temporalstep.New(context.Background(), temporalstep.Config{DataDir: filepath.Join(t.TempDir(), "data"), Tools: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer acts.Close()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(temporalstep.Workflow)
	acts.Register(env)

	var asked []temporalstep.Result
	var updateErrs []error
	ask := func() temporalstep.Result {
		v, err := env.QueryWorkflow(temporalstep.QueryResult)
		if err != nil {
			t.Fatal(err)
		}
		var r temporalstep.Result
		v.Get(&r)
		asked = append(asked, r)
		return r
	}
	send := func(name string, arg any) {
		env.UpdateWorkflow(name, name, &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { updateErrs = append(updateErrs, err) },
			OnComplete: func(_ any, err error) { updateErrs = append(updateErrs, err) },
		}, arg)
	}
	env.RegisterDelayedCallback(func() {
		r := ask()
		send(temporalstep.UpdateApprove, temporalstep.ApproveRequest{Actions: r.AwaitingApproval, By: "test"})
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		r := ask()
		out, _ := json.Marshal(map[string]string{"message_id": world.Emails[len(world.Emails)-1]})
		send(temporalstep.UpdateResolve, temporalstep.Resolution{ActionID: r.InReview[0], Done: out, By: "test"})
	}, 2*time.Hour)
	env.ExecuteWorkflow(temporalstep.Workflow, temporalstep.WorkflowRequest{Request: temporalstep.Request{Plan: json.RawMessage(Plan), Approve: "safe"}, MaxAttempts: 3})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || !asked[0].WaitingForApproval() || !slices.Equal(asked[0].AwaitingApproval, []string{"welcome"}) ||
		!asked[1].NeedsReview() || asked[1].WaitingForApproval() {
		t.Fatalf("the workflow asked %+v, want approval of welcome, then its review", asked)
	}
	for _, err := range updateErrs {
		if err != nil {
			t.Fatalf("update: %v", err)
		}
	}
	var res temporalstep.Result
	env.GetWorkflowResult(&res)
	if res.Status != "completed" || len(world.Emails) != 1 {
		t.Fatalf("result %+v, emails %v; want completed with one email", res, world.Emails)
	}
}
