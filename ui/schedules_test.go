package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor/schedule"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ui"
)

// invoicePlan invoices once per run: the payments API counts one effect
// per run (each run's key is its own), so the world's count of
// payments/REF is the number of runs that performed it.
func invoicePlan(ref string) json.RawMessage {
	return json.RawMessage(`{"goal":"invoice","actions":[{"id":"inv","tool":"payments_create_invoice",
		"args":{"customer":"c_1","amount":5,"currency":"EUR","reference":"` + ref + `"}}]}`)
}

// schedBundle is a server whose clock the test holds, with its scheduler
// loops started by startScheduler.
type schedBundle struct {
	*bundle
	clock *ledgertest.Clock
}

func setupScheduler(t *testing.T, start time.Time) *schedBundle {
	t.Helper()
	clock := ledgertest.NewClock(start)
	b := setup(t, options{tune: func(cfg *ui.Config) { cfg.Now = clock.Now }})
	return &schedBundle{bundle: b, clock: clock}
}

// startScheduler runs n scheduler loops on the server until the test ends.
func (b *schedBundle) startScheduler(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.srv.RunScheduler(ctx, 2*time.Millisecond); err != nil {
				t.Errorf("RunScheduler: %v", err)
			}
		}()
	}
	// Before the bundle's own cleanup (registered earlier, run later).
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func (b *schedBundle) create(t *testing.T, body map[string]any) {
	t.Helper()
	var out map[string]any
	if st := b.call("POST", "/v1/schedules", body, &out); st != 201 {
		t.Fatalf("POST /v1/schedules = %d %v", st, out)
	}
}

