package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// TestResolvedDataIsNeverParsedAgain: an output whose text contains "${"
// passed on by a reference is data. Regression: once the resolved argument
// was written back (shown to a reviewer, or claimed), every approve, reject
// and rerun failed with "load: ... bad reference".
func TestResolvedDataIsNeverParsedAgain(t *testing.T) {
	t.Parallel()
	text := json.RawMessage(`{"text":"Price: ${price} and ${a.output.text}"}`)
	for _, pol := range []Policy{PolicyNone, PolicyAll} {
		t.Run(string(pol), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			src := &tooltest.Tool{SpecValue: spec("src", tools.ReadOnly), CallFunc: func(context.Context, tools.Call) (json.RawMessage, error) {
				return text, nil
			}}
			mail := w.Tool(spec("mail", tools.AtMostOnce))
			// The note's first call commits but its answer is lost: the retry
			// (and a restart) must work from the recorded, resolved args.
			w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault {
				if tool == "note" && n == 1 {
					return tooltest.LoseReply
				}
				return tooltest.NoFault
			}
			b := setup(t, []tools.Tool{src, mail, w.Tool(spec("note", tools.Keyed))})
			p := mkPlan(t, pa("a", "src", `{}`), pa("m", "mail", `{"body":"${a.output.text}"}`, "a"),
				pa("n", "note", `{"body":"${a.output.text}"}`, "a"))
			doc := b.run("r1", p, pol)
			ctx := context.Background()
			for i := 0; doc.Run.Status == ledger.RunAwaitingApproval && i < 3; i++ {
				if err := b.eng.ApproveAll(ctx, "r1", "ann"); err != nil {
					t.Fatalf("Approve: %v", err)
				}
				doc = b.resume("r1")
			}
			wantStatus(t, doc, ledger.RunCompleted)
			for _, id := range []string{"m", "n"} {
				a := wantAction(t, doc, id, ledger.StatusSucceeded)
				if got := string(a.Args); got != `{"body":"Price: ${price} and ${a.output.text}"}` {
					t.Fatalf("%s sent with %s", id, got)
				}
			}
			if len(mail.Calls()) != 1 {
				t.Fatalf("mail calls %d", len(mail.Calls()))
			}
			if n := w.Effects(row(t, doc, "n").Key); n != 1 {
				t.Fatalf("note took effect %d times", n)
			}
			// A new process reads the rows without parsing the data.
			b.restart()
			wantStatus(t, b.resume("r1"), ledger.RunCompleted)
		})
	}
}

// compWorld is a world with a charge tool of class chargeClass compensated by
// refund (refundSpec), and ship, which the test makes fail.
func compWorld(t *testing.T, chargeClass tools.Class, refund tools.Spec, fault func(tool string, n int) tooltest.Fault) (*bundle, *tooltest.World) {
	t.Helper()
	w := tooltest.NewWorld()
	w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault { return fault(tool, n) }
	charge := spec("charge", chargeClass)
	charge.Compensate = &tools.Compensation{Tool: refund.Name, Args: json.RawMessage(`{"charge":"${output.id}","amount":"${input.amount}"}`)}
	refund.InputSchema = objSchema
	return setup(t, []tools.Tool{w.Tool(charge), w.Tool(refund), w.Tool(spec("ship", tools.Keyed))}), w
}

var chargeThenShip = []string{`{"amount":5000}`, `{"to":"x"}`}

// TestResolvedDoneIsCompensated: an at-most-once charge whose outcome was
// unknown, marked done by a person, counts as succeeded: when the run fails
// later, it is undone like any other. Regression: compensation looked only at
// action.succeeded events.
func TestResolvedDoneIsCompensated(t *testing.T) {
	t.Parallel()
	b, w := compWorld(t, tools.AtMostOnce, spec("refund", tools.Keyed), func(tool string, n int) tooltest.Fault {
		switch {
		case tool == "charge":
			return tooltest.LoseReply
		case tool == "ship":
			return tooltest.Reject
		}
		return tooltest.NoFault
	})
	p := mkPlan(t, pa("c", "charge", chargeThenShip[0]), pa("s", "ship", chargeThenShip[1], "c"))
	doc := b.run("r1", p, PolicyAll)
	wantAction(t, doc, "c", ledger.StatusNeedsReview)
	if err := b.eng.Resolve(context.Background(), "r1", "c", ledger.Resolution{Done: json.RawMessage(`{"id":"ch_9"}`), By: "ann"}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "c", ledger.StatusCompensated)
	u := wantAction(t, doc, "c.undo", ledger.StatusSucceeded)
	if string(u.Args) != `{"amount":5000,"charge":"ch_9"}` || w.Effects(u.Key) != 1 {
		t.Fatalf("refund %s took effect %d times", u.Args, w.Effects(u.Key))
	}
}

