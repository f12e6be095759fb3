package ui_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// One token per scope, plus the two of the agent/person split.
const (
	agentToken  = "agent-token-0123456789"  // read, submit: what an agent holds
	botToken    = "bot-token-0123456789abc" // submit only
	personToken = "person-token-012345678"  // read, review, control: a person
)

var scopeTokens = map[ui.Scope]string{
	ui.ScopeRead:    "scope-read-0123456789",
	ui.ScopeSubmit:  "scope-submit-012345678",
	ui.ScopeReview:  "scope-review-012345678",
	ui.ScopeControl: "scope-control-01234567",
	ui.ScopeAdmin:   "scope-admin-0123456789",
}

func hashOf(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// withScopedTokens adds the tokens above: the per-scope ones by hash (as a
// tokens file gives them), the others in clear.
func withScopedTokens(c *ui.Config) {
	for _, sc := range ui.Scopes {
		c.ScopedTokens = append(c.ScopedTokens, ui.Token{Name: "only-" + string(sc), Scopes: []ui.Scope{sc}, SHA256: hashOf(scopeTokens[sc])})
	}
	c.ScopedTokens = append(c.ScopedTokens,
		ui.Token{Name: "agent", Scopes: []ui.Scope{ui.ScopeRead, ui.ScopeSubmit}, Secret: agentToken},
		ui.Token{Name: "bot", Scopes: []ui.Scope{ui.ScopeSubmit}, Secret: botToken},
		ui.Token{Name: "rita", Scopes: []ui.Scope{ui.ScopeRead, ui.ScopeReview, ui.ScopeControl}, Secret: personToken},
	)
}

func bearerOf(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

type forbiddenBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details struct {
			MissingScope string   `json:"missing_scope"`
			Token        string   `json:"token"`
			Scopes       []string `json:"scopes"`
		} `json:"details"`
	} `json:"error"`
}

// dialAs opens a WebSocket with tok, trusting the server's certificate.
func (b *bundle) dialAs(path, tok string) (*websocket.Conn, *http.Response, error) {
	return b.dialer().Dial(b.wsURL(path), http.Header{"Authorization": {"Bearer " + tok}})
}

// TestEveryRouteWithEveryScope walks the route table as served (routes
// added later are walked too) with a token of each scope: a token that
// lacks the route's scope gets 403 forbidden naming it; one that holds it
// gets past authorization (whatever the handler then says about the dummy
// request); public routes need no token; no route lets a request without a
// token through.
func TestEveryRouteWithEveryScope(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: withScopedTokens})
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "walk", "plan": onboardingPlan(t), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	fill := strings.NewReplacer("{id}", "walk", "{action}", "price")
	routes := ui.Routes()
	if len(routes) < 20 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, rt := range routes {
		path := fill.Replace(rt.Path)
		if rt.Public {
			// Needs no scope (POST /v1/session answers 401 to no token: it is the sign-in).
			req, _ := http.NewRequest(rt.Method, b.hs.URL+path, nil)
			resp, err := b.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusForbidden || (resp.StatusCode == http.StatusUnauthorized && rt.Path != "/v1/session") {
				t.Errorf("public %s %s without a token = %d", rt.Method, rt.Path, resp.StatusCode)
			}
			continue
		}
		if !rt.Listed {
			t.Errorf("%s %s has no scope of its own (it needs admin): add it to routeScopes", rt.Method, rt.Path)
		}
		if code := b.callWith(rt.Method, path, nil, nil, nil); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token = %d, want 401", rt.Method, rt.Path, code)
		}
		for _, sc := range ui.Scopes {
			// A body that no handler accepts as is: the scope check comes first.
			code, e := b.callRaw(rt.Method, path, `{"x-walk": true}`, scopeTokens[sc])
			holds := sc == ui.ScopeAdmin || rt.Scope == "" || rt.Scope == sc
			switch {
			case holds && code == http.StatusForbidden && e.Error.Code == "forbidden":
				t.Errorf("%s %s with a %s token: forbidden (%s)", rt.Method, rt.Path, sc, e.Error.Message)
			case holds && code == http.StatusUnauthorized:
				t.Errorf("%s %s with a %s token: 401", rt.Method, rt.Path, sc)
			case !holds && (code != http.StatusForbidden || e.Error.Code != "forbidden" || e.Error.Details.MissingScope != string(rt.Scope) ||
				e.Error.Details.Token != "only-"+string(sc) || !strings.Contains(e.Error.Message, string(rt.Scope))):
				t.Errorf("%s %s with a %s token = %d %+v, want 403 forbidden naming %s", rt.Method, rt.Path, sc, code, e.Error, rt.Scope)
			}
		}
	}
}

