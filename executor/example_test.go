package executor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

type greetIn struct {
	Name string `json:"name"`
}

type greetOut struct {
	Text string `json:"text"`
}

// Run a plan of one keyed tool, then run it again: the second run resumes and
// calls nothing.
func ExampleEngine_Run() {
	dir, err := os.MkdirTemp("", "docket-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	led, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer led.Close()

	calls := 0
	greet := tools.Func(tools.Spec{Name: "greet", Description: "Greets someone.", Class: tools.Keyed},
		func(ctx context.Context, call tools.Call, in greetIn) (greetOut, error) {
			calls++ // a real tool would send call.Key to the provider
			return greetOut{Text: "hello " + in.Name}, nil
		})
	reg, err := tools.NewRegistry(greet)
	if err != nil {
		panic(err)
	}
	eng, err := executor.New(executor.Config{Ledger: led, Tools: reg, Logger: quiet})
	if err != nil {
		panic(err)
	}
	p, err := plan.Decode([]byte(`{"goal":"greet ann","actions":[{"id":"g","tool":"greet","args":{"name":"ann"}}]}`))
	if err != nil {
		panic(err)
	}
	runID, _ := executor.DeriveRunID(p)
	for range 2 {
		doc, err := eng.Run(ctx, runID, p, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println(doc.Run.Status, string(doc.Actions[0].Output), "calls:", calls)
	}
	// Output:
	// completed {"text":"hello ann"} calls: 1
	// completed {"text":"hello ann"} calls: 1
}
