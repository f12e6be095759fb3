package executor

import (
	"fmt"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// TestReadyScanDoesNotGrowWithThePlan checks that looking for ready actions
// costs about the same per action whatever the plan's size: a chain of n
// actions (each waits for the one before) looks at a bounded number of
// nodes per action, not at the rest of the plan after every outcome (which
// made a chain of n cost n²/2 looks).
func TestReadyScanDoesNotGrowWithThePlan(t *testing.T) {
	t.Parallel()
	for _, n := range []int{50, 400} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			b := setup(t, []tools.Tool{w.Tool(spec("step", tools.Keyed))})
			doc := b.run("chain", chainPlan("step", n), PolicyAll)
			wantStatus(t, doc, ledger.RunCompleted)
			if got := len(w.Keys()); got != n {
				t.Fatalf("%d keys took effect, want %d", got, n)
			}
			visits := b.eng.scanVisits.Load()
			if limit := uint64(8 * n); visits > limit {
				t.Fatalf("chain of %d: the ready scan looked at %d nodes (%.1f per action), want at most %d: it grows with the plan",
					n, visits, float64(visits)/float64(n), limit)
			}
			t.Logf("chain of %d: %d nodes looked at (%.1f per action)", n, visits, float64(visits)/float64(n))
		})
	}
}

// TestReadyScanJoinsAndFans drives a plan mixing fan-out, joins and a
// dependency that succeeds while its dependents are parked, in several
// rounds of parallelism, and checks every action ran once and in an order
// its dependencies allow.
func TestReadyScanJoinsAndFans(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 2, 5, 32} {
		t.Run(fmt.Sprint(par), func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			b := setup(t, []tools.Tool{w.Tool(spec("step", tools.Keyed))}, func(c *Config) { c.Parallelism = par })
			// root → f0..f9 → join j (all f) → g0..g4 (each on j and one f) → end (all g).
			acts := []plan.Action{pa("root", "step", `{"i":0}`)}
			var fs, gs []string
			for i := range 10 {
				id := fmt.Sprintf("f%d", i)
				fs = append(fs, id)
				acts = append(acts, pa(id, "step", fmt.Sprintf(`{"f":%d}`, i), "root"))
			}
			acts = append(acts, pa("j", "step", `{"j":1}`, fs...))
			for i := range 5 {
				id := fmt.Sprintf("g%d", i)
				gs = append(gs, id)
				acts = append(acts, pa(id, "step", fmt.Sprintf(`{"g":%d}`, i), "j", fs[9-i]))
			}
			acts = append(acts, pa("end", "step", `{"end":1}`, gs...))
			doc := b.run("mix", mkPlan(t, acts...), PolicyAll)
			wantStatus(t, doc, ledger.RunCompleted)
			if got := len(w.Keys()); got != len(acts) {
				t.Fatalf("%d keys took effect, want %d", got, len(acts))
			}
			// Every action was claimed after each of its dependencies succeeded.
			at := map[string]uint64{}
			for _, ev := range b.events("mix") {
				switch ev.Type {
				case "action.claimed", "action.succeeded":
					at[string(ev.Type)+" "+ev.ActionID] = ev.Seq
				}
			}
			for _, a := range acts {
				for _, dep := range a.DependsOn {
					if at["action.claimed "+a.ID] < at["action.succeeded "+dep] {
						t.Fatalf("%s was claimed (seq %d) before %s succeeded (seq %d)", a.ID, at["action.claimed "+a.ID], dep, at["action.succeeded "+dep])
					}
				}
			}
		})
	}
}

// TestChainCommits counts the durable commits of a chain of n: one to
// record the run with its first claim, one per later action (its
// predecessor's outcome with its claim) and one for the last outcome with
// the run's completion. The last one needs isLast to know, in O(1), that
// every other action succeeded.
func TestChainCommits(t *testing.T) {
	t.Parallel()
	w := tooltest.NewWorld()
	b := setup(t, []tools.Tool{w.Tool(spec("step", tools.Keyed))})
	const n = 6
	led := b.led.(*badgerdb.Ledger)
	before := led.Stats().Commits
	doc := b.run("chain", chainPlan("step", n), PolicyAll)
	wantStatus(t, doc, ledger.RunCompleted)
	if got, want := led.Stats().Commits-before, uint64(n+1); got != want {
		t.Fatalf("a chain of %d took %d commits, want %d (the run's record and its first claim share one, the last outcome and the run's completion another)", n, got, want)
	}
}
