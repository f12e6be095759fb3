package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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

func TestTwoEnginesOnTheSameRunEachKeyTakesEffectOnce(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	// lookup and at_most_once tools count every request as an effect.
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Lookup)), w.Tool(spec("send", tools.AtMostOnce))},
		func(c *Config) { c.Parallelism = 4 })
	var acts []plan.Action
	for i := range 24 {
		acts = append(acts, pa(fmt.Sprintf("m%d", i), "mk", fmt.Sprintf(`{"i":%d}`, i)))
	}
	for i := range 8 {
		acts = append(acts, pa(fmt.Sprintf("s%d", i), "send", fmt.Sprintf(`{"to":"${m%d.output.id}"}`, i), fmt.Sprintf("m%d", i)))
	}
	p := mkPlan(t, acts...)
	cfg := b.cfg
	cfg.Ledger = b.led
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, e := range []*Engine{b.eng, e2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	doc, err := b.led.Doc(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, doc, ledger.RunCompleted)
	if dups := w.Duplicates(); len(dups) > 0 {
		t.Fatalf("duplicate effects: %v", dups)
	}
	if got := len(w.Keys()); got != 32 {
		t.Fatalf("%d keys took effect, want 32", got)
	}
	if n := b.count("r1", "action.claimed"); n != 32 {
		t.Fatalf("%d claims, want 32 (no key claimed twice)", n)
	}
	if n := b.count("r1", "run.completed"); n != 1 {
		t.Fatalf("%d run.completed events", n)
	}
}

func TestIdenticalActionsWithDifferentIDsTakeEffectTwiceResumedOnce(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	ft := w.Tool(spec("mk", tools.Lookup))
	b := setup(t, []tools.Tool{ft})
	p := mkPlan(t, pa("x", "mk", `{"v":1}`), pa("y", "mk", `{"v":1}`))
	doc := b.run("r1", p, PolicySafe)
	wantStatus(t, doc, ledger.RunCompleted)
	x, y := row(t, doc, "x"), row(t, doc, "y")
	if x.Key == y.Key {
		t.Fatal("identical actions under different ids share a key")
	}
	if w.Effects(x.Key) != 1 || w.Effects(y.Key) != 1 {
		t.Fatalf("effects %d, %d", w.Effects(x.Key), w.Effects(y.Key))
	}
	b.restart()
	b.run("r1", p, PolicySafe)
	if len(ft.Calls()) != 2 || len(w.Keys()) != 2 {
		t.Fatalf("resume called again: %d calls", len(ft.Calls()))
	}
}

