package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// shortLease is a lease tests can outwait: 1.5s, renewed every 300ms.
func shortLease(schema string) postgres.Config {
	return postgres.Config{Schema: schema, Lease: 1500 * time.Millisecond, Heartbeat: 300 * time.Millisecond, SkewMargin: 200 * time.Millisecond}
}

// waitExpired waits until inc's lease expired by the database's clock.
func waitExpired(t *testing.T, s *postgres.Store, inc string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		gone, err := s.LeaseExpired(context.Background(), inc)
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s did not expire within 30s", inc)
		}
		<-tick.C
	}
}

func onePlanRun(t *testing.T, s ledger.Store, runID string) (string, json.RawMessage) {
	t.Helper()
	args := json.RawMessage(`{"amount":5}`)
	p := &plan.Plan{Goal: "g", Actions: []plan.Action{{ID: "a1", Tool: "pay", Args: args}}}
	if _, _, err := s.CreateRun(context.Background(), ledger.Run{ID: runID, Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	k, err := plan.Key(runID, "a1", "pay", args)
	if err != nil {
		t.Fatal(err)
	}
	return k, args
}

// A node whose lease lapsed (its heartbeat stopped, as in a long pause)
// cannot commit a claim or an outcome; another node takes its claim over
// only once the lease expired, and re-registration gives the lapsed node a
// new incarnation.
func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	k, args := onePlanRun(t, a, "r")

	if _, err := ledger.ApplyOne(ctx, a, ledger.Claim("r", "a1", "pay", k, args, 1)); err != nil {
		t.Fatalf("claim on node A: %v", err)
	}
	// While A's lease holds, B may not take the claim over.
	_, err := ledger.ApplyOne(ctx, b, ledger.Claim("r", "a1", "pay", k, args, 2))
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "another node") || ce.Current.Owner != a.Incarnation() {
		t.Fatalf("takeover of a live node's claim: %v, want a conflict naming another node", err)
	}

	// A stalls: no heartbeat. Its lease expires by the database's clock.
	old := a.Incarnation()
	a.PauseHeartbeat(true)
	waitExpired(t, b, old)

	// A wakes up and reports attempt 1's outcome: refused, typed, nothing written.
	_, err = a.Apply(ctx, ledger.Succeed(k, 1, json.RawMessage(`{"id":"ch_1"}`)))
	var le *postgres.LeaseError
	if !errors.Is(err, ledger.ErrLeaseExpired) || !errors.As(err, &le) || le.Incarnation != old {
		t.Fatalf("outcome from the lapsed node: %v, want a *LeaseError for %s", err, old)
	}
	if !strings.Contains(err.Error(), "expired") {
		t.Fatalf("lease error says: %v", err)
	}
	if le.Expired.IsZero() || !le.Now.After(le.Expired) {
		t.Fatalf("lease error times: expired %v, database clock %v: want the lease's end and a later clock", le.Expired, le.Now)
	}
	if rec, err := b.Key(ctx, k); err != nil || rec.State != ledger.StatusClaimed || rec.Owner != old {
		t.Fatalf("the refused outcome wrote something: %+v, %v", rec, err)
	}

	// B takes over: attempt 2, flagged as maybe done before.
	res, err := ledger.ApplyOne(ctx, b, ledger.Claim("r", "a1", "pay", k, args, 2))
	if err != nil || res.Key.Owner != b.Incarnation() || res.Key.Attempt != 2 || !res.Key.MaybeTookEffect {
		t.Fatalf("takeover after the lease expired: %+v, %v", res.Key, err)
	}

	// It re-registered: a new incarnation, with a live lease.
	a.PauseHeartbeat(false)
	if a.Incarnation() == old {
		t.Fatal("the lapsed node kept its incarnation")
	}
	// Its late outcome for attempt 1 is now a plain conflict (B holds attempt 2).
	if _, err := ledger.ApplyOne(ctx, a, ledger.Succeed(k, 1, json.RawMessage(`{"id":"ch_1"}`))); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("late outcome of attempt 1 after re-registering: %v, want a conflict", err)
	}
	if _, err := ledger.ApplyOne(ctx, b, ledger.Succeed(k, 2, json.RawMessage(`{"id":"ch_1"}`))); err != nil {
		t.Fatal(err)
	}
	rec, err := a.Key(ctx, k)
	if err != nil || rec.State != ledger.StatusSucceeded || rec.Attempt != 2 || rec.Owner != b.Incarnation() {
		t.Fatalf("key after takeover: %+v, %v", rec, err)
	}
	evs, err := b.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, ev := range evs {
		if ev.Type == ledger.EventActionClaimed {
			claims++
		}
	}
	if claims != 2 {
		t.Fatalf("%d claim events, want 2 (A's attempt 1, B's attempt 2)", claims)
	}
}

