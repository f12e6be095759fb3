package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/memory"
	"github.com/docketrun/docket/plan"
)

// An in-memory store for a test: the same rules and events as the Badger
// ledger, nothing on disk.
func Example() {
	s, err := memory.New(memory.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	p := &plan.Plan{Goal: "greet", Actions: []plan.Action{{ID: "a1", Tool: "echo", Args: json.RawMessage(`{"msg":"hi"}`)}}}
	if _, _, err := s.CreateRun(ctx, ledger.Run{ID: "r1"}, p, nil); err != nil {
		fmt.Println(err)
		return
	}
	key, _ := plan.Key("r1", "a1", "echo", p.Actions[0].Args)
	if _, err := ledger.ApplyOne(ctx, s, ledger.Claim("r1", "a1", "echo", key, p.Actions[0].Args, 1)); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := ledger.ApplyOne(ctx, s, ledger.Succeed(key, 1, json.RawMessage(`{"said":"hi"}`))); err != nil {
		fmt.Println(err)
		return
	}
	_, err = ledger.ApplyOne(ctx, s, ledger.Claim("r1", "a1", "echo", key, p.Actions[0].Args, 2))
	fmt.Println("claim again:", err != nil)
	evs, _ := s.Events(ctx, "r1", 0, 0)
	for _, ev := range evs {
		fmt.Println(strings.TrimSpace(fmt.Sprint(ev.Seq, " ", ev.Type, " ", ev.ActionID)))
	}
	// Output:
	// claim again: true
	// 1 run.created
	// 2 plan.recorded
	// 3 action.claimed a1
	// 4 action.succeeded a1
}
