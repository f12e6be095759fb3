package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/executor/mcpserve/mcpservetest"

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
	// Nothing listening: unavailable, exit 4 (retry later).
	c := sharedPG.Get(t)
	down := strings.Replace(url, fmt.Sprintf(":%d/", c.Port), ":1/", 1)
	r = inproc(t, "runs", "list", "--ledger", down)
	wantCode(t, r, exitBusy)
	noPassword(r)
	if !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("database down:\n%s", r)
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

// wsEvent is one message of a run's WebSocket that carries an event.
type wsEvent struct {
	Event *struct {
		RunID    string          `json:"run_id"`
		Seq      uint64          `json:"seq"`
		Type     string          `json:"type"`
		ActionID string          `json:"action_id"`
		Data     json.RawMessage `json:"data"`
	} `json:"event"`
}

// streamRun dials a run's WebSocket and sends its events on the channel
// (closed when the socket ends).
func streamRun(t *testing.T, base, token, runID string) <-chan wsEvent {
	t.Helper()
	return stream(t, base, token, "/v1/runs/"+runID+"/ws?after=0")
}

// stream dials a WebSocket of the API at path and sends its events on the
// channel (closed when the socket ends).
func stream(t *testing.T, base, token, path string) <-chan wsEvent {
	t.Helper()
	u := "ws" + strings.TrimPrefix(base, "http") + path
	c, resp, err := websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", u, err, resp)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan wsEvent, 256)
	go func() {
		defer close(ch)
		for {
			var m wsEvent
			if err := c.ReadJSON(&m); err != nil {
				return
			}
			if m.Event != nil {
				ch <- m
			}
		}
	}()
	return ch
}