// A lapsed node's claim is refused as well.
func TestLeaseFencingClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	k, args := onePlanRun(t, a, "r")
	old := a.Incarnation()
	a.PauseHeartbeat(true)
	waitExpired(t, b, old)
	_, err := a.Apply(ctx, ledger.Claim("r", "a1", "pay", k, args, 1))
	if !errors.Is(err, ledger.ErrLeaseExpired) {
		t.Fatalf("claim from the lapsed node: %v, want ErrLeaseExpired", err)
	}
	if _, err := b.Key(ctx, k); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused claim left a record: %v", err)
	}
}

// Runs whose driver's lease expired are adopted by one node, once; runs of
// live nodes and runs that are not running are never adopted.
func TestAdoptOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	c := open(t, shortLease(schema))
	onePlanRun(t, a, "r")
	onePlanRun(t, a, "done")
	if _, err := ledger.ApplyOne(ctx, a, ledger.SetRunStatus("done", ledger.RunCompleted, ledger.EventRunCompleted, "", nil)); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
		t.Fatalf("adopted %v (%v) while the driver is alive", ids, err)
	}
	a.PauseHeartbeat(true)
	waitExpired(t, b, a.Incarnation())
	ids, err := b.AdoptOrphans(ctx, 10)
	if err != nil || len(ids) != 1 || ids[0] != "r" {
		t.Fatalf("B adopted %v, %v; want [r]", ids, err)
	}
	if ids, err := c.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
		t.Fatalf("C adopted %v (%v) after B did", ids, err)
	}
	// The driver is the node that last wrote to the run.
	if _, err := ledger.ApplyOne(ctx, c, ledger.Note("r", "test.note", "", nil)); err != nil {
		t.Fatal(err)
	}
	b.PauseHeartbeat(true)
	waitExpired(t, c, b.Incarnation())
	if ids, err := c.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
		t.Fatalf("C adopted %v (%v): it drives r itself", ids, err)
	}
}

// A reservation is held across nodes until it is released or its holder's
// lease expires.
func TestReserve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	relA, ok, err := a.Reserve(ctx, "run:r")
	if err != nil || !ok {
		t.Fatalf("A reserving: %v %v", ok, err)
	}
	if _, ok, err := b.Reserve(ctx, "run:r"); err != nil || ok {
		t.Fatalf("B reserved what A holds: %v %v", ok, err)
	}
	relA()
	relB, ok, err := b.Reserve(ctx, "run:r")
	if err != nil || !ok {
		t.Fatalf("B reserving after A released: %v %v", ok, err)
	}
	_ = relB
	if _, ok, _ := a.Reserve(ctx, "run:r"); ok {
		t.Fatal("A reserved what B holds")
	}
	b.PauseHeartbeat(true)
	waitExpired(t, a, b.Incarnation())
	if _, ok, err := a.Reserve(ctx, "run:r"); err != nil || !ok {
		t.Fatalf("A reserving after B's lease expired: %v %v", ok, err)
	}
}

