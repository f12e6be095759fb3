package ledgertest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// testScheduleKeeper: a schedule created is read back as created (on a
// durable store, by a second handle too), a retried create returns it, a
// different one is ErrConflict; a swap at the stored version replaces it
// and one at a stale version is ErrConflict (of two swaps racing at one
// version exactly one wins); bad records are ErrInvalid; a deleted
// schedule is gone.
func testScheduleKeeper(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	sk := b.l.(ledger.ScheduleKeeper)
	reader := sk
	if _, shared := b.l.(ledger.LeaseHolder); shared && opts.Durable {
		// A store several processes share: a second handle reads and
		// races the first.
		reader = open(t, b.cfg).(ledger.ScheduleKeeper)
	}
	created := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	def := ledger.Schedule{ID: "nightly", Spec: "30 2 * * *", TZ: "Europe/Paris", Overlap: "skip", CatchUp: "latest",
		Plan: json.RawMessage(`{"goal":"g","actions":[{"id":"a1","tool":"t","args":{"i":1}}]}`), Approve: "safe",
		CreatedBy: "token:alice", CreatedAt: created}

	read := createSchedules(t, b, sk, reader, def)
	read = swapSchedules(t, b, sk, reader, read, created.Add(16*time.Hour+30*time.Minute))
	raceScheduleSwaps(t, b, sk, reader, read)
	listAndDeleteSchedules(t, b, sk, reader, def)
	if !opts.Durable {
		return
	}
	// The record survives the handle that wrote it.
	b.l.Close()
	reopened := open(t, b.cfg).(ledger.ScheduleKeeper)
	if read, err := reopened.Schedule(b.ctx, "nightly"); err != nil || read.Version != 3 || !ledger.SameDefinition(read, def) {
		t.Fatalf("after reopening: %+v, %v", read, err)
	}
}

// createSchedules: a schedule created is read back as created, a retried
// create returns it, a different one is ErrConflict, bad records are
// ErrInvalid and never stored. It returns the schedule as read back.
func createSchedules(t *testing.T, b *bundle, sk, reader ledger.ScheduleKeeper, def ledger.Schedule) ledger.Schedule {
	t.Helper()
	created := def.CreatedAt
	if _, err := reader.Schedule(b.ctx, "nightly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Schedule before create = %v; want ErrNotFound", err)
	}
	if all, err := reader.Schedules(b.ctx); err != nil || len(all) != 0 {
		t.Fatalf("Schedules of a new store = %v, %v", all, err)
	}
	got, err := sk.CreateSchedule(b.ctx, def)
	if err != nil || got.Version != 1 || !got.Handled.Equal(created) || !ledger.SameDefinition(got, def) {
		t.Fatalf("CreateSchedule = %+v, %v; want version 1, handled at its creation", got, err)
	}
	read, err := reader.Schedule(b.ctx, "nightly")
	if err != nil || read.Version != 1 || !ledger.SameDefinition(read, def) || !read.CreatedAt.Equal(created) || read.Paused {
		t.Fatalf("Schedule = %+v, %v", read, err)
	}
	// A retried create (the same definition) returns the stored record.
	if again, err := sk.CreateSchedule(b.ctx, def); err != nil || again.Version != 1 {
		t.Fatalf("CreateSchedule again = %+v, %v; want the stored record", again, err)
	}
	other := def
	other.Spec = "0 3 * * *"
	if _, err := sk.CreateSchedule(b.ctx, other); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("CreateSchedule with another definition = %v; want ErrConflict", err)
	}
	for _, bad := range []ledger.Schedule{
		{ID: "", Spec: "@daily", Goal: "g"},
		{ID: "a/b", Spec: "@daily", Goal: "g"},
		{ID: "x", Spec: "", Goal: "g"},
		{ID: "x", Spec: "@daily"},
		{ID: "x", Spec: "@daily", Goal: "g", Plan: json.RawMessage(`{"goal":"g"}`)},
		{ID: "x", Spec: "@daily", Plan: json.RawMessage(`{not json`)},
	} {
		if _, err := sk.CreateSchedule(b.ctx, bad); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("CreateSchedule(%+v) = %v; want ErrInvalid", bad, err)
		}
	}
	if _, err := reader.Schedule(b.ctx, "x"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused schedule was stored: %v", err)
	}
	return read
}