// Three `docket serve` processes on one database: any node answers any
// call (the identity rules of POST /v1/runs hold across them), a run driven
// by node A streams on node B's WebSocket, gap-free; when A is SIGKILLed in
// the middle of a call, another node adopts the run once A's lease expired
// and finishes it, each charge once; an approval given on node C makes a
// run submitted to node B go on; a session of the page made on one node is
// valid on the others.
func TestSharedLedgerNodes(t *testing.T) {
	t.Parallel()
	url, pw := sharedLedger(t)
	w := newChargeWorld(t)
	tools := w.toolsFile(t, t.TempDir())
	const token = "shared-nodes-test-token"
	args := []string{"--ledger", url, "--tools", tools, "--token", token, "--lease", "2s"}
	a := startServeChild(t, args...)
	b := startServeChild(t, args...)
	c := startServeChild(t, args...)

	body := fmt.Sprintf(`{"run_id": "mid", "approve": "all", "plan": %s}`, diskPlan)
	if status, _, code := a.call(t, "POST", "/v1/runs", token, body); status != http.StatusCreated {
		t.Fatalf("POST /v1/runs on A: %d %s", status, code)
	}
	if status, _, code := b.call(t, "POST", "/v1/runs", token, body); status != http.StatusOK {
		t.Fatalf("the same POST on B: %d %s, want 200", status, code)
	}
	other := fmt.Sprintf(`{"run_id": "mid", "approve": "none", "plan": %s}`, diskPlan)
	if status, _, code := c.call(t, "POST", "/v1/runs", token, other); status != http.StatusUnprocessableEntity {
		t.Fatalf("another body under the same id on C: %d %s, want 422", status, code)
	}
	events := streamRun(t, b.base, token, "mid")
	waitClosed(t, w.arrived, "the gate charge at the provider")
	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	close(w.open)

	var next uint64 = 1
	var takeover time.Duration
	deadline := time.After(90 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-events:
			if !ok {
				t.Fatalf("B's socket closed before the run completed\nB:\n%s\nC:\n%s", b.output(), c.output())
			}
			ev := m.Event
			if ev.Seq != next {
				t.Fatalf("event seq %d on B's socket, want %d (gap or repeat)", ev.Seq, next)
			}
			next++
			if ev.Type == "action.claimed" && ev.ActionID == "gate" && strings.Contains(string(ev.Data), `"attempt":2`) {
				takeover = time.Since(killed)
			}
			switch ev.Type {
			case "run.completed":
				done = true
			case "run.failed", "run.paused":
				t.Fatalf("run mid ended %s", ev.Type)
			}
		case <-deadline:
			t.Fatalf("run mid did not complete after A was killed\nB:\n%s\nC:\n%s", b.output(), c.output())
		}
	}
	if takeover == 0 {
		t.Fatal("the gate charge was never claimed again after A was killed")
	}
	t.Logf("takeover (SIGKILL to the gate claimed on another node): %v with --lease 2s", takeover.Round(time.Millisecond))
	for ref, n := range w.effectsOf("first", "gate", "last") {
		if n != 1 {
			t.Errorf("%d charges for %s, want 1", n, ref)
		}
	}

	// Submitted to B, approved on C, continued wherever it is driven.
	submitAndApprove(t, w, b, c, token)
	// C's all-runs stream (the page's live list) shows a run that B
	// created and drove.
	all := stream(t, c.base, token, "/v1/ws")
	elsewhere := `{"run_id": "elsewhere", "approve": "all", "plan": {"goal": "one charge", "actions": [
		{"id": "e1", "tool": "charge", "args": {"reference": "e1", "amount": 9}}]}}`
	if status, _, code := b.call(t, "POST", "/v1/runs", token, elsewhere); status != http.StatusCreated {
		t.Fatalf("POST on B: %d %s", status, code)
	}
	for seenOnC := false; !seenOnC; {
		select {
		case m, ok := <-all:
			if !ok {
				t.Fatal("C's all-runs socket closed")
			}
			seenOnC = m.Event.RunID == "elsewhere" && m.Event.Type == "run.completed"
		case <-time.After(30 * time.Second):
			t.Fatalf("C's all-runs stream never showed run elsewhere completing\nC:\n%s", c.output())
		}
	}
	// A session made on B is valid on C; signing out on C ends it on B.
	req, _ := http.NewRequest("POST", b.base+"/v1/session", strings.NewReader(`{"token": "`+token+`"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "docket_session" {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusOK || cookie == nil {
		t.Fatalf("POST /v1/session on B: %d, cookie %v", resp.StatusCode, cookie)
	}
	withCookie := func(s *servedChild, method, path string) int {
		t.Helper()
		req, _ := http.NewRequest(method, s.base+path, nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := withCookie(c, "GET", "/v1/runs/wait"); code != http.StatusOK {
		t.Fatalf("B's session on C: %d", code)
	}
	if code := withCookie(c, "DELETE", "/v1/session"); code != http.StatusNoContent {
		t.Fatalf("signing out on C: %d", code)
	}
	if code := withCookie(b, "GET", "/v1/runs/wait"); code != http.StatusUnauthorized {
		t.Fatalf("the session on B after signing out on C: %d, want 401", code)
	}
	for _, s := range []*servedChild{a, b, c} {
		if strings.Contains(s.output(), pw) {
			t.Fatalf("a node logged the password:\n%s", s.output())
		}
	}
}

// waitStatus polls a run on node s until it has status want.
// submitAndApprove submits run "wait" (one charge, nothing approved) to
// node on, approves it on node by (the same node or another), and wants it
// completed with one charge.
func submitAndApprove(t *testing.T, w *chargeWorld, on, by *servedChild, token string) {
	t.Helper()
	wait := `{"run_id": "wait", "approve": "none", "plan": {"goal": "one charge", "actions": [
		{"id": "w1", "tool": "charge", "args": {"reference": "w1", "amount": 7}}]}}`
	if status, _, code := on.call(t, "POST", "/v1/runs", token, wait); status != http.StatusCreated {
		t.Fatalf("POST: %d %s", status, code)
	}
	waitStatus(t, on, token, "wait", "awaiting_approval")
	if status, _, code := by.call(t, "POST", "/v1/runs/wait/approve", token, `{"all": true}`); status != http.StatusOK && status != http.StatusAccepted {
		t.Fatalf("approve: %d %s", status, code)
	}
	waitStatus(t, on, token, "wait", "completed")
	if n := w.effectsOf("w1")["w1"]; n != 1 {
		t.Fatalf("%d charges for w1", n)
	}
}

func waitStatus(t *testing.T, s *servedChild, token, runID, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("GET", s.base+"/v1/runs/"+runID, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Status string `json:"status"`
		}
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if doc.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %q, want %q\n%s", runID, doc.Status, want, s.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Two `docket mcp` processes on one shared ledger at the same time (a data
// directory would make the second one busy): the same call in the same
// session through either is one charge.
func TestMCPSharedLedger(t *testing.T) {
	t.Parallel()
	url, pw := sharedLedger(t)
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	toolsPath := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--tools", toolsPath, "--ledger", url, "--approve", "all", "--session", "desk-shared", "--wait", "500ms"}
	a := startMCPChild(t, "", args...)
	b := startMCPChild(t, "", args...)
	charge := map[string]any{"customer": "acme", "amount": 1200}
	ra := a.call(t, "charge", charge, nil)
	rb := b.call(t, "charge", charge, nil)
	if ra.IsError || rb.IsError || resultText(ra) != resultText(rb) {
		t.Fatalf("the same call through two processes: %s / %s", resultText(ra), resultText(rb))
	}
	if e := w.Effects(); e.Charges != 1 {
		t.Fatalf("effects %+v: want one charge", e)
	}
	for _, c := range []*mcpChild{a, b} {
		if strings.Contains(c.stderr.String(), pw) {
			t.Fatalf("docket mcp logged the password: %s", c.stderr)
		}
	}
}

// docket audit takes --ledger postgres://… and $DOCKET_LEDGER: an untouched
// run on the shared ledger verifies there and through a service on it; an
// event edited in the database is reported by all three.
func TestSharedLedgerAudit(t *testing.T) {
	t.Parallel()
	url, pw := sharedLedger(t)
	shapedRun(t, "--ledger", url)
	env := map[string]string{"DOCKET_LEDGER": url}
	s := startServe(t, nil, "--ledger", url)
	check := func(wantExit int, want string) {
		t.Helper()
		for _, r := range []result{
			inproc(t, "audit", "--ledger", url, "--verify", "shaped"),
			inprocEnv(t, env, "audit", "--verify", "shaped"),
			inproc(t, "audit", "--server", s.base, "--token", s.token, "--verify", "shaped"),
		} {
			wantCode(t, r, wantExit)
			if !strings.Contains(r.stderr, want) || strings.Contains(r.stdout+r.stderr, pw) {
				t.Fatalf("want %q on stderr, no password:\n%s", want, r)
			}
			if wantExit == exitOK {
				checkAuditLines(t, r.stdout)
			}
		}
	}
	check(exitOK, "hash chain verified")

	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(context.Background(), `UPDATE docket.events SET data = convert_to(replace(convert_from(data, 'UTF8'), '"z": 1e2', '"z": 1e3'), 'UTF8')
		WHERE run_id = 'shaped' AND type = 'action.succeeded'`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("editing the event: %v (%s)", err, tag)
	}
	check(exitFailed, "audit chain is broken at event 5")
}

// Every command that takes --data takes --ledger through ledgerFlag, with
// $DOCKET_LEDGER as its default (shown without the password), but demo:
// its --data defaults to a temporary directory, and $DOCKET_LEDGER would
// put the demo's runs into the shared ledger. A command that does not
// open a ledger the usual way (chaos has its own --ledger, for the nodes
// experiment only) takes no --data.
func TestEveryDataCommandTakesLedger(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DOCKET_LEDGER": "postgres://u:secret-pw@127.0.0.1:1/db"}
	var lines [][]string
	for name := range commands {
		switch name {
		case "demo":
		case "runs":
			lines = append(lines, []string{"runs", "list"}, []string{"runs", "show"})
		default:
			lines = append(lines, []string{name})
		}
	}
	n := 0
	for _, line := range lines {
		r := inprocEnv(t, env, append(line, "--help")...)
		if strings.Contains(r.stdout+r.stderr, "secret-pw") {
			t.Fatalf("the password was printed:\n%s", r)
		}
		if !strings.Contains(r.stdout, "\n  -data ") {
			continue
		}
		n++
		if !strings.Contains(r.stdout, "\n  -ledger value\n") || !strings.Contains(r.stdout, "(default postgres://u:xxxxx@127.0.0.1:1/db)") {
			t.Errorf("docket %s takes --data without --ledger (default $DOCKET_LEDGER):\n%s", strings.Join(line, " "), r)
		}
	}
	if n < 15 {
		t.Fatalf("only %d commands take --data", n)
	}
}

// docket restore writes a data directory: --ledger (or $DOCKET_LEDGER
// without --data) is refused with what to use instead; an explicit --data
// wins over $DOCKET_LEDGER.
func TestRestoreSharedLedger(t *testing.T) {
	t.Parallel()
	url := "postgres://u:secret-pw@127.0.0.1:1/db"
	env := map[string]string{"DOCKET_LEDGER": url}
	for _, r := range []result{
		inproc(t, "restore", "--ledger", url, "--in", "backup.docket"),
		inprocEnv(t, env, "restore", "--in", "backup.docket"),
	} {
		wantCode(t, r, exitBad)
		if !strings.Contains(r.stderr, "pg_restore") || strings.Contains(r.stderr, "secret-pw") {
			t.Fatalf("restore into the shared ledger:\n%s", r)
		}
	}
	r := inprocEnv(t, env, "restore", "--data", filepath.Join(t.TempDir(), "data"), "--in", filepath.Join(t.TempDir(), "missing"))
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "reading backup") {
		t.Fatalf("restore --data with $DOCKET_LEDGER set:\n%s", r)
	}
}
