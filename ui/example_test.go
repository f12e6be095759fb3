package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/ui"
)

// A program embeds the service: a ledger, the tools, a token, then the
// handler on any HTTP server. Shutdown before closing the ledger.
func ExampleServer() {
	world := demoworld.Start() // stands in for the real CRM, payments, email
	defer world.Close()
	file, err := httptool.Parse(world.ToolsFile(demoworld.ToolsOptions{}), os.Getenv)
	if err != nil {
		panic(err)
	}
	reg, err := tools.NewRegistry(file.Tools...)
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "docket-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	led, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer led.Close()
	srv, err := ui.New(ui.Config{Ledger: led, Tools: reg, Tokens: map[string]string{"ops": "example-token-123456"}, Logger: quiet})
	if err != nil {
		panic(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()

	body := `{"run_id": "example", "approve": "none", "plan": ` + string(demoworld.OnboardingPlan()) + `}`
	req, _ := http.NewRequest("POST", hs.URL+"/v1/runs", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer example-token-123456")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	doc, err := led.Doc(context.Background(), "example")
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, doc.Run.Status, len(doc.Actions), "actions")
	// Output: 201 awaiting_approval 5 actions
}
