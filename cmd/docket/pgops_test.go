package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger/postgres/pgtest"
)

// keywordLedger writes a ledger URL of the package's cluster in libpq's
// keyword/value form.
func keywordLedger(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	return fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=disable",
		u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/"), u.User.Username(), pw)
}

// --ledger and $DOCKET_LEDGER take libpq's keyword/value form as they take
// a URL; the messages that name the ledger hide its password.
func TestSharedLedgerKeywordForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw, pw := sharedLedger(t)
	dsn := keywordLedger(t, raw)
	noPassword := func(r result) {
		t.Helper()
		if strings.Contains(r.stdout+r.stderr, pw) {
			t.Fatalf("the password was printed:\n%s", r)
		}
	}
	planPath := b.plan(t, "p", crashPlan(crashClasses[4])) // an email (at most once), then a payment
	r := inproc(t, "run", "--ledger", dsn, "--tools", b.tools, "--plan", planPath, "--run-id", "kw-1")
	wantCode(t, r, exitPaused)
	noPassword(r)
	if !strings.Contains(r.stderr, "docket approve --ledger 'host=") || !strings.Contains(r.stderr, "password=xxxxx") {
		t.Fatalf("the waiting message should name the ledger (without its password):\n%s", r)
	}
	env := map[string]string{"DOCKET_LEDGER": dsn}
	r = inprocEnv(t, env, "approve", "--tools", b.tools, "kw-1")
	wantCode(t, r, exitOK)
	noPassword(r)
	// The URL form reads what the keyword form recorded.
	r = inproc(t, "runs", "show", "--json", "--ledger", raw, "kw-1")
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, `"status": "completed"`) && !strings.Contains(r.stdout, `"status":"completed"`) {
		t.Fatalf("runs show:\n%s", r)
	}
	// A data directory is still a directory.
	r = inproc(t, "runs", "list", "--ledger", "./host=somewhere")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "keyword/value") {
		t.Fatalf("--ledger with a path:\n%s", r)
	}
}

// Two docket serve nodes on one database through PgBouncer in transaction
// mode, named with the keyword/value form and nothing about the pooler (B
// LISTENs on a direct connection, $DOCKET_LEDGER_LISTEN; A polls): a run
// created on A streams on B gap-free; A is SIGKILLed while a charge is
// in flight and B finishes the run, every charge made once; a run
// submitted on B waits for approval and an approval on B finishes it.
func TestSharedLedgerNodesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	raw, pw := sharedLedger(t)
	bouncer := pgtest.StartBouncer(t, sharedPG.Get(t), pgtest.BouncerOptions{})
	dsn := keywordLedger(t, bouncer.Rewrite(raw))
	w := newChargeWorld(t)
	tools := w.toolsFile(t, t.TempDir())
	const token = "pooled-nodes-test-token"
	args := []string{"--ledger", dsn, "--tools", tools, "--token", token, "--lease", "2s"}
	a := startServeChild(t, args...)
	// B LISTENs on a direct connection ($DOCKET_LEDGER_LISTEN); A polls.
	b := startServeChildEnv(t, append(os.Environ(), "DOCKET_LEDGER_LISTEN="+keywordLedger(t, raw)), args...)
	for name, s := range map[string]*servedChild{"A": a, "B": b} {
		if !strings.Contains(s.output(), "pooler in transaction mode") {
			t.Fatalf("node %s did not say it found the pooler:\n%s", name, s.output())
		}
	}
	if !strings.Contains(b.output(), "LISTENs for other nodes' events on ListenURL") || strings.Contains(a.output(), "on ListenURL") {
		t.Fatalf("B should LISTEN on $DOCKET_LEDGER_LISTEN, A poll\nA:\n%s\nB:\n%s", a.output(), b.output())
	}

	body := fmt.Sprintf(`{"run_id": "mid", "approve": "all", "plan": %s}`, diskPlan)
	if status, _, code := a.call(t, "POST", "/v1/runs", token, body); status != http.StatusCreated {
		t.Fatalf("POST /v1/runs on A: %d %s\nA:\n%s", status, code, a.output())
	}
	if status, _, code := b.call(t, "POST", "/v1/runs", token, body); status != http.StatusOK {
		t.Fatalf("the same POST on B: %d %s, want 200", status, code)
	}
	events := streamRun(t, b.base, token, "mid")
	waitClosed(t, w.arrived, "the gate charge at the provider")
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	close(w.open)
	var next uint64 = 1
	deadline := time.After(90 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-events:
			if !ok {
				t.Fatalf("B's socket closed before the run completed\nB:\n%s", b.output())
			}
			if m.Event == nil {
				continue
			}
			ev := m.Event
			if ev.Seq != next {
				t.Fatalf("event seq %d on B's socket, want %d (gap or repeat)", ev.Seq, next)
			}
			next++
			switch ev.Type {
			case "run.completed":
				done = true
			case "run.failed", "run.paused":
				t.Fatalf("run mid ended %s\nB:\n%s", ev.Type, b.output())
			}
		case <-deadline:
			t.Fatalf("run mid did not complete after A was killed\nB:\n%s", b.output())
		}
	}
	for ref, n := range w.effectsOf("first", "gate", "last") {
		if n != 1 {
			t.Errorf("%d charges for %s, want 1", n, ref)
		}
	}

	submitAndApprove(t, w, b, b, token)
	for _, s := range []*servedChild{a, b} {
		if strings.Contains(s.output(), pw) {
			t.Fatalf("a node logged the password:\n%s", s.output())
		}
		// Every request took from the token's shared bucket through the pooler.
		if strings.Contains(s.output(), "shared rate limits could not be read") {
			t.Fatalf("the shared rate limits failed through the pooler:\n%s", s.output())
		}
	}
}