func TestReplayForkAndEditBeforeExecution(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	mk, send := w.Tool(spec("mk", tools.Keyed)), w.Tool(spec("send", tools.Keyed))
	b := setup(t, []tools.Tool{mk, send})
	p1 := mkPlan(t,
		pa("a", "mk", `{"name":"ann"}`),
		pa("b", "send", `{"to":"${a.output.args.name}"}`, "a"),
		pa("c", "mk", `{"name":"cid"}`))
	doc := b.run("r1", p1, PolicySafe)
	wantStatus(t, doc, ledger.RunCompleted)
	calls := func() int { return len(mk.Calls()) + len(send.Calls()) }
	if calls() != 3 {
		t.Fatalf("calls %d", calls())
	}
	keys := map[string]string{}
	for _, a := range doc.Actions {
		keys[a.ID] = a.Key
	}

	// Replay with c edited: only c runs again.
	p2 := mkPlan(t, p1.Actions[0], p1.Actions[1], pa("c", "mk", `{"name":"cid2"}`))
	doc, err := b.eng.Replay(context.Background(), "r1", p2, nil)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	wantStatus(t, doc, ledger.RunCompleted)
	if doc.Run.Revision != 2 {
		t.Fatalf("revision %d", doc.Run.Revision)
	}
	if calls() != 4 {
		t.Fatalf("replay made %d calls, want 1: %s %+v", calls()-3, docString(doc), doc.Actions)
	}
	for _, id := range []string{"a", "b"} {
		r := wantAction(t, doc, id, ledger.StatusSucceeded)
		if r.Key != keys[id] {
			t.Fatalf("unchanged %s got a new key", id)
		}
	}
	if c := wantAction(t, doc, "c", ledger.StatusSucceeded); c.Key == keys["c"] {
		t.Fatal("edited c kept its key")
	}

	// Replay with a edited: a runs, and b because its resolved args change.
	p3 := mkPlan(t, pa("a", "mk", `{"name":"bob"}`), p1.Actions[1], p2.Actions[2])
	doc, err = b.eng.Replay(context.Background(), "r1", p3, nil)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	wantStatus(t, doc, ledger.RunCompleted)
	if calls() != 6 {
		t.Fatalf("second replay made %d calls, want 2 (a and b)", calls()-4)
	}
	if got := string(row(t, doc, "b").Args); got != `{"to":"bob"}` {
		t.Fatalf("b args %s", got)
	}

	// Fork: everything again under a new run id.
	doc, err = b.eng.Fork(context.Background(), "r1", "r2", nil)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	wantStatus(t, doc, ledger.RunCompleted)
	if calls() != 9 {
		t.Fatalf("fork made %d calls, want 3", calls()-6)
	}
	if dups := w.Duplicates(); len(dups) > 0 {
		t.Fatalf("duplicates %v", dups)
	}

	// Edit before execution is review: the key follows the edited args.
	p4 := mkPlan(t, pa("e", "mk", `{"name":"draft"}`))
	doc = b.run("r3", p4, PolicyNone)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	if err := b.eng.Edit(context.Background(), "r3", "e", json.RawMessage(`{"name":"final"}`), "ann"); err != nil {
		t.Fatalf("Edit: %v", err)
	}
	if err := b.eng.Edit(context.Background(), "r3", "e", json.RawMessage(`{"name":"${nope.output}"}`), "ann"); !errors.Is(err, ErrInvalidPlan) {
		t.Fatalf("Edit with a bad reference: %v", err)
	}
	if err := b.eng.ApproveAll(context.Background(), "r3", "ann"); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	doc = b.resume("r3")
	wantStatus(t, doc, ledger.RunCompleted)
	e := wantAction(t, doc, "e", ledger.StatusSucceeded)
	if e.Key != keyOf(t, "r3", "e", "mk", `{"name":"final"}`) {
		t.Fatal("the key does not follow the edited args")
	}
	if err := b.eng.Edit(context.Background(), "r3", "e", json.RawMessage(`{"name":"late"}`), "ann"); !errors.Is(err, ErrNotReviewable) {
		t.Fatalf("Edit after execution: %v", err)
	}
}

func TestApprovalPolicies(t *testing.T) {
	t.Parallel()
	mkTools := func(w *tooltest.World) []tools.Tool {
		always := spec("wire", tools.Keyed)
		always.Approval.Always = true
		above := spec("pay", tools.Keyed)
		above.Approval.Above = map[string]json.Number{"amount": "100"}
		return []tools.Tool{w.Tool(spec("put", tools.Keyed)), w.Tool(spec("sms", tools.AtMostOnce)), w.Tool(always), w.Tool(above)}
	}
	p := func(t *testing.T) *plan.Plan {
		return mkPlan(t,
			pa("put", "put", `{}`), pa("sms", "sms", `{}`), pa("wire", "wire", `{}`),
			pa("small", "pay", `{"amount":50}`), pa("big", "pay", `{"amount":500}`))
	}
	cases := []struct {
		pol     Policy
		ran     []string
		waiting []string
	}{
		{PolicySafe, []string{"put", "small"}, []string{"sms", "wire", "big"}},
		{PolicyAll, []string{"put", "sms", "small"}, []string{"wire", "big"}},
		{PolicyNone, nil, []string{"put", "sms", "wire", "small", "big"}},
	}
	for _, tc := range cases {
		t.Run(string(tc.pol), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			b := setup(t, mkTools(w))
			doc := b.run("r1", p(t), tc.pol)
			wantStatus(t, doc, ledger.RunAwaitingApproval)
			for _, id := range tc.ran {
				wantAction(t, doc, id, ledger.StatusSucceeded)
			}
			for _, id := range tc.waiting {
				wantAction(t, doc, id, ledger.StatusPending)
			}
			if n := b.count("r1", "run.awaiting_approval"); n != 1 {
				t.Fatalf("%d run.awaiting_approval events", n)
			}
			b.resume("r1") // nothing new: no second event
			if n := b.count("r1", "run.awaiting_approval"); n != 1 {
				t.Fatalf("%d run.awaiting_approval events after an idle resume", n)
			}
			if err := b.eng.Approve(context.Background(), "r1", tc.waiting[:1], "ann"); err != nil {
				t.Fatalf("Approve: %v", err)
			}
			if err := b.eng.Approve(context.Background(), "r1", []string{"nope"}, "ann"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("Approve unknown action: %v", err)
			}
			doc = b.resume("r1")
			wantAction(t, doc, tc.waiting[0], ledger.StatusSucceeded)
			if err := b.eng.ApproveAll(context.Background(), "r1", "ann"); err != nil {
				t.Fatalf("Approve all: %v", err)
			}
			doc = b.resume("r1")
			wantStatus(t, doc, ledger.RunCompleted)
			if len(w.Keys()) != 5 || len(w.Duplicates()) > 0 {
				t.Fatalf("effects on %d keys, duplicates %v", len(w.Keys()), w.Duplicates())
			}
		})
	}
}

