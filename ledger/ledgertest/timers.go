package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// Durable timers (ledger/timer.go): the claim's own transaction refuses an
// action before it is due by the store's clock, computing the due time from
// recorded facts (the row's timer, its dependencies' success, the run's
// creation), and writes nothing then; Wait records the run's wake time and
// the actions' due times, which survive a reopen and which WakeIndex finds;
// RunNow makes a waiting action due at once.
func testTimers(t *testing.T, open Opener, opts Options) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	clk := NewClock(t0)
	cfg := Config{Dir: t.TempDir(), Clock: clk}
	l := open(t, cfg)
	b := &bundle{l: l, ctx: ctx, cfg: cfg}

	p := &plan.Plan{Goal: "remind", Actions: []plan.Action{
		{ID: "invoice", Tool: "t", Args: []byte(`{"i":1}`)},
		{ID: "remind", Tool: "t", Args: []byte(`{"i":2}`), DependsOn: []string{"invoice"}, After: "2d"},
		{ID: "open", Tool: "t", Args: []byte(`{"i":3}`), NotBefore: "2026-01-02T04:00:00Z"},
		{ID: "late", Tool: "t", Args: []byte(`{"i":4}`), After: "30m", NotBefore: "2026-01-02T03:10:00Z"},
	}}
	var rows []ledger.Action
	for _, a := range p.Actions {
		rows = append(rows, ledger.Action{ID: a.ID, Tool: a.Tool, Args: a.Args, DependsOn: a.DependsOn,
			Status: ledger.StatusApproved, ApprovedArgs: a.Args, Timer: ledger.TimerOf(a)})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Policy: "safe"}, p, rows); err != nil {
		t.Fatal(err)
	}
	tc := &timerCase{b: b, clk: clk}
	due := tc.claimWhenDue(t, t0)
	tc.waitAndReopen(t, open, opts, due)
	tc.runNow(t)
	tc.wake(t, due)
}

// timerCase is run "r" of testTimers in a store on a clock the test sets.
type timerCase struct {
	b   *bundle
	clk *Clock
}

// key is the idempotency key of action id, whose args are {"i":i}.
func (tc *timerCase) key(t *testing.T, id string, i int) string {
	return key(t, "r", id, `{"i":`+string(rune('0'+i))+`}`)
}

func (tc *timerCase) claim(t *testing.T, id string, i int) ledger.Op {
	return ledger.Claim("r", id, "t", tc.key(t, id, i), json.RawMessage(`{"i":`+string(rune('0'+i))+`}`), 1)
}

// notDue checks that op is refused as not due before due, and writes
// nothing.
func (tc *timerCase) notDue(t *testing.T, op ledger.Op, due time.Time) {
	t.Helper()
	b := tc.b
	before := len(b.events(t, "r"))
	r := b.apply(t, op)
	var nd *ledger.NotDueError
	if !errors.As(r.Err, &nd) || !errors.Is(r.Err, ledger.ErrNotDue) {
		t.Fatalf("claim at %s: %v, want *NotDueError", tc.clk.Now(), r.Err)
	}
	if !nd.DueAt.Equal(due) {
		t.Fatalf("claim refused with due %s, want %s (%v)", nd.DueAt, due, r.Err)
	}
	if n := len(b.events(t, "r")); n != before {
		t.Fatalf("a refused claim appended %d events", n-before)
	}
	if row := b.row(t, "r", nd.ActionID); row.Key != "" || row.Status != ledger.StatusApproved {
		t.Fatalf("a refused claim changed the row: %+v", row)
	}
}

// claimWhenDue: claims are refused before their due time and admitted
// from it; the run was created at t0. It returns remind's due time.
func (tc *timerCase) claimWhenDue(t *testing.T, t0 time.Time) time.Time {
	b, clk := tc.b, tc.clk
	// A dependency that has not succeeded: the due time is not known yet.
	tc.notDue(t, tc.claim(t, "remind", 2), time.Time{})
	// not_before alone.
	clk.Set(t0.Add(10 * time.Minute))
	tc.notDue(t, tc.claim(t, "open", 3), t0.Add(time.Hour))
	// The later of not_before and after (from the run's creation: no
	// dependencies).
	tc.notDue(t, tc.claim(t, "late", 4), t0.Add(30*time.Minute))
	clk.Set(t0.Add(30 * time.Minute))
	b.mustOK(t, tc.claim(t, "late", 4))
	clk.Set(t0.Add(time.Hour))
	b.mustOK(t, tc.claim(t, "open", 3))

	// after counts from the dependency's success as recorded.
	b.mustOK(t, tc.claim(t, "invoice", 1))
	succeeded := t0.Add(90 * time.Minute)
	clk.Set(succeeded)
	b.mustOK(t, ledger.Succeed(tc.key(t, "invoice", 1), 1, []byte(`{"id":"inv1"}`)))
	clk.Set(succeeded.Add(time.Hour))
	due := succeeded.Add(48 * time.Hour)
	tc.notDue(t, tc.claim(t, "remind", 2), due)
	return due
}

