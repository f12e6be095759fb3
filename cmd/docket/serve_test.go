package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/planner/demomodel"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes and reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// served is a `docket serve` running in-process.
type served struct {
	base, token string
	lines       []string // stdout up to the URL and token lines
	stderr      *lockedBuffer
	stop        func() error
}

// startServe runs `docket serve` with args and waits until it printed where
// it listens.
func startServe(t *testing.T, env map[string]string, args ...string) *served {
	t.Helper()
	pr, pw := io.Pipe()
	stderr := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := runEnv(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), Env{
			Stdin: strings.NewReader(""), Stdout: pw, Stderr: stderr,
			Getenv: func(k string) string { return env[k] },
		})
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	s := &served{stderr: stderr}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(30 * time.Second)
	for s.base == "" || !strings.Contains(strings.Join(s.lines, "\n"), "open ") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve ended before listening: %v\nstderr: %s", <-done, stderr)
			}
			s.lines = append(s.lines, l)
			if rest, ok := strings.CutPrefix(l, "docket serve: listening on "); ok {
				s.base = strings.TrimSuffix(rest, "/")
			}
			if _, tok, ok := strings.Cut(l, "shown this once): "); ok {
				s.token = tok
			}
		case <-deadline:
			t.Fatalf("serve printed no URL in time: %q", s.lines)
		}
	}
	go func() {
		for range lines { // keep draining stdout
		}
	}()
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("serve did not stop in time")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *served) post(t *testing.T, path string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", s.base+path, bytes.NewReader(b))
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

// `docket serve` with no flags: the demo model and the demo world, a token
// generated once and kept, the CLI acting through it with --server, and a
// graceful stop.
func TestServeDemoAndServerFlag(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	s := startServe(t, nil, "--data", data)
	out := strings.Join(s.lines, "\n")
	if !strings.Contains(out, "no model endpoint configured") || !strings.Contains(out, "demo model") || s.token == "" {
		t.Fatalf("serve said:\n%s", out)
	}
	fi, err := os.Stat(filepath.Join(data, tokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if strings.Contains(s.stderr.String(), s.token) {
		t.Fatal("the token is in the log")
	}

	// A newcomer's goal, planned by the demo model, waits for approval.
	var doc struct {
		RunID   string `json:"run_id"`
		Status  string `json:"status"`
		Actions []struct{ ID, Tool, Status string }
	}
	if code := s.post(t, "/v1/runs", map[string]any{"goal": "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack", "approve": "none"}, &doc); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d", code)
	}
	if doc.Status != "awaiting_approval" || len(doc.Actions) != 3 {
		t.Fatalf("run = %+v", doc)
	}

	// The data directory is held: local commands say so (exit 4), and act
	// through the service with --server.
	if r := inproc(t, "runs", "list", "--data", data); r.code != exitBusy {
		t.Fatalf("local runs list while serving: %s", r)
	}
	srv := []string{"--server", s.base, "--token", s.token}
	r := inproc(t, append([]string{"approve", doc.RunID}, srv...)...)
	// The email's reference resolved: it is shown again, resolved.
	if r.code != exitPaused || !strings.Contains(r.stderr, "--server "+s.base) {
		t.Fatalf("first approve: %s", r)
	}
	r = inproc(t, append([]string{"approve", doc.RunID}, srv...)...)
	if r.code != exitOK || !strings.Contains(r.stdout, `"status": "completed"`) {
		t.Fatalf("second approve: %s", r)
	}
	r = inproc(t, append([]string{"runs", "show", "--json", doc.RunID}, srv...)...)
	if r.code != exitOK || !strings.Contains(r.stdout, `"status": "completed"`) {
		t.Fatalf("runs show: %s", r)
	}
	r = inproc(t, append([]string{"runs", "list"}, srv...)...)
	if r.code != exitOK || !strings.Contains(r.stdout, doc.RunID) {
		t.Fatalf("runs list: %s", r)
	}

	// docket run --server with a plan: performed, and the same command again
	// repeats nothing.
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, demoworld.OnboardingPlan(), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r = inproc(t, append([]string{"run", "--plan", planPath, "--approve", "all"}, srv...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, `"status": "completed"`) || strings.Contains(r.stdout, `"attempts": 2`) {
			t.Fatalf("run --server #%d: %s", i+1, r)
		}
	}
	// docket run --server with a goal: the service's (demo) model plans it;
	// the same command again is the same request and gets the same run.
	var ids []string
	for i := range 2 {
		r = inproc(t, append([]string{"run", "--goal", "onboard Initech: create the CRM contact, email the welcome pack", "--approve", "all"}, srv...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, `"status": "completed"`) {
			t.Fatalf("run --server --goal #%d: %s", i+1, r)
		}
		var d struct {
			RunID string `json:"run_id"`
		}
		json.Unmarshal([]byte(r.stdout), &d)
		ids = append(ids, d.RunID)
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Fatalf("run --server --goal twice gave runs %q", ids)
	}
	r = inproc(t, "runs", "show", "--server", s.base, "--token", "wrong-token-wrong-token", doc.RunID)
	if r.code != exitBad || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("wrong token: %s", r)
	}

	if err := s.stop(); err != nil {
		t.Fatalf("serve stopped with %v", err)
	}
	if !strings.Contains(s.stderr.String(), "stopped") {
		t.Fatalf("stderr: %s", s.stderr)
	}

	// A second start keeps the stored token and does not show it again.
	s2 := startServe(t, nil, "--data", data)
	if s2.token != "" || strings.Contains(strings.Join(s2.lines, "\n"), s.token) {
		t.Fatalf("restart showed a token: %q", s2.lines)
	}
	s2.token = s.token
	var again struct{ Status string }
	req, _ := http.NewRequest("GET", s2.base+"/v1/runs/"+doc.RunID, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&again)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || again.Status != "completed" {
		t.Fatalf("after restart: %d %+v", resp.StatusCode, again)
	}
}

func TestServeFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "short"}, "at least 16"},
		{[]string{"--grace", "0s"}, "--grace"},
		{[]string{"--addr", "not-an-address"}, "listening on"},
		{[]string{"extra"}, "no positional"},
	} {
		r := inproc(t, append([]string{"serve", "--data", filepath.Join(dir, "d")}, c.args...)...)
		if r.code != exitBad || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %s", c.args, r)
		}
	}
	// A named token from the environment is accepted and no token is generated.
	s := startServe(t, map[string]string{"DOCKET_TOKEN": "ci=0123456789abcdef0123"}, "--data", filepath.Join(dir, "e"))
	if s.token != "" {
		t.Fatal("a token was generated although DOCKET_TOKEN is set")
	}
	s.token = "0123456789abcdef0123"
	if code := s.post(t, "/v1/runs", map[string]any{"plan": json.RawMessage(demoworld.OnboardingPlan()), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("POST with the named token = %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "e", tokenFile)); !os.IsNotExist(err) {
		t.Fatalf("token file written: %v", err)
	}
}

// `docket run --goal` plans with the model once and records the plan; the
// same command again (even with no model configured) resumes the recorded
// run without calling the model and repeats no effect.
func TestRunGoalCommand(t *testing.T) {
	b := setup(t)
	calls := 0
	var mu sync.Mutex
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		demomodel.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	vars := map[string]string{"OPENAI_BASE_URL": model.URL + "/v1", "OPENAI_MODEL": demomodel.Model}
	goal := "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack"
	args := []string{"run", "--data", b.data, "--tools", b.tools, "--goal", goal, "--approve", "all"}
	code, out, errOut := runWith(t, Env{Getenv: func(k string) string { return vars[k] }}, args...)
	if code != exitOK || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("run --goal: exit %d\n%s\n%s", code, out, errOut)
	}
	mu.Lock()
	first := calls
	mu.Unlock()
	if first == 0 {
		t.Fatal("the model was not called")
	}
	code, out2, errOut := runWith(t, Env{Getenv: func(string) string { return "" }}, args...)
	if code != exitOK || !strings.Contains(errOut, "using the recorded plan") {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, out2, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != first {
		t.Fatalf("the model was called again (%d → %d)", first, calls)
	}
	for _, e := range []string{"crm/billing@acme.example", "payments/onboarding-acme", "email/billing@acme.example/welcome-pack"} {
		if n := b.world.Effect(e); n != 1 {
			t.Fatalf("effect %s = %d, want 1", e, n)
		}
	}
	// No model at all and no recorded plan: a clear bad-input error.
	code, _, errOut = runWith(t, Env{Getenv: func(string) string { return "" }}, "run", "--data", b.data, "--tools", b.tools, "--goal", "onboard Initech: create the CRM contact")
	if code != exitBad || !strings.Contains(errOut, "needs a model") {
		t.Fatalf("no model: exit %d\n%s", code, errOut)
	}
}

// With a tools file and no model configured, the service takes plans only.
func TestServeToolsFileWithoutModel(t *testing.T) {
	b := setup(t)
	s := startServe(t, map[string]string{"DOCKET_TOKEN": "0123456789abcdef0123"}, "--data", b.data, "--tools", b.tools)
	s.token = "0123456789abcdef0123"
	if out := strings.Join(s.lines, "\n"); !strings.Contains(out, "created from plans only") {
		t.Fatalf("serve said:\n%s", out)
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if code := s.post(t, "/v1/runs", map[string]any{"goal": "onboard ACME"}, &e); code != http.StatusNotImplemented || e.Error.Code != "no_planner" {
		t.Fatalf("goal without a model = %d %+v", code, e)
	}
	var doc struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
	}
	if code := s.post(t, "/v1/runs", map[string]any{"plan": json.RawMessage(demoworld.OnboardingPlan()), "approve": "all"}, &doc); code != http.StatusCreated {
		t.Fatalf("plan = %d", code)
	}
	r := inproc(t, "runs", "list", "--server", s.base, "--token", s.token, "--json")
	if r.code != exitOK || !strings.Contains(r.stdout, "Onboard ACME") {
		t.Fatalf("runs list: %s", r)
	}
	// A stop starts no new action: wait for the run to end first.
	if code := s.get(t, "/v1/runs/"+doc.RunID+"?wait=60s", &doc); code != http.StatusOK || doc.Status != "completed" {
		t.Fatalf("GET the run after waiting: %d, status %q", code, doc.Status)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	// The world saw the plan performed (each effect once).
	for _, e := range demoworld.OnboardingEffects {
		if n := b.world.Effect(e); n != 1 {
			t.Fatalf("effect %s = %d, want 1 (%s)", e, n, b.world.Describe())
		}
	}
}
