package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

func timerPlan(t *testing.T, after string) *plan.Plan {
	t.Helper()
	remind := pa("remind", "send", `{"invoice":"${invoice.output.id}"}`, "invoice")
	remind.After = after
	return mkPlan(t, pa("invoice", "mk", `{"n":1}`), remind, pa("audit", "mk", `{"n":2}`))
}

func eventTypes(evs []ledger.Event) map[ledger.EventType]int {
	m := map[ledger.EventType]int{}
	for _, ev := range evs {
		m[ev.Type]++
	}
	return m
}

// "Send the reminder 2 days after the invoice": the drive performs what is
// ready, leaves the reminder waiting (the run stays running with its wake
// time recorded, the drive returns), and a wake at that time performs it
// once.
func TestTimerWaitsThenWakes(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Idempotent)), w.Tool(spec("send", tools.AtMostOnce))})
	ctx := context.Background()
	doc := b.run("r1", timerPlan(t, "2d"), PolicyAll)
	wantStatus(t, doc, ledger.RunRunning)
	wantAction(t, doc, "invoice", ledger.StatusSucceeded)
	wantAction(t, doc, "audit", ledger.StatusSucceeded) // not blocked by the waiting action
	wantAction(t, doc, "remind", ledger.StatusApproved)
	inv, err := b.led.Key(ctx, row(t, doc, "invoice").Key)
	if err != nil {
		t.Fatal(err)
	}
	due := inv.UpdatedAt.Add(48 * time.Hour)
	if !doc.Run.WakeAt.Equal(due) {
		t.Fatalf("waiting until %s, want the invoice's success + 2d = %s", doc.Run.WakeAt, due)
	}
	if tm := row(t, doc, "remind").Timer; tm == nil || !tm.DueAt.Equal(due) {
		t.Fatalf("remind's timer %+v, want due %s", tm, due)
	}
	if ev := eventTypes(b.events("r1")); ev[ledger.EventRunWaiting] != 1 || ev[ledger.EventActionClaimed] != 2 {
		t.Fatalf("events %v: want one run.waiting and two claims", ev)
	}

	// Woken early (a restart resumes every running run): nothing starts.
	b.clock.Advance(47 * time.Hour)
	b.restart()
	if next, err := b.eng.WakeDue(ctx); err != nil || !next.Equal(due) {
		t.Fatalf("WakeDue before the time = %s, %v; want the next wake %s", next, err, due)
	}
	doc = b.resume("r1")
	wantAction(t, doc, "remind", ledger.StatusApproved)
	if ev := eventTypes(b.events("r1")); ev[ledger.EventActionClaimed] != 2 || ev[ledger.EventRunWaiting] != 1 {
		t.Fatalf("a drive before the time changed the run: %v", ev)
	}

	// At the time: the wake drives the run, the reminder is sent once.
	b.clock.Advance(time.Hour)
	if next, err := b.eng.WakeDue(ctx); err != nil || !next.IsZero() {
		t.Fatalf("WakeDue at the time = %s, %v; want no wake left", next, err)
	}
	doc = b.doc("r1")
	wantStatus(t, doc, ledger.RunCompleted)
	send := wantAction(t, doc, "remind", ledger.StatusSucceeded)
	if n := w.Effects(send.Key); n != 1 {
		t.Fatalf("the reminder took effect %d times", n)
	}
	if !doc.Run.WakeAt.IsZero() {
		t.Fatalf("a completed run waits until %s", doc.Run.WakeAt)
	}
	if ev := eventTypes(b.events("r1")); ev[ledger.EventRunWoken] != 1 {
		t.Fatalf("events %v: want one run.woken", ev)
	}
}

// A person runs a waiting action now; cancel stops a waiting run.
func TestTimerRunNowAndCancel(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	b := setup(t, []tools.Tool{w.Tool(spec("mk", tools.Idempotent)), w.Tool(spec("send", tools.AtMostOnce))})
	ctx := context.Background()
	wantStatus(t, b.run("r1", timerPlan(t, "30d"), PolicyAll), ledger.RunRunning)
	if err := b.eng.RunNow(ctx, "r1", "invoice", "alice"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("RunNow of an action without a timer: %v", err)
	}
	if err := b.eng.RunNow(ctx, "r1", "remind", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.WakeDue(ctx); err != nil {
		t.Fatal(err)
	}
	doc := b.doc("r1")
	wantStatus(t, doc, ledger.RunCompleted)
	if n := w.Effects(wantAction(t, doc, "remind", ledger.StatusSucceeded).Key); n != 1 {
		t.Fatalf("the reminder took effect %d times", n)
	}

	wantStatus(t, b.run("r2", timerPlan(t, "30d"), PolicyAll), ledger.RunRunning)
	if err := b.eng.Cancel(ctx, "r2", "bob"); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(31 * 24 * time.Hour)
	if next, err := b.eng.WakeDue(ctx); err != nil || !next.IsZero() {
		t.Fatalf("WakeDue after cancel = %s, %v", next, err)
	}
	doc = b.resume("r2")
	wantStatus(t, doc, ledger.RunCancelled)
	if r := row(t, doc, "remind"); r.Status != ledger.StatusSkipped || r.Key != "" {
		t.Fatalf("the cancelled run's reminder is %s (key %q), want skipped and never claimed", r.Status, r.Key)
	}
}
