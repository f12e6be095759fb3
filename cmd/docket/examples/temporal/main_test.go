package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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

// TestWorkerKilledDuringTheEmail: the worker is killed (SIGKILL, a real
// process) after the provider sent the email and before docket recorded
// it. The example started again over the same ledger finds the email in
// needs_review that its own process never sent: it says the email waits for
// a person and how to resolve it, and exits with the waiting code, sending
// nothing; with -resolve it finishes the run.
func TestWorkerKilledDuringTheEmail(t *testing.T) {
	if dir := os.Getenv("DOCKET_TEMPORAL_EXAMPLE_CHILD"); dir != "" {
		killedWorker(t, dir)
		return
	}
	data := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerKilledDuringTheEmail$")
	cmd.Env = append(os.Environ(), "DOCKET_TEMPORAL_EXAMPLE_CHILD="+data)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sent := false
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "sent" {
			sent = true
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !sent {
		t.Fatalf("the worker exited before it sent the email:\n%s", strings.Join(lines, "\n"))
	}

	// The example again, over the same ledger, with a new provider log.
	world := NewWorld()
	var sendErr error
	p := &person{world: world, workflowID: "default-test-workflow-id"}
	_, asked := restartedWorker(t, data, world, func(env *testsuite.TestWorkflowEnvironment, r temporalstep.Result) {
		err := p.step(r, func(name string, arg any) error { t.Fatalf("the example sent %s %+v", name, arg); return nil })
		var waiting *WaitingError
		if !errors.As(err, &waiting) {
			sendErr = fmt.Errorf("step: %v, want a WaitingError", err)
		} else if msg := err.Error(); !strings.Contains(msg, "-resolve done=MESSAGE_ID") || !strings.Contains(msg, "[welcome]") {
			sendErr = fmt.Errorf("message %q does not say how to resolve welcome", msg)
		}
		env.CancelWorkflow()
	})
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	if len(*asked) != 1 || !(*asked)[0].NeedsReview() || !slices.Equal((*asked)[0].InReview, []string{"welcome"}) {
		t.Fatalf("the workflow asked %+v, want welcome in review", *asked)
	}
	if len(world.Emails) != 0 {
		t.Fatalf("the restarted worker sent %v", world.Emails)
	}

	// A person looked at the provider's log: -resolve done=msg_1.
	r, err := parseResolve("done=msg_1")
	if err != nil {
		t.Fatal(err)
	}
	world = NewWorld()
	p = &person{world: world, workflowID: "default-test-workflow-id", resolve: r}
	env, _ := restartedWorker(t, data, world, func(env *testsuite.TestWorkflowEnvironment, r temporalstep.Result) {
		if err := p.step(r, func(name string, arg any) error {
			env.UpdateWorkflow(name, name, &testsuite.TestUpdateCallback{
				OnAccept:   func() {},
				OnReject:   func(err error) { sendErr = err },
				OnComplete: func(_ any, err error) { sendErr = err },
			}, arg)
			return nil
		}); err != nil {
			sendErr = err
		}
	})
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res temporalstep.Result
	env.GetWorkflowResult(&res)
	if res.Status != "completed" || len(world.Emails) != 0 {
		t.Fatalf("result %+v, emails sent again %v; want completed with none sent again", res, world.Emails)
	}
}

// killedWorker runs the example's workflow, approving everything, with an
// email provider that sends, prints "sent" and hangs until it is killed.
func killedWorker(t *testing.T, data string) {
	world := NewWorld()
	world.afterSend = func() {
		fmt.Println("sent")
		select {}
	}
	reg, err := world.Tools()
	if err != nil {
		t.Fatal(err)
	}
	acts, err := temporalstep.New(context.Background(), temporalstep.Config{DataDir: data, Tools: reg})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Hour)
	env.RegisterWorkflow(temporalstep.Workflow)
	acts.Register(env)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(temporalstep.QueryResult)
		if err != nil {
			t.Fatal(err)
		}
		var r temporalstep.Result
		v.Get(&r)
		env.UpdateWorkflow(temporalstep.UpdateApprove, "approve", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, temporalstep.ApproveRequest{Actions: r.AwaitingApproval, By: "test"})
	}, time.Hour)
	env.ExecuteWorkflow(temporalstep.Workflow, temporalstep.WorkflowRequest{Request: temporalstep.Request{Plan: json.RawMessage(Plan), Approve: "safe"}, MaxAttempts: 3})
	t.Fatal("the workflow finished; the email should have hung")
}

// restartedWorker runs the example's workflow over data with world's tools
// and calls person with the workflow's Result an hour in.
func restartedWorker(t *testing.T, data string, world *World, person func(*testsuite.TestWorkflowEnvironment, temporalstep.Result)) (*testsuite.TestWorkflowEnvironment, *[]temporalstep.Result) {
	reg, err := world.Tools()
	if err != nil {
		t.Fatal(err)
	}
	acts, err := temporalstep.New(context.Background(), temporalstep.Config{DataDir: data, Tools: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer acts.Close()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(temporalstep.Workflow)
	acts.Register(env)
	var asked []temporalstep.Result
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(temporalstep.QueryResult)
		if err != nil {
			t.Fatal(err)
		}
		var r temporalstep.Result
		v.Get(&r)
		asked = append(asked, r)
		person(env, r)
	}, time.Hour)
	env.ExecuteWorkflow(temporalstep.Workflow, temporalstep.WorkflowRequest{Request: temporalstep.Request{Plan: json.RawMessage(Plan), Approve: "safe"}, MaxAttempts: 3})
	return env, &asked
}
