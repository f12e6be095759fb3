package ui

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/memory"
	"github.com/docketrun/docket/plan"
)

// TestLedgerGaugesCountEveryRun: docket_runs and docket_actions count every
// run of the ledger (more than one page of ListRuns, far more than the 200
// newest the hand-written exporter looked at), a run the engine or the
// server marks is read again at the next scrape, and a change nobody
// marked (another process on a shared ledger) shows within one turn of the
// bounded resync.
func TestLedgerGaugesCountEveryRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	led, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1100
	for i := range n {
		id := fmt.Sprintf("run-%04d", i)
		p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
		rows := []ledger.Action{{ID: "a1", Tool: "t", Class: "keyed", Status: ledger.StatusPending, Args: json.RawMessage(`{}`)}}
		if _, _, err := led.CreateRun(ctx, ledger.Run{ID: id, Goal: "g", Policy: "all", Status: ledger.RunRunning}, p, rows); err != nil {
			t.Fatal(err)
		}
	}
	c := newLedgerCounts(led)
	gauges := func() (running, cancelled, pending, skipped int) {
		t.Helper()
		if err := c.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.byRun[ledger.RunRunning], c.byRun[ledger.RunCancelled],
			c.byClass[classStatus{"keyed", "pending"}], c.byClass[classStatus{"keyed", "skipped"}]
	}
	if r, _, p, _ := gauges(); r != n || p != n {
		t.Fatalf("after the first scrape: %d runs running, %d actions pending; want %d and %d", r, p, n, n)
	}
	// The oldest run changes and is marked (as the Observer does): the next
	// scrape counts it.
	cancel := func(id string) {
		t.Helper()
		if _, err := led.Apply(ctx, ledger.Skip(id, "a1", "cancelled"),
			ledger.SetRunStatus(id, ledger.RunCancelled, ledger.EventRunCancelled, "", nil)); err != nil {
			t.Fatal(err)
		}
	}
	cancel("run-0000")
	c.touch("run-0000")
	if r, x, p, s := gauges(); r != n-1 || x != 1 || p != n-1 || s != 1 {
		t.Fatalf("after a marked change: running %d cancelled %d pending %d skipped %d", r, x, p, s)
	}
	// Another old run changes unmarked: the bounded resync reaches it
	// within one turn over every run.
	cancel("run-0001")
	turns := 0
	for {
		turns++
		if _, x, _, s := gauges(); x == 2 && s == 2 {
			break
		}
		if turns > n/resyncPerScrape+2 {
			t.Fatalf("an unmarked change was not counted after %d scrapes", turns)
		}
	}
	if r, x, p, s := gauges(); r != n-2 || x != 2 || p != n-2 || s != 2 {
		t.Fatalf("at the end: running %d cancelled %d pending %d skipped %d", r, x, p, s)
	}
}
