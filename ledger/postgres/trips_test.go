package postgres_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// The common Applies are at most two round trips each: one that begins the
// transaction and reads (and locks) what the op reads, one that writes,
// checks the lease and commits; one when this store wrote what they read
// (spec.go: checked, written and committed in one).
func TestApplyRoundTrips(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	bg := context.Background()
	trips := func(what string, fn func(ctx context.Context) error) {
		t.Helper()
		if n := roundTrips(t, what, fn); n > 2 {
			t.Errorf("%s took %d round trips, want at most 2", what, n)
		}
	}
	apply := func(op ledger.Op) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := ledger.ApplyOne(ctx, s, op)
			return err
		}
	}
	p := &plan.Plan{Goal: "trips"}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		p.Actions = append(p.Actions, plan.Action{ID: id, Tool: "t", Args: json.RawMessage(`{"id":"` + id + `"}`)})
	}
	trips("create run", func(ctx context.Context) error {
		_, created, err := s.CreateRun(ctx, ledger.Run{ID: "r1", Policy: "all"}, p, nil)
		if err == nil && !created {
			t.Error("the run was not created")
		}
		return err
	})
	key := func(id string) string {
		k, _ := plan.Key("r1", id, "t", p.Actions[0].Args)
		return k + id
	}
	args := json.RawMessage(`{"x":1}`)
	trips("claim", apply(ledger.Claim("r1", "a", "t", key("a"), args, 1)))
	trips("succeed", apply(ledger.Succeed(key("a"), 1, json.RawMessage(`{"ok":true}`))))
	trips("claim again", apply(ledger.Claim("r1", "b", "t", key("b"), args, 1)))
	trips("fail (retryable)", apply(ledger.Fail(key("b"), 1, "boom", true, nil)))
	trips("claim attempt 2", apply(ledger.Claim("r1", "b", "t", key("b"), args, 2)))
	trips("fail", apply(ledger.Fail(key("b"), 2, "boom", false, nil)))
	trips("approve", apply(ledger.Approve("r1", "c", nil, "alice")))
	trips("claim d", apply(ledger.Claim("r1", "d", "t", key("d"), args, 1)))
	trips("succeed d + claim e (a step of the executor)", func(ctx context.Context) error {
		res, err := s.Apply(ctx, ledger.Succeed(key("d"), 1, json.RawMessage(`{}`)), ledger.Claim("r1", "e", "t", key("e"), args, 1))
		for _, r := range res {
			if err == nil {
				err = r.Err
			}
		}
		return err
	})
	trips("run status", apply(ledger.SetRunStatus("r1", ledger.RunFailed, ledger.EventRunFailed, "b failed", nil)))

	acts, err := s.Actions(bg, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ledger.Status{"a": ledger.StatusSucceeded, "b": ledger.StatusFailed, "c": ledger.StatusApproved,
		"d": ledger.StatusSucceeded, "e": ledger.StatusClaimed}
	for _, a := range acts {
		if a.Status != want[a.ID] {
			t.Errorf("action %s is %s, want %s", a.ID, a.Status, want[a.ID])
		}
	}
}

