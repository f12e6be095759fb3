package postgres_test

// Two executor engines on two nodes of one database: the whole path of a
// takeover, as the executor sees it. (An external test package: the ledger
// itself never imports the executor or tools.)

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// Node A stalls in the middle of two calls (a keyed payment and an
// at-most-once email, both of which took effect); its lease expires; node
// B resumes the run: the payment is called again with the same key (the
// provider answers with the first charge), the email goes to needs_review.
// When A wakes up, its outcomes are refused. Every effect happened once.
func TestTakeoverEffectsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	world := tooltest.NewWorld()
	specs := []tools.Spec{
		{Name: "pay", Class: tools.Keyed, Timeout: time.Minute},
		{Name: "email", Class: tools.AtMostOnce, Timeout: time.Minute},
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Node A's tools perform the effect, then hang until released.
	release := make(chan struct{})
	called := make(chan string, 2)
	var regA []tools.Tool
	for _, s := range specs {
		wt := world.Tool(s)
		inner := wt.CallFunc
		wt.CallFunc = func(ctx context.Context, call tools.Call) (json.RawMessage, error) {
			out, err := inner(ctx, call)
			called <- call.Action
			<-release
			return out, err
		}
		regA = append(regA, wt)
	}
	var regB []tools.Tool
	for _, s := range specs {
		regB = append(regB, world.Tool(s))
	}
	engine := func(l ledger.Store, ts []tools.Tool) *executor.Engine {
		reg, err := tools.NewRegistry(ts...)
		if err != nil {
			t.Fatal(err)
		}
		e, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet, Clock: l})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	engA, engB := engine(a, regA), engine(b, regB)
	p, err := plan.Decode([]byte(`{"goal":"pay and tell","actions":[
		{"id":"charge","tool":"pay","args":{"amount":120}},
		{"id":"tell","tool":"email","args":{"to":"ann"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() {
		_, err := engA.Run(ctx, "r", p, &executor.RunOptions{Policy: executor.PolicyAll})
		aDone <- err
	}()
	for range 2 {
		select {
		case <-called:
		case err := <-aDone:
			t.Fatalf("node A's run ended before its calls: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("node A did not call its tools")
		}
	}
	old := a.Incarnation()
	a.PauseHeartbeat(true)
	waitExpired(t, b, old)

	doc, err := engB.Resume(ctx, "r", nil)
	if err != nil {
		t.Fatalf("node B resuming: %v", err)
	}
	st := map[string]ledger.Status{}
	for _, act := range doc.Actions {
		st[act.ID] = act.Status
	}
	if st["charge"] != ledger.StatusSucceeded || st["tell"] != ledger.StatusNeedsReview || doc.Run.Status != ledger.RunPaused {
		t.Fatalf("after the takeover: run %s, actions %v", doc.Run.Status, st)
	}

	close(release)
	select {
	case err := <-aDone:
		if !errors.Is(err, ledger.ErrLeaseExpired) {
			t.Fatalf("node A's run after waking up: %v, want ErrLeaseExpired", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("node A's run did not end after its calls returned")
	}
	a.PauseHeartbeat(false)
	for _, k := range world.Keys() {
		if n := world.Effects(k); n != 1 {
			t.Fatalf("key %s took effect %d times", k, n)
		}
	}
	if len(world.Keys()) != 2 {
		t.Fatalf("effects under %d keys, want 2", len(world.Keys()))
	}
	// The records agree: the charge's output is the provider's first one.
	doc, err = b.Doc(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := world.Output(doc.Actions[0].Key)
	if string(doc.Actions[0].Output) != string(out) {
		t.Fatalf("charge output %s, provider's %s", doc.Actions[0].Output, out)
	}
}

// A node that stalls between its claim and its call, longer than its
// lease, does not make the call when it wakes up (its lease may have
// lapsed: another node may hold the action now); the node that resumes the
// run sends the at-most-once action to needs_review. No request at all
// reached the provider.
func TestLapsedNodeDoesNotCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	world := tooltest.NewWorld()
	spec := tools.Spec{Name: "email", Class: tools.AtMostOnce, Timeout: time.Minute}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	regA, err := tools.NewRegistry(world.Tool(spec))
	if err != nil {
		t.Fatal(err)
	}
	regB, err := tools.NewRegistry(world.Tool(spec))
	if err != nil {
		t.Fatal(err)
	}
	engA, err := executor.New(executor.Config{Ledger: a, Tools: regA, Logger: quiet, Clock: a, Hooks: executor.Hooks{
		AfterClaim: func(string) {
			// The process stalls right after its claim, past its lease.
			inc := a.Incarnation()
			a.PauseHeartbeat(true)
			waitExpired(t, b, inc)
			if a.LeaseValid() {
				t.Error("LeaseValid is still true after the lease expired by the database's clock")
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	engB, err := executor.New(executor.Config{Ledger: b, Tools: regB, Logger: quiet, Clock: b})
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Decode([]byte(`{"goal":"tell","actions":[{"id":"tell","tool":"email","args":{"to":"ann"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = engA.Run(ctx, "r", p, &executor.RunOptions{Policy: executor.PolicyAll})
	if !errors.Is(err, ledger.ErrLeaseExpired) {
		t.Fatalf("node A's run: %v, want ErrLeaseExpired", err)
	}
	a.PauseHeartbeat(false)
	if keys := world.Keys(); len(keys) != 0 {
		t.Fatalf("the lapsed node called the provider: %v", keys)
	}
	doc, err := engB.Resume(ctx, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Actions[0].Status != ledger.StatusNeedsReview || len(world.Keys()) != 0 {
		t.Fatalf("after node B resumed: %s, requests under %v", doc.Actions[0].Status, world.Keys())
	}
}
