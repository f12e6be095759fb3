// Command temporal runs docket as a Temporal workflow and walks through the
// approval and resolve loop against a real Temporal server (the dev server:
// `temporal server start-dev`, see the README's "Temporal" section):
//
//	cd cmd/docket/examples/temporal
//	go run . -address 127.0.0.1:7233
//
// It starts a worker (temporalstep.Workflow and its activities over a Badger
// ledger in -data) and a workflow that onboards a customer: a CRM contact
// (lookup: safe to retry) and a welcome email (at_most_once: a person
// approves it). Then, as a person would through the updates:
//
//  1. the run waits for approval of the email: the example approves it
//     (update "approve");
//  2. the email provider sends the email but the answer is lost (the example's
//     email tool fails after sending, once): docket does not know whether it
//     went out and never sends it again on its own: the run waits in
//     needs_review (not for approval: Result.NeedsReview);
//  3. the example resolves it as done with the message the provider shows
//     (update "resolve"), and the workflow completes with one email sent.
//
// Run it twice with the same -data and -workflow-id: the second run finds
// the workflow (or the run) done and sends nothing. Each step is printed.
//
// Stopped (killed) while the email was being sent, and started again, the
// example finds the email in needs_review that this process did not send:
// it cannot see whether the email went out, so it prints that the email
// waits for a person and exits 3 (waiting), sending nothing. Started again
// with -resolve done=MESSAGE_ID (it went out), -resolve retry (it did not)
// or -resolve skip, it sends that decision (update "resolve") and the
// workflow completes.
//
// It is its own Go module (with replaces to docket and temporalstep), so
// that docket does not carry Temporal's dependencies.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/docketrun/docket/executor/temporalstep"
	"github.com/docketrun/docket/tools"
)

// Plan is what the workflow runs.
const Plan = `{"goal": "onboard ACME", "actions": [
  {"id": "contact", "tool": "crm_create_contact", "args": {"email": "billing@acme.example"}},
  {"id": "welcome", "tool": "email_send", "depends_on": ["contact"],
   "args": {"to": "billing@acme.example", "contact_id": "${contact.output.id}"}}]}`

// World is the example's external systems, in memory: a CRM that can be
// searched by the key docket sends, and an email provider whose first
// answer is lost after it sent the email.
type World struct {
	mu       sync.Mutex
	contacts map[string]string // docket's key → contact id
	Emails   []string          // message ids sent
	lostOnce bool
	// afterSend, if set, runs after the provider sent an email and before
	// it answers (a test kills the worker there).
	afterSend func()
}

func NewWorld() *World { return &World{contacts: map[string]string{}} }

// Tools is the registry the worker runs plans with.
func (w *World) Tools() (*tools.Registry, error) {
	type contactIn struct {
		Email string `json:"email"`
	}
	type contactOut struct {
		ID string `json:"id"`
	}
	contact := tools.FuncLooker(tools.Spec{Name: "crm_create_contact", Description: "Create a CRM contact.", Class: tools.Lookup},
		func(ctx context.Context, call tools.Call, in contactIn) (contactOut, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			id := fmt.Sprintf("c_%d", len(w.contacts)+1)
			w.contacts[call.Key] = id
			return contactOut{ID: id}, nil
		},
		func(ctx context.Context, call tools.Call, in contactIn) (contactOut, bool, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			id, ok := w.contacts[call.Key]
			return contactOut{ID: id}, ok, nil
		})
	type emailIn struct {
		To        string `json:"to"`
		ContactID string `json:"contact_id"`
	}
	type emailOut struct {
		MessageID string `json:"message_id"`
	}
	email := tools.Func(tools.Spec{Name: "email_send", Description: "Send the welcome email.", Class: tools.AtMostOnce},
		func(ctx context.Context, call tools.Call, in emailIn) (emailOut, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			id := fmt.Sprintf("msg_%d", len(w.Emails)+1)
			w.Emails = append(w.Emails, id)
			if w.afterSend != nil {
				w.afterSend()
			}
			if !w.lostOnce {
				w.lostOnce = true
				// Sent, but the answer never arrives: an unknown outcome.
				return emailOut{}, errors.New("connection reset after the request was sent")
			}
			return emailOut{MessageID: id}, nil
		})
	return tools.NewRegistry(contact, email)
}

// Sent is the message ids the provider's log shows in this process.
func (w *World) Sent() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.Emails)
}

// LastEmail is the last message id this process sent; false when it sent
// none (the email in review was sent by a worker that is gone).
func (w *World) LastEmail() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.Emails) == 0 {
		return "", false
	}
	return w.Emails[len(w.Emails)-1], true
}