// TestFailedCompensationPausesForAPerson: a refund refused (400) leaves a
// charge in place: the run pauses (needs_review on the undo, named) instead
// of ending failed with nobody asked.
func TestFailedCompensationPausesForAPerson(t *testing.T) {
	t.Parallel()
	b, _ := compWorld(t, tools.Keyed, spec("refund", tools.Keyed), func(tool string, n int) tooltest.Fault {
		if tool == "ship" || tool == "refund" {
			return tooltest.Reject
		}
		return tooltest.NoFault
	})
	p := mkPlan(t, pa("c", "charge", chargeThenShip[0]), pa("s", "ship", chargeThenShip[1], "c"))
	doc := b.run("r1", p, PolicyAll)
	wantStatus(t, doc, ledger.RunPaused)
	wantAction(t, doc, "c", ledger.StatusSucceeded)
	u := wantAction(t, doc, "c.undo", ledger.StatusNeedsReview)
	if !strings.Contains(u.Error, "compensation of c") {
		t.Fatalf("undo reason %q does not name what it undoes", u.Error)
	}
	// The person refunds by hand and says so: the charge counts as undone.
	if err := b.eng.Resolve(context.Background(), "r1", "c.undo", ledger.Resolution{Done: json.RawMessage(`{"id":"manual"}`), By: "ann"}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "c", ledger.StatusCompensated)
}

// TestCompensationObeysApprovalRules: an at-most-once refund with
// approval: always waits for a person under --approve none instead of
// running on its own.
func TestCompensationObeysApprovalRules(t *testing.T) {
	t.Parallel()
	refund := spec("refund", tools.AtMostOnce)
	refund.Approval = tools.Approval{Always: true}
	b, w := compWorld(t, tools.Keyed, refund, func(tool string, n int) tooltest.Fault {
		if tool == "ship" {
			return tooltest.Reject
		}
		return tooltest.NoFault
	})
	p := mkPlan(t, pa("c", "charge", chargeThenShip[0]), pa("s", "ship", chargeThenShip[1], "c"))
	doc := b.run("r1", p, PolicyAll)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	u := wantAction(t, doc, "c.undo", ledger.StatusPending)
	if w.Effects(keyOf(t, "r1", "c.undo", "refund", string(u.Args))) != 0 {
		t.Fatal("the refund ran without its approval")
	}
	if err := b.eng.Approve(context.Background(), "r1", []string{"c.undo"}, "ann"); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "c", ledger.StatusCompensated)
	u = wantAction(t, doc, "c.undo", ledger.StatusSucceeded)
	if w.Effects(u.Key) != 1 {
		t.Fatalf("refund effects %d", w.Effects(u.Key))
	}
}

// TestKeyTTLIsCheckedBeforeEveryCall: keyed tool with key_ttl 2s and no
// lookup. Attempt 1 commits but its answer is lost; attempt 2 is answered
// 429 with Retry-After 3s. Attempt 3 would go out past the key's TTL, when
// the provider may have forgotten the key and charge again: a person
// decides instead. Regression: the TTL was checked before the backoff wait,
// not before the call, and never on the 429/409 paths.
func TestKeyTTLIsCheckedBeforeEveryCall(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"429", "409"} {
		t.Run(second, func(t *testing.T) {
			t.Parallel()
			var calls int
			var mu sync.Mutex
			s := spec("charge", tools.Keyed)
			s.KeyTTL = 2 * time.Second
			ft := &tooltest.Tool{SpecValue: s, CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				switch calls {
				case 1:
					return nil, fmt.Errorf("500 after the charge was made")
				case 2:
					if second == "429" {
						return nil, tools.RetryAfter(3*time.Second, fmt.Errorf("429 slow down"))
					}
					return nil, tools.InFlight(3*time.Second, fmt.Errorf("409 in flight"))
				}
				return json.RawMessage(`{"id":"ch_2"}`), nil // a second charge
			}}
			b := setup(t, []tools.Tool{noLook{ft}})
			doc := b.run("r1", mkPlan(t, pa("c", "charge", `{"amount":1}`)), PolicyAll)
			wantStatus(t, doc, ledger.RunPaused)
			a := wantAction(t, doc, "c", ledger.StatusNeedsReview)
			if !strings.Contains(a.Error, "key_ttl") {
				t.Fatalf("reason %q does not name key_ttl", a.Error)
			}
			if calls != 2 {
				t.Fatalf("%d calls, want 2 (none past the key's TTL)", calls)
			}
		})
	}
}

