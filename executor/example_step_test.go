package executor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// provider is a payment provider that deduplicates by idempotency key, as a
// card processor does: it counts charges per key.
type provider struct {
	mu      sync.Mutex
	charges map[string]int // key → charges made
	after   func()         // called after each charge (the example's "crash")
}

type chargeIn struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

type chargeOut struct {
	ID string `json:"id"`
}

func (p *provider) tool() tools.Tool {
	return tools.Func(tools.Spec{Name: "charge", Description: "Charge a customer.", Class: tools.Keyed},
		func(ctx context.Context, call tools.Call, in chargeIn) (chargeOut, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.charges[call.Key] == 0 { // a new key charges, a known key answers the stored charge
				p.charges[call.Key]++
			}
			if p.after != nil {
				p.after()
			}
			return chargeOut{ID: "ch_" + in.Customer}, nil
		})
}

// hostStep is what a workflow engine's step (an activity, a task, a job)
// does to run a plan with docket: the run id comes from the host's own,
// stable identity for the step, never from the attempt, so that a retried
// step resumes the same run instead of starting a new one. It opens the
// ledger each time, as a fresh worker process would.
func hostStep(ctx context.Context, dataDir, workflowID, stepName string, p *plan.Plan, reg *tools.Registry) (ledger.RunDoc, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dataDir, Logger: quiet})
	if err != nil {
		return ledger.RunDoc{}, err // ledger.ErrLocked: another worker holds the directory; retry later
	}
	defer l.Close()
	eng, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet})
	if err != nil {
		return ledger.RunDoc{}, err
	}
	runID := workflowID + "/" + stepName
	return eng.Run(ctx, runID, p, &executor.RunOptions{Policy: executor.PolicyAll})
}

// Embedding the executor as a workflow-engine step. The first attempt dies
// right after the provider charged, before docket recorded the outcome (the
// host timed the step out; here its context is cancelled). The host retries
// the step: docket resumes the same run from its ledger (had the outcome not
// been recorded, it would call the keyed tool again with the same key and the
// provider would answer the stored charge) and completes; further retries
// return the recorded result without calling the provider.
func Example_workflowStep() {
	dir, err := os.MkdirTemp("", "docket-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	prov := &provider{charges: map[string]int{}}
	reg, err := tools.NewRegistry(prov.tool())
	if err != nil {
		panic(err)
	}
	p, err := plan.Decode([]byte(`{"goal": "bill ACME", "actions": [
	  {"id": "bill", "tool": "charge", "args": {"customer": "acme", "amount": 1200}}]}`))
	if err != nil {
		panic(err)
	}

	for attempt := 1; attempt <= 3; attempt++ { // the host engine's attempts of one step
		ctx, cancel := context.WithCancel(context.Background())
		prov.after = nil
		if attempt == 1 {
			prov.after = cancel // the host gives up on the step just after the charge
		}
		doc, err := hostStep(ctx, dir, "order-4711", "bill", p, reg)
		cancel()
		if err != nil {
			fmt.Printf("attempt %d: failed (%v), the host will retry\n", attempt, errors.Is(err, context.Canceled))
			continue
		}
		a := doc.Actions[0]
		fmt.Printf("attempt %d: run %s %s, action %s %s %s\n", attempt, doc.Run.ID, doc.Run.Status, a.ID, a.Status, a.Output)
	}
	charges := 0
	for _, n := range prov.charges {
		charges += n
	}
	fmt.Printf("provider: %d charge\n", charges)
	// Output:
	// attempt 1: failed (true), the host will retry
	// attempt 2: run order-4711/bill completed, action bill succeeded {"id":"ch_acme"}
	// attempt 3: run order-4711/bill completed, action bill succeeded {"id":"ch_acme"}
	// provider: 1 charge
}

// A step that needs a person: under the safe policy an at_most_once action
// waits for approval; the host polls by calling Run again with the same run
// id (nothing runs while it waits), and once a reviewer approved, the next
// call finishes the run.
func Example_pollingStep() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "docket-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	sent := 0
	email := tools.Func(tools.Spec{Name: "send_email", Description: "Send an email.", Class: tools.AtMostOnce},
		func(ctx context.Context, call tools.Call, in struct {
			To string `json:"to"`
		}) (map[string]string, error) {
			sent++
			return map[string]string{"to": in.To}, nil
		})
	reg, err := tools.NewRegistry(email)
	if err != nil {
		panic(err)
	}
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	eng, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet})
	if err != nil {
		panic(err)
	}
	p, err := plan.Decode([]byte(`{"goal": "welcome", "actions": [
	  {"id": "welcome", "tool": "send_email", "args": {"to": "ann@example.com"}}]}`))
	if err != nil {
		panic(err)
	}
	// Without an identity from the host, derive the run id from the plan:
	// the same plan resumes the same run.
	runID, err := executor.DeriveRunID(p)
	if err != nil {
		panic(err)
	}
	for poll := 1; poll <= 2; poll++ {
		doc, err := eng.Run(ctx, runID, p, &executor.RunOptions{Policy: executor.PolicySafe})
		if err != nil {
			panic(err)
		}
		fmt.Printf("poll %d: %s, welcome %s, sent %d\n", poll, doc.Run.Status, doc.Actions[0].Status, sent)
	}
	if err := eng.Approve(ctx, runID, []string{"welcome"}, "reviewer:ann"); err != nil {
		panic(err)
	}
	doc, err := eng.Run(ctx, runID, p, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("after approval: %s, welcome %s, sent %d\n", doc.Run.Status, doc.Actions[0].Status, sent)
	// Output:
	// poll 1: awaiting_approval, welcome pending, sent 0
	// poll 2: awaiting_approval, welcome pending, sent 0
	// after approval: completed, welcome succeeded, sent 1
}