// callRaw sends body with tok and reads a forbidden answer, if it is one.
func (b *bundle) callRaw(method, path, body, tok string) (int, forbiddenBody) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.hs.URL+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := b.client().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e forbiddenBody
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &e)
	return resp.StatusCode, e
}

// TestEverySocketOpWithEveryScope: the socket needs read to open; each op
// then needs its scope (review or control), answered with an error naming
// the missing scope, whatever else the message says.
func TestEverySocketOpWithEveryScope(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) {
		withScopedTokens(c)
		for _, sc := range ui.Scopes {
			c.ScopedTokens = append(c.ScopedTokens, ui.Token{Name: "read-" + string(sc), Scopes: []ui.Scope{ui.ScopeRead, sc}, Secret: "read-plus-" + string(sc) + "-0123456789"})
		}
	}})
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "sock", "plan": onboardingPlan(t), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	// Without read, no socket at all (either stream).
	for _, path := range []string{"/v1/runs/sock/ws", "/v1/ws"} {
		for _, sc := range []ui.Scope{ui.ScopeSubmit, ui.ScopeReview, ui.ScopeControl} {
			_, resp, err := b.dialAs(path, scopeTokens[sc])
			if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("%s with only %s: %v %v, want 403", path, sc, err, resp)
			}
			var e forbiddenBody
			json.NewDecoder(resp.Body).Decode(&e)
			if e.Error.Details.MissingScope != "read" {
				t.Fatalf("%s with only %s: %+v", path, sc, e.Error)
			}
		}
	}
	// Messages that name nothing real: a token that holds the op's scope
	// gets past the check (an ack, or an error that is not forbidden).
	msgs := map[string]map[string]any{
		"approve": {"op": "approve", "actions": []string{"nope"}},
		"reject":  {"op": "reject", "action": "nope"},
		"edit":    {"op": "edit", "action": "nope", "args": map[string]any{}},
		"resolve": {"op": "resolve", "action": "nope", "skip": true},
		"run_now": {"op": "run_now", "action": "nope"},
		"pause":   {"op": "pause"},
		"resume":  {"op": "resume"},
		"cancel":  {"op": "cancel", "run": "other-run"}, // refused as another run's: after the scope
	}
	ops := ui.ReviewOps()
	if len(msgs) != len(ops) {
		t.Fatalf("the test knows %d ops, the server %d: %v", len(msgs), len(ops), ops)
	}
	for _, sc := range ui.Scopes {
		tok := "read-plus-" + string(sc) + "-0123456789"
		for _, path := range []string{"/v1/runs/sock/ws", "/v1/ws"} {
			c, _, err := b.dialAs(path, tok)
			if err != nil {
				t.Fatalf("read+%s on %s: %v", sc, path, err)
			}
			for i, op := range ops {
				m := map[string]any{"id": fmt.Sprint(i)}
				for k, v := range msgs[op] {
					m[k] = v
				}
				if path == "/v1/ws" && m["run"] == nil {
					m["run"] = "sock"
				}
				if err := c.WriteJSON(m); err != nil {
					t.Fatal(err)
				}
				var ans wsMsg
				for {
					ans = read(t, c)
					if ans.Type != "event" {
						break
					}
				}
				need := ui.OpScopes()[op]
				holds := sc == ui.ScopeAdmin || sc == need
				forbidden := ans.Type == "error" && ans.Error != nil && ans.Error.Code == "forbidden"
				if holds == forbidden || ans.ID != fmt.Sprint(i) || (forbidden && !strings.Contains(ans.Error.Message, string(need))) {
					t.Errorf("read+%s, op %s on %s: %+v %+v (needs %s)", sc, op, path, ans, ans.Error, need)
				}
			}
			c.Close()
		}
	}
	// The run was never touched by a refused op: every action still waits.
	doc, err := b.led.Doc(t.Context(), "sock")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range doc.Actions {
		if a.Status != ledger.StatusPending {
			t.Fatalf("action %s is %s", a.ID, a.Status)
		}
	}
}

