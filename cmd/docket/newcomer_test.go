package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger/badgerdb"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServerUnreachable: a --server nobody answers on is not a failed run
// (exit 1) but "unavailable, retry later" (exit 4), says that nothing was
// sent, and prints no made-up Run JSON. A connection that breaks after the
// request was sent says the request may have been carried out; a service
// answering 503 is also exit 4.
func TestServerUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	planPath := b.plan(t, "plan", string(demoworld.OnboardingPlan()))
	down := "http://" + closedPort(t)
	vars := map[string]string{"DOCKET_TOKEN": "tok-0123456789abcdef"}
	for _, args := range [][]string{
		{"run", "--server", down, "--plan", planPath, "--run-id", "r1"},
		{"runs", "list", "--server", down},
		{"runs", "show", "--server", down, "r1"},
		{"approve", "--server", down, "r1"},
	} {
		r := inprocEnv(t, vars, args...)
		if r.code != exitBusy {
			t.Errorf("exit %d, want 4 (retry later)\n%s", r.code, r)
			continue
		}
		for _, w := range []string{"unreachable", down, "nothing was sent", "docket serve running"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("stderr lacks %q\n%s", w, r)
			}
		}
		if r.stdout != "" {
			t.Errorf("a command that reached no service printed a Run JSON\n%s", r)
		}
	}

	// Accepts the request, then hangs up without an answer.
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hangup.Close)
	r := inprocEnv(t, vars, "runs", "list", "--server", hangup.URL)
	if r.code != exitBusy || !strings.Contains(r.stderr, "may have been carried out") || !strings.Contains(r.stderr, "runs show --server "+hangup.URL) {
		t.Errorf("a connection broken before the answer: want exit 4 saying the request may have been carried out\n%s", r)
	}

	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error": {"code": "shutting_down", "message": "the service is shutting down"}}`))
	}))
	t.Cleanup(unavailable.Close)
	r = inprocEnv(t, vars, "run", "--server", unavailable.URL, "--plan", planPath, "--run-id", "r1")
	if r.code != exitBusy || !strings.Contains(r.stderr, "shutting down") || r.stdout != "" {
		t.Errorf("a 503 answer: want exit 4 and no Run JSON\n%s", r)
	}
}

// TestStepBusyPrintsNoMadeUpRun: a step whose data directory is held by
// another process exits 4 and prints nothing on stdout (it cannot read the
// run; before, it printed a run "running" created at 0001-01-01).
func TestStepBusyPrintsNoMadeUpRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: b.data})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := stepInproc(t, stepRequestJSON(t, "busy-step", demoworld.OnboardingPlan(), "all"), b.stepArgs()...)
	wantCode(t, r, exitBusy)
	if r.stdout != "" || !strings.Contains(r.stderr, "--server URL") {
		t.Fatalf("busy step: want no stdout and a hint to use --server URL\n%s", r)
	}
}

// TestServeEveryInterface: --addr 0.0.0.0:PORT prints a URL a browser can
// open (not http://[::]:PORT), the URL for other machines, and a warning that
// the API is plain HTTP on every interface.
func TestServeEveryInterface(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := startServe(t, nil, "--data", filepath.Join(dir, "data"), "--addr", "0.0.0.0:0")
	if !strings.HasPrefix(s.base, "http://127.0.0.1:") {
		t.Fatalf("listening URL %q: want http://127.0.0.1:PORT\n%s", s.base, strings.Join(s.lines, "\n"))
	}
	resp, err := http.Get(s.base + "/healthz")
	if err != nil {
		t.Fatalf("the printed URL does not answer: %v", err)
	}
	resp.Body.Close()
	out := strings.Join(s.lines, "\n")
	if !strings.Contains(out, "every network interface") || !strings.Contains(out, "other machines: http://") {
		t.Fatalf("stdout should say it listens everywhere and give the URL for other machines:\n%s", out)
	}
	if w := s.stderr.String(); !strings.Contains(w, "warning") || !strings.Contains(w, "plain HTTP on every network interface") {
		t.Fatalf("no plain-HTTP warning on stderr:\n%s", w)
	}

	// The default (loopback) warns about nothing.
	local := startServe(t, nil, "--data", filepath.Join(dir, "data2"))
	if strings.Contains(local.stderr.String(), "plain HTTP") || strings.Contains(strings.Join(local.lines, "\n"), "every network interface") {
		t.Fatalf("a loopback listener warned:\n%s\n%s", strings.Join(local.lines, "\n"), local.stderr)
	}
}