// TestCancelDuringUnknownOutcomesLeavesThemReconcilable: the run is
// cancelled while a keyed call and an idempotent call are in flight; both
// commit, then their answers are lost. Their effects may exist: each action
// goes to needs_review (a person can say what happened), never back to
// pending in a cancelled run where nothing can conclude them.
func TestCancelDuringUnknownOutcomesLeavesThemReconcilable(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	inFlight := make(chan struct{}, 2)
	release := make(chan struct{})
	w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault { return tooltest.LoseReply }
	block := func(tl *tooltest.Tool) *tooltest.Tool {
		inner := tl.CallFunc
		tl.CallFunc = func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
			inFlight <- struct{}{}
			<-release
			return inner(ctx, c)
		}
		return tl
	}
	b := setup(t, []tools.Tool{block(w.Tool(spec("charge", tools.Keyed))), block(w.Tool(spec("put", tools.Idempotent)))})
	p := mkPlan(t, pa("c", "charge", `{"amount":1}`), pa("p", "put", `{"v":1}`))
	done := make(chan ledger.RunDoc, 1)
	go func() {
		doc, _ := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll})
		done <- doc
	}()
	<-inFlight
	<-inFlight
	if err := b.eng.Cancel(context.Background(), "r1", "ann"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	close(release)
	<-done
	doc := b.doc("r1")
	wantStatus(t, doc, ledger.RunCancelled)
	for _, id := range []string{"c", "p"} {
		a := wantAction(t, doc, id, ledger.StatusNeedsReview)
		if w.Effects(a.Key) != 1 {
			t.Fatalf("%s: %d effects", id, w.Effects(a.Key))
		}
	}
	// A person says what happened; the ledger takes it.
	if err := b.eng.Resolve(context.Background(), "r1", "c", ledger.Resolution{Done: json.RawMessage(`{"id":"seen"}`), By: "ann"}); err != nil {
		t.Fatalf("Resolve on the cancelled run: %v", err)
	}
	if a := wantAction(t, b.doc("r1"), "c", ledger.StatusSucceeded); string(a.Output) != `{"id":"seen"}` {
		t.Fatalf("output %s", a.Output)
	}
}

// TestReplayNeverBuildsOnAnUndoneAction: charge (compensated by refund),
// then ship, refused the first time. The run fails and refunds the charge.
// A replay that fixes only the shipping address must not ship against the
// refunded charge (the charge's unchanged key would return its undone
// output): it is refused, naming the charge; nothing more happens.
func TestReplayNeverBuildsOnAnUndoneAction(t *testing.T) {
	t.Parallel()
	b, w := compWorld(t, tools.Keyed, spec("refund", tools.Keyed), func(tool string, n int) tooltest.Fault {
		if tool == "ship" && n == 1 {
			return tooltest.Reject
		}
		return tooltest.NoFault
	})
	ship := func(to string) *plan.Plan {
		return mkPlan(t, pa("c", "charge", chargeThenShip[0]), pa("s", "ship", `{"to":"`+to+`","charge":"${c.output.id}"}`, "c"))
	}
	doc := b.run("r1", ship("nowhere"), PolicyAll)
	wantStatus(t, doc, ledger.RunFailed)
	charge := wantAction(t, doc, "c", ledger.StatusCompensated)
	before := len(w.Keys())
	doc, err := b.eng.Replay(context.Background(), "r1", ship("somewhere"), nil)
	if err == nil || !strings.Contains(err.Error(), "c") || !strings.Contains(err.Error(), "compensated") {
		t.Fatalf("Replay over an undone charge: %v (status %s), want a refusal naming c", err, doc.Run.Status)
	}
	if got := len(w.Keys()); got != before || w.Effects(charge.Key) != 1 {
		t.Fatalf("the replay acted: %d keys (was %d), charge effects %d", got, before, w.Effects(charge.Key))
	}
	if d := b.doc("r1"); d.Run.Status != ledger.RunFailed || d.Run.Revision != 1 {
		t.Fatalf("after the refusal: status %s revision %d, want failed 1", d.Run.Status, d.Run.Revision)
	}
}

