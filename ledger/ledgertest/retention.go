package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// retentionCase is a store with runs in every state the collector tells
// apart, ended at known times.
type retentionCase struct {
	b     *bundle
	c     ledger.Collector
	ended time.Time // after every run below ended
	keys  map[string]string
}

// newRetentionCase records:
//
//	old:   completed, one succeeded key (with a budget hold), a memo, a
//	       large argument (a blob): past a 1h retention
//	prot:  completed, its key claimed WithKeyTTL(48h): protected
//	own:   completed, its own retention of 72h
//	live:  running, never ended
//	back:  failed, then replayed to running: not ended any more
func newRetentionCase(t *testing.T, open Opener) *retentionCase {
	b := setup(t, open)
	c, ok := b.l.(ledger.Collector)
	if !ok {
		t.Fatal("the store does not collect (ledger.Collector)")
	}
	rc := &retentionCase{b: b, c: c, keys: map[string]string{}}
	big := `{"i":1,"pad":` + string(bigString(70<<10)) + `}`
	for _, id := range []string{"old", "prot", "own", "live", "back"} {
		p := testPlan("goal of "+id, 2)
		run := ledger.Run{ID: id, Policy: "safe"}
		if id == "own" {
			run.Retention = ledger.Duration(72 * time.Hour)
		}
		if id == "old" {
			p.Actions[0].Args = json.RawMessage(big)
		}
		if _, _, err := b.l.CreateRun(b.ctx, run, p, nil); err != nil {
			t.Fatalf("CreateRun(%s): %v", id, err)
		}
		args := `{"i":1}`
		if id == "old" {
			args = big
		}
		k := key(t, id, "a1", args)
		rc.keys[id] = k
		claim := ledger.Claim(id, "a1", "t", k, json.RawMessage(args), 1)
		switch id {
		case "prot":
			claim = claim.WithKeyTTL(48 * time.Hour)
		case "old":
			claim = claim.WithCharges(ledger.Charge{Budget: "calls", Scope: "run:old", Amount: "1", Limit: "9"})
		}
		b.mustOK(t, claim)
		b.mustOK(t, ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`)))
		if _, err := b.l.Memo(b.ctx, id, "m", json.RawMessage(`"v"`)); err != nil {
			t.Fatalf("Memo(%s): %v", id, err)
		}
		switch id {
		case "live":
		case "back":
			b.mustOK(t, ledger.SetRunStatus(id, ledger.RunFailed, ledger.EventRunFailed, "x", nil))
			b.mustOK(t, ledger.SetRunStatus(id, ledger.RunRunning, "", "", nil))
		default:
			b.mustOK(t, ledger.SetRunStatus(id, ledger.RunCompleted, ledger.EventRunCompleted, "", nil))
		}
	}
	rc.ended = b.l.Now()
	return rc
}

func (rc *retentionCase) collect(t *testing.T, o ledger.CollectOptions) ledger.CollectReport {
	t.Helper()
	rep, err := rc.c.Collect(rc.b.ctx, o)
	if err != nil {
		t.Fatalf("Collect(%+v): %v", o, err)
	}
	return rep
}

// present reports whether run id can still be read.
func (rc *retentionCase) present(t *testing.T, id string) bool {
	t.Helper()
	_, err := rc.b.l.GetRun(rc.b.ctx, id)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetRun(%s): %v", id, err)
	}
	return err == nil
}

func (rc *retentionCase) want(t *testing.T, present ...string) {
	t.Helper()
	for _, id := range []string{"old", "prot", "own", "live", "back"} {
		want := false
		for _, p := range present {
			want = want || p == id
		}
		if got := rc.present(t, id); got != want {
			t.Errorf("run %s present = %v, want %v", id, got, want)
		}
	}
}

// testCollector is the contract of ledger.Collector.
func testCollector(t *testing.T, open Opener, _ Options) {
	t.Run("KeptWithinRetention", func(t *testing.T) { testCollectKeptWithinRetention(t, open) })
	t.Run("DryRunDeletesNothing", func(t *testing.T) { testCollectDryRunDeletesNothing(t, open) })
	t.Run("PastRetentionDeletedWhole", func(t *testing.T) { testCollectPastRetentionDeletedWhole(t, open) })
	t.Run("KeyProtectsItsRun", func(t *testing.T) { testCollectKeyProtectsItsRun(t, open) })
	t.Run("RunsOwnRetention", func(t *testing.T) { testCollectRunsOwnRetention(t, open) })
	t.Run("NotEndedNeverCollected", func(t *testing.T) { testCollectNotEndedNeverCollected(t, open) })
	t.Run("BudgetsPastTheirWindow", func(t *testing.T) { testCollectBudgetsPastTheirWindow(t, open) })
	t.Run("Concurrent", func(t *testing.T) { testCollectConcurrent(t, open) })
	t.Run("NegativeRetentionRefused", func(t *testing.T) { testCollectNegativeRetentionRefused(t, open) })
}

// testCollectKeptWithinRetention: nothing within the retention goes, and
// without a global retention only a run with its own does.
func testCollectKeptWithinRetention(t *testing.T, open Opener) {
	rc := newRetentionCase(t, open)
	rep := rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(59 * time.Minute), Retention: time.Hour})
	if rep.Runs != 0 {
		t.Errorf("report %+v, want no run", rep)
	}
	rc.want(t, "old", "prot", "own", "live", "back")
	// No global retention: only a run with its own is ever collected.
	rep = rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(1000 * time.Hour)})
	if rep.Runs != 1 {
		t.Errorf("without retention: report %+v, want the one run with its own", rep)
	}
	rc.want(t, "old", "prot", "live", "back")
}

// testCollectDryRunDeletesNothing: a dry run reports what would go and
// deletes nothing.
func testCollectDryRunDeletesNothing(t *testing.T, open Opener) {
	rc := newRetentionCase(t, open)
	rep := rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(2 * time.Hour), Retention: time.Hour, DryRun: true})
	if rep.Runs != 1 || rep.Records < 5 || rep.Kept != 1 {
		t.Errorf("dry run report %+v, want 1 run of at least 5 records, 1 kept", rep)
	}
	rc.want(t, "old", "prot", "own", "live", "back")
	if _, err := rc.b.l.Key(rc.b.ctx, rc.keys["old"]); err != nil {
		t.Errorf("Key after a dry run: %v", err)
	}
}

// testCollectPastRetentionDeletedWhole: a run past the retention goes with
// its key, document, events and holds, and its id is free again.
func testCollectPastRetentionDeletedWhole(t *testing.T, open Opener) {
	rc := newRetentionCase(t, open)
	b := rc.b
	rep := rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(2 * time.Hour), Retention: time.Hour})
	if rep.Runs != 1 || rep.Kept != 1 {
		t.Errorf("report %+v, want 1 run deleted, 1 kept by its key", rep)
	}
	rc.want(t, "prot", "own", "live", "back")
	if _, err := b.l.Key(b.ctx, rc.keys["old"]); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Key of a deleted run: %v, want ErrNotFound", err)
	}
	if _, err := b.l.Doc(b.ctx, "old"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Doc of a deleted run: %v, want ErrNotFound", err)
	}
	if evs, err := b.l.Events(b.ctx, "old", 0, 0); err == nil && len(evs) > 0 {
		t.Errorf("Events of a deleted run: %d events", len(evs))
	}
	if br, ok := b.l.(ledger.BudgetReader); ok {
		if _, err := br.Hold(b.ctx, rc.keys["old"]); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("Hold of a deleted run's key: %v, want ErrNotFound", err)
		}
	}
	runs, _, err := b.l.ListRuns(b.ctx, ledger.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.ID == "old" {
			t.Error("ListRuns still lists the deleted run")
		}
	}
	// The id is free again, with nothing left of the old run: a new
	// run's events start at 1, its memo and key are new.
	b.createRun(t, "old", 1)
	checkSeqs(t, b.events(t, "old"), 0)
	if evs := b.events(t, "old"); len(evs) == 0 || evs[0].Seq != 1 || evs[0].Type != ledger.EventRunCreated {
		t.Errorf("events of the new run: %v", types(evs))
	}
	if v, err := b.l.Memo(b.ctx, "old", "m", json.RawMessage(`"new"`)); err != nil || string(v) != `"new"` {
		t.Errorf("memo of the new run = %s, %v; want the new value", v, err)
	}
	if _, err := b.l.Key(b.ctx, rc.keys["old"]); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Key of the old run's key in the new run: %v, want ErrNotFound", err)
	}
	// Collecting again changes nothing.
	if rep := rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(2 * time.Hour), Retention: time.Hour}); rep.Runs != 0 {
		t.Errorf("second collect: %+v", rep)
	}
}

// testCollectKeyProtectsItsRun: a key claimed with a TTL keeps its run
// until the TTL has passed.
func testCollectKeyProtectsItsRun(t *testing.T, open Opener) {
	rc := newRetentionCase(t, open)
	// Past the key's 48h from its first claim, the run goes.
	rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(47 * time.Hour), Retention: time.Hour})
	rc.want(t, "prot", "own", "live", "back")
	rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(48*time.Hour + time.Minute), Retention: time.Hour})
	rc.want(t, "own", "live", "back")
}

// testCollectRunsOwnRetention: a run's own retention applies, and a longer
// global one wins over it.
func testCollectRunsOwnRetention(t *testing.T, open Opener) {
	rc := newRetentionCase(t, open)
	r, err := rc.b.l.GetRun(rc.b.ctx, "own")
	if err != nil || time.Duration(r.Retention) != 72*time.Hour {
		t.Fatalf("GetRun(own) retention = %v, %v; want 72h", r.Retention, err)
	}
	// Its own retention applies with no global one, and a longer
	// global one wins over it.
	rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(73 * time.Hour), Retention: 100 * time.Hour})
	rc.want(t, "old", "prot", "own", "live", "back")
	rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(73 * time.Hour)})
	rc.want(t, "old", "prot", "live", "back")
}

// testCollectNotEndedNeverCollected: a run that has not ended stays, however
// old.
func testCollectNotEndedNeverCollected(t *testing.T, open Opener) {
	rc := newRetentionCase(t, open)
	rc.collect(t, ledger.CollectOptions{Now: rc.ended.Add(10000 * time.Hour), Retention: time.Nanosecond})
	rc.want(t, "live", "back")
}

// testCollectBudgetsPastTheirWindow: budget buckets of a past window go,
// the current window's stays.
func testCollectBudgetsPastTheirWindow(t *testing.T, open Opener) {
	b := setup(t, open)
	br, ok := b.l.(ledger.BudgetReader)
	if !ok {
		t.Skip("the store does not read budgets")
	}
	b.createRun(t, "r", 2)
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for i, w := range []time.Time{day.Add(-24 * time.Hour), day} {
		a := []string{"a1", "a2"}[i]
		args := `{"i":` + a[1:] + `}`
		b.mustOK(t, ledger.Claim("r", a, "t", key(t, "r", a, args), json.RawMessage(args), 1).WithCharges(
			ledger.Charge{Budget: "spend", Scope: "all", Window: w, Every: 24 * time.Hour, Amount: "1", Limit: "9"}))
	}
	now := day.Add(time.Hour)
	rep, err := b.l.(ledger.Collector).Collect(b.ctx, ledger.CollectOptions{Now: now, DryRun: true})
	if err != nil || rep.Buckets != 1 {
		t.Fatalf("dry run = %+v, %v; want 1 bucket", rep, err)
	}
	if all, _ := br.Budgets(b.ctx); len(all) != 2 {
		t.Fatalf("a dry run deleted buckets: %d left", len(all))
	}
	if _, err := b.l.(ledger.Collector).Collect(b.ctx, ledger.CollectOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	all, err := br.Budgets(b.ctx)
	if err != nil || len(all) != 1 || !all[0].Window.Equal(day) {
		t.Fatalf("buckets after collect = %+v, %v; want only the current window's", all, err)
	}
}

// testCollectNegativeRetentionRefused: a negative retention is ErrInvalid.
func testCollectNegativeRetentionRefused(t *testing.T, open Opener) {
	b := setup(t, open)
	if _, err := b.l.(ledger.Collector).Collect(b.ctx, ledger.CollectOptions{Retention: -time.Second}); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("Collect with a negative retention: %v, want ErrInvalid", err)
	}
}

// testCollectConcurrent: collects running again and again while runs are
// created, driven and ended leave every run that is not ended whole, and a
// run deleted under a writer makes its ops fail with ErrNotFound, never
// with anything else.
func testCollectConcurrent(t *testing.T, open Opener) {
	b := setup(t, open)
	c := b.l.(ledger.Collector)
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	const workers, runs, actions = 3, 12, 4
	errs := make(chan error, workers+1)
	stop := make(chan struct{})
	collected := make(chan int, 1)
	go func() {
		n, err := collectUntil(b.ctx, c, far, stop)
		if err != nil {
			errs <- err
		}
		collected <- n
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range runs {
				id := fmt.Sprintf("w%d-r%d", w, r)
				live := r%3 == 0 // never ended
				if err := driveCollectedRun(t, b, id, actions, live); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-collected
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkLiveRuns(t, b, workers, runs)
	// What is left ended goes with one more collect; the live runs stay.
	if _, err := c.Collect(b.ctx, ledger.CollectOptions{Now: far, Retention: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	all, _, err := b.l.ListRuns(b.ctx, ledger.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != workers*runs/3 {
		t.Errorf("%d runs left, want the %d live ones", len(all), workers*runs/3)
	}
	t.Logf("%d runs collected while the writers ran", n)
}

// collectUntil collects everything ended before far, again and again until
// stop is closed or a collect fails, and returns how many runs it deleted.
func collectUntil(ctx context.Context, c ledger.Collector, far time.Time, stop <-chan struct{}) (int, error) {
	n := 0
	for {
		select {
		case <-stop:
			return n, nil
		default:
		}
		rep, err := c.Collect(ctx, ledger.CollectOptions{Now: far, Retention: time.Nanosecond})
		if err != nil {
			return n, fmt.Errorf("collecting: %w", err)
		}
		n += rep.Runs
	}
}

// driveCollectedRun creates run id and drives its actions to success while
// the collector runs; unless live, it ends the run, then replays and ends
// it again if the collector has not deleted it meanwhile.
func driveCollectedRun(t *testing.T, b *bundle, id string, actions int, live bool) error {
	if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: id}, testPlan(id, actions), nil); err != nil {
		return fmt.Errorf("CreateRun(%s): %w", id, err)
	}
	for i := 1; i <= actions; i++ {
		a, args := fmt.Sprintf("a%d", i), fmt.Sprintf(`{"i":%d}`, i)
		k := key(t, id, a, args)
		for _, op := range []ledger.Op{ledger.Claim(id, a, "t", k, json.RawMessage(args), 1),
			ledger.Succeed(k, 1, json.RawMessage(`{}`))} {
			if _, err := ledger.ApplyOne(b.ctx, b.l, op); err != nil {
				return fmt.Errorf("%s %s: %w", id, a, err)
			}
		}
	}
	if live {
		return nil
	}
	if _, err := ledger.ApplyOne(b.ctx, b.l, ledger.SetRunStatus(id, ledger.RunCompleted, ledger.EventRunCompleted, "", nil)); err != nil {
		return fmt.Errorf("ending %s: %w", id, err)
	}
	// A replay racing the collector: it finds the run or not.
	_, err := ledger.ApplyOne(b.ctx, b.l, ledger.SetRunStatus(id, ledger.RunRunning, "", "", nil))
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("replaying %s: %w", id, err)
	}
	if err == nil {
		if _, err := ledger.ApplyOne(b.ctx, b.l, ledger.SetRunStatus(id, ledger.RunCompleted, ledger.EventRunCompleted, "", nil)); err != nil {
			return fmt.Errorf("ending %s again: %w", id, err)
		}
	}
	return nil
}

// checkLiveRuns checks that every run never ended (every third) is whole:
// its actions succeeded and its events in sequence.
func checkLiveRuns(t *testing.T, b *bundle, workers, runs int) {
	t.Helper()
	for w := range workers {
		for r := 0; r < runs; r += 3 {
			id := fmt.Sprintf("w%d-r%d", w, r)
			doc, err := b.l.Doc(b.ctx, id)
			if err != nil {
				t.Fatalf("live run %s: %v", id, err)
			}
			for _, a := range doc.Actions {
				if a.Status != ledger.StatusSucceeded {
					t.Errorf("live run %s action %s is %s", id, a.ID, a.Status)
				}
			}
			checkSeqs(t, b.events(t, id), 0)
		}
	}
}