// TestServeRestartSaysWhereTheTokenIs: the generated token is shown once; on
// restart serve says which file keeps it (and still never prints it).
func TestServeRestartSaysWhereTheTokenIs(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	first := startServe(t, nil, "--data", data)
	if first.token == "" {
		t.Fatalf("first start showed no generated token:\n%s", strings.Join(first.lines, "\n"))
	}
	first.stop() // (a stop this early may report the interrupted start-up)
	second := startServe(t, nil, "--data", data)
	out := strings.Join(second.lines, "\n")
	path := filepath.Join(data, tokenFile)
	if !strings.Contains(out, "kept in "+path) {
		t.Fatalf("restart should say the token is kept in %s:\n%s", path, out)
	}
	if strings.Contains(out, first.token) {
		t.Fatalf("restart printed the token:\n%s", out)
	}
	kept, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(kept)) != first.token {
		t.Fatalf("the token file does not hold the token: %v", err)
	}
	env := startServe(t, map[string]string{"DOCKET_TOKEN": "from-the-environment-0123"}, "--data", filepath.Join(t.TempDir(), "d"))
	if !strings.Contains(strings.Join(env.lines, "\n"), "token: from $DOCKET_TOKEN") {
		t.Fatalf("serve should say the token comes from DOCKET_TOKEN:\n%s", strings.Join(env.lines, "\n"))
	}
}

// TestServeDemoModelUnknownGoal: with no model configured, a goal the demo
// model cannot plan is refused (422) with a message that says so and lists
// what it knows; no empty run is recorded as "completed".
func TestServeDemoModelUnknownGoal(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"))
	var answer struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	code := s.post(t, "/v1/runs", map[string]any{"run_id": "milk", "goal": "buy milk and send it to Bob"}, &answer)
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("POST /v1/runs with a goal the demo model does not know: %d %+v, want 422", code, answer)
	}
	for _, w := range []string{"demo model", "onboard", "crm_create_contact", "email_send", "OPENAI_MODEL"} {
		if !strings.Contains(answer.Error.Message, w) {
			t.Errorf("refusal message lacks %q: %s", w, answer.Error.Message)
		}
	}
	req, _ := http.NewRequest("GET", s.base+"/v1/runs", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list runList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Runs) != 0 {
		t.Fatalf("a refused goal recorded runs: %+v", list.Runs)
	}
}

// TestReadmeCLIReferenceShowsTools: the commands that continue a run refuse
// to work without --tools, so the CLI reference (cmd/docket/README.md) shows
// it on each.
func TestReadmeCLIReferenceShowsTools(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	planPath := filepath.Join(dir, "p.json")
	if err := os.WriteFile(planPath, demoworld.OnboardingPlan(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, args string }{
		{"approve", "r1"},
		{"reject", "r1 a1"},
		{"resolve", "r1 a1 --skip"},
		{"replay", "r1 --plan " + planPath},
		{"fork", "r1"},
	} {
		r := inproc(t, append([]string{c.name, "--data", data}, strings.Fields(c.args)...)...)
		if r.code != exitBad || !strings.Contains(r.stderr, "--tools FILE is required") {
			t.Errorf("%s without --tools: exit %d\n%s", c.name, r.code, r)
		}
		row := ""
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "| `docket "+c.name+" ") || strings.Contains(line, "/ `docket "+c.name+" ") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("the README's CLI reference has no row for docket %s", c.name)
			continue
		}
		if !strings.Contains(row, "`docket "+c.name+" --tools F ") {
			t.Errorf("the README's CLI reference shows docket %s without --tools F: %s", c.name, row)
		}
	}
}

// TestNoDoublePrefix: an edit or a replay that does not fit the tools says
// "invalid plan" once, not "invalid plan: invalid plan:" (nor "executor:
// invalid plan: ... invalid plan:").
func TestNoDoublePrefix(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"))
	var created struct {
		Actions []struct {
			ID string `json:"id"`
		} `json:"actions"`
	}
	if code := s.post(t, "/v1/runs", map[string]any{"run_id": "dp", "plan": json.RawMessage(demoworld.OnboardingPlan()), "approve": "none"}, &created); code != http.StatusCreated || len(created.Actions) == 0 {
		t.Fatalf("creating the run: %d %+v", code, created)
	}
	var answer struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	code := s.post(t, "/v1/runs/dp/actions/"+created.Actions[0].ID+"/edit", map[string]any{"args": map[string]any{"bogus": 1}}, &answer)
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("edit with bad args: %d %s", code, answer.Error.Message)
	}
	if n := strings.Count(answer.Error.Message, "invalid plan"); n != 1 {
		t.Errorf("edit refusal says \"invalid plan\" %d times: %s", n, answer.Error.Message)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"actions": [{"id": "x", "tool": "email_send", "args": {"to": 1}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := inprocEnv(t, map[string]string{"DOCKET_TOKEN": s.token}, "replay", "--server", s.base, "dp", "--plan", bad)
	wantCode(t, r, exitBad)
	if n := strings.Count(r.stderr, "invalid plan"); n != 1 || strings.Contains(r.stderr, "invalid_plan: invalid plan") {
		t.Errorf("replay refusal says \"invalid plan\" %d times:\n%s", n, r)
	}
}
