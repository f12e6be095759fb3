package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// An action's life: record the run, claim the action's key, record its
// outcome together with the next claim, and read the Run JSON back.
func Example() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	p := &plan.Plan{Goal: "greet", Actions: []plan.Action{
		{ID: "a1", Tool: "greet", Args: json.RawMessage(`{"name":"Ada"}`)},
		{ID: "a2", Tool: "greet", Args: json.RawMessage(`{"name":"Bob"}`), DependsOn: []string{"a1"}},
	}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "run-1", Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
		fmt.Println(err)
		return
	}
	k1, _ := plan.Key("run-1", "a1", "greet", p.Actions[0].Args)
	k2, _ := plan.Key("run-1", "a2", "greet", p.Actions[1].Args)
	if _, err := l.Apply(ctx, ledger.Claim("run-1", "a1", "greet", k1, p.Actions[0].Args, 1)); err != nil {
		fmt.Println(err)
		return
	}
	// ... the tool runs with key k1 ...
	res, err := l.Apply(ctx,
		ledger.Succeed(k1, 1, json.RawMessage(`{"greeting":"hello Ada"}`)),
		ledger.Claim("run-1", "a2", "greet", k2, p.Actions[1].Args, 1))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res[0].Action.Status, res[1].Action.Status)

	// A second claim of a1 (say, after a crash) finds it succeeded.
	res, _ = l.Apply(ctx, ledger.Claim("run-1", "a1", "greet", k1, p.Actions[0].Args, 1))
	var ce *ledger.ConflictError
	if errors.As(res[0].Err, &ce) {
		fmt.Println(ce.Current.State, string(ce.Current.Output))
	}
	evs, _ := l.Events(ctx, "run-1", 0, 0)
	for _, ev := range evs {
		fmt.Println(strings.TrimSpace(fmt.Sprint(ev.Seq, " ", ev.Type, " ", ev.ActionID)))
	}
	// Output:
	// succeeded claimed
	// succeeded {"greeting":"hello Ada"}
	// 1 run.created
	// 2 plan.recorded
	// 3 action.claimed a1
	// 4 action.succeeded a1
	// 5 action.claimed a2
}