// swapSchedules: a swap at the stored version replaces the schedule, one
// at a stale version is ErrConflict, one of a missing schedule is
// ErrNotFound. slot is the fire time the swap records. It returns the
// schedule as read back after the swap.
func swapSchedules(t *testing.T, b *bundle, sk, reader ledger.ScheduleKeeper, read ledger.Schedule, slot time.Time) ledger.Schedule {
	t.Helper()
	next := read
	next.Handled, next.LastFired, next.LastRunID = slot, slot, "sched:nightly:20260302T013000Z"
	swapped, err := sk.SwapSchedule(b.ctx, next)
	if err != nil || swapped.Version != 2 || !swapped.Handled.Equal(slot) {
		t.Fatalf("SwapSchedule = %+v, %v; want version 2", swapped, err)
	}
	if _, err := sk.SwapSchedule(b.ctx, next); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("SwapSchedule at a stale version = %v; want ErrConflict", err)
	}
	read, err = reader.Schedule(b.ctx, "nightly")
	if err != nil || read.Version != 2 || !read.LastFired.Equal(slot) || read.LastRunID != next.LastRunID {
		t.Fatalf("Schedule after the swap = %+v, %v", read, err)
	}
	missing := read
	missing.ID = "nope"
	if _, err := sk.SwapSchedule(b.ctx, missing); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("SwapSchedule of a missing schedule = %v; want ErrNotFound", err)
	}
	return read
}

// raceScheduleSwaps: two writers swap the same version: exactly one wins.
func raceScheduleSwaps(t *testing.T, b *bundle, sk, reader ledger.ScheduleKeeper, read ledger.Schedule) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, w := range []ledger.ScheduleKeeper{sk, reader} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := read
			s.Paused = i == 0
			s.Skipped = int64(i + 1)
			_, errs[i] = w.SwapSchedule(b.ctx, s)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, ledger.ErrConflict):
			t.Fatalf("a racing swap failed with %v; want success or ErrConflict", err)
		}
	}
	if wins != 1 {
		t.Fatalf("two swaps at one version: %d won (%v); want exactly one", wins, errs)
	}
	if read, err := reader.Schedule(b.ctx, "nightly"); err != nil || read.Version != 3 {
		t.Fatalf("after the race: %+v, %v; want version 3", read, err)
	}
}

// listAndDeleteSchedules: Schedules lists by id; a deleted schedule is
// gone, and deleting it again is ErrNotFound.
func listAndDeleteSchedules(t *testing.T, b *bundle, sk, reader ledger.ScheduleKeeper, def ledger.Schedule) {
	t.Helper()
	second := def
	second.ID, second.Plan, second.Goal = "hourly", nil, "check the queue"
	if _, err := sk.CreateSchedule(b.ctx, second); err != nil {
		t.Fatalf("CreateSchedule(hourly): %v", err)
	}
	all, err := reader.Schedules(b.ctx)
	if err != nil || len(all) != 2 || all[0].ID != "hourly" || all[1].ID != "nightly" {
		t.Fatalf("Schedules = %+v, %v; want hourly, nightly", all, err)
	}
	if err := sk.DeleteSchedule(b.ctx, "hourly"); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	if err := sk.DeleteSchedule(b.ctx, "hourly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("DeleteSchedule again = %v; want ErrNotFound", err)
	}
	if _, err := reader.Schedule(b.ctx, "hourly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a deleted schedule reads %v; want ErrNotFound", err)
	}
}