// TestRetryAfterBeyondTheBudgetSaysSo: a 429 asking to wait an hour is not
// retried within the drive; the failure says why (the wait exceeds the retry
// budget) and that nothing was processed.
func TestRetryAfterBeyondTheBudgetSaysSo(t *testing.T) {
	t.Parallel()
	ft := &tooltest.Tool{SpecValue: spec("k", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		return nil, tools.RetryAfter(time.Hour, fmt.Errorf("429 too many requests"))
	}}
	b := setup(t, []tools.Tool{noLook{ft}})
	doc := b.run("r1", mkPlan(t, pa("a", "k", `{}`)), PolicyAll)
	a := wantAction(t, doc, "a", ledger.StatusFailed)
	if !strings.Contains(a.Error, "wait 1h0m0s") || !strings.Contains(a.Error, "retry budget") || !strings.Contains(a.Error, "nothing was processed") {
		t.Fatalf("error %q does not say the wait exceeds the retry budget", a.Error)
	}
	if n := len(ft.Calls()); n != 1 {
		t.Fatalf("%d calls", n)
	}
}

// TestApproveNamesWhatItApproves: an empty list approves nothing (it is
// refused); the whole plan is ApproveAll. Regression (issue 13.2): a review
// message without ids approved every waiting action, an email included.
func TestApproveNamesWhatItApproves(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	mail := w.Tool(spec("mail", tools.AtMostOnce))
	b := setup(t, []tools.Tool{w.Tool(spec("pay", tools.Keyed)), mail})
	doc := b.run("r1", mkPlan(t, pa("pay", "pay", `{}`), pa("mail", "mail", `{}`)), PolicyNone)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	for _, ids := range [][]string{nil, {}} {
		if err := b.eng.Approve(context.Background(), "r1", ids, "ann"); !errors.Is(err, ErrNothingNamed) {
			t.Fatalf("Approve(%v) = %v, want ErrNothingNamed", ids, err)
		}
	}
	if err := b.eng.Approve(context.Background(), "r1", []string{"pay"}, "ann"); err != nil {
		t.Fatal(err)
	}
	doc = b.resume("r1")
	wantAction(t, doc, "pay", ledger.StatusSucceeded)
	wantAction(t, doc, "mail", ledger.StatusPending)
	if len(mail.Calls()) != 0 {
		t.Fatal("mail was sent without being named")
	}
	if err := b.eng.ApproveAll(context.Background(), "r1", "ann"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.resume("r1"), ledger.RunCompleted)
}

// TestCancelledRunConcludesWhatWasInFlightAfterACrash: the run is cancelled
// while an action's call is at the provider, and the process dies before the
// outcome is recorded. A later drive of the cancelled run (any command on
// it) does not start anything, but it concludes the claim: needs_review, so
// a person can say what happened. Regression: a cancelled run was never
// driven again, the action stayed claimed and resolve refused it.
func TestCancelledRunConcludesWhatWasInFlightAfterACrash(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	var b *bundle
	var once sync.Once
	opt := func(c *Config) {
		c.Hooks.AfterCall = func(id string) {
			if id == "c" {
				once.Do(func() {
					if err := b.eng.Cancel(context.Background(), "r1", "ann"); err != nil {
						t.Errorf("Cancel: %v", err)
					}
					b.led.Close() // the process dies before recording the outcome
				})
			}
		}
	}
	b = setup(t, []tools.Tool{w.Tool(spec("charge", tools.Keyed)), w.Tool(spec("mail", tools.AtMostOnce))}, opt)
	p := mkPlan(t, pa("c", "charge", `{"amount":1}`), pa("m", "mail", `{}`, "c"))
	b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll})
	b.restart()
	doc := b.resume("r1")
	wantStatus(t, doc, ledger.RunCancelled)
	c := wantAction(t, doc, "c", ledger.StatusNeedsReview)
	if !strings.Contains(c.Error, "cancelled") {
		t.Fatalf("reason %q", c.Error)
	}
	if a := row(t, doc, "m"); a.Attempts != 0 || a.Status == ledger.StatusSucceeded {
		t.Fatalf("m ran after the cancel: %s", a.Status)
	}
	if n := w.Effects(c.Key); n != 1 {
		t.Fatalf("charge effects %d", n)
	}
	if err := b.eng.Resolve(context.Background(), "r1", "c", ledger.Resolution{Done: json.RawMessage(`{"id":"seen"}`), By: "ann"}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
}