// A cancelled run with a claim left in flight is adopted once the claim's
// owner is gone: by any node when its driver is gone too, by its driver
// (here the node that cancelled it) otherwise; a cancelled run with nothing
// in flight never is. While the owner lives, no other node may declare its
// claim's outcome unknown (needs_review).
func TestAdoptCancelledInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	c := open(t, shortLease(schema))
	cancel := func(s *postgres.Store, runID string) {
		t.Helper()
		if _, err := ledger.ApplyOne(ctx, s, ledger.SetRunStatus(runID, ledger.RunCancelled, ledger.EventRunCancelled, "", nil)); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(s *postgres.Store, runID string) string {
		t.Helper()
		k, args := onePlanRun(t, s, runID)
		if _, err := ledger.ApplyOne(ctx, s, ledger.Claim(runID, "a1", "pay", k, args, 1)); err != nil {
			t.Fatal(err)
		}
		return k
	}
	unsettled := func(want ...string) {
		t.Helper()
		got, err := c.Unsettled(ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("unsettled runs %v (%v), want %v", got, err, want)
		}
	}
	kb := claim(a, "by-b") // A calls the tool; B cancels the run (B drives it now, by the log)
	unsettled()            // a running run is not
	cancel(b, "by-b")
	ka := claim(a, "by-a") // A calls the tool and cancels the run itself
	cancel(a, "by-a")
	onePlanRun(t, a, "idle") // nothing in flight
	cancel(a, "idle")
	// Between attempts: its claim failed and may be tried again.
	kr := claim(a, "retry")
	if _, err := ledger.ApplyOne(ctx, a, ledger.Fail(kr, 1, "503", true, nil)); err != nil {
		t.Fatal(err)
	}
	cancel(a, "retry")
	// Its call's answer comes after the cancel.
	ks := claim(a, "answered")
	cancel(a, "answered")
	unsettled("answered", "by-a", "by-b", "retry")
	if _, err := ledger.ApplyOne(ctx, a, ledger.Skip("retry", "a1", "cancelled")); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.ApplyOne(ctx, a, ledger.Succeed(ks, 1, json.RawMessage(`{}`))); err != nil {
		t.Fatal(err)
	}
	unsettled("by-a", "by-b")

	const why = "outcome unknown"
	_, err := ledger.ApplyOne(ctx, b, ledger.NeedsReview(kb, 1, why))
	var ce *ledger.ConflictError
	if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "another node") {
		t.Fatalf("needs_review of a live node's claim: %v, want a conflict naming another node", err)
	}
	for _, s := range []*postgres.Store{b, c} {
		if ids, err := s.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
			t.Fatalf("adopted %v (%v) while the claims' owner is alive", ids, err)
		}
	}

	a.PauseHeartbeat(true)
	waitExpired(t, c, a.Incarnation())
	ids, err := c.AdoptOrphans(ctx, 10)
	if err != nil || len(ids) != 1 || ids[0] != "by-a" {
		t.Fatalf("C adopted %v, %v; want [by-a] (by-b's driver B is alive)", ids, err)
	}
	ids, err = b.AdoptOrphans(ctx, 10)
	if err != nil || len(ids) != 1 || ids[0] != "by-b" {
		t.Fatalf("B adopted %v, %v; want [by-b], the run it cancelled", ids, err)
	}
	for _, k := range []string{kb, ka} {
		if _, err := ledger.ApplyOne(ctx, b, ledger.NeedsReview(k, 1, why)); err != nil {
			t.Fatalf("needs_review once the owner is gone: %v", err)
		}
	}
	unsettled()
	for _, s := range []*postgres.Store{b, c} {
		if ids, err := s.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
			t.Fatalf("adopted %v (%v) once nothing is in flight", ids, err)
		}
	}
}

// A run paused by the executor with nothing left in needs_review, or
// awaiting approval with an action approved, whose driver died is adopted
// (the node recorded a resolution or an approval, then died before driving
// the run on); one with an action in needs_review, nothing approved, or
// paused by a person waits for the person and is never adopted.
func TestAdoptWaitingRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	b := open(t, shortLease(schema))
	apply := func(ops ...ledger.Op) {
		t.Helper()
		res, err := a.Apply(ctx, ops...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	onePlanRun(t, a, "resolved")
	apply(ledger.SetRunStatus("resolved", ledger.RunPaused, ledger.EventRunPaused, "", nil))
	onePlanRun(t, a, "approved")
	apply(ledger.SetRunStatus("approved", ledger.RunAwaitingApproval, ledger.EventRunAwaitingApproval, "", nil),
		ledger.Approve("approved", "a1", nil, "alice"))
	onePlanRun(t, a, "waiting") // nothing approved yet: the person has not acted
	apply(ledger.SetRunStatus("waiting", ledger.RunAwaitingApproval, ledger.EventRunAwaitingApproval, "", nil))
	k, args := onePlanRun(t, a, "review")
	apply(ledger.Claim("review", "a1", "pay", k, args, 1), ledger.NeedsReview(k, 1, "unknown"),
		ledger.SetRunStatus("review", ledger.RunPaused, ledger.EventRunPaused, "", nil))
	onePlanRun(t, a, "person")
	apply(ledger.SetPause("person", "alice", ledger.RunPaused, nil))

	if ids, err := b.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
		t.Fatalf("adopted %v (%v) while the driver is alive", ids, err)
	}
	a.PauseHeartbeat(true)
	waitExpired(t, b, a.Incarnation())
	ids, err := b.AdoptOrphans(ctx, 10)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"approved", "resolved"}) {
		t.Fatalf("adopted %v, %v; want [approved resolved]", ids, err)
	}
	if ids, err := b.AdoptOrphans(ctx, 10); err != nil || len(ids) != 0 {
		t.Fatalf("adopted %v (%v) again", ids, err)
	}
}