func TestApprovalIsAskedAgainWhenResolvedArgsDiffer(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	sms := w.Tool(spec("sms", tools.AtMostOnce))
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Keyed)), sms})
	p := mkPlan(t, pa("a", "mk", `{}`), pa("s", "sms", `{"to":"${a.output.id}"}`, "a"))
	doc := b.run("r1", p, PolicyNone)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	// The reviewer approves everything as planned (s with its reference).
	if err := b.eng.ApproveAll(context.Background(), "r1", "ann"); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if got := string(row(t, b.doc("r1"), "s").Args); got != `{"to":"${a.output.id}"}` {
		t.Fatalf("s approved with args %s", got)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	s := wantAction(t, doc, "s", ledger.StatusPending)
	var aout struct{ ID string }
	json.Unmarshal(row(t, doc, "a").Output, &aout)
	if string(s.Args) != `{"to":"`+aout.ID+`"}` {
		t.Fatalf("s is shown with args %s, want them resolved", s.Args)
	}
	if len(sms.Calls()) != 0 {
		t.Fatal("sms ran on an approval of other args")
	}
	if err := b.eng.Approve(context.Background(), "r1", []string{"s"}, "ann"); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunCompleted)
	if len(sms.Calls()) != 1 {
		t.Fatalf("sms calls %d", len(sms.Calls()))
	}
}

func TestRejectFailsTheRunAndDependentsNeverRun(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	sms := w.Tool(spec("sms", tools.AtMostOnce))
	put := w.Tool(spec("put", tools.Keyed))
	b := setup(t, []tools.Tool{sms, put})
	p := mkPlan(t, pa("s", "sms", `{}`), pa("after", "put", `{}`, "s"))
	doc := b.run("r1", p, PolicySafe)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	if err := b.eng.Reject(context.Background(), "r1", "s", "wrong person", "ann"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "s", ledger.StatusRejected)
	wantAction(t, doc, "after", ledger.StatusSkipped)
	if len(sms.Calls())+len(put.Calls()) != 0 {
		t.Fatal("a rejected action or its dependent ran")
	}
	if err := b.eng.Reject(context.Background(), "r1", "after", "x", "ann"); !errors.Is(err, ErrNotReviewable) {
		t.Fatalf("Reject of a skipped action: %v", err)
	}
}