func (b *schedBundle) record(t *testing.T, id string) ledger.Schedule {
	t.Helper()
	rec, err := b.led.(ledger.ScheduleKeeper).Schedule(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// waitRecord waits until schedule id's record satisfies cond.
func (b *schedBundle) waitRecord(t *testing.T, id, what string, cond func(ledger.Schedule) bool) ledger.Schedule {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec := b.record(t, id)
		if cond(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %s: %s did not happen in time: %+v", id, what, rec)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// runs lists the ids of the runs schedule id created, oldest first.
func (b *schedBundle) runsOf(t *testing.T, id string) []string {
	t.Helper()
	all, _, err := b.led.ListRuns(context.Background(), ledger.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].CreatedBy == "schedule:"+id {
			out = append(out, all[i].ID)
		}
	}
	return out
}

func slotIDs(id string, slots ...time.Time) []string {
	var out []string
	for _, s := range slots {
		out = append(out, schedule.RunID(id, s))
	}
	return out
}

func equalIDs(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// Two scheduler loops over one ledger fire each slot once: one run per
// slot, named by the slot, created by the schedule, performed once.
func TestSchedulerFiresEachSlotOnce(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	b := setupScheduler(t, t0)
	b.create(t, map[string]any{"id": "inv", "spec": "every 1m", "plan": invoicePlan("sched-once")})
	b.startScheduler(t, 2)
	var slots []time.Time
	for i := 1; i <= 5; i++ {
		slot := t0.Add(time.Duration(i) * time.Minute)
		slots = append(slots, slot)
		b.clock.Set(slot.Add(time.Second))
		rec := b.waitRecord(t, "inv", "slot "+slot.String(), func(r ledger.Schedule) bool { return r.LastFired.Equal(slot) })
		if rec.LastRunID != schedule.RunID("inv", slot) {
			t.Fatalf("last run %q; want %q", rec.LastRunID, schedule.RunID("inv", slot))
		}
		b.waitStatus(rec.LastRunID, ledger.RunCompleted)
	}
	if got, want := b.runsOf(t, "inv"), slotIDs("inv", slots...); !equalIDs(got, want) {
		t.Fatalf("runs of the schedule: %v; want %v", got, want)
	}
	if n := b.world.Effect("payments/sched-once"); n != 5 {
		t.Fatalf("%d invoices for 5 slots; want 5", n)
	}
	rec := b.record(t, "inv")
	if rec.Skipped != 0 || !rec.Handled.Equal(slots[4]) {
		t.Fatalf("record: %+v", rec)
	}
	// The API shows the next slots and the last one fired.
	var view struct {
		Next      []time.Time `json:"next"`
		LastRunID string      `json:"last_run_id"`
	}
	if st := b.call("GET", "/v1/schedules/inv", nil, &view); st != 200 || len(view.Next) != 3 || !view.Next[0].Equal(t0.Add(6*time.Minute)) || view.LastRunID != rec.LastRunID {
		t.Fatalf("GET /v1/schedules/inv = %d %+v", st, view)
	}
}

// A paused schedule fires nothing; resumed, it fires from then on, not
// the slots that came due while it was paused.
func TestSchedulerPauseResume(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	b := setupScheduler(t, t0)
	b.create(t, map[string]any{"id": "p", "spec": "every 1m", "plan": invoicePlan("sched-pause")})
	if st := b.call("POST", "/v1/schedules/p/pause", map[string]any{}, nil); st != 200 {
		t.Fatalf("pause = %d", st)
	}
	b.startScheduler(t, 1)
	b.clock.Set(t0.Add(3*time.Minute + time.Second))
	if st := b.call("POST", "/v1/schedules/p/resume", map[string]any{}, nil); st != 200 {
		t.Fatalf("resume = %d", st)
	}
	b.clock.Set(t0.Add(4*time.Minute + time.Second))
	rec := b.waitRecord(t, "p", "the first slot after resuming", func(r ledger.Schedule) bool { return !r.LastFired.IsZero() })
	if !rec.LastFired.Equal(t0.Add(4 * time.Minute)) {
		t.Fatalf("first slot fired after resuming: %v; want %v", rec.LastFired, t0.Add(4*time.Minute))
	}
	b.waitStatus(rec.LastRunID, ledger.RunCompleted)
	if got, want := b.runsOf(t, "p"), slotIDs("p", t0.Add(4*time.Minute)); !equalIDs(got, want) {
		t.Fatalf("runs: %v; want %v", got, want)
	}
}

// Overlap policies: the first slot's run waits for a person (approve
// "none"), so it has not ended when the second slot comes due.
func TestSchedulerOverlap(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	s1, s2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for _, overlap := range []string{"skip", "queue", "cancel_previous"} {
		t.Run(overlap, func(t *testing.T) {
			t.Parallel()
			b := setupScheduler(t, t0)
			ref := "sched-overlap-" + overlap
			b.create(t, map[string]any{"id": "o", "spec": "every 1m", "overlap": overlap, "approve": "none", "plan": invoicePlan(ref)})
			b.startScheduler(t, 1)
			b.clock.Set(s1.Add(time.Second))
			rec := b.waitRecord(t, "o", "the first slot", func(r ledger.Schedule) bool { return r.LastFired.Equal(s1) })
			first := rec.LastRunID
			b.waitStatus(first, ledger.RunAwaitingApproval)
			b.clock.Set(s2.Add(time.Second))
			switch overlap {
			case "skip":
				rec = b.waitRecord(t, "o", "the second slot skipped", func(r ledger.Schedule) bool { return r.Handled.Equal(s2) })
				if rec.Skipped != 1 || !rec.LastSkipped.Equal(s2) || rec.LastRunID != first {
					t.Fatalf("skip: %+v", rec)
				}
				if got := b.runsOf(t, "o"); !equalIDs(got, slotIDs("o", s1)) {
					t.Fatalf("skip: runs %v", got)
				}
			case "queue":
				// The second slot waits while the first run waits for a
				// person, and fires once it has ended.
				for range 50 { // many looks of the scheduler
					if _, err := b.led.GetRun(context.Background(), schedule.RunID("o", s2)); !errors.Is(err, ledger.ErrNotFound) {
						t.Fatalf("queue: the second slot fired while the first run was waiting: %v", err)
					}
					time.Sleep(2 * time.Millisecond)
				}
				if st := b.call("POST", "/v1/runs/"+first+"/cancel", map[string]any{}, nil); st != 200 {
					t.Fatalf("cancel = %d", st)
				}
				rec = b.waitRecord(t, "o", "the queued slot", func(r ledger.Schedule) bool { return r.LastFired.Equal(s2) })
				if rec.Skipped != 0 {
					t.Fatalf("queue: %+v", rec)
				}
				if got := b.runsOf(t, "o"); !equalIDs(got, slotIDs("o", s1, s2)) {
					t.Fatalf("queue: runs %v", got)
				}
			case "cancel_previous":
				rec = b.waitRecord(t, "o", "the second slot", func(r ledger.Schedule) bool { return r.LastFired.Equal(s2) })
				b.waitStatus(first, ledger.RunCancelled)
				if got := b.runsOf(t, "o"); !equalIDs(got, slotIDs("o", s1, s2)) {
					t.Fatalf("cancel_previous: runs %v", got)
				}
			}
		})
	}
}

// Catch-up after downtime: a schedule every 5 minutes, created at t0; the
// scheduler starts at t0+32m (6 slots were missed).
func TestSchedulerCatchUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var missed []time.Time
	for i := 1; i <= 6; i++ {
		missed = append(missed, t0.Add(time.Duration(5*i)*time.Minute))
	}
	cases := []struct {
		catchUp string
		fired   []time.Time
		skipped int64
	}{
		{"none", nil, 6},
		{"latest", missed[5:], 5},
		{"all", missed, 0},
	}
	for _, c := range cases {
		t.Run(c.catchUp, func(t *testing.T) {
			t.Parallel()
			b := setupScheduler(t, t0)
			ref := "sched-catchup-" + c.catchUp
			// Queue: with catch-up all, the missed slots run one after another.
			b.create(t, map[string]any{"id": "c", "spec": "every 5m", "catch_up": c.catchUp, "overlap": "queue", "plan": invoicePlan(ref)})
			b.clock.Set(t0.Add(32 * time.Minute))
			b.startScheduler(t, 1)
			rec := b.waitRecord(t, "c", "the missed slots handled", func(r ledger.Schedule) bool { return r.Handled.Equal(missed[5]) })
			if rec.Skipped != c.skipped {
				t.Fatalf("skipped %d; want %d (%+v)", rec.Skipped, c.skipped, rec)
			}
			if got, want := b.runsOf(t, "c"), slotIDs("c", c.fired...); !equalIDs(got, want) {
				t.Fatalf("runs %v; want %v", got, want)
			}
			for _, id := range slotIDs("c", c.fired...) {
				b.waitStatus(id, ledger.RunCompleted)
			}
			if n := b.world.Effect("payments/" + ref); n != len(c.fired) {
				t.Fatalf("%d invoices; want %d", n, len(c.fired))
			}
		})
	}
}

// Bad schedules are refused with a clear error and nothing is stored.
func TestScheduleRefusals(t *testing.T) {
	t.Parallel()
	b := setupScheduler(t, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"id": "x", "spec": "61 * * * *", "plan": invoicePlan("r")}, 422},
		{map[string]any{"id": "x", "spec": "@daily", "tz": "Mars/Olympus", "plan": invoicePlan("r")}, 422},
		{map[string]any{"id": "x", "spec": "@daily", "overlap": "sometimes", "plan": invoicePlan("r")}, 422},
		{map[string]any{"id": "x", "spec": "@daily", "catch_up": "some", "plan": invoicePlan("r")}, 422},
		{map[string]any{"id": "x", "spec": "@daily"}, 400},
		{map[string]any{"id": "x", "spec": "@daily", "goal": "g", "plan": invoicePlan("r")}, 400},
		{map[string]any{"id": "x", "spec": "@daily", "plan": json.RawMessage(`{"goal":"g","actions":[{"id":"a","tool":"nope","args":{}}]}`)}, 422},
		{map[string]any{"id": "a/b", "spec": "@daily", "plan": invoicePlan("r")}, 422},
		{map[string]any{"id": "x", "spec": "@daily", "approve": "maybe", "plan": invoicePlan("r")}, 400},
		{map[string]any{"id": "x", "spec": "@daily", "plan": invoicePlan("r"), "extra": 1}, 400},
	} {
		var out struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if st := b.call("POST", "/v1/schedules", c.body, &out); st != c.want || out.Error.Message == "" {
			t.Errorf("POST %v = %d %+v; want %d with a message", c.body, st, out, c.want)
		}
	}
	var list struct {
		Schedules []any `json:"schedules"`
	}
	if st := b.call("GET", "/v1/schedules", nil, &list); st != 200 || len(list.Schedules) != 0 {
		t.Fatalf("after refusals: %d %v", st, list)
	}
}

// A goal schedule: each slot's run is planned by the model when the slot
// fires (here the demo model), then recorded and driven like POST /v1/runs
// with a goal.
func TestSchedulerGoal(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	b := setupScheduler(t, t0)
	b.create(t, map[string]any{"id": "g", "spec": "every 1m", "goal": demoworld.OnboardingGoal, "approve": "all"})
	b.startScheduler(t, 2)
	slot := t0.Add(time.Minute)
	b.clock.Set(slot.Add(time.Second))
	rec := b.waitRecord(t, "g", "the first slot", func(r ledger.Schedule) bool { return r.LastFired.Equal(slot) })
	doc := b.waitStatus(rec.LastRunID, ledger.RunCompleted)
	if doc.Run.CreatedBy != "schedule:g" || doc.Run.Goal != demoworld.OnboardingGoal || len(doc.Actions) == 0 {
		t.Fatalf("the goal's run: created by %q, goal %q, %d actions", doc.Run.CreatedBy, doc.Run.Goal, len(doc.Actions))
	}
	for _, effect := range demoworld.OnboardingEffects {
		if n := b.world.Effect(effect); n != 1 {
			t.Errorf("%s: %d; want 1", effect, n)
		}
	}
}
