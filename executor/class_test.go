package executor

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

var allClasses = []tools.Class{tools.ReadOnly, tools.Idempotent, tools.Keyed, tools.Lookup, tools.AtMostOnce}

func TestEveryClassSucceedsOnceAndRerunCallsNothing(t *testing.T) {
	t.Parallel()
	for _, class := range allClasses {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			tool := w.Tool(spec("t", class))
			b := setup(t, []tools.Tool{tool})
			p := mkPlan(t, pa("a1", "t", `{"n":1}`), pa("a2", "t", `{"from":"${a1.output.id}"}`, "a1"))
			doc := b.run("r1", p, PolicyAll)
			wantStatus(t, doc, ledger.RunCompleted)
			a1 := wantAction(t, doc, "a1", ledger.StatusSucceeded)
			a2 := wantAction(t, doc, "a2", ledger.StatusSucceeded)
			var out1 struct{ ID string }
			if err := json.Unmarshal(a1.Output, &out1); err != nil || out1.ID == "" {
				t.Fatalf("a1 output %s: %v", a1.Output, err)
			}
			if want := `{"from":"` + out1.ID + `"}`; string(a2.Args) != want {
				t.Fatalf("a2 args %s, want resolved %s", a2.Args, want)
			}
			if a2.Key != keyOf(t, "r1", "a2", "t", string(a2.Args)) {
				t.Fatalf("a2 key %s is not derived from its resolved args", a2.Key)
			}
			if class != tools.ReadOnly {
				if got := w.Effects(a1.Key) + w.Effects(a2.Key); got != 2 {
					t.Fatalf("effects %d, want 2", got)
				}
			}
			calls := len(tool.Calls())
			// Same run id, same plan: resumes, calls nothing.
			doc = b.run("r1", p, PolicyAll)
			wantStatus(t, doc, ledger.RunCompleted)
			if got := len(tool.Calls()); got != calls {
				t.Fatalf("rerun made %d more calls", got-calls)
			}
			if n := b.count("r1", "run.completed"); n != 1 {
				t.Fatalf("%d run.completed events, want 1", n)
			}
		})
	}
}

// crashAfterCall returns hooks that close the ledger right after the named
// action's first call returned: the effect happened, its outcome is lost.
func crashAfterCall(b **bundle, id string) setupOpt {
	var done atomic.Bool
	return func(c *Config) {
		c.Hooks.AfterCall = func(actionID string) {
			if actionID == id && done.CompareAndSwap(false, true) {
				(*b).led.Close()
			}
		}
	}
}

func TestCrashAfterCallResumesByClass(t *testing.T) {
	t.Parallel()
	cases := []struct {
		class       tools.Class
		ttl         time.Duration
		advance     time.Duration
		hideLookup  bool
		wantStatus  ledger.RunStatus
		wantAction  ledger.Status
		wantEffects int
		wantCalls   int // calls after the crash
	}{
		{class: tools.ReadOnly, wantStatus: ledger.RunCompleted, wantAction: ledger.StatusSucceeded, wantEffects: 0, wantCalls: 1},
		{class: tools.Idempotent, wantStatus: ledger.RunCompleted, wantAction: ledger.StatusSucceeded, wantEffects: 1, wantCalls: 1},
		{class: tools.Keyed, ttl: time.Hour, wantStatus: ledger.RunCompleted, wantAction: ledger.StatusSucceeded, wantEffects: 1, wantCalls: 1},
		// Past key_ttl with a lookup: the lookup finds the effect, no call.
		{class: tools.Keyed, ttl: time.Minute, advance: 2 * time.Minute, wantStatus: ledger.RunCompleted, wantAction: ledger.StatusSucceeded, wantEffects: 1, wantCalls: 0},
		// Past key_ttl without a lookup: a person decides.
		{class: tools.Keyed, ttl: time.Minute, advance: 2 * time.Minute, hideLookup: true, wantStatus: ledger.RunPaused, wantAction: ledger.StatusNeedsReview, wantEffects: 1, wantCalls: 0},
		// Lookup: found (after the visibility window) → recorded, no second write.
		{class: tools.Lookup, wantStatus: ledger.RunCompleted, wantAction: ledger.StatusSucceeded, wantEffects: 1, wantCalls: 0},
		{class: tools.AtMostOnce, wantStatus: ledger.RunPaused, wantAction: ledger.StatusNeedsReview, wantEffects: 1, wantCalls: 0},
	}
	for _, tc := range cases {
		name := string(tc.class)
		if tc.advance > 0 {
			name += "_past_ttl"
		}
		if tc.hideLookup {
			name += "_no_lookup"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			s := spec("t", tc.class)
			s.KeyTTL = tc.ttl
			ft := w.Tool(s)
			var tool tools.Tool = ft
			if tc.hideLookup {
				tool = noLook{ft}
			}
			var b *bundle
			b = setup(t, []tools.Tool{tool}, crashAfterCall(&b, "a1"))
			p := mkPlan(t, pa("a1", "t", `{"n":1}`))
			if _, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err == nil {
				t.Fatal("Run after the ledger closed: no error")
			}
			if len(ft.Calls()) != 1 {
				t.Fatalf("calls before crash %d", len(ft.Calls()))
			}
			b.restart()
			b.clock.Advance(tc.advance)
			doc := b.resume("r1")
			wantStatus(t, doc, tc.wantStatus)
			a := wantAction(t, doc, "a1", tc.wantAction)
			if got := len(ft.Calls()) - 1; got != tc.wantCalls {
				t.Fatalf("calls after the crash %d, want %d", got, tc.wantCalls)
			}
			if got := w.Effects(a.Key); got != tc.wantEffects {
				t.Fatalf("effects %d, want %d", got, tc.wantEffects)
			}
			if tc.wantAction == ledger.StatusSucceeded && tc.class != tools.ReadOnly {
				want, _ := w.Output(a.Key)
				if string(a.Output) != string(want) {
					t.Fatalf("recorded output %s, world has %s", a.Output, want)
				}
			}
			if dups := w.Duplicates(); len(dups) > 0 {
				t.Fatalf("duplicate effects %v", dups)
			}
		})
	}
}