// TestAgentCannotApproveItsOwnRun is the agent/person split end to end, over
// HTTP and over HTTPS with a certificate the test made: a token with submit
// (and read) creates a run that needs a person; its approve and resolve
// attempts are refused (HTTP and socket) naming the review scope, as is
// creating a run that approves itself (approve: all); a person's token
// approves it on the socket and over HTTP, and the run completes.
func TestAgentCannotApproveItsOwnRun(t *testing.T) {
	t.Parallel()
	for _, overTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{tune: withScopedTokens, tls: overTLS})
			if overTLS && !strings.HasPrefix(b.hs.URL, "https://") {
				t.Fatal(b.hs.URL)
			}
			var e forbiddenBody
			if code := b.callWith("POST", "/v1/runs", map[string]any{"run_id": "self", "plan": onboardingPlan(t), "approve": "all"}, &e, bearerOf(botToken)); code != http.StatusForbidden || e.Error.Details.MissingScope != "review" {
				t.Fatalf("submit-only create with approve all = %d %+v", code, e.Error)
			}
			var doc runDoc
			if code := b.callWith("POST", "/v1/runs", map[string]any{"run_id": "split", "plan": onboardingPlan(t)}, &doc, bearerOf(botToken)); code != http.StatusCreated {
				t.Fatalf("submit-only create = %d", code)
			}
			b.waitStatus("split", ledger.RunAwaitingApproval)
			// The submit-only token cannot even read it back.
			if code := b.callWith("GET", "/v1/runs/split", nil, &e, bearerOf(botToken)); code != http.StatusForbidden || e.Error.Details.MissingScope != "read" {
				t.Fatalf("submit-only read = %d %+v", code, e.Error)
			}
			for _, tok := range []string{botToken, agentToken} {
				for _, c := range []struct {
					path string
					body any
				}{
					{"/v1/runs/split/approve", map[string]any{"all": true}},
					{"/v1/runs/split/actions/welcome/approve", nil},
					{"/v1/runs/split/actions/welcome/resolve", map[string]any{"skip": true}},
					{"/v1/runs/split/actions/welcome/edit", map[string]any{"args": map[string]any{}}},
				} {
					e = forbiddenBody{}
					if code := b.callWith("POST", c.path, c.body, &e, bearerOf(tok)); code != http.StatusForbidden || e.Error.Code != "forbidden" || e.Error.Details.MissingScope != "review" {
						t.Fatalf("%s by the agent = %d %+v", c.path, code, e.Error)
					}
				}
			}
			// On the socket: the agent (read+submit) may watch, not approve.
			ac, _, err := b.dialAs("/v1/runs/split/ws", agentToken)
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			for i, m := range []map[string]any{{"op": "approve", "all": true}, {"op": "resolve", "action": "welcome", "retry": true}} {
				m["id"] = fmt.Sprint("agent-", i)
				ac.WriteJSON(m)
				for {
					ans := read(t, ac)
					if ans.Type == "event" {
						continue
					}
					if ans.Type != "error" || ans.Error == nil || ans.Error.Code != "forbidden" || !strings.Contains(ans.Error.Message, "review") {
						t.Fatalf("agent's %v on the socket: %+v %+v", m["op"], ans, ans.Error)
					}
					break
				}
			}
			if d := b.waitStatus("split", ledger.RunAwaitingApproval); d.Run.Status != ledger.RunAwaitingApproval {
				t.Fatal(d.Run.Status)
			}
			// The person approves on the socket...
			pc, _, err := b.dialAs("/v1/runs/split/ws", personToken)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			pc.WriteJSON(map[string]any{"id": "p1", "op": "approve", "all": true})
			for {
				ans := read(t, pc)
				if ans.Type == "event" {
					continue
				}
				if ans.Type != "ack" || ans.ID != "p1" {
					t.Fatalf("person's approve on the socket: %+v %+v", ans, ans.Error)
				}
				break
			}
			// ... and over HTTP whatever is shown again, until it is done.
			final := b.waitFor("split", "an end or a wait", func(d ledger.RunDoc) bool {
				return d.Run.Status == ledger.RunCompleted || (d.Run.Status == ledger.RunAwaitingApproval && slices.ContainsFunc(d.Actions, func(a ledger.Action) bool { return a.Status == ledger.StatusPending }))
			})
			for range 5 {
				if final.Run.Status == ledger.RunCompleted {
					break
				}
				if code := b.callWith("POST", "/v1/runs/split/approve", map[string]any{"all": true}, nil, bearerOf(personToken)); code != http.StatusOK {
					t.Fatalf("person's approve over HTTP = %d", code)
				}
				final = b.waitFor("split", "an end or a wait", func(d ledger.RunDoc) bool {
					return d.Run.Status == ledger.RunCompleted || (d.Run.Status == ledger.RunAwaitingApproval && slices.ContainsFunc(d.Actions, func(a ledger.Action) bool { return a.Status == ledger.StatusPending }))
				})
			}
			if final.Run.Status != ledger.RunCompleted {
				t.Fatalf("run is %s", final.Run.Status)
			}
			// Who approved is recorded: the person's token, never the agent's.
			evs, err := b.led.Events(t.Context(), "split", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			byPerson := 0
			for _, ev := range evs {
				if ev.Type != "action.approved" {
					continue
				}
				switch {
				case bytes.Contains(ev.Data, []byte("token:rita")):
					byPerson++
					if ev.ActionID != "welcome" {
						t.Fatalf("the person approved %s, which the policy approves", ev.ActionID)
					}
				case bytes.Contains(ev.Data, []byte(`"by":"policy"`)) && ev.ActionID != "welcome":
				default:
					t.Fatalf("approval of %s not by the person nor the policy: %s", ev.ActionID, ev.Data)
				}
			}
			if byPerson == 0 {
				t.Fatal("no approval by the person recorded")
			}
		})
	}
}