// TestCancelDuringARetryWait: the run is cancelled while an action waits to
// be retried. After a 429 (nothing processed) it is skipped; after an unknown
// outcome it goes to needs_review. Neither stays pending in a cancelled run.
func TestCancelDuringARetryWait(t *testing.T) {
	t.Parallel()
	for _, unknown := range []bool{false, true} {
		t.Run(fmt.Sprintf("unknown=%v", unknown), func(t *testing.T) {
			t.Parallel()
			var b *bundle
			var calls atomic.Int32
			ft := &tooltest.Tool{SpecValue: spec("k", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
				calls.Add(1)
				if unknown {
					return nil, fmt.Errorf("connection reset after the request was sent")
				}
				return nil, tools.RetryAfter(time.Second, fmt.Errorf("429"))
			}}
			b = setup(t, []tools.Tool{noLook{ft}}, func(c *Config) {
				inner := c.Sleep
				c.Sleep = func(ctx context.Context, d time.Duration) error {
					if err := b.eng.Cancel(context.Background(), "r1", "ann"); err != nil {
						t.Errorf("Cancel: %v", err)
					}
					return inner(ctx, d)
				}
			})
			b.eng.Run(context.Background(), "r1", mkPlan(t, pa("a", "k", `{}`)), &RunOptions{Policy: PolicyAll})
			doc := b.doc("r1")
			wantStatus(t, doc, ledger.RunCancelled)
			want := ledger.StatusSkipped
			if unknown {
				want = ledger.StatusNeedsReview
			}
			wantAction(t, doc, "a", want)
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d calls after the cancel", n-1)
			}
		})
	}
}

// TestRefusalAfterAPersonsRetryFails: attempt 1's outcome is unknown,
// attempt 2 is refused (402): needs_review (attempt 1 may have taken
// effect). The person checks, finds nothing, and says retry; attempt 3 is
// refused again: now the action fails. Regression: the earlier unknown was
// never considered settled, so every retry went back to needs_review and
// the run never ended (chaos seed 898073004126034120 run 41: 61 attempts).
func TestRefusalAfterAPersonsRetryFails(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	ft := &tooltest.Tool{SpecValue: spec("charge", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			return nil, fmt.Errorf("500 after the write")
		}
		return nil, tools.Permanent(fmt.Errorf("402 card declined"))
	}}
	b := setup(t, []tools.Tool{noLook{ft}})
	doc := b.run("r1", mkPlan(t, pa("c", "charge", `{"amount":9500}`)), PolicyAll)
	wantAction(t, doc, "c", ledger.StatusNeedsReview)
	if err := b.eng.Resolve(context.Background(), "r1", "c", ledger.Resolution{Retry: true, By: "ann"}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "c", ledger.StatusFailed)
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

