package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger/postgres/pgtest"
)

// sharedPG is this package's throwaway PostgreSQL cluster (started by the
// first test that needs it, stopped by TestMain).
var sharedPG pgtest.Shared

// sharedLedger returns the URL of a new database on the package's cluster.
func sharedLedger(t *testing.T) (url, password string) {
	t.Helper()
	c := sharedPG.Get(t)
	u, err := c.CreateDatabase(context.Background(), "cli")
	if err != nil {
		t.Fatal(err)
	}
	return u, c.Password
}

// The commands that take --data take --ledger postgres://… (or
// $DOCKET_LEDGER) as well: a run waits for approval, is approved, is shown
// and listed, all against the shared ledger; nothing is "busy" while a
// service holds it; the password is never printed.
func TestSharedLedgerCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, pw := sharedLedger(t)
	noPassword := func(r result) {
		t.Helper()
		if strings.Contains(r.stdout+r.stderr, pw) {
			t.Fatalf("the password was printed:\n%s", r)
		}
	}
	// A service on the same ledger does not make the CLI busy.
	s := startServe(t, nil, "--ledger", url, "--tools", b.tools) // the token is generated and kept in the ledger
	if out := strings.Join(s.lines, "\n"); !strings.Contains(out, "ledger: postgres://docket:xxxxx@") || strings.Contains(out, pw) {
		t.Fatalf("serve said:\n%s", out)
	}

	planPath := b.plan(t, "p", crashPlan(crashClasses[4])) // an email (at most once), then a payment
	r := inproc(t, "run", "--ledger", url, "--tools", b.tools, "--plan", planPath, "--run-id", "shared-1")
	wantCode(t, r, exitPaused)
	noPassword(r)
	if !strings.Contains(r.stderr, "docket approve --ledger 'postgres://docket:xxxxx@") {
		t.Fatalf("the waiting message should name the ledger (without its password):\n%s", r)
	}
	// $DOCKET_LEDGER selects it too.
	env := map[string]string{"DOCKET_LEDGER": url}
	r = inprocEnv(t, env, "approve", "--tools", b.tools, "shared-1")
	wantCode(t, r, exitOK)
	noPassword(r)
	r = inprocEnv(t, env, "runs", "show", "--json", "shared-1")
	wantCode(t, r, exitOK)
	var doc struct {
		Status  string `json:"status"`
		Actions []struct {
			Status string `json:"status"`
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Status != "completed" || len(doc.Actions) != 2 {
		t.Fatalf("runs show: %v\n%s", err, r)
	}
	r = inproc(t, "runs", "list", "--ledger", url)
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "shared-1") {
		t.Fatalf("runs list:\n%s", r)
	}
	if n := b.world.Effect("email/t@acme.example/welcome"); n != 1 {
		t.Fatalf("the email was sent %d times", n)
	}
	// The service sees the run the CLI made.
	var got map[string]any
	req := s.get(t, "/v1/runs/shared-1", &got)
	if req != 200 || got["status"] != "completed" {
		t.Fatalf("GET /v1/runs/shared-1 on the service: %d %v", req, got)
	}

	// backup says to use pg_dump.
	r = inproc(t, "backup", "--ledger", url)
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "pg_dump") {
		t.Fatalf("backup:\n%s", r)
	}
	noPassword(r)
	// A wrong password: a clear error, no password of either kind.
	bad := strings.Replace(url, pw, "wrong-password-123", 1)
	r = inproc(t, "runs", "list", "--ledger", bad)
	wantCode(t, r, exitFailed)
	noPassword(r)
	if !strings.Contains(r.stderr, "authentication failed") || strings.Contains(r.stderr, "wrong-password-123") {
		t.Fatalf("wrong password:\n%s", r)
	}
	// --ledger takes a URL only.
	r = inproc(t, "runs", "list", "--ledger", "/tmp/somewhere")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "postgres://") {
		t.Fatalf("--ledger with a path:\n%s", r)
	}
}

func (s *served) get(t *testing.T, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}