// TestSessionTellsScopes: the session answers name the token's scopes and
// what the page may offer; under TLS the session cookie is Secure.
func TestSessionTellsScopes(t *testing.T) {
	t.Parallel()
	for _, overTLS := range []bool{false, true} {
		b := setup(t, options{tune: withScopedTokens, tls: overTLS})
		req, _ := http.NewRequest("POST", b.hs.URL+"/v1/session", strings.NewReader(`{"token":"`+agentToken+`"}`))
		resp, err := b.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var created struct {
			Name   string   `json:"name"`
			Scopes []string `json:"scopes"`
		}
		json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		if resp.StatusCode != 200 || created.Name != "agent" || !slices.Equal(created.Scopes, []string{"read", "submit"}) {
			t.Fatalf("POST /v1/session = %d %+v", resp.StatusCode, created)
		}
		var cookie *http.Cookie
		for _, c := range resp.Cookies() {
			if isSessionCookie(c) {
				cookie = c
			}
		}
		if cookie == nil || cookie.Secure != b.secure() || !cookie.HttpOnly {
			t.Fatalf("tls=%v: cookie %+v", b.secure(), cookie)
		}
		var who struct {
			Name   string          `json:"name"`
			Scopes []string        `json:"scopes"`
			May    map[string]bool `json:"may"`
		}
		if code := b.callWith("GET", "/v1/session", nil, &who, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}); code != 200 {
			t.Fatalf("GET /v1/session = %d", code)
		}
		if !slices.Equal(who.Scopes, []string{"read", "submit"}) || who.May["approve"] || who.May["resolve"] || who.May["pause"] || !who.May["create"] {
			t.Fatalf("GET /v1/session = %+v", who)
		}
		// The cookie carries the token's scopes: no approving with it either.
		var e forbiddenBody
		if code := b.callWith("POST", "/v1/runs/x/approve", map[string]any{"all": true}, &e, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}); code != 403 || e.Error.Details.MissingScope != "review" {
			t.Fatalf("approve with the agent's session = %d %+v", code, e.Error)
		}
		var admin struct {
			Scopes []string `json:"scopes"`
		}
		b.call("GET", "/v1/session", nil, &admin)
		if !slices.Equal(admin.Scopes, []string{"read", "submit", "review", "control", "admin"}) {
			t.Fatalf("--token's scopes: %v", admin.Scopes)
		}
	}
}