func TestAtMostOnceUnknownOutcomeEachResolution(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, b *bundle, w *tooltest.World, ft *tooltest.Tool, doc ledger.RunDoc)
	cases := []struct {
		name    string
		res     ledger.Resolution
		wantRun ledger.RunStatus
		check   check
	}{
		{"done", ledger.Resolution{Done: json.RawMessage(`{"id":"by-hand"}`), By: "ops"}, ledger.RunCompleted,
			func(t *testing.T, b *bundle, w *tooltest.World, ft *tooltest.Tool, doc ledger.RunDoc) {
				wantAction(t, doc, "a1", ledger.StatusSucceeded)
				a2 := wantAction(t, doc, "a2", ledger.StatusSucceeded)
				if string(a2.Args) != `{"x":"by-hand"}` {
					t.Fatalf("a2 args %s, want the person's output", a2.Args)
				}
				if len(ft.Calls()) != 1 {
					t.Fatalf("at-most-once tool called %d times", len(ft.Calls()))
				}
			}},
		{"retry", ledger.Resolution{Retry: true, By: "ops"}, ledger.RunCompleted,
			func(t *testing.T, b *bundle, w *tooltest.World, ft *tooltest.Tool, doc ledger.RunDoc) {
				a1 := wantAction(t, doc, "a1", ledger.StatusSucceeded)
				if a1.Attempts != 2 || len(ft.Calls()) != 2 {
					t.Fatalf("attempts %d calls %d, want 2 and 2 (the person asked for one more)", a1.Attempts, len(ft.Calls()))
				}
			}},
		{"skip", ledger.Resolution{Skip: true, By: "ops"}, ledger.RunCompleted,
			func(t *testing.T, b *bundle, w *tooltest.World, ft *tooltest.Tool, doc ledger.RunDoc) {
				wantAction(t, doc, "a1", ledger.StatusSkipped)
				wantAction(t, doc, "a2", ledger.StatusSkipped)
				if len(ft.Calls()) != 1 {
					t.Fatalf("calls %d", len(ft.Calls()))
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			lost := true
			w.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
				if tool == "pay" && lost {
					lost = false
					return tooltest.LoseReply
				}
				return tooltest.NoFault
			}
			ps := spec("pay", tools.AtMostOnce)
			ps.OutputSchema = json.RawMessage(`{"type":"object","required":["id"]}`)
			ft := w.Tool(ps)
			next := w.Tool(spec("next", tools.Keyed))
			b := setup(t, []tools.Tool{ft, next})
			p := mkPlan(t, pa("a1", "pay", `{"amount":5}`), pa("a2", "next", `{"x":"${a1.output.id}"}`, "a1"))
			doc := b.run("r1", p, PolicyAll)
			wantStatus(t, doc, ledger.RunPaused)
			wantAction(t, doc, "a1", ledger.StatusNeedsReview)
			wantAction(t, doc, "a2", ledger.StatusApproved)
			if n := b.count("r1", "run.paused"); n != 1 {
				t.Fatalf("%d run.paused events", n)
			}
			// Resuming without a decision changes nothing and adds no events.
			before := len(b.events("r1"))
			doc = b.resume("r1")
			wantStatus(t, doc, ledger.RunPaused)
			if after := len(b.events("r1")); after != before {
				t.Fatalf("idle resume wrote %d events", after-before)
			}
			if tc.res.Done != nil {
				// An output that fails the output schema is refused.
				err := b.eng.Resolve(context.Background(), "r1", "a1", ledger.Resolution{Done: json.RawMessage(`{"nope":1}`)})
				if err == nil || !strings.Contains(err.Error(), "output schema") {
					t.Fatalf("Resolve with invalid output: %v", err)
				}
			}
			if err := b.eng.Resolve(context.Background(), "r1", "a1", tc.res); err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			doc = b.resume("r1")
			wantStatus(t, doc, tc.wantRun)
			tc.check(t, b, w, ft, doc)
			if err := b.eng.Resolve(context.Background(), "r1", "a2", ledger.Resolution{Retry: true}); err == nil {
				t.Fatal("Resolve of an action not in needs_review: no error")
			}
		})
	}
}

// A call says its arguments were validated (tools.Call.ArgsValidated, which
// lets Func skip validating them again) only when this drive validated
// them: a fresh claim, not a claim resumed from the ledger after a crash.
func TestArgsValidatedOnlyWhenThisDriveValidatedThem(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	s := spec("t", tools.Keyed)
	s.KeyTTL = time.Hour
	ft := w.Tool(s)
	var b *bundle
	b = setup(t, []tools.Tool{ft}, crashAfterCall(&b, "a1"))
	p := mkPlan(t, pa("a1", "t", `{"n":1}`), pa("a2", "t", `{"n":2}`, "a1"))
	if _, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err == nil {
		t.Fatal("Run after the ledger closed: no error")
	}
	b.restart()
	doc := b.resume("r1")
	wantStatus(t, doc, ledger.RunCompleted)
	calls := ft.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3 (a1, a1 again after the crash, a2)", len(calls))
	}
	for i, want := range []bool{true, false, true} {
		if calls[i].ArgsValidated != want {
			t.Fatalf("call %d (%s, attempt %d): ArgsValidated %v, want %v", i, calls[i].Action, calls[i].Attempt, calls[i].ArgsValidated, want)
		}
	}
}