func main() {
	address := flag.String("address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "the Temporal frontend (host:port)")
	namespace := flag.String("namespace", "default", "the Temporal namespace")
	data := flag.String("data", "./temporal-example.docket-data", "the worker's docket ledger directory")
	queue := flag.String("task-queue", "docket-example", "the task queue")
	workflowID := flag.String("workflow-id", "docket-example-onboard-acme", "the workflow id (the run id derives from it)")
	resolveFlag := flag.String("resolve", "", "how to resolve an email in review that this process did not send: done=MESSAGE_ID, retry or skip")
	flag.Parse()
	resolve, err := parseResolve(*resolveFlag)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, *address, *namespace, *data, *queue, *workflowID, resolve)
	stop()
	var waiting *WaitingError
	if errors.As(err, &waiting) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitWaiting)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, address, namespace, data, queue, workflowID string, resolve *temporalstep.Resolution) error {
	c, err := client.Dial(client.Options{HostPort: address, Namespace: namespace})
	if err != nil {
		return fmt.Errorf("connecting to Temporal at %s: %w", address, err)
	}
	defer c.Close()

	world := NewWorld()
	reg, err := world.Tools()
	if err != nil {
		return err
	}
	acts, err := temporalstep.New(ctx, temporalstep.Config{DataDir: data, Tools: reg})
	if err != nil {
		return err
	}
	defer acts.Close()
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(temporalstep.Workflow)
	acts.Register(w)
	if err := w.Start(); err != nil {
		return fmt.Errorf("starting the worker: %w", err)
	}
	defer w.Stop()

	req := temporalstep.WorkflowRequest{
		Request:   temporalstep.Request{Plan: json.RawMessage(Plan), Approve: "safe"},
		Heartbeat: 10 * time.Second, StartToClose: 10 * time.Minute,
	}
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflowID, TaskQueue: queue}, temporalstep.Workflow, req)
	if err != nil {
		return fmt.Errorf("starting the workflow: %w", err)
	}
	fmt.Printf("workflow %s started (run %s)\n", wr.GetID(), wr.GetRunID())
	done := make(chan error, 1)
	var final temporalstep.Result
	go func() { done <- wr.Get(ctx, &final) }()

	// The person's side: read the workflow's Result, act on what it asks.
	p := &person{world: world, workflowID: workflowID, resolve: resolve}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("workflow: %w", err)
			}
			fmt.Printf("completed: %s, actions %+v; emails sent: %d %v\n", final.Status, final.Actions, len(world.Emails), world.Emails)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		v, err := c.QueryWorkflow(ctx, workflowID, "", temporalstep.QueryResult)
		if err != nil {
			continue // not started yet
		}
		var res temporalstep.Result
		if err := v.Get(&res); err != nil {
			return err
		}
		if err := p.step(res, func(name string, arg any) error { return sendUpdate(ctx, c, workflowID, name, arg) }); err != nil {
			return err
		}
	}
}

// person is the person's side of the loop: it reads the workflow's Result
// and answers what it asks, once each.
type person struct {
	world      *World
	workflowID string
	resolve    *temporalstep.Resolution // from -resolve; nil: decide from the provider's log
	seen       map[string]bool
}

// step acts on one Result; send sends a workflow update and waits for it.
// An email in review that this process did not see sent (the worker that
// sent it was killed: its provider log went with it) is a decision for a
// person: without -resolve, step returns a *WaitingError saying how to
// make it, and never guesses.
func (p *person) step(res temporalstep.Result, send func(name string, arg any) error) error {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	switch {
	case res.NeedsReview() && !p.seen["review"]:
		p.seen["review"] = true
		fmt.Printf("needs review: %v (the email's outcome is unknown; the provider's log shows %v)\n", res.InReview, p.world.Sent())
		r := p.resolve
		if r == nil {
			id, ok := p.world.LastEmail()
			if !ok {
				return &WaitingError{WorkflowID: p.workflowID, InReview: res.InReview}
			}
			out, _ := json.Marshal(map[string]string{"message_id": id})
			r = &temporalstep.Resolution{Done: out, By: "example"}
		}
		rr := *r
		rr.ActionID = res.InReview[0]
		if err := send(temporalstep.UpdateResolve, rr); err != nil {
			return err
		}
		fmt.Printf("resolved %s: %s\n", rr.ActionID, describe(rr))
	case res.WaitingForApproval() && !p.seen["approval"] && slices.Contains(res.AwaitingApproval, "welcome"):
		p.seen["approval"] = true
		fmt.Printf("waiting for approval: %v\n", res.AwaitingApproval)
		if err := send(temporalstep.UpdateApprove, temporalstep.ApproveRequest{Actions: res.AwaitingApproval, By: "example"}); err != nil {
			return err
		}
		fmt.Println("approved")
	}
	return nil
}

func describe(r temporalstep.Resolution) string {
	switch {
	case r.Retry:
		return "retry (send it once more)"
	case r.Skip:
		return "skipped"
	}
	return "done, with " + string(r.Done)
}

// exitWaiting is the exit code of a run that waits for a person, as docket's
// own commands use it.
const exitWaiting = 3

// WaitingError is a workflow left waiting for a person's decision the
// example cannot make: an email whose outcome is unknown.
type WaitingError struct {
	WorkflowID string
	InReview   []string
}

func (e *WaitingError) Error() string {
	return fmt.Sprintf(`needs review: %v waits for a person: the worker that sent the email was stopped during the call, so whether the email went out is unknown; docket will not send it again on its own, and the workflow %s stays open.
Look in the email provider's log, then run this example again with the same -data and -workflow-id and one of:
  -resolve done=MESSAGE_ID   it was sent: record it as done with the provider's message id
  -resolve retry             it was not sent: send it once more
  -resolve skip              do not send it`, e.InReview, e.WorkflowID)
}

// parseResolve parses -resolve: done=MESSAGE_ID, retry or skip; "" is nil.
func parseResolve(s string) (*temporalstep.Resolution, error) {
	switch {
	case s == "":
		return nil, nil
	case s == "retry":
		return &temporalstep.Resolution{Retry: true, By: "example"}, nil
	case s == "skip":
		return &temporalstep.Resolution{Skip: true, By: "example"}, nil
	case strings.HasPrefix(s, "done=") && len(s) > len("done="):
		out, _ := json.Marshal(map[string]string{"message_id": strings.TrimPrefix(s, "done=")})
		return &temporalstep.Resolution{Done: out, By: "example"}, nil
	}
	return nil, fmt.Errorf("-resolve %q: want done=MESSAGE_ID, retry or skip", s)
}

// sendUpdate sends a workflow update and waits for its answer.
func sendUpdate(ctx context.Context, c client.Client, workflowID, name string, arg any) error {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	if err := h.Get(ctx, nil); err != nil {
		return fmt.Errorf("update %s: %w", name, err)
	}
	return nil
}