// TestRateLimitAndSocketCap: a token over its rate gets 429 with
// Retry-After (others are not affected) until its bucket refills; a token
// at its socket cap gets 429 on one more upgrade, and a closed socket gives
// its slot back. Both are counted in /metrics.
func TestRateLimitAndSocketCap(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b := setup(t, options{tune: func(c *ui.Config) {
		withScopedTokens(c)
		c.RateLimit, c.RateBurst, c.MaxSocketsPerToken = 1, 3, 1
		c.Now = clock
	}})
	for i := range 3 {
		if code := b.callWith("GET", "/v1/runs", nil, nil, bearerOf(agentToken)); code != 200 {
			t.Fatalf("request %d = %d", i+1, code)
		}
	}
	req, _ := http.NewRequest("GET", b.hs.URL+"/v1/runs", nil)
	req.Header.Set("Authorization", "Bearer "+agentToken)
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e errorBody
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || e.Error.Code != "rate_limited" {
		t.Fatalf("4th request = %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), e.Error)
	}
	if code := b.callWith("GET", "/v1/runs", nil, nil, bearerOf(personToken)); code != 200 {
		t.Fatalf("another token = %d", code)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if code := b.callWith("GET", "/v1/runs", nil, nil, bearerOf(agentToken)); code != 200 {
		t.Fatalf("after a second = %d", code)
	}

	b.call("POST", "/v1/runs", map[string]any{"run_id": "cap", "plan": onboardingPlan(t), "approve": "none"}, nil)
	c1, _, err := b.dialAs("/v1/runs/cap/ws", personToken)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err = b.dialAs("/v1/ws", personToken)
	if err == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a second socket: %v %v", err, resp)
	}
	c1.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		now = now.Add(10 * time.Second) // refill the bucket between tries
		mu.Unlock()
		c2, _, err := b.dialAs("/v1/ws", personToken)
		if err == nil {
			c2.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed socket's slot was not given back: %v", err)
		}
		<-time.After(10 * time.Millisecond)
	}
	var metrics string
	req, _ = http.NewRequest("GET", b.hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err = b.client().Do(req); err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics = string(raw)
	if !strings.Contains(metrics, "docket_rate_limited_total ") || strings.Contains(metrics, "docket_rate_limited_total 0\n") {
		t.Fatalf("metrics:\n%s", metrics)
	}
}

// TestAuthFailuresCountedNotLogged: a wrong token is counted in
// docket_auth_failures_total and logged, never the token itself; a missing
// scope is counted by scope.
func TestAuthFailuresCountedNotLogged(t *testing.T) {
	t.Parallel()
	var logs lockedLog
	b := setup(t, options{tune: func(c *ui.Config) {
		withScopedTokens(c)
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}})
	const wrong = "wrong-secret-token-abcdef"
	for range 3 {
		if code := b.callWith("GET", "/v1/runs", nil, nil, bearerOf(wrong)); code != 401 {
			t.Fatalf("wrong token = %d", code)
		}
	}
	b.callWith("POST", "/v1/session", map[string]string{"token": wrong}, nil, nil)
	b.callWith("POST", "/v1/runs/x/pause", nil, nil, bearerOf(agentToken))
	req, _ := http.NewRequest("GET", b.hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"docket_auth_failures_total 4\n", `docket_forbidden_total{scope="control"} 1`} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("metrics lack %q:\n%s", want, raw)
		}
	}
	// Logged once per client address and minute, with the count, never
	// once per attempt (a guesser would flood the log).
	got := logs.String()
	if strings.Count(got, "authentication failed") != 1 || strings.Contains(got, wrong) || strings.Contains(got, agentToken) {
		t.Fatalf("log:\n%s", got)
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReadyzWarns: Config.Warnings (docket serve: plain HTTP beyond
// loopback) are in /readyz; the service stays ready.
func TestReadyzWarns(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.Warnings = []string{"plain HTTP on a non-loopback address"} }})
	var ready struct {
		Status   string   `json:"status"`
		Warnings []string `json:"warnings"`
	}
	if code := b.callWith("GET", "/readyz", nil, &ready, nil); code != 200 || ready.Status != "ready" || len(ready.Warnings) != 1 {
		t.Fatalf("/readyz = %d %+v", code, ready)
	}
}