// A token's request rate is one budget across the nodes of a shared
// ledger: requests spread over two nodes are allowed --burst times in all,
// not --burst times on each.
func TestSharedLedgerNodesRateLimit(t *testing.T) {
	t.Parallel()
	raw, _ := sharedLedger(t)
	tools := newChargeWorld(t).toolsFile(t, t.TempDir())
	const token = "shared-limits-test-token"
	// One request per 100s refills: nothing refills during the test.
	args := []string{"--ledger", raw, "--tools", tools, "--token", token, "--rate", "0.01", "--burst", "10"}
	a := startServeChild(t, args...)
	b := startServeChild(t, args...)
	allowed, limited := 0, 0
	for i := range 30 {
		s := a
		if i%2 == 1 {
			s = b
		}
		switch status, retry, code := s.call(t, "GET", "/v1/runs", token, ""); status {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
			limited++
			if code != "rate_limited" || retry == "" {
				t.Fatalf("429 without rate_limited and Retry-After: %q %q", code, retry)
			}
		default:
			t.Fatalf("GET /v1/runs: %d %s", status, code)
		}
	}
	if allowed != 10 || limited != 20 {
		t.Fatalf("%d requests allowed and %d limited over two nodes, want 10 and 20 (one budget of --burst 10)\nA:\n%s\nB:\n%s", allowed, limited, a.output(), b.output())
	}
}

// The cap on a token's page sessions (32) holds across the nodes of a
// shared ledger: 34 sign-ins spread over two nodes leave the 32 newest
// sessions valid on both, and the 2 oldest ended on both.
func TestSharedLedgerNodesSessionCap(t *testing.T) {
	t.Parallel()
	raw, _ := sharedLedger(t)
	tools := newChargeWorld(t).toolsFile(t, t.TempDir())
	const token = "shared-sessions-cap-test-token"
	args := []string{"--ledger", raw, "--tools", tools, "--token", token, "--rate", "1000", "--burst", "1000"}
	nodes := []*servedChild{startServeChild(t, args...), startServeChild(t, args...)}
	var cookies []*http.Cookie
	for i := range 34 {
		s := nodes[i%2]
		resp, err := http.Post(s.base+"/v1/session", "application/json", strings.NewReader(`{"token": "`+token+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var c *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "docket_session" {
				c = ck
			}
		}
		if resp.StatusCode != http.StatusOK || c == nil {
			t.Fatalf("sign-in %d: %d, cookie %v", i, resp.StatusCode, c)
		}
		cookies = append(cookies, c)
	}
	for i, c := range cookies {
		for n, s := range nodes {
			req, _ := http.NewRequest("GET", s.base+"/v1/runs", nil)
			req.AddCookie(c)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusOK
			if i < 2 {
				want = http.StatusUnauthorized
			}
			if resp.StatusCode != want {
				t.Errorf("session %d (of 34, made on node %d) on node %d: %d, want %d", i, i%2, n, resp.StatusCode, want)
			}
		}
	}
}

// A client address's allowance of failed sign-ins (20 at once, 1 per
// second) is one across the nodes of a shared ledger: wrong tokens spread
// over two nodes are answered 401 about 20 times in all, then 429.
func TestSharedLedgerNodesSignInThrottle(t *testing.T) {
	t.Parallel()
	raw, _ := sharedLedger(t)
	tools := newChargeWorld(t).toolsFile(t, t.TempDir())
	const token = "shared-signin-test-token"
	args := []string{"--ledger", raw, "--tools", tools, "--token", token}
	nodes := []*servedChild{startServeChild(t, args...), startServeChild(t, args...)}
	start := time.Now()
	unauthorized, limited := 0, 0
	for i := range 36 {
		switch status, _, code := nodes[i%2].call(t, "GET", "/v1/runs", "wrong-token-"+token, ""); status {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Fatalf("a wrong token: %d %s", status, code)
		}
	}
	// The allowance refills at 1 per second while the requests go.
	refilled := int(time.Since(start).Seconds()) + 1
	if unauthorized < 20 || unauthorized > 20+refilled || limited == 0 {
		t.Fatalf("36 wrong tokens over two nodes: %d answered 401 and %d 429, want 20 (+%d refilled) 401 and the rest 429 (one allowance)", unauthorized, limited, refilled)
	}
}
