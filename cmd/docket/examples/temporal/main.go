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
			if !w.lostOnce {
				w.lostOnce = true
				// Sent, but the answer never arrives: an unknown outcome.
				return emailOut{}, errors.New("connection reset after the request was sent")
			}
			return emailOut{MessageID: id}, nil
		})
	return tools.NewRegistry(contact, email)
}

func main() {
	address := flag.String("address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "the Temporal frontend (host:port)")
	namespace := flag.String("namespace", "default", "the Temporal namespace")
	data := flag.String("data", "./temporal-example.docket-data", "the worker's docket ledger directory")
	queue := flag.String("task-queue", "docket-example", "the task queue")
	workflowID := flag.String("workflow-id", "docket-example-onboard-acme", "the workflow id (the run id derives from it)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *address, *namespace, *data, *queue, *workflowID); err != nil {
		log.Fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, address, namespace, data, queue, workflowID string) error {
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
	seen := map[string]bool{}
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
		switch {
		case res.NeedsReview() && !seen["review"]:
			seen["review"] = true
			fmt.Printf("needs review: %v (the email's outcome is unknown; the provider's log shows %v)\n", res.InReview, world.Emails)
			out, _ := json.Marshal(map[string]string{"message_id": world.Emails[len(world.Emails)-1]})
			if err := sendUpdate(ctx, c, workflowID, temporalstep.UpdateResolve,
				temporalstep.Resolution{ActionID: res.InReview[0], Done: out, By: "example"}); err != nil {
				return err
			}
			fmt.Println("resolved: done, with the message the provider shows")
		case res.WaitingForApproval() && !seen["approval"] && slices.Contains(res.AwaitingApproval, "welcome"):
			seen["approval"] = true
			fmt.Printf("waiting for approval: %v\n", res.AwaitingApproval)
			if err := sendUpdate(ctx, c, workflowID, temporalstep.UpdateApprove,
				temporalstep.ApproveRequest{Actions: res.AwaitingApproval, By: "example"}); err != nil {
				return err
			}
			fmt.Println("approved")
		}
	}
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