// A ledger written before runs had their unsettled column: the upgrade
// sets it on the cancelled runs with an action in flight, and the adopt
// sweep finds them through it once their nodes are gone.
func TestUpgradeMarksUnsettledRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	a := open(t, shortLease(schema))
	k, args := onePlanRun(t, a, "left")
	if _, err := ledger.ApplyOne(ctx, a, ledger.Claim("left", "a1", "pay", k, args, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.ApplyOne(ctx, a, ledger.SetRunStatus("left", ledger.RunCancelled, ledger.EventRunCancelled, "", nil)); err != nil {
		t.Fatal(err)
	}
	onePlanRun(t, a, "idle")
	if _, err := ledger.ApplyOne(ctx, a, ledger.SetRunStatus("idle", ledger.RunCancelled, ledger.EventRunCancelled, "", nil)); err != nil {
		t.Fatal(err)
	}
	// The tables as version 11 had them.
	conn := rawConn(t)
	qs := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`DROP INDEX ` + qs + `.runs_unsettled`,
		`ALTER TABLE ` + qs + `.runs DROP COLUMN unsettled`,
		`CREATE INDEX actions_in_flight ON ` + qs + `.actions (run_id)
			WHERE key <> '' AND (status = 'claimed' OR (status IN ('pending', 'approved') AND attempts > 0 AND NOT undo))`,
		`UPDATE ` + qs + `.meta SET value = '11' WHERE name = 'schema_version'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	a.PauseHeartbeat(true)
	b := open(t, shortLease(schema))
	// The upgrade marked the node of the older tables stopped, its lease
	// left to run out: its next commit is refused.
	if l, err := b.Lease(ctx, a.Incarnation()); err != nil || !l.Stopped || !l.Live() {
		t.Fatalf("the node of the older tables after the upgrade: %+v %v, want stopped with its lease running", l, err)
	}
	if _, err := ledger.ApplyOne(ctx, a, ledger.SetRunStatus("idle", ledger.RunCancelled, "", "", nil)); !errors.Is(err, ledger.ErrLeaseExpired) {
		t.Fatalf("a commit of the node of the older tables after the upgrade: %v, want ErrLeaseExpired", err)
	}
	if got, err := b.Unsettled(ctx); err != nil || !slices.Equal(got, []string{"left"}) {
		t.Fatalf("after the upgrade, unsettled runs %v (%v), want [left]", got, err)
	}
	waitExpired(t, b, a.Incarnation())
	if ids, err := b.AdoptOrphans(ctx, 10); err != nil || !slices.Equal(ids, []string{"left"}) {
		t.Fatalf("adopted %v (%v), want [left]", ids, err)
	}
}

// A node whose tables a newer docket upgraded stops writing. The upgrade
// (as migrate does it: the version and the nodes marked stopped in one
// transaction) makes its next commit fail the lease check, nothing
// written; its registration again finds the tables moved, so every Apply
// after it fails at once naming both versions (errors.Is ErrFormat). Its
// lease is not shortened: its claim is taken over only once the lease
// ended. A node of the tables' version goes on.
func TestSchemaMovedStopsWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir())
	old := open(t, shortLease(schema))
	claim := groupRuns(t, old, "m0", "m1", "m2")
	held, _ := claim("m2", "a")
	if res, err := old.Apply(ctx, held); err != nil || res[0].Err != nil {
		t.Fatalf("a claim before the upgrade: %v %+v", err, res)
	}
	conn := rawConn(t)
	defer conn.Close(ctx)
	newer := strconv.Itoa(postgres.SchemaVersion + 1)
	upgrade, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := upgrade.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "meta"}.Sanitize()+` SET value = $1 WHERE name = 'schema_version'`, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := upgrade.Exec(ctx, postgres.StopNodesSQL(schema)); err != nil {
		t.Fatal(err)
	}
	if err := upgrade.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	op, k := claim("m0", "a")
	if _, err := old.Apply(ctx, op); !errors.Is(err, ledger.ErrLeaseExpired) && !errors.Is(err, ledger.ErrFormat) {
		t.Fatalf("the first commit after the upgrade: %v, want the lease check refusing it", err)
	}
	var keys int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "keys"}.Sanitize()+` WHERE key = $1`, k).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("the refused claim's key: %d rows, %v (want none written)", keys, err)
	}
	op2, _ := claim("m1", "a")
	_, err = old.Apply(ctx, op2)
	var me *postgres.SchemaMovedError
	if !errors.As(err, &me) || !errors.Is(err, ledger.ErrFormat) || !errors.Is(err, ledger.ErrUnavailable) || me.Tables != newer || me.Binary != postgres.SchemaVersion ||
		!strings.Contains(err.Error(), "version "+newer) {
		t.Fatalf("an Apply after the node learnt of the upgrade: %v, want SchemaMovedError naming version %s", err, newer)
	}
	if old.LeaseValid() {
		t.Fatal("the node still counts its lease as valid after the tables moved")
	}
	// Its claim is not another node's to take until its lease ended.
	inc := old.Incarnation()
	if gone, err := old.LeaseExpired(ctx, inc); err != nil || gone {
		t.Fatalf("right after the upgrade the lease counts as ended (%v, %v): it must not be shortened", gone, err)
	}
	waitExpired(t, old, inc)

	// Back at this binary's version, a new node writes.
	if _, err := conn.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "meta"}.Sanitize()+` SET value = $1 WHERE name = 'schema_version'`, strconv.Itoa(postgres.SchemaVersion)); err != nil {
		t.Fatal(err)
	}
	fresh := open(t, shortLease(schema))
	if res, err := fresh.Apply(ctx, op); err != nil || res[0].Err != nil {
		t.Fatalf("a node of the tables' version: %v %+v", err, res)
	}
}

// TestRegistrationWaitsForAnUpgrade: a node registering while a newer
// binary upgrades the tables waits for the upgrade and then finds the
// tables moved; it never registers as a running node of the old version
// that the upgrade's marking of the nodes missed.
func TestRegistrationWaitsForAnUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir())
	old := open(t, shortLease(schema))
	claim := groupRuns(t, old, "w0", "w1")
	// Its lease lapses: its next commit is refused and it registers again.
	old.PauseHeartbeat(true)
	waitExpired(t, old, old.Incarnation())

	conn := rawConn(t)
	defer conn.Close(ctx)
	newer := strconv.Itoa(postgres.SchemaVersion + 1)
	meta := pgx.Identifier{schema, "meta"}.Sanitize()
	upgrade, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer upgrade.Rollback(ctx)
	// As migrate does: the version's row locked first, the nodes marked
	// stopped, the version changed.
	if _, err := upgrade.Exec(ctx, `SELECT value FROM `+meta+` WHERE name = 'schema_version' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := upgrade.Exec(ctx, postgres.StopNodesSQL(schema)); err != nil {
		t.Fatal(err)
	}
	if _, err := upgrade.Exec(ctx, `UPDATE `+meta+` SET value = $1 WHERE name = 'schema_version'`, newer); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		op, _ := claim("w0", "a")
		_, err := old.Apply(ctx, op)
		done <- err
	}()
	// The registration waits on the version's row while the upgrade is
	// under way.
	watch := rawConn(t)
	defer watch.Close(ctx)
	waitForLock(ctx, t, watch, schema, "%INSERT INTO%nodes%", "registration waiting for the upgrade", func() string {
		select {
		case err := <-done:
			return fmt.Sprintf("the Apply returned (%v) while the upgrade was under way: its registration did not wait for it", err)
		default:
			return ""
		}
	})
	if err := upgrade.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ledger.ErrLeaseExpired) && !errors.Is(err, ledger.ErrFormat) {
		t.Fatalf("the Apply whose lease lapsed: %v", err)
	}
	var running int
	if err := watch.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "nodes"}.Sanitize()+` WHERE stopped_at IS NULL`).Scan(&running); err != nil || running != 0 {
		t.Fatalf("%d nodes registered as running after the upgrade (%v), want none", running, err)
	}
	op, _ := claim("w1", "a")
	var me *postgres.SchemaMovedError
	if _, err := old.Apply(ctx, op); !errors.As(err, &me) || me.Tables != newer {
		t.Fatalf("an Apply after the upgrade: %v, want SchemaMovedError naming version %s", err, newer)
	}
}

// An open that upgrades nothing does not lock the version's row, so it never
// waits for a registration (which reads it FOR SHARE), nor holds one up.
func TestOpenWithoutUpgradeDoesNotWaitForARegistration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name() + t.TempDir())
	open(t, postgres.Config{Schema: schema}) // creates the tables
	conn := rawConn(t)
	reg, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Rollback(ctx)
	meta := pgx.Identifier{schema, "meta"}.Sanitize()
	if _, err := reg.Exec(ctx, `SELECT value FROM `+meta+` WHERE name = 'schema_version' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := postgres.Open(ctx, postgres.Config{URL: database(t), Schema: schema, MaxConns: 6})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	watch := rawConn(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return
		default:
		}
		var waiting int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%schema_version%' AND strpos(query, $1) > 0`, schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			t.Fatal("the open waits on the version's row while a registration reads it")
		}
		if time.Now().After(deadline) {
			t.Fatal("Open did not return in 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
