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

// A claim that carries tool limits costs one round trip more than one that
// does not (it reads and locks its tool's row, which the first pipeline
// cannot name for a key that does not exist yet); the outcome that gives
// the slot back costs none more (the first pipeline locks the rows of the
// tools of the keys it names).
func TestLimitRoundTrips(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{Schema: schemaFor(t.Name())})
	bg := context.Background()
	trips := func(what string, op ledger.Op, want int64) {
		t.Helper()
		var n atomic.Int64
		r, err := ledger.ApplyOne(postgres.CountTrips(bg, &n), s, op)
		if err != nil || r.Err != nil {
			t.Fatalf("%s: %v %v", what, err, r.Err)
		}
		t.Logf("%s: %d round trips", what, n.Load())
		if n.Load() != want {
			t.Errorf("%s took %d round trips, want %d", what, n.Load(), want)
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
	trips("claim without limits", ledger.Claim("r1", "a", "t", key("a"), args, 1), 2)
	trips("its outcome", ledger.Succeed(key("a"), 1, json.RawMessage(`{}`)), 2)
	trips("claim with limits", ledger.Claim("r1", "b", "t", key("b"), args, 1).WithLimits(lim), 3)
	trips("its outcome (gives the slot back)", ledger.Succeed(key("b"), 1, json.RawMessage(`{}`)), 2)
	trips("a limited claim of a tool with a row", ledger.Claim("r1", "c", "t", key("c"), args, 1).WithLimits(lim), 3)
}
