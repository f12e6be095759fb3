package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// fixedClock is a clock that never moves: both ledgers of the comparison
// below stamp every record with the same time.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// The one round trip path decides as the two round trip path does. Two
// ledgers (schemas), each with a driving node A and another node B that
// writes in between (a person's review, a pause, a first claim of the same
// key, a cancel), get the same random sequence of Applies; one answers in
// one round trip whenever it can, the other never does. Every result, and
// at the end every run's document, key records and events, must be the same
// (the nodes' incarnations aside).
func TestOneRoundTripDecidesAsTwo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := fixedClock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	type side struct {
		a, b *postgres.Store
		name string
	}
	mk := func(name string, spec bool) side {
		schema := schemaFor(t.Name() + "/" + name)
		a := open(t, postgres.Config{Schema: schema, Clock: clock})
		b := open(t, postgres.Config{Schema: schema, Clock: clock})
		a.SetSpeculation(spec)
		b.SetSpeculation(spec)
		return side{a, b, name}
	}
	one, two := mk("one", true), mk("two", false)
	norm := func(s side, v string) string {
		return strings.NewReplacer(s.a.Incarnation(), "<A>", s.b.Incarnation(), "<B>").Replace(v)
	}
	runs := []string{"r1", "r2"}
	acts := []string{"a1", "a2", "a3", "a4"}
	args := func(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)) }
	key := func(run, id string, i int) string {
		k, err := plan.Key(run, id, "t", args(i))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, s := range []side{one, two} {
		for _, run := range runs {
			p := &plan.Plan{Goal: "equivalence"}
			var rows []ledger.Action
			for i, id := range acts {
				p.Actions = append(p.Actions, plan.Action{ID: id, Tool: "t", Args: args(1)})
				st := ledger.StatusApproved
				if i%2 == 1 {
					st = ledger.StatusPending
				}
				rows = append(rows, ledger.Action{ID: id, Tool: "t", Args: args(1), Status: st})
			}
			if _, _, err := s.a.CreateRun(ctx, ledger.Run{ID: run, Policy: "all"}, p, rows); err != nil {
				t.Fatal(err)
			}
		}
	}
	allow := ledger.Gate{Outcome: "allow"}
	rng := rand.New(rand.NewPCG(7, 30))
	randOp := func() (ledger.Op, string) {
		run, id := runs[rng.IntN(len(runs))], acts[rng.IntN(len(acts))]
		i, n := 1+rng.IntN(3), 1+rng.IntN(2)
		k := key(run, id, i)
		switch r := rng.IntN(100); {
		case r < 30:
			return ledger.Claim(run, id, "t", k, args(i), n).Decided(args(i), allow, false), fmt.Sprintf("claim %s/%s i=%d n=%d", run, id, i, n)
		case r < 50:
			return ledger.Succeed(k, n, json.RawMessage(`{"ok":true}`)), fmt.Sprintf("succeed %s/%s i=%d n=%d", run, id, i, n)
		case r < 60:
			return ledger.Fail(k, n, "boom", r%2 == 0, nil), fmt.Sprintf("fail %s/%s i=%d n=%d", run, id, i, n)
		case r < 70:
			return ledger.Approve(run, id, nil, "bob"), fmt.Sprintf("approve %s/%s", run, id)
		case r < 78:
			return ledger.Edit(run, id, args(i), "bob"), fmt.Sprintf("edit %s/%s i=%d", run, id, i)
		case r < 84:
			return ledger.SetPause(run, "token:bob", "", nil), "pause " + run
		case r < 92:
			return ledger.SetPause(run, "", ledger.RunRunning, nil), "resume " + run
		case r < 97:
			return ledger.Reject(run, id, "no", "bob"), fmt.Sprintf("reject %s/%s", run, id)
		default:
			return ledger.SetRunStatus(run, ledger.RunCancelled, "", "", nil), "cancel (no event) " + run
		}
	}
	var trips [2]atomic.Int64 // one, two
	oks := 0
	answer := func(s side, onA bool, ops []ledger.Op) string {
		st := s.b
		if onA {
			st = s.a
		}
		n := &trips[0]
		if s.name == "two" {
			n = &trips[1]
		}
		res, err := st.Apply(postgres.CountTrips(ctx, n), ops...)
		if err != nil {
			return norm(s, "commit: "+err.Error())
		}
		var out []string
		for _, r := range res {
			e := "ok"
			if r.Err != nil {
				e = r.Err.Error()
			} else if s.name == "one" {
				oks++
			}
			out = append(out, e)
		}
		return norm(s, strings.Join(out, " | "))
	}
	const steps = 400
	for step := range steps {
		onA := rng.IntN(100) < 75
		op, what := randOp()
		ops := []ledger.Op{op}
		if rng.IntN(4) == 0 {
			op2, what2 := randOp()
			ops, what = append(ops, op2), what+" + "+what2
		}
		if a, b := answer(one, onA, ops), answer(two, onA, ops); a != b {
			t.Fatalf("step %d (%s, on %s): one round trip answered\n  %s\nthe two round trip path\n  %s", step, what, map[bool]string{true: "A", false: "B"}[onA], a, b)
		}
	}
	t.Logf("%d steps, %d ops went through; round trips: %d in one round trip where it can, %d in two", steps, oks, trips[0].Load(), trips[1].Load())
	if trips[0].Load() >= trips[1].Load() || oks < steps/8 {
		t.Fatalf("the comparison is empty: %d ops through, round trips %d and %d", oks, trips[0].Load(), trips[1].Load())
	}
	state := func(s side) string {
		var b strings.Builder
		for _, run := range runs {
			doc, err := s.a.Doc(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			j, _ := json.Marshal(doc)
			fmt.Fprintf(&b, "%s\n", j)
			for _, a := range doc.Actions {
				if a.Key != "" {
					k, err := s.a.Key(ctx, a.Key)
					if err != nil {
						t.Fatal(err)
					}
					j, _ := json.Marshal(k)
					fmt.Fprintf(&b, "%s\n", j)
				}
			}
			evs, err := s.a.Events(ctx, run, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				fmt.Fprintf(&b, "%d %s %s %s\n", ev.Seq, ev.Type, ev.ActionID, ev.Data)
			}
		}
		return norm(s, b.String())
	}
	if a, b := state(one), state(two); a != b {
		t.Fatalf("after %d steps the ledgers differ:\none round trip:\n%s\ntwo round trips:\n%s", steps, a, b)
	}
}
