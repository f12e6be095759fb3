package badgerdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// A person's pause is a fact of the run record: it survives a reopen, other
// status changes keep it, and only SetPause with by == "" lifts it.
func TestSetPauseIsDurableAndOnlyLiftedExplicitly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openBadger(t, badgerdb.Config{Dir: dir})
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Status: ledger.RunRunning, Policy: "safe"}, p,
		[]ledger.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	apply := func(o ledger.Op) error {
		t.Helper()
		res, err := l.Apply(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Err
	}
	if err := apply(ledger.SetPause("r", "alice", "", []byte(`{"by":"alice"}`))); err != nil {
		t.Fatal(err)
	}
	// A drive that writes paused for another reason keeps the person's pause.
	if err := apply(ledger.SetRunStatus("r", ledger.RunPaused, "run.paused", "", []byte(`{"reason":"needs_review"}`))); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openBadger(t, badgerdb.Config{Dir: dir})
	run, err := l.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != ledger.RunPaused || run.PausedBy != "alice" {
		t.Fatalf("after reopen: status %s paused_by %q, want paused by alice", run.Status, run.PausedBy)
	}
	if err := apply(ledger.SetPause("r", "bob", "", nil)); err != nil {
		t.Fatalf("pausing a paused run again: %v", err)
	}
	if run, _ = l.GetRun(ctx, "r"); run.PausedBy != "alice" {
		t.Fatalf("a second pause changed paused_by to %q", run.PausedBy)
	}
	if err := apply(ledger.SetPause("r", "", ledger.RunRunning, []byte(`{"by":"bob"}`))); err != nil {
		t.Fatal(err)
	}
	if run, _ = l.GetRun(ctx, "r"); run.Status != ledger.RunRunning || run.PausedBy != "" {
		t.Fatalf("after resume: status %s paused_by %q", run.Status, run.PausedBy)
	}
	evs, err := l.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	if n := len(types); n < 3 || types[n-3] != "run.paused" || types[n-2] != "run.paused" || types[n-1] != "run.resumed" {
		t.Fatalf("events %v: want ... run.paused, run.paused, run.resumed", types)
	}
	// Nothing to pause or resume in a finished run.
	if err := apply(ledger.SetRunStatus("r", ledger.RunCancelled, "run.cancelled", "", nil)); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"alice", ""} {
		if err := apply(ledger.SetPause("r", by, ledger.RunRunning, nil)); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("SetPause(by %q) on a cancelled run: %v, want ErrConflict", by, err)
		}
	}
}

// A status change away from paused ends a person's pause: a later pause for
// another reason (an action needs review) is not a person's. Regression: a
// leftover PausedBy made such a run wait for a resume nobody knew to give
// (chaos seed 898073905121015326 run 37).
func TestLeavingPausedClearsPausedBy(t *testing.T) {
	ctx := context.Background()
	l := openBadger(t, badgerdb.Config{Dir: t.TempDir()})
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Status: ledger.RunRunning, Policy: "safe"}, p,
		[]ledger.Action{{ID: "a", Tool: "t", Args: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []ledger.Op{
		ledger.SetPause("r", "alice", "", []byte(`{"by":"alice"}`)),
		ledger.SetRunStatus("r", ledger.RunRunning, "run.resumed", "", nil),
		ledger.SetRunStatus("r", ledger.RunPaused, "run.paused", "", []byte(`{"reason":"needs_review"}`)),
	} {
		res, err := l.Apply(ctx, o)
		if err != nil || res[0].Err != nil {
			t.Fatalf("Apply: %v %v", err, res[0].Err)
		}
	}
	run, err := l.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != ledger.RunPaused || run.PausedBy != "" {
		t.Fatalf("status %s, paused by %q: want paused for review, by nobody", run.Status, run.PausedBy)
	}
}