// waitAndReopen: the drive records the wake time; an identical rewrite
// adds nothing; the wake time survives a reopen and NextWake finds it.
func (tc *timerCase) waitAndReopen(t *testing.T, open Opener, opts Options, due time.Time) {
	b, ctx := tc.b, tc.b.ctx
	b.mustOK(t, ledger.Wait("r", due, map[string]time.Time{"remind": due}))
	b.mustOK(t, ledger.Wait("r", due, map[string]time.Time{"remind": due}))
	evs := b.events(t, "r")
	if last := evs[len(evs)-1]; last.Type != ledger.EventRunWaiting || evs[len(evs)-2].Type == ledger.EventRunWaiting {
		t.Fatalf("events end with %v, want one run.waiting", types(evs[len(evs)-2:]))
	}
	l := reopen(t, open, b.cfg, b.l, opts)
	b.l = l
	checkWaiting(t, l, "r", due)
	if w, ok, err := ledger.NextWake(ctx, l); err != nil || !ok || w.RunID != "r" || !w.At.Equal(due) {
		t.Fatalf("NextWake = %+v %v %v, want r at %s", w, ok, err, due)
	}
	if wi, ok := l.(ledger.WakeIndex); ok {
		if ws, err := wi.Wakes(ctx, due.Add(-time.Second), 0); err != nil || len(ws) != 0 {
			t.Fatalf("Wakes before the wake time = %v, %v; want none", ws, err)
		}
	}
}

// runNow: a person's op with who, and the claim is admitted at once.
func (tc *timerCase) runNow(t *testing.T) {
	b, l := tc.b, tc.b.l
	if r := b.apply(t, ledger.RunNow("r", "invoice", "alice")); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("RunNow of an action without a timer: %v, want ErrInvalid", r.Err)
	}
	if r := b.apply(t, ledger.RunNow("r", "remind", "")); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("RunNow without who: %v, want ErrInvalid", r.Err)
	}
	b.mustOK(t, ledger.RunNow("r", "remind", "alice"))
	b.mustOK(t, ledger.RunNow("r", "remind", "alice"))
	evs := b.events(t, "r")
	if last := evs[len(evs)-1]; last.Type != ledger.EventActionRunNow || last.ActionID != "remind" || !strings.Contains(string(last.Data), `"alice"`) ||
		evs[len(evs)-2].Type == ledger.EventActionRunNow {
		t.Fatalf("events end with %v %s, want one action.run_now by alice", types(evs[len(evs)-2:]), last.Data)
	}
	if run, _ := l.GetRun(b.ctx, "r"); !run.WakeAt.Equal(tc.clk.Now()) {
		t.Fatalf("after run now the wake time is %s, want now (%s)", run.WakeAt, tc.clk.Now())
	}
	b.mustOK(t, tc.claim(t, "remind", 2))
	if r := b.apply(t, ledger.RunNow("r", "open", "alice")); !errors.Is(r.Err, ledger.ErrConflict) {
		t.Fatalf("RunNow of a claimed action: %v, want a conflict", r.Err)
	}
}

// wake: taken up, the wake time is cleared (run.woken); an ended run keeps
// no wake time.
func (tc *timerCase) wake(t *testing.T, due time.Time) {
	b, ctx, l := tc.b, tc.b.ctx, tc.b.l
	b.mustOK(t, ledger.Wait("r", time.Time{}, nil))
	evs := b.events(t, "r")
	if last := evs[len(evs)-1]; last.Type != ledger.EventRunWoken {
		t.Fatalf("last event %s, want run.woken", last.Type)
	}
	if _, ok, err := ledger.NextWake(ctx, l); err != nil || ok {
		t.Fatalf("NextWake after the wake = %v %v, want none", ok, err)
	}
	// An ended run keeps no wake time.
	b.mustOK(t, ledger.Wait("r", due, nil))
	b.mustOK(t, ledger.SetRunStatus("r", ledger.RunCancelled, ledger.EventRunCancelled, "", nil))
	if run, _ := l.GetRun(ctx, "r"); !run.WakeAt.IsZero() {
		t.Fatalf("a cancelled run keeps its wake time %s", run.WakeAt)
	}
	if _, ok, err := ledger.NextWake(ctx, l); err != nil || ok {
		t.Fatalf("NextWake after cancel = %v %v, want none", ok, err)
	}
}

// checkWaiting checks the run's wake time and the remind action's due
// time as the Run JSON shows them.
func checkWaiting(t *testing.T, l ledger.Store, runID string, due time.Time) {
	t.Helper()
	doc, err := l.Doc(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		WaitingUntil time.Time `json:"waiting_until"`
		Actions      []struct {
			ID    string        `json:"id"`
			Timer *ledger.Timer `json:"timer"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !got.WaitingUntil.Equal(due) {
		t.Fatalf("Run JSON waiting_until = %s, want %s: %s", got.WaitingUntil, due, raw)
	}
	for _, a := range got.Actions {
		switch a.ID {
		case "remind":
			if a.Timer == nil || a.Timer.After != "2d" || !a.Timer.DueAt.Equal(due) {
				t.Fatalf("remind's timer in the Run JSON = %+v, want after 2d due %s", a.Timer, due)
			}
		case "open":
			if a.Timer == nil || !a.Timer.NotBefore.Equal(time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)) {
				t.Fatalf("open's timer in the Run JSON = %+v", a.Timer)
			}
		case "invoice":
			if a.Timer != nil {
				t.Fatalf("invoice has a timer in the Run JSON: %+v", a.Timer)
			}
		}
	}
}
