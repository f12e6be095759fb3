package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// An Apply on records this node wrote last is one round trip; when another
// node changed one of them since (a person's pause, an edit, a first claim
// of the same key, a cancel), the checks in that round trip fail, nothing
// is written, and the Apply decides on what the database holds, exactly as
// when it had read it first.
func TestOneRoundTripDecidesOnWhatAnotherNodeWrote(t *testing.T) {
	t.Parallel()
	schema := schemaFor(t.Name())
	a := open(t, postgres.Config{Schema: schema})
	b := open(t, postgres.Config{Schema: schema})
	ctx := context.Background()
	args := func(i int) json.RawMessage { return json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`) }
	key := func(run, id string, i int) string {
		k, err := plan.Key(run, id, "t", args(i))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	p := &plan.Plan{Goal: "nodes"}
	var rows []ledger.Action
	for i, id := range []string{"a1", "a2", "a3", "a4"} {
		p.Actions = append(p.Actions, plan.Action{ID: id, Tool: "t", Args: args(i + 1)})
		rows = append(rows, ledger.Action{ID: id, Tool: "t", Args: args(i + 1), Status: ledger.StatusApproved})
	}
	if _, _, err := a.CreateRun(ctx, ledger.Run{ID: "r", Policy: "all"}, p, rows); err != nil {
		t.Fatal(err)
	}
	allow := ledger.Gate{Outcome: "allow"}
	claim := func(id string, i int) ledger.Op {
		return ledger.Claim("r", id, "t", key("r", id, i), args(i), 1).Decided(args(i), allow, false)
	}
	// applyA applies op on node A and returns its result and round trips.
	applyA := func(what string, op ledger.Op) (ledger.Result, int64) {
		t.Helper()
		var n atomic.Int64
		res, err := a.Apply(postgres.CountTrips(ctx, &n), op)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %d round trips", what, n.Load())
		return res[0], n.Load()
	}
	mustB := func(op ledger.Op) {
		t.Helper()
		res, err := b.Apply(ctx, op)
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// A's own records: one round trip each.
	for _, step := range []struct {
		what string
		op   ledger.Op
	}{
		{"claim a1", claim("a1", 1)},
		{"succeed a1", ledger.Succeed(key("r", "a1", 1), 1, json.RawMessage(`{}`))},
	} {
		if r, n := applyA(step.what, step.op); r.Err != nil || n != 1 {
			t.Fatalf("%s: %v, %d round trips; want done in 1", step.what, r.Err, n)
		}
	}

	// B pauses the run: A's claim, decided on its own records, is refused
	// and writes nothing.
	mustB(ledger.SetPause("r", "token:bob", "", nil))
	r, n := applyA("claim a2 after B paused the run", claim("a2", 2))
	var se *ledger.StaleError
	if !errors.As(r.Err, &se) || !strings.Contains(se.Msg, "paused by token:bob") {
		t.Fatalf("claim after another node's pause: %v; want refused as paused", r.Err)
	}
	if n < 2 {
		t.Fatalf("the refused claim took %d round trips: it did not read the pause", n)
	}
	if _, err := a.Key(ctx, key("r", "a2", 2)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused claim wrote its key: %v", err)
	}
	mustB(ledger.SetPause("r", "", ledger.RunRunning, nil))

	// B edits a3: A's claim with the args it read is refused.
	mustB(ledger.Edit("r", "a3", json.RawMessage(`{"i":9}`), "token:bob"))
	if r, _ := applyA("claim a3 after B edited it", claim("a3", 3)); !errors.As(r.Err, &se) || !strings.Contains(se.Msg, "edited") {
		t.Fatalf("claim after another node's edit: %v; want refused as edited", r.Err)
	}

	// B claims a4 first: A's claim of the same key meets B's.
	res, err := b.Apply(ctx, claim("a4", 4))
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res[0].Err)
	}
	if r, _ := applyA("claim a4 after B claimed it", claim("a4", 4)); r.Err == nil {
		t.Fatal("A's claim of a key B holds went through")
	}
	if k, err := a.Key(ctx, key("r", "a4", 4)); err != nil || k.Owner != b.Incarnation() {
		t.Fatalf("key a4: owner %q, %v; want B's %q", k.Owner, err, b.Incarnation())
	}

	// A claims a2 (the run and a2 are A's records again); B then cancels
	// the run with no event (a status set that way leaves no event whose
	// seq A's write would collide with: only the check of the run's version
	// sees it). A records a2's outcome (allowed on a cancelled run): the
	// run stays cancelled, not the running run A remembered.
	if r, _ := applyA("claim a2", claim("a2", 2)); r.Err != nil {
		t.Fatal(r.Err)
	}
	mustB(ledger.SetRunStatus("r", ledger.RunCancelled, "", "", nil))
	if r, n := applyA("succeed a2 after B cancelled the run", ledger.Succeed(key("r", "a2", 2), 1, json.RawMessage(`{}`))); r.Err != nil || n < 2 {
		t.Fatalf("outcome after another node's cancel: %v, %d round trips; want recorded after reading the run", r.Err, n)
	}
	if run, err := b.GetRun(ctx, "r"); err != nil || run.Status != ledger.RunCancelled {
		t.Fatalf("run: %s, %v; want cancelled", run.Status, err)
	}
}

// A one round trip Apply writes a record it remembered only when the
// record is still that version, whoever changed it since: a write that
// leaves every value as it was (a sweep, a re-encryption, a person's
// statement) is a change all the same. And a record it took as absent (its
// tool's limit row) must still be absent when it commits. Otherwise the
// Apply decides again on what the database holds, and records its outcome.
func TestOneRoundTripWritesOnlyTheVersionRemembered(t *testing.T) {
	t.Parallel()
	schema := schemaFor(t.Name())
	// A run and a tool of its own: the schema outlives the test (-count).
	run, tool := fmt.Sprintf("r%d", time.Now().UnixNano()), fmt.Sprintf("t%d", time.Now().UnixNano())
	a := open(t, postgres.Config{Schema: schema})
	conn := rawConn(t)
	ctx := context.Background()
	args := json.RawMessage(`{}`)
	ids := []string{"a1", "a2", "a3", "a4"}
	key := func(id string) string {
		k, err := plan.Key(run, id, tool, args)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	p := &plan.Plan{Goal: "versions"}
	var rows []ledger.Action
	for _, id := range ids {
		p.Actions = append(p.Actions, plan.Action{ID: id, Tool: tool, Args: args})
		rows = append(rows, ledger.Action{ID: id, Tool: tool, Args: args, Status: ledger.StatusApproved})
	}
	if _, _, err := a.CreateRun(ctx, ledger.Run{ID: run, Policy: "all"}, p, rows); err != nil {
		t.Fatal(err)
	}
	apply := func(what string, op ledger.Op) int64 {
		t.Helper()
		var n atomic.Int64
		res, err := a.Apply(postgres.CountTrips(ctx, &n), op)
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return n.Load()
	}
	s := pgx.Identifier{schema}.Sanitize()
	for i, c := range []struct {
		record, touch string
		args          []any
	}{
		{"its row", `UPDATE ` + s + `.actions SET attempts = attempts WHERE run_id = $1 AND action_id = $2`, []any{run, ids[0]}},
		{"its key", `UPDATE ` + s + `.keys SET attempt = attempt WHERE key = $1`, []any{key(ids[1])}},
		{"the run", `UPDATE ` + s + `.runs SET status = status WHERE run_id = $1`, []any{run}},
		{"its tool's limit row, absent until then", `INSERT INTO ` + s + `.tool_limits (tool, record) VALUES ($1, '{}')`, []any{tool}},
	} {
		id := ids[i]
		claim := ledger.Claim(run, id, tool, key(id), args, 1).Decided(args, ledger.Gate{Outcome: "allow"}, false)
		apply("claim "+id, claim) // the row, the key and the run: remembered
		tag, err := conn.Exec(ctx, c.touch, c.args...)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("touch %s: %v, %d rows", c.record, err, tag.RowsAffected())
		}
		if n := apply("succeed "+id, ledger.Succeed(key(id), 1, json.RawMessage(`{"ok":true}`))); n < 2 {
			t.Errorf("succeed %s after another writer touched %s: %d round trip; want it to find the new version and read again", id, c.record, n)
		}
		k, err := a.Key(ctx, key(id))
		if err != nil || k.State != ledger.StatusSucceeded || string(k.Output) != `{"ok":true}` {
			t.Fatalf("key of %s: %s %s, %v; want succeeded with its output", id, k.State, k.Output, err)
		}
	}
	acts, err := a.Actions(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	for _, act := range acts {
		if act.Status != ledger.StatusSucceeded {
			t.Errorf("action %s: %s; want succeeded", act.ID, act.Status)
		}
	}
}

// The rules' time in a one round trip Apply is never ahead of the
// database's clock: a reading that runs ahead fails the check, and the
// Apply records the time it reads.
func TestOneRoundTripTimeIsTheDatabases(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	ctx := context.Background()
	p := &plan.Plan{Goal: "clock", Actions: []plan.Action{{ID: "a", Tool: "t", Args: json.RawMessage(`{}`)}}}
	if _, _, err := s.CreateRun(ctx, ledger.Run{ID: "r", Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	s.SkewSpecClock(time.Hour)
	var n atomic.Int64
	res, err := s.Apply(postgres.CountTrips(ctx, &n), ledger.Approve("r", "a", nil, "ann"))
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res[0].Err)
	}
	if n.Load() < 2 {
		t.Fatalf("%d round trips: the time an hour ahead was not refused", n.Load())
	}
	evs, err := s.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if ahead := time.Until(last.At); ahead > 10*time.Minute {
		t.Fatalf("event %s recorded at %v, %v ahead of this machine's clock", last.Type, last.At, ahead)
	}
}

// A one round trip Apply's write that meets a row another transaction
// holds waits for it, then writes only the version it remembered: after
// that transaction changed the row the Apply decides again on what the
// database holds; after it only locked the row and let go, the Apply goes
// through in its one round trip.
func TestOneRoundTripWriteWaitsThenChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		what, hold string
		changed    bool
	}{
		{"changed", `UPDATE %s.actions SET attempts = attempts WHERE run_id = $1 AND action_id = 'a1'`, true},
		{"only locked", `SELECT 1 FROM %s.actions WHERE run_id = $1 AND action_id = 'a1' FOR UPDATE`, false},
	} {
		t.Run(c.what, func(t *testing.T) {
			schema := schemaFor(t.Name())
			run := fmt.Sprintf("r%d", time.Now().UnixNano()) // the schema outlives the test (-count)
			a := open(t, postgres.Config{Schema: schema})
			conn, watch := rawConn(t), rawConn(t)
			ctx := context.Background()
			args := json.RawMessage(`{}`)
			key, err := plan.Key(run, "a1", "t", args)
			if err != nil {
				t.Fatal(err)
			}
			p := &plan.Plan{Goal: "wait", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: args}}}
			if _, _, err := a.CreateRun(ctx, ledger.Run{ID: run, Policy: "all"},
				p, []ledger.Action{{ID: "a1", Tool: "t", Args: args, Status: ledger.StatusApproved}}); err != nil {
				t.Fatal(err)
			}
			claim := ledger.Claim(run, "a1", "t", key, args, 1).Decided(args, ledger.Gate{Outcome: "allow"}, false)
			if res, err := a.Apply(ctx, claim); err != nil || res[0].Err != nil {
				t.Fatal(err, res[0].Err)
			}

			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, fmt.Sprintf(c.hold, pgx.Identifier{schema}.Sanitize()), run); err != nil {
				t.Fatal(err)
			}
			type outcome struct {
				err   error
				trips int64
			}
			done := make(chan outcome, 1)
			go func() {
				var n atomic.Int64
				res, err := a.Apply(postgres.CountTrips(ctx, &n), ledger.Succeed(key, 1, json.RawMessage(`{"ok":true}`)))
				if err == nil {
					err = res[0].Err
				}
				done <- outcome{err, n.Load()}
			}()
			// The Apply's write waits for the row.
			waitForLock(ctx, t, watch, schema, "%UPDATE%actions%", "Apply waiting for the row", func() string {
				select {
				case o := <-done:
					return fmt.Sprintf("the Apply returned (%v, %d round trips) while another transaction held its row", o.err, o.trips)
				default:
					return ""
				}
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			o := <-done
			switch {
			case o.err != nil:
				t.Fatalf("the outcome: %v", o.err)
			case c.changed && o.trips < 2:
				t.Errorf("the row changed while the Apply waited, and it went through in %d round trip; want it to read the row again", o.trips)
			case !c.changed && o.trips != 1:
				t.Errorf("the row was only locked, and the Apply took %d round trips; want 1", o.trips)
			}
			k, err := a.Key(ctx, key)
			if err != nil || k.State != ledger.StatusSucceeded || string(k.Output) != `{"ok":true}` {
				t.Fatalf("key: %s %s, %v; want succeeded with its output", k.State, k.Output, err)
			}
		})
	}
}
