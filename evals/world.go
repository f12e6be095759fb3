package evals

import (
	"context"
	"sort"
)

// Executor runs calls against a fresh simulated world: first setup (the
// initial state), then the plan, and returns the world's final effect
// counters. docket eval provides one for "demoworld"; it needs the executor
// and a ledger, which this package does not import.
type Executor interface {
	Execute(ctx context.Context, c *Case, setup, calls []Call) (map[string]int, error)
}

// CodeWorldState: the simulated world did not end as expected.
const CodeWorldState = "world_state"

// CheckWorld executes the calls of an execution-level case and adds a
// reason for every effect counter that differs from the expectation. A case
// without a world, or a nil Executor, is left as it is (a case with a world
// then fails: it cannot be judged).
func CheckWorld(ctx context.Context, ex Executor, c *Case, calls []Call, r *Result) {
	if c.World == nil {
		return
	}
	if ex == nil {
		r.fail(CodeWorldState, "the case is judged by the final state of world %q, and no executor for it was given", c.World.Name)
		r.Pass = false
		return
	}
	got, err := ex.Execute(ctx, c, normalizeCalls(c, c.World.Setup), normalizeCalls(c, calls))
	if err != nil {
		r.fail(CodeWorldState, "executing the plan against world %s failed: %v", c.World.Name, err)
		r.Pass = false
		r.Metrics.ExactMatch = false
		return
	}
	before := len(r.Codes)
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range c.World.Effects {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		want, listed := c.World.Effects[k]
		n := got[k]
		switch {
		case listed && n != want:
			r.fail(CodeWorldState, "in the final state, %s happened %d %s, expected %d", k, n, plural(n, "time", "times"), want)
		case !listed && n > 0 && !c.World.AllowOtherEffects:
			r.fail(CodeWorldState, "in the final state, %s happened %d %s, which the request did not ask for", k, n, plural(n, "time", "times"))
		}
	}
	if len(r.Codes) > before {
		r.Pass = false
		r.Metrics.ExactMatch = false
	}
}

// ScoreOptions tune ScorePlans. The zero value is usable.
type ScoreOptions struct {
	// Executor runs execution-level cases (those with a world).
	Executor Executor
	// Context bounds their execution. Default context.Background().
	Context context.Context
}

func (o *ScoreOptions) check() func(c *Case, calls []Call, r *Result) {
	if o == nil {
		o = &ScoreOptions{}
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return func(c *Case, calls []Call, r *Result) {
		if c.World != nil {
			CheckWorld(ctx, o.Executor, c, calls, r)
		}
	}
}
