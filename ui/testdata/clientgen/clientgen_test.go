// Package clientgen proves that the OpenAPI document docket serves generates
// a working client: its test starts the service (the ui handler over a
// Badger ledger and the demo world), fetches GET /v1/openapi.json, generates
// a Go client from it with oapi-codegen v2 (pinned by this module's tool
// directive), and drives a run end to end with driver/, a program written
// only against the generated client.
//
// It is a module of its own so that oapi-codegen and its dependencies stay
// out of docket's go.mod; make test runs it (cd ui/testdata/clientgen && go
// test ./...).
//
// Imports: docket's ui, ledger/badgerdb, tools, tools/httptool and
// evals/demoworld (to serve), and the standard library.
package clientgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/ui"
	"github.com/docketrun/docket/ui/testdata/clientgen/report"
)

const token = "clientgen-token-0123456789"

func serve(t *testing.T) (*httptest.Server, *demoworld.World) {
	t.Helper()
	w := demoworld.Start()
	t.Cleanup(w.Close)
	file := w.ToolsFile(demoworld.ToolsOptions{Timeout: "5s"})
	f, err := httptool.Parse(file, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	led, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ui.New(ui.Config{Ledger: led, Tools: reg, Tokens: map[string]string{"client": token}, ToolsFile: file, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		led.Close()
	})
	return hs, w
}

// goCmd runs the go command in this module and returns its stdout.
func goCmd(t *testing.T, ctx context.Context, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

func TestGeneratedClientDrivesARun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hs, world := serve(t)

	// The document as served.
	resp, err := http.Get(hs.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json = %d %v", resp.StatusCode, err)
	}
	if !json.Valid(spec) {
		t.Fatalf("the served document is not JSON")
	}
	if err := os.WriteFile("openapi.json", spec, 0o644); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll("docketclient")
	t0 := time.Now()
	goCmd(t, ctx, "tool", "oapi-codegen", "-config", "oapi-codegen.yaml", "openapi.json")
	gen, err := os.ReadFile(filepath.Join("docketclient", "client.gen.go"))
	if err != nil {
		t.Fatalf("oapi-codegen wrote no client: %v", err)
	}
	t.Logf("oapi-codegen: %d bytes of client in %v", len(gen), time.Since(t0).Round(time.Millisecond))

	// The driver, built on the generated client, drives a run.
	out := goCmd(t, ctx, "run", "-tags", "clientgen_driver", "./driver", "-url", hs.URL, "-token", token, "-run", "clientgen-1")
	var rep report.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("the driver's report: %v\n%s", err, out)
	}
	t.Logf("driver: %s", bytes.TrimSpace(out))
	switch {
	case rep.Health != "ok", rep.SessionWho != "token:client", rep.Tools == 0, rep.ServerSchema != "3.1.0":
		t.Errorf("service reads: %+v", rep)
	case rep.Created != 201 || rep.Again != 200:
		t.Errorf("create = %d, again = %d; want 201, 200", rep.Created, rep.Again)
	case rep.Waiting != "awaiting_approval" || rep.Inbox != 2:
		t.Errorf("before approval: %s with %d in the inbox, want awaiting_approval with 2", rep.Waiting, rep.Inbox)
	case rep.Status != "completed" || rep.Settled != "true" || !slices.Equal(rep.Actions, []string{"pay:succeeded", "mail:succeeded"}):
		t.Errorf("after approval: %s (settled %q) %v", rep.Status, rep.Settled, rep.Actions)
	case rep.PlanActions != 2 || rep.LastType != "run.completed" || rep.PastEnd != "after_past_end" || !rep.Listed:
		t.Errorf("reads after the run: %+v", rep)
	case rep.UnknownRun != "not_found" || rep.UnknownCode != 404:
		t.Errorf("unknown run: %s %d", rep.UnknownRun, rep.UnknownCode)
	}
	// Exactly one effect in the world each.
	if p, e := world.Requests("payments"), world.Requests("email"); p != 1 || e != 1 {
		t.Errorf("the world saw %d payment and %d email requests, want 1 each: %s", p, e, world.Describe())
	}
}