// An Apply on records this store wrote last is one round trip (spec.go):
// claims and outcomes without tool limits, and a limited claim of a tool
// that has no limit row yet (taken as absent, checked absent). Once a
// commit has seen the tool's row, an Apply that reads it takes the two
// round trips of tx.begin, and a limited claim one more (it reads and locks
// its tool's row, which the first pipeline cannot name for a key that does
// not exist yet).
func TestLimitRoundTrips(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	bg := context.Background()
	trips := func(what string, op ledger.Op, want int64) {
		t.Helper()
		n := roundTrips(t, what, func(ctx context.Context) error {
			r, err := ledger.ApplyOne(ctx, s, op)
			if err == nil {
				err = r.Err
			}
			return err
		})
		if n != want {
			t.Errorf("%s took %d round trips, want %d", what, n, want)
		}
	}
	p := &plan.Plan{Goal: "trips"}
	for _, id := range []string{"a", "b", "c"} {
		p.Actions = append(p.Actions, plan.Action{ID: id, Tool: "t", Args: json.RawMessage(`{"id":"` + id + `"}`)})
	}
	if _, _, err := s.CreateRun(bg, ledger.Run{ID: "r1", Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	key := func(id string) string { k, _ := plan.Key("r1", id, "t", p.Actions[0].Args); return k + id }
	args := json.RawMessage(`{"x":1}`)
	lim := ledger.ToolLimit{MaxInFlight: 2, Rate: 10, Per: 1e9}
	trips("claim without limits", ledger.Claim("r1", "a", "t", key("a"), args, 1), 1)
	trips("its outcome", ledger.Succeed(key("a"), 1, json.RawMessage(`{}`)), 1)
	trips("claim with limits", ledger.Claim("r1", "b", "t", key("b"), args, 1).WithLimits(lim), 1)
	trips("its outcome (gives the slot back)", ledger.Succeed(key("b"), 1, json.RawMessage(`{}`)), 2)
	trips("a limited claim of a tool with a row", ledger.Claim("r1", "c", "t", key("c"), args, 1).WithLimits(lim), 3)
}

// roundTrips runs fn with a context that counts the round trips to the
// database and returns how many it made; fn's error fails the test, and so
// does a count of none (the counting tracer is not installed).
func roundTrips(t *testing.T, what string, fn func(ctx context.Context) error) int64 {
	t.Helper()
	var n atomic.Int64
	if err := fn(postgres.CountTrips(context.Background(), &n)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s: %d round trips", what, n.Load())
	if n.Load() == 0 {
		t.Errorf("%s: no round trip counted (is the counting tracer installed?)", what)
	}
	return n.Load()
}

// A new run's rows are inserted as the Apply that records the run leaves
// them: its first claim, made in the same Apply, is not an UPDATE of a row
// inserted a statement earlier. Every row carries the command id (cmin) of
// the one statement that inserted the revision's rows; a row rewritten in
// the same transaction would carry a later one. The rows the Apply wrote
// read back as it wrote them (the claim, the approval, the rest pending).
func TestNewRunRowsInsertedOnce(t *testing.T) {
	t.Parallel()
	schema := schemaFor(t.Name())
	s := open(t, postgres.Config{Schema: schema})
	ctx := context.Background()
	p := &plan.Plan{Goal: "insert once"}
	for _, id := range []string{"a", "b", "c", "d"} {
		p.Actions = append(p.Actions, plan.Action{ID: id, Tool: "t", Args: json.RawMessage(`{"id":"` + id + `"}`)})
	}
	p.Actions[1].DependsOn = []string{"a"}
	p.Actions[2].DependsOn = []string{"a"}
	p.Actions[3].DependsOn = []string{"b", "c"} // a diamond
	create, err := ledger.NewRun(ledger.Run{ID: "r1", Policy: "none"}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := plan.Key("r1", "a", "t", p.Actions[0].Args)
	res, err := s.Apply(ctx, create, ledger.Approve("r1", "a", nil, "alice"), ledger.Approve("r1", "d", nil, "alice"),
		ledger.Claim("r1", "a", "t", k, p.Actions[0].Args, 1))
	for _, r := range res {
		if err == nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatal(err)
	}

	conn := rawConn(t)
	rows, err := conn.Query(ctx, `SELECT action_id, cmin::text FROM `+schema+`.actions WHERE run_id = 'r1' ORDER BY action_id`)
	if err != nil {
		t.Fatal(err)
	}
	cmins := map[string]string{}
	for rows.Next() {
		var id, cmin string
		if err := rows.Scan(&id, &cmin); err != nil {
			t.Fatal(err)
		}
		cmins[id] = cmin
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cmins) != 4 {
		t.Fatalf("%d rows, want 4", len(cmins))
	}
	for id, c := range cmins {
		if c != cmins["b"] {
			t.Errorf("row %s was written by command %s, row b by command %s: want every row inserted by the same statement, once", id, c, cmins["b"])
		}
	}

	acts, err := s.Actions(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ledger.Status{"a": ledger.StatusClaimed, "b": ledger.StatusPending, "c": ledger.StatusPending, "d": ledger.StatusApproved}
	for _, a := range acts {
		if a.Status != want[a.ID] {
			t.Errorf("action %s is %s, want %s", a.ID, a.Status, want[a.ID])
		}
	}
	if len(acts) != 4 || acts[0].ID != "a" || acts[0].Attempts != 1 || acts[0].Key != k {
		t.Errorf("actions read back: %+v", acts)
	}
}
