package badgerdb_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// The key record carries the facts the executor decides from: when attempt 1
// was claimed (kept by later claims), whether an earlier attempt may have
// taken effect (set by unknown failures, takeovers of a dead claim and
// needs_review; cleared by a person's resolution; kept otherwise), and the
// class of the latest failure.
func TestKeyRecordSafetyFacts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := &stepClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	args := json.RawMessage(`{"n":1}`)
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: args}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Goal: "g", Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	k, _ := plan.Key("r", "a1", "t", args)
	step := func(what string, op ledger.Op) ledger.KeyRecord {
		t.Helper()
		res, err := l.Apply(ctx, op)
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		stored, err := l.Key(ctx, k)
		if err != nil {
			t.Fatalf("%s: read key: %v", what, err)
		}
		if stored.FirstClaimedAt != res[0].Key.FirstClaimedAt || stored.MaybeTookEffect != res[0].Key.MaybeTookEffect ||
			stored.Failure != res[0].Key.Failure {
			t.Fatalf("%s: stored record %+v differs from the result's %+v", what, stored, res[0].Key)
		}
		return stored
	}
	want := func(what string, rec ledger.KeyRecord, maybe bool, failure ledger.Failure) {
		t.Helper()
		if rec.MaybeTookEffect != maybe || rec.Failure != failure {
			t.Fatalf("%s: MaybeTookEffect %v, Failure %q; want %v, %q", what, rec.MaybeTookEffect, rec.Failure, maybe, failure)
		}
	}

	rec := step("claim 1", ledger.Claim("r", "a1", "t", k, args, 1))
	first := rec.FirstClaimedAt
	if first.IsZero() || !first.Equal(rec.ClaimedAt) {
		t.Fatalf("claim 1: FirstClaimedAt %v, ClaimedAt %v", first, rec.ClaimedAt)
	}
	want("claim 1", rec, false, "")
	rec = step("not sent", ledger.FailWith(k, 1, "refused", true, ledger.FailureNotSent, nil))
	want("not sent", rec, false, ledger.FailureNotSent)
	evs, _ := l.Events(ctx, "r", 0, 0)
	var data struct{ Outcome string }
	if err := json.Unmarshal(evs[len(evs)-1].Data, &data); err != nil || data.Outcome != "not_sent" {
		t.Fatalf("attempt_failed event %s: outcome %q, want not_sent (%v)", evs[len(evs)-1].Data, data.Outcome, err)
	}
	rec = step("claim 2", ledger.Claim("r", "a1", "t", k, args, 2))
	if !rec.FirstClaimedAt.Equal(first) || !rec.ClaimedAt.After(first) {
		t.Fatalf("claim 2: FirstClaimedAt %v (want %v), ClaimedAt %v", rec.FirstClaimedAt, first, rec.ClaimedAt)
	}
	want("claim 2", rec, false, "")
	rec = step("unknown", ledger.FailWith(k, 2, "timeout", true, ledger.FailureUnknown, nil))
	want("unknown", rec, true, ledger.FailureUnknown)
	rec = step("claim 3", ledger.Claim("r", "a1", "t", k, args, 3))
	want("claim 3 keeps it", rec, true, "")
	rec = step("not sent after unknown", ledger.FailWith(k, 3, "refused", true, ledger.FailureNotSent, nil))
	want("not sent keeps it", rec, true, ledger.FailureNotSent)
	step("claim 4", ledger.Claim("r", "a1", "t", k, args, 4))
	rec = step("needs review", ledger.NeedsReview(k, 4, "ask"))
	want("needs review", rec, true, "")
	rec = step("resolve retry", ledger.Resolve("r", "a1", ledger.Resolution{Retry: true, By: "ada"}))
	want("a person's resolution clears it", rec, false, "")
	rec = step("claim 5", ledger.Claim("r", "a1", "t", k, args, 5))
	want("claim 5", rec, false, "")
	if !rec.FirstClaimedAt.Equal(first) {
		t.Fatalf("claim 5: FirstClaimedAt %v, want %v", rec.FirstClaimedAt, first)
	}

	// Another incarnation takes over claim 5, which has no outcome: the
	// gone process's call may have taken effect.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	rec = step("takeover", ledger.Claim("r", "a1", "t", k, args, 6))
	want("takeover", rec, true, "")
	if !rec.FirstClaimedAt.Equal(first) {
		t.Fatalf("takeover: FirstClaimedAt %v, want %v", rec.FirstClaimedAt, first)
	}
	rec = step("key in flight", ledger.FailWith(k, 6, "409", true, ledger.FailureKeyInFlight, nil))
	want("key in flight", rec, true, ledger.FailureKeyInFlight)
}

// A record written before the safety facts existed reads with them zero.
func TestKeyRecordWithoutSafetyFacts(t *testing.T) {
	var rec ledger.KeyRecord
	old := `{"key":"dk1_x","run_id":"r","action_id":"a1","tool":"t","args":{},"state":"pending","attempt":2,"owner":"o","claimed_at":"2030-01-01T00:00:00Z","updated_at":"2030-01-01T00:00:00Z"}`
	if err := json.Unmarshal([]byte(old), &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.FirstClaimedAt.IsZero() || rec.MaybeTookEffect || rec.Failure != "" {
		t.Fatalf("old record: %+v", rec)
	}
	b, _ := json.Marshal(ledger.KeyRecord{Key: "dk1_x"})
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, f := range []string{"first_claimed_at", "maybe_took_effect", "failure"} {
		if _, ok := m[f]; ok {
			t.Errorf("a record without the fact writes %q: %s", f, b)
		}
	}
}