func TestCancelAndPauseWhileRunning(t *testing.T) {
	t.Parallel()
	for _, pause := range []bool{false, true} {
		name := "cancel"
		if pause {
			name = "pause"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			started := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			slow := &tooltest.Tool{SpecValue: spec("slow", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
				once.Do(func() { close(started) })
				<-release
				return json.RawMessage(`{"ok":true}`), nil
			}}
			put := w.Tool(spec("put", tools.Keyed))
			b := setup(t, []tools.Tool{noLook{slow}, put})
			p := mkPlan(t, pa("a", "slow", `{}`), pa("b", "put", `{}`, "a"))
			done := make(chan ledger.RunDoc)
			go func() {
				doc, err := b.eng.Run(context.Background(), "r1", p, nil)
				if err != nil {
					t.Errorf("Run: %v", err)
				}
				done <- doc
			}()
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the slow action never started")
			}
			var err error
			if pause {
				err = b.eng.Pause(context.Background(), "r1", "ann")
			} else {
				err = b.eng.Cancel(context.Background(), "r1", "ann")
			}
			if err != nil {
				t.Fatalf("pause/cancel: %v", err)
			}
			close(release)
			var doc ledger.RunDoc
			select {
			case doc = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			want := ledger.RunCancelled
			if pause {
				want = ledger.RunPaused
			}
			wantStatus(t, doc, want)
			wantAction(t, doc, "a", ledger.StatusSucceeded) // in flight: finished and recorded
			if pause {
				wantAction(t, doc, "b", ledger.StatusApproved) // never started, still to do
			} else {
				wantAction(t, doc, "b", ledger.StatusSkipped) // never started, never will (issue 24)
			}
			if len(put.Calls()) != 0 {
				t.Fatal("a new action started after pause/cancel")
			}
			doc = b.resume("r1")
			if pause {
				// A person's pause holds until an explicit resume (issue 24.10).
				wantStatus(t, doc, ledger.RunPaused)
				if len(put.Calls()) != 0 {
					t.Fatal("Resume lifted a person's pause")
				}
				if err := b.eng.Unpause(context.Background(), "r1", "ann"); err != nil {
					t.Fatal(err)
				}
				doc = b.resume("r1")
				wantStatus(t, doc, ledger.RunCompleted)
				if n := b.count("r1", "run.resumed"); n != 1 {
					t.Fatalf("%d run.resumed events", n)
				}
			} else {
				wantStatus(t, doc, ledger.RunCancelled)
				if len(put.Calls()) != 0 {
					t.Fatal("a cancelled run resumed")
				}
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Keyed))})
	ctx := context.Background()
	p := mkPlan(t, pa("a", "mk", `{}`))
	b.run("r1", p, PolicySafe)

	if _, err := b.eng.Run(ctx, "r1", mkPlan(t, pa("a", "mk", `{"x":1}`)), nil); !errors.Is(err, ErrPlanMismatch) {
		t.Fatalf("different plan: %v", err)
	}
	if _, err := b.eng.Run(ctx, "r2", mkPlan(t, pa("a", "nope", `{}`)), nil); !errors.Is(err, ErrInvalidPlan) {
		t.Fatalf("unknown tool: %v", err)
	}
	if _, err := b.eng.Run(ctx, "r2", p, &RunOptions{Policy: "most"}); err == nil {
		t.Fatal("unknown policy accepted")
	}
	// The tools change: resuming needs AcceptToolsChange.
	cfg := b.cfg
	reg2, err := tools.NewRegistry(w.Tool(spec("mk", tools.Idempotent)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tools, cfg.Ledger = reg2, b.led
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := e2.Run(ctx, "r1", p, nil)
	if !errors.Is(err, ErrToolsChanged) || !strings.Contains(err.Error(), "AcceptToolsChange") {
		t.Fatalf("tools changed: %v", err)
	}
	if doc.Run.ID != "r1" {
		t.Fatal("no Run JSON with the tools-changed error")
	}
	if _, err := e2.Resume(ctx, "r1", &RunOptions{AcceptToolsChange: true}); err != nil {
		t.Fatalf("Resume accepting the change: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without ledger and tools: no error")
	}
}

func TestRecordedHelpersAndDerivedRunID(t *testing.T) {
	t.Parallel()
	b := setup(t, []tools.Tool{tooltest.NewWorld().Tool(spec("mk", tools.Keyed))})
	ctx := context.Background()
	p := mkPlan(t, pa("a", "mk", `{}`))
	id, err := DeriveRunID(p)
	if err != nil || !regexp.MustCompile(`^run_[0-9a-f]{16}$`).MatchString(id) {
		t.Fatalf("DeriveRunID: %q %v", id, err)
	}
	if id2, _ := DeriveRunID(mkPlan(t, pa("a", "mk", `{}`))); id2 != id {
		t.Fatal("DeriveRunID is not stable")
	}
	if id3, _ := DeriveRunID(mkPlan(t, pa("a", "mk", `{"x":1}`))); id3 == id {
		t.Fatal("different plans derive the same run id")
	}
	b.run(id, p, PolicySafe)
	u1, err := b.eng.UUID(ctx, id, "order")
	if err != nil || !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(u1) {
		t.Fatalf("UUID %q %v", u1, err)
	}
	t1, err := b.eng.Now(ctx, id, "start")
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	b.restart()
	if u2, _ := b.eng.UUID(ctx, id, "order"); u2 != u1 {
		t.Fatalf("UUID changed on resume: %s then %s", u1, u2)
	}
	if u3, _ := b.eng.UUID(ctx, id, "other"); u3 == u1 {
		t.Fatal("two names share a UUID")
	}
	if t2, _ := b.eng.Now(ctx, id, "start"); !t2.Equal(t1) {
		t.Fatalf("Now changed: %v then %v", t1, t2)
	}
}

func TestInFlightClaimOfThisProcessIsAwaitedNotRepeated(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	slow := &tooltest.Tool{SpecValue: spec("mk", tools.Lookup), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return json.RawMessage(`{"id":"x"}`), nil
	}}
	b := setup(t, []tools.Tool{slow})
	cfg := b.cfg
	cfg.Ledger = b.led
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := mkPlan(t, pa("a", "mk", `{}`))
	type result struct {
		doc ledger.RunDoc
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() {
		doc, err := b.eng.Run(context.Background(), "r1", p, nil)
		first <- result{doc, err}
	}()
	<-started
	go func() {
		doc, err := e2.Resume(context.Background(), "r1", nil)
		second <- result{doc, err}
	}()
	select {
	case r := <-second:
		t.Fatalf("the second engine returned while the claim was in flight: %v %s", r.err, docString(r.doc))
	default:
	}
	close(release)
	for _, ch := range []chan result{first, second} {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("drive: %v", r.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a drive did not return")
		}
	}
	wantStatus(t, b.doc("r1"), ledger.RunCompleted)
	if calls.Load() != 1 {
		t.Fatalf("%d calls of an in-flight key", calls.Load())
	}
}

func TestContextEndedDuringCallRecordsTheAttemptAndResumes(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	ctx, cancel := context.WithCancel(context.Background())
	var first atomic.Bool
	first.Store(true)
	ft := w.Tool(spec("mk", tools.Keyed))
	inner := ft.CallFunc
	ft.CallFunc = func(c context.Context, call tools.Call) (json.RawMessage, error) {
		out, err := inner(c, call) // the effect happens
		if first.CompareAndSwap(true, false) {
			cancel()
			<-c.Done()
			return nil, c.Err() // and then the caller goes away: outcome unknown
		}
		return out, err
	}
	b := setup(t, []tools.Tool{ft})
	p := mkPlan(t, pa("a", "mk", `{}`), pa("b", "mk", `{"n":2}`, "a"))
	doc, err := b.eng.Run(ctx, "r1", p, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if doc.Run.ID != "r1" {
		t.Fatal("no Run JSON with the context error")
	}
	a := row(t, doc, "a")
	if a.Status != ledger.StatusPending || a.Attempts != 1 {
		t.Fatalf("interrupted attempt not recorded as retryable: %s %d", a.Status, a.Attempts)
	}
	doc = b.resume("r1")
	wantStatus(t, doc, ledger.RunCompleted)
	if dups := w.Duplicates(); len(dups) > 0 || len(w.Keys()) != 2 {
		t.Fatalf("keys %v duplicates %v", w.Keys(), dups)
	}
}

// TestRunOfARecordedRunDecidesFromTheRecord: Run of a run recorded before
// decides from the run as recorded, not from the rows it would have
// recorded. Recorded under policy none (every action waits for a person),
// a Run under policy all (which would have approved them) calls nothing:
// its first commit finds the run and writes nothing, and the drive that
// reads it leaves it awaiting approval. Approved, it runs each action once.
func TestRunOfARecordedRunDecidesFromTheRecord(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Keyed))})
	ctx := context.Background()
	p := mkPlan(t, pa("a", "mk", `{"n":1}`), pa("b", "mk", `{"n":2}`, "a"))
	if _, created, err := b.eng.Record(ctx, "r1", p, &RunOptions{Policy: PolicyNone}); err != nil || !created {
		t.Fatalf("Record: created %v, %v", created, err)
	}
	before, err := b.led.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	doc := b.run("r1", p, PolicyAll)
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	if n := len(w.Keys()); n != 0 {
		t.Fatalf("%d actions took effect in a run that waits for approval", n)
	}
	after, err := b.led.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range after[len(before):] {
		if ev.Type == ledger.EventActionClaimed || ev.Type == ledger.EventRunCreated {
			t.Fatalf("Run of a recorded run wrote %s", ev.Type)
		}
	}
	if err := b.eng.Approve(ctx, "r1", []string{"a", "b"}, "token:bob"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.resume("r1"), ledger.RunCompleted)
	for _, k := range w.Keys() {
		if n := w.Effects(k); n != 1 {
			t.Fatalf("key %s took effect %d times", k, n)
		}
	}
	if n := len(w.Keys()); n != 2 {
		t.Fatalf("%d actions took effect, want 2", n)
	}
}