// TestReplayKeepsWhatItDidNotReach: a replay changes b, which now fails
// definitely; c (after b in order, unchanged) had succeeded in revision 1.
// The run fails before the drive reaches c, yet c's effect exists under its
// unchanged key: c keeps its key and output in revision 2 (and compensation
// would see it), never "skipped: not started". The same for a replay that
// is cancelled before any drive. Regression: chaos seed 898080348987320995
// (a replay's unchanged, succeeded action ended skipped with no key).
func TestReplayKeepsWhatItDidNotReach(t *testing.T) {
	t.Parallel()
	ft := &tooltest.Tool{SpecValue: spec("mk", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		if strings.Contains(string(c.Args), "bad") {
			return nil, tools.Permanent(errors.New("400 bad value"))
		}
		return json.RawMessage(`{"id":"` + c.Key[len(c.Key)-6:] + `"}`), nil
	}}
	b := setup(t, []tools.Tool{noLook{ft}}, func(c *Config) { c.Parallelism = 1 })
	mk := func(bv string) *plan.Plan {
		return mkPlan(t, pa("a", "mk", `{"v":1}`), pa("b", "mk", `{"v":"`+bv+`"}`, "a"),
			pa("c", "mk", `{"v":3}`, "b"), pa("d", "mk", `{"from":"${c.output.id}"}`, "c"))
	}
	for _, cancel := range []bool{false, true} {
		runID := fmt.Sprintf("r-cancel-%v", cancel)
		doc := b.run(runID, mk("ok"), PolicyAll)
		wantStatus(t, doc, ledger.RunCompleted)
		before := map[string]ledger.Action{}
		for _, a := range doc.Actions {
			before[a.ID] = a
		}
		calls := len(ft.Calls())
		if cancel {
			if _, err := b.eng.RecordReplay(context.Background(), runID, mk("bad"), nil); err != nil {
				t.Fatalf("RecordReplay: %v", err)
			}
			if err := b.eng.Cancel(context.Background(), runID, "ann"); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			doc = b.doc(runID)
			wantStatus(t, doc, ledger.RunCancelled)
			if n := len(ft.Calls()) - calls; n != 0 {
				t.Fatalf("cancelled replay made %d calls", n)
			}
		} else {
			var err error
			doc, err = b.eng.Replay(context.Background(), runID, mk("bad"), nil)
			if err != nil {
				t.Fatalf("Replay: %v", err)
			}
			wantStatus(t, doc, ledger.RunFailed)
			if n := len(ft.Calls()) - calls; n != 1 {
				t.Fatalf("replay made %d calls, want 1 (b)", n)
			}
		}
		for _, id := range []string{"a", "c", "d"} {
			x := row(t, doc, id)
			if x.Status != ledger.StatusSucceeded || x.Key != before[id].Key || string(x.Output) != string(before[id].Output) {
				t.Errorf("cancel %v: %s succeeded before the replay (key %s, output %s); after it: %s, key %q, output %s (%s)",
					cancel, id, before[id].Key, before[id].Output, x.Status, x.Key, x.Output, x.Error)
			}
		}
	}
}

// TestStaleApprovalOfUnresolvedArgsIsAskedAgain: "approve all" reads the rows,
// then approves each row's args as read. When the drive resolved an
// at-most-once action's references for review in between, the approval is
// for the unresolved args: it can never count for the call that would be
// sent. Regression: the row stayed "approved", so every later "approve
// all" passed it by and the run waited for ever. The drive now puts such a
// row back to pending, and the next "approve all" approves what will be sent.
func TestStaleApprovalOfUnresolvedArgsIsAskedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := tooltest.NewWorld()
	mail := w.Tool(spec("mail", tools.AtMostOnce))
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Lookup)), mail})
	unresolved := `{"to":"${mk.output.id}"}`
	doc := b.run("r1", mkPlan(t, pa("mk", "mk", `{"v":1}`), pa("mail", "mail", unresolved, "mk")), PolicyNone)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	if err := b.eng.Approve(ctx, "r1", []string{"mk"}, "ann"); err != nil {
		t.Fatal(err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	wantAction(t, doc, "mail", ledger.StatusPending)
	// The approval "approve all" writes when it read the row before the
	// drive showed the resolved args.
	if _, err := ledger.ApplyOne(ctx, b.led, ledger.Approve("r1", "mail", json.RawMessage(unresolved), "ann")); err != nil {
		t.Fatal(err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	wantAction(t, doc, "mail", ledger.StatusPending)
	if len(mail.Calls()) != 0 {
		t.Fatal("mail was sent on an approval of other args")
	}
	if err := b.eng.ApproveAll(ctx, "r1", "ann"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.resume("r1"), ledger.RunCompleted)
	if n := len(mail.Calls()); n != 1 {
		t.Fatalf("mail sent %d times, want 1", n)
	}
}
