package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// graphShape is a small plan graph: action ids in plan order, each with the
// ids it depends on.
type graphShape struct {
	name string
	deps [][2]any // {id string, deps []string}
}

func shape(name string, nodes ...[2]any) graphShape { return graphShape{name: name, deps: nodes} }

func nd(id string, deps ...string) [2]any { return [2]any{id, deps} }

// graphShapes are the shapes users make: joins (fan-in of 2 and 3), diamonds,
// joins of joins, fan-outs and wide plans.
var graphShapes = []graphShape{
	shape("fan-in-2", nd("a"), nd("b"), nd("c", "a", "b")),
	shape("fan-in-3", nd("a"), nd("b"), nd("x"), nd("c", "a", "b", "x")),
	shape("diamond", nd("a"), nd("b", "a"), nd("c", "a"), nd("d", "b", "c")),
	shape("join-of-joins", nd("a"), nd("b"), nd("c"), nd("d"), nd("ab", "a", "b"), nd("cd", "c", "d"), nd("all", "ab", "cd")),
	shape("fan-out", nd("root"), nd("l1", "root"), nd("l2", "root"), nd("l3", "root"), nd("l4", "root")),
	shape("wide", nd("w1"), nd("w2"), nd("w3"), nd("w4"), nd("w5"), nd("w6"), nd("w7"), nd("w8"), nd("w9"), nd("w10"), nd("w11"), nd("w12")),
	shape("double-diamond", nd("a"), nd("b", "a"), nd("c", "a"), nd("d", "b", "c"), nd("e", "d"), nd("f", "d"), nd("g", "e", "f")),
}

// plan builds the shape as a plan of one tool; every action references the
// outputs of the actions it depends on (so resolved arguments, and keys,
// depend on them) or, for roots, carries its own id.
func (s graphShape) plan(tool string) *plan.Plan {
	p := &plan.Plan{Goal: s.name}
	for _, n := range s.deps {
		id, deps := n[0].(string), n[1].([]string)
		args := map[string]any{"id": id}
		for i, d := range deps {
			args[fmt.Sprintf("in%d", i)] = "${" + d + ".output.id}"
		}
		raw, _ := json.Marshal(args)
		p.Actions = append(p.Actions, plan.Action{ID: id, Tool: tool, Args: raw, DependsOn: deps})
	}
	return p
}

// TestGraphShapesComplete runs every small graph shape many times, with a
// tool that answers at once and with one that answers after a jittered delay,
// and checks that every run completes with each action's effect exactly once.
// Regression: a join (an action depending on two actions running in parallel)
// left the run "running" with the join never started, 9 times out of 10.
func TestGraphShapesComplete(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, s := range graphShapes {
		for _, delayed := range []bool{false, true} {
			name := s.name + "/instant"
			if delayed {
				name = s.name + "/jittered"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				rnd := mrand.New(mrand.NewPCG(seed, uint64(len(name))))
				var rmu sync.Mutex
				w := tooltest.NewWorld()
				keyed := w.Tool(spec("op", tools.Keyed))
				inner := keyed.CallFunc
				keyed.CallFunc = func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
					if delayed {
						rmu.Lock()
						d := time.Duration(rnd.IntN(500)) * time.Microsecond
						rmu.Unlock()
						time.Sleep(d) // the tool's own latency, not a wait for an event
					}
					return inner(ctx, c)
				}
				b := setup(t, []tools.Tool{keyed}, func(c *Config) { c.Parallelism = 8 })
				rounds := 40
				if delayed {
					rounds = 15
				}
				p := s.plan("op")
				for i := range rounds {
					runID := fmt.Sprintf("r%d", i)
					doc, err := b.eng.Run(context.Background(), runID, p, &RunOptions{Policy: PolicyAll})
					if err != nil {
						t.Fatalf("round %d: Run: %v", i, err)
					}
					if doc.Run.Status != ledger.RunCompleted {
						t.Fatalf("round %d (seed %d): run %s status %s (error %q), want completed; actions: %s",
							i, seed, runID, doc.Run.Status, doc.Run.Error, docString(doc))
					}
					for _, a := range doc.Actions {
						if a.Status != ledger.StatusSucceeded || a.Attempts != 1 {
							t.Fatalf("round %d: action %s %s after %d attempts", i, a.ID, a.Status, a.Attempts)
						}
						if n, r := w.Effects(a.Key), w.Requests(a.Key); n != 1 || r != 1 {
							t.Fatalf("round %d: action %s took effect %d times in %d requests, want 1 in 1", i, a.ID, n, r)
						}
					}
				}
				if dups := w.Duplicates(); len(dups) > 0 {
					t.Fatalf("duplicate effects: %v", dups)
				}
				if got, want := len(w.Keys()), rounds*len(p.Actions); got != want {
					t.Fatalf("%d keys took effect, want %d", got, want)
				}
			})
		}
	}
}

// TestStalledDriveSaysSoLoudly checks the guard behind the fix above: a drive
// that ends with an action ready but never started (a scheduler bug) returns
// a StallError naming it, instead of leaving the run "running" in silence.
// The stall is made by hand: the run is recorded, then settled without
// scheduling anything.
func TestStalledDriveSaysSoLoudly(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	b := setup(t, []tools.Tool{w.Tool(spec("op", tools.Keyed))})
	p := graphShapes[0].plan("op") // a, b, c depends on a and b
	p.RunID = "stall"
	rows, err := b.eng.initialRows(p, PolicyAll, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := b.led.CreateRun(ctx, ledger.Run{ID: "stall", Status: ledger.RunRunning, Revision: 1, Goal: p.Goal,
		Policy: string(PolicyAll), ToolsHash: b.reg.Hash()}, p, rows); err != nil {
		t.Fatal(err)
	}
	g := acquireGate(b.led, "stall")
	defer releaseGate(b.led, "stall", g)
	g.status = ledger.RunRunning
	d := newDriver(b.eng, "stall", g)
	d.pol = PolicyAll
	recorded, err := b.led.Actions(ctx, "stall")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.load(recorded); err != nil {
		t.Fatal(err)
	}
	err = d.finish(ctx)
	var se *StallError
	if !errors.As(err, &se) || !errors.Is(err, ErrStalled) {
		t.Fatalf("finish of a drive that started nothing: %v, want a StallError", err)
	}
	if fmt.Sprint(se.Actions) != "[a b]" {
		t.Fatalf("stalled actions %v, want [a b] (c waits for them, it is not ready)", se.Actions)
	}
	// Driving it for real completes it: nothing was lost.
	doc := b.resume("stall")
	wantStatus(t, doc, ledger.RunCompleted)
}
