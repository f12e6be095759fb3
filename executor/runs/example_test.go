package runs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// A run planned from a goal: the planner (here a function; with a model,
// planner.Planner.Plan) is called the first time only, and the same request
// again continues the recorded run.
func ExampleRun() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "runs-example")
	defer os.RemoveAll(dir)
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	world := tooltest.NewWorld()
	reg, _ := tools.NewRegistry(world.Tool(tools.Spec{Name: "set", Class: tools.Idempotent}))
	eng, err := executor.New(executor.Config{Ledger: l, Tools: reg, Logger: quiet})
	if err != nil {
		panic(err)
	}

	ident := executor.Request{Goal: "set x to 1"}
	req := runs.Request{RunID: "run_example", Identity: &ident,
		Planner: func(ctx context.Context) (*plan.Plan, error) {
			fmt.Println("planning")
			return &plan.Plan{Goal: "set x to 1", Actions: []plan.Action{{ID: "a1", Tool: "set", Args: json.RawMessage(`{"x":1}`)}}}, nil
		}}
	for range 2 {
		res, doc, err := runs.Run(ctx, eng, l, req)
		if err != nil {
			panic(err)
		}
		fmt.Println(doc.Run.Status, "planned now:", res.Planned, "effects:", world.Effects(doc.Actions[0].Key))
	}
	// Output:
	// planning
	// completed planned now: true effects: 1
	// completed planned now: false effects: 1
}
