package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// The newcomer's path: a goal is planned by the (demo) model, recorded and
// shown waiting; approving it performs every action once.
func TestGoalPlannedApprovedExecuted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var doc runDoc
	code := b.call("POST", "/v1/runs", map[string]any{"goal": "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack", "approve": "none"}, &doc)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d %+v", code, doc)
	}
	if doc.Status != "awaiting_approval" || len(doc.Actions) != 3 || doc.Policy != "none" {
		t.Fatalf("new run = %+v", doc)
	}
	for _, a := range doc.Actions {
		if a.Status != "pending" || a.Class == "" {
			t.Fatalf("action %s: status %s class %q, want pending with a class", a.ID, a.Status, a.Class)
		}
	}
	if n := b.world.Requests("crm") + b.world.Requests("payments") + b.world.Requests("email"); n != 0 {
		t.Fatalf("%d requests reached the world before approval", n)
	}
	final := b.approveUntilDone(doc.RunID)
	if final.Run.Status != ledger.RunCompleted {
		t.Fatalf("run ended %s", final.Run.Status)
	}
	for _, a := range final.Actions {
		if a.Status != ledger.StatusSucceeded {
			t.Fatalf("action %s ended %s", a.ID, a.Status)
		}
	}
	for _, e := range []string{"crm/billing@acme.example", "payments/onboarding-acme", "email/billing@acme.example/welcome-pack"} {
		if n := b.world.Effect(e); n != 1 {
			t.Fatalf("effect %s happened %d times, want 1 (%s)", e, n, b.world.Describe())
		}
	}
	// Approvals record who made them.
	evs, err := b.led.Events(context.Background(), doc.RunID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	approvals := 0
	for _, ev := range evs {
		if ev.Type == "action.approved" {
			approvals++
			if !strings.Contains(string(ev.Data), "token:alice") {
				t.Fatalf("approval event %s does not name the reviewer", ev.Data)
			}
		}
		if strings.Contains(string(ev.Data), testToken) {
			t.Fatalf("event %d carries the token", ev.Seq)
		}
	}
	// The email's arguments changed when its reference resolved: it was
	// shown again and approved a second time.
	if approvals != 4 {
		t.Fatalf("%d approval events, want 4", approvals)
	}
}

// The identity rules of POST /v1/runs (ui/README.md, Runs).
func TestCreateIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	body := map[string]any{"run_id": "r-ident", "plan": onboardingPlan(t), "approve": "none"}
	var first, again runDoc
	if code := b.call("POST", "/v1/runs", body, &first); code != http.StatusCreated {
		t.Fatalf("first = %d", code)
	}
	if code := b.call("POST", "/v1/runs", body, &again); code != http.StatusOK || again.RunID != "r-ident" {
		t.Fatalf("same body again = %d %s, want 200 with the run", code, again.RunID)
	}
	var e errorBody
	body["approve"] = "all"
	if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusUnprocessableEntity || e.Error.Code != "identity_reused" {
		t.Fatalf("different body = %d %+v, want 422 identity_reused", code, e)
	}
	// Idempotency-Key names the run when the body does not.
	h := map[string]string{"Authorization": "Bearer " + testToken, "Idempotency-Key": "idem-1"}
	body2 := map[string]any{"plan": onboardingPlan(t), "approve": "none"}
	var d1, d2 runDoc
	if code := b.callWith("POST", "/v1/runs", body2, &d1, h); code != http.StatusCreated || d1.RunID != "idem-1" {
		t.Fatalf("with Idempotency-Key = %d %s", code, d1.RunID)
	}
	if code := b.callWith("POST", "/v1/runs", body2, &d2, h); code != http.StatusOK || d2.RunID != "idem-1" {
		t.Fatalf("again with Idempotency-Key = %d %s", code, d2.RunID)
	}
	// Without either, every request is a new run.
	var n1, n2 runDoc
	b.call("POST", "/v1/runs", body2, &n1)
	b.call("POST", "/v1/runs", body2, &n2)
	if n1.RunID == "" || n1.RunID == n2.RunID {
		t.Fatalf("anonymous runs got ids %q and %q", n1.RunID, n2.RunID)
	}
}

// blockingModel holds every model request until released.
type blockingModel struct {
	entered chan struct{}
	release chan struct{}
	next    http.RoundTripper
	once    sync.Once
}

func (m *blockingModel) RoundTrip(r *http.Request) (*http.Response, error) {
	m.once.Do(func() { close(m.entered) })
	select {
	case <-m.release:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return m.next.RoundTrip(r)
}

// While the first request is still being accepted (planning), the same
// identity answers 409; afterwards 200.
func TestCreateInProgressConflict(t *testing.T) {
	t.Parallel()
	m := &blockingModel{entered: make(chan struct{}), release: make(chan struct{})}
	b := setup(t, options{model: m})
	m.next = demomodelTransport()
	body := map[string]any{"run_id": "r-busy", "goal": "onboard ACME: create the CRM contact", "approve": "none"}
	firstCode := make(chan int, 1)
	go func() { firstCode <- b.call("POST", "/v1/runs", body, nil) }()
	<-m.entered
	var e errorBody
	if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusConflict || e.Error.Code != "in_progress" {
		t.Fatalf("during acceptance = %d %+v, want 409 in_progress", code, e)
	}
	close(m.release)
	if code := <-firstCode; code != http.StatusCreated {
		t.Fatalf("first = %d, want 201", code)
	}
	if code := b.call("POST", "/v1/runs", body, nil); code != http.StatusOK {
		t.Fatalf("after acceptance = %d, want 200", code)
	}
}

// A client that gives up while the model thinks does not free the identity:
// the planning goes on, a retry meanwhile answers 409, and once the plan is
// recorded the retry gets the run.
func TestCreateClientGoneWhilePlanning(t *testing.T) {
	t.Parallel()
	m := &blockingModel{entered: make(chan struct{}), release: make(chan struct{}), next: demomodelTransport()}
	b := setup(t, options{model: m})
	all, _, err := b.dialer().Dial(b.wsURL("/v1/ws"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	body := map[string]any{"run_id": "r-gone", "goal": "onboard ACME: create the CRM contact", "approve": "none"}
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", b.hs.URL+"/v1/runs", strings.NewReader(string(raw)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	gone := make(chan error, 1)
	go func() {
		resp, err := b.client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	<-m.entered
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	var e errorBody
	if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusConflict {
		t.Fatalf("retry while planning = %d %+v, want 409", code, e)
	}
	close(m.release)
	for {
		msg := read(t, all)
		if msg.Event != nil && msg.Event.RunID == "r-gone" && msg.Event.Type == "run.awaiting_approval" {
			break
		}
	}
	if code := b.call("POST", "/v1/runs", body, nil); code != http.StatusOK {
		t.Fatalf("retry after recording = %d, want 200", code)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var e errorBody
	if code := b.callWith("GET", "/v1/runs", nil, &e, nil); code != http.StatusUnauthorized || e.Error.Code != "unauthorized" {
		t.Fatalf("no token = %d %+v", code, e)
	}
	if code := b.callWith("GET", "/v1/runs", nil, &e, map[string]string{"Authorization": "Bearer wrong-token-xyz"}); code != http.StatusUnauthorized {
		t.Fatalf("wrong token = %d", code)
	}
	// The page's session: a cookie that is HttpOnly and SameSite=Strict.
	req, _ := http.NewRequest("POST", b.hs.URL+"/v1/session", strings.NewReader(`{"token":"`+testToken+`"}`))
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if isSessionCookie(c) {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusOK || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session = %d, cookie %+v", resp.StatusCode, cookie)
	}
	if strings.Contains(cookie.Value, testToken) {
		t.Fatal("the cookie carries the token")
	}
	withCookie := map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}
	if code := b.callWith("GET", "/v1/runs", nil, nil, withCookie); code != http.StatusOK {
		t.Fatalf("GET with the cookie = %d", code)
	}
	// A write carried by the cookie from a foreign page is refused.
	foreign := map[string]string{"Cookie": cookie.Name + "=" + cookie.Value, "Origin": "http://evil.example"}
	if code := b.callWith("POST", "/v1/runs", map[string]any{"plan": onboardingPlan(t)}, &e, foreign); code != http.StatusForbidden || e.Error.Code != "bad_origin" {
		t.Fatalf("foreign write = %d %+v", code, e)
	}
	if code := b.callWith("POST", "/v1/session", map[string]any{"token": "nope-nope-nope"}, &e, nil); code != http.StatusUnauthorized {
		t.Fatalf("session with a wrong token = %d", code)
	}
	// Health needs no token; metrics do.
	if code := b.callWith("GET", "/healthz", nil, nil, nil); code != http.StatusOK {
		t.Fatalf("healthz = %d", code)
	}
	if code := b.callWith("GET", "/metrics", nil, nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("metrics without a token = %d", code)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(c *ui.Config) { c.MaxBodyBytes = 4096 }})
	cases := []struct {
		name, method, path string
		body               any
		code               int
		errCode            string
	}{
		{"unknown field", "POST", "/v1/runs", `{"goal":"x","colour":"red"}`, 400, "bad_request"},
		{"not json", "POST", "/v1/runs", `{"goal":`, 400, "bad_request"},
		{"two values", "POST", "/v1/runs", `{"goal":"a"}{"goal":"b"}`, 400, "bad_request"},
		{"nothing to do", "POST", "/v1/runs", `{}`, 400, "bad_request"},
		{"plan and goal", "POST", "/v1/runs", map[string]any{"goal": "x", "plan": onboardingPlan(t)}, 400, "bad_request"},
		{"bad policy", "POST", "/v1/runs", `{"goal":"x","approve":"maybe"}`, 400, "bad_request"},
		{"bad run id", "POST", "/v1/runs", map[string]any{"run_id": "../x", "plan": onboardingPlan(t)}, 400, "bad_request"},
		{"too large", "POST", "/v1/runs", `{"goal":"` + strings.Repeat("x", 5000) + `"}`, 413, "too_large"},
		{"invalid plan", "POST", "/v1/runs", `{"plan":{"actions":[{"id":"a","tool":"nope","args":{}}]}}`, 422, "invalid_plan"},
		{"bad args", "POST", "/v1/runs", `{"plan":{"actions":[{"id":"a","tool":"payments_create_invoice","args":{"amount":"lots"}}]}}`, 422, ""},
		{"unknown run", "GET", "/v1/runs/nope", nil, 404, "not_found"},
		{"unknown run events", "GET", "/v1/runs/nope/events", nil, 404, "not_found"},
		{"bad after", "GET", "/v1/runs/nope/events?after=-1", nil, 400, "bad_request"},
		{"bad status filter", "GET", "/v1/runs?status=sleepy", nil, 400, "bad_request"},
		{"unknown endpoint", "GET", "/v1/nothing", nil, 404, "not_found"},
		{"resolve nothing", "POST", "/v1/runs/nope/actions/a/resolve", `{"skip":true}`, 404, "not_found"},
		{"resolve without a choice", "POST", "/v1/runs/nope/actions/a/resolve", `{}`, 400, "bad_request"},
	}
	for _, c := range cases {
		var e errorBody
		code := b.call(c.method, c.path, c.body, &e)
		if code != c.code || e.Error.Message == "" || (c.errCode != "" && e.Error.Code != c.errCode) {
			t.Errorf("%s: %d %+v, want %d %s", c.name, code, e.Error, c.code, c.errCode)
		}
	}
	var e errorBody
	b.call("POST", "/v1/runs", `{"plan":{"actions":[{"id":"a","tool":"nope","args":{}}]}}`, &e)
	if !strings.Contains(string(e.Error.Details), "problems") {
		t.Errorf("invalid plan details %s list no problems", e.Error.Details)
	}
}

// Review before any claim: edits are validated and recorded with their
// author, a rejection ends the run cleanly.
func TestEditAndReject(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var doc runDoc
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-edit", "plan": onboardingPlan(t), "approve": "none"}, &doc)
	var e errorBody
	if code := b.call("POST", "/v1/runs/r-edit/actions/contact/edit", map[string]any{"args": map[string]any{"company": 7}}, &e); code != http.StatusUnprocessableEntity {
		t.Fatalf("invalid edit = %d %+v, want 422", code, e)
	}
	if code := b.call("POST", "/v1/runs/r-edit/actions/contact/edit", map[string]any{"args": map[string]any{"company": "ACME Corp", "email": "ap@acme.example"}}, &doc); code != http.StatusOK {
		t.Fatalf("edit = %d", code)
	}
	for _, a := range doc.Actions {
		if a.ID == "contact" && !strings.Contains(string(a.Args), "ap@acme.example") {
			t.Fatalf("edited args = %s", a.Args)
		}
	}
	evs, _ := b.led.Events(context.Background(), "r-edit", 0, 0)
	edited := false
	for _, ev := range evs {
		edited = edited || (ev.Type == "action.edited" && strings.Contains(string(ev.Data), "token:alice"))
	}
	if !edited {
		t.Fatal("no action.edited event naming the reviewer")
	}
	if code := b.call("POST", "/v1/runs/r-edit/actions/welcome/reject", map[string]any{"reason": "not yet"}, &doc); code != http.StatusOK {
		t.Fatalf("reject = %d", code)
	}
	// A rejection fails the run cleanly: nothing starts, the rest is skipped.
	final := b.waitStatus("r-edit", ledger.RunFailed)
	for _, a := range final.Actions {
		if a.Attempts != 0 {
			t.Fatalf("action %s was attempted after a rejection", a.ID)
		}
	}
	if n := b.world.Requests("crm") + b.world.Requests("payments") + b.world.Requests("email"); n != 0 {
		t.Fatalf("%d requests reached the world: %s", n, b.world.Describe())
	}
	// Once the run has ended, its actions cannot be edited any more.
	if code := b.call("POST", "/v1/runs/r-edit/actions/contact/edit", map[string]any{"args": map[string]any{"company": "X", "email": "x@x.example"}}, &e); code != http.StatusConflict {
		t.Fatalf("edit after the end = %d %+v, want 409", code, e)
	}
}

// An at-most-once action whose outcome is unknown waits for a person, who
// marks it done through the API.
func TestNeedsReviewResolved(t *testing.T) {
	t.Parallel()
	drop, hits := dropServer(t)
	b := setup(t, options{toolsFile: func(w *demoworld.World) []byte {
		return []byte(strings.Replace(string(w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"})), w.Email.URL, drop, 1))
	}})
	var doc runDoc
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-review", "plan": onboardingPlan(t), "approve": "all"}, &doc)
	paused := b.waitFor("r-review", "welcome in needs_review", func(d ledger.RunDoc) bool {
		for _, a := range d.Actions {
			if a.ID == "welcome" && a.Status == ledger.StatusNeedsReview {
				return d.Run.Status == ledger.RunPaused
			}
		}
		return false
	})
	if hits() != 1 {
		t.Fatalf("the at-most-once email was sent %d times, want 1", hits())
	}
	_ = paused
	var e errorBody
	if code := b.call("POST", "/v1/runs/r-review/actions/welcome/resolve", map[string]any{"retry": true, "skip": true}, &e); code != http.StatusBadRequest {
		t.Fatalf("two resolutions = %d", code)
	}
	if code := b.call("POST", "/v1/runs/r-review/actions/welcome/resolve", map[string]any{"done": map[string]any{"message_id": "msg_manual"}}, nil); code != http.StatusOK {
		t.Fatalf("resolve = %d", code)
	}
	final := b.waitStatus("r-review", ledger.RunCompleted)
	for _, a := range final.Actions {
		if a.ID == "welcome" && (a.Status != ledger.StatusSucceeded || !strings.Contains(string(a.Output), "msg_manual")) {
			t.Fatalf("welcome = %s %s", a.Status, a.Output)
		}
	}
	if hits() != 1 {
		t.Fatalf("email sent %d times after the resolution", hits())
	}
}

// A run that was running when the service stopped is driven on at start,
// and nothing is done twice.
func TestResumeRunningOnStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := setup(t, options{dir: dir})
	var doc runDoc
	// The onboarding without its email (an at-most-once action whose
	// resolved arguments would need a second approval).
	var p map[string]any
	json.Unmarshal(onboardingPlan(t), &p)
	p["actions"] = p["actions"].([]any)[:4]
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-resume", "plan": p, "approve": "none"}, &doc)
	// Approve in the ledger without driving, as if the process stopped
	// between the approval and the drive; the run is marked running.
	eng, err := executor.New(executor.Config{Ledger: b.led, Tools: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.ApproveAll(context.Background(), "r-resume", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.led.Apply(context.Background(), ledger.SetRunStatus("r-resume", ledger.RunRunning, "run.resumed", "", nil)); err != nil {
		t.Fatal(err)
	}
	world := b.world
	b.stop()

	b2 := setup(t, options{dir: dir, toolsFile: func(*demoworld.World) []byte { return b.toolsFile }})
	stored, err := b2.led.Events(context.Background(), "r-resume", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The all-runs stream picks the run up where its log ends.
	all, _, err := b2.dialer().Dial(b2.wsURL("/v1/ws"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	n, err := b2.srv.ResumeRunning(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("ResumeRunning = %d, %v; want 1", n, err)
	}
	b2.waitStatus("r-resume", ledger.RunCompleted)
	if m := read(t, all); m.Type != "event" || m.Event.RunID != "r-resume" || m.Event.Seq != stored[len(stored)-1].Seq+1 {
		t.Fatalf("first event on the all-runs stream: %+v, want seq %d", m.Event, stored[len(stored)-1].Seq+1)
	}
	for _, e := range demoworld.OnboardingEffects[:3] {
		if got := world.Effect(e); got != 1 {
			t.Fatalf("effect %s = %d, want 1 (%s)", e, got, world.Describe())
		}
	}
}

// A person's approval recorded by a process that stopped before driving the
// run on (the run still says awaiting_approval): the next start drives it to
// the end. A run a person paused stays paused.
func TestResumeApprovedOnStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := setup(t, options{dir: dir})
	var p map[string]any
	json.Unmarshal(onboardingPlan(t), &p)
	p["actions"] = p["actions"].([]any)[:4]
	var doc runDoc
	for _, id := range []string{"r-approved", "r-held"} {
		b.call("POST", "/v1/runs", map[string]any{"run_id": id, "plan": p, "approve": "none"}, &doc)
		b.waitStatus(id, ledger.RunAwaitingApproval)
	}
	eng, err := executor.New(executor.Config{Ledger: b.led, Tools: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r-approved", "r-held"} {
		if err := eng.ApproveAll(context.Background(), id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Pause(context.Background(), "r-held", "rita"); err != nil {
		t.Fatal(err)
	}
	world := b.world
	b.stop()

	b2 := setup(t, options{dir: dir, toolsFile: func(*demoworld.World) []byte { return b.toolsFile }})
	n, err := b2.srv.ResumeRunning(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("ResumeRunning = %d, %v; want 1 (the approved run, not the one a person paused)", n, err)
	}
	b2.waitStatus("r-approved", ledger.RunCompleted)
	for _, e := range demoworld.OnboardingEffects[:3] {
		if got := world.Effect(e); got != 1 {
			t.Fatalf("effect %s = %d, want 1 (%s)", e, got, world.Describe())
		}
	}
	if r, err := b2.led.GetRun(context.Background(), "r-held"); err != nil || r.Status != ledger.RunPaused || r.PausedBy == "" {
		t.Fatalf("the run a person paused: %+v, %v", r, err)
	}
}

func TestListEventsReplayForkMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var doc runDoc
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-list", "plan": onboardingPlan(t), "approve": "all"}, &doc)
	b.waitStatus("r-list", ledger.RunCompleted)

	var list struct {
		Runs []struct {
			RunID  string `json:"run_id"`
			Status string `json:"status"`
		} `json:"runs"`
		Next string `json:"next"`
	}
	if code := b.call("GET", "/v1/runs?status=completed", nil, &list); code != http.StatusOK || len(list.Runs) != 1 || list.Runs[0].RunID != "r-list" {
		t.Fatalf("list = %d %+v", code, list)
	}
	b.call("GET", "/v1/runs?status=paused", nil, &list)
	if len(list.Runs) != 0 {
		t.Fatalf("paused runs = %+v", list.Runs)
	}
	var evs struct {
		Events []ledger.Event `json:"events"`
		Last   uint64         `json:"last"`
	}
	b.call("GET", "/v1/runs/r-list/events?after=3", nil, &evs)
	if len(evs.Events) == 0 || evs.Events[0].Seq != 4 || evs.Last != evs.Events[len(evs.Events)-1].Seq {
		t.Fatalf("events after 3 = %+v", evs)
	}
	for i, ev := range evs.Events {
		if ev.Seq != uint64(4+i) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}

	// Replay with an edited invoice reference: only what changed runs again.
	var p map[string]any
	json.Unmarshal(onboardingPlan(t), &p)
	acts := p["actions"].([]any)
	inv := acts[2].(map[string]any)["args"].(map[string]any)
	inv["reference"] = "onboarding-acme-2"
	var replayed runDoc
	if code := b.call("POST", "/v1/runs/r-list/replay", map[string]any{"plan": p}, &replayed); code != http.StatusOK || replayed.Revision != 2 {
		t.Fatalf("replay = %d revision %d", code, replayed.Revision)
	}
	b.waitFor("r-list", "revision 2 completed", func(d ledger.RunDoc) bool {
		return d.Run.Revision == 2 && d.Run.Status == ledger.RunCompleted
	})
	if b.world.Effect("crm/billing@acme.example") != 1 || b.world.Effect("payments/onboarding-acme-2") != 1 || b.world.Effect("payments/onboarding-acme") != 1 {
		t.Fatalf("after replay: %s", b.world.Describe())
	}

	// Fork: a new run, everything again, on purpose.
	var forked runDoc
	if code := b.call("POST", "/v1/runs/r-list/fork", map[string]any{"run_id": "r-fork"}, &forked); code != http.StatusCreated || forked.RunID != "r-fork" {
		t.Fatalf("fork = %d %+v", code, forked.RunID)
	}
	b.waitStatus("r-fork", ledger.RunCompleted)
	if b.world.Effect("crm/billing@acme.example") != 2 {
		t.Fatalf("after fork: %s", b.world.Describe())
	}

	req, _ := http.NewRequest("GET", b.hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	m := sb.String()
	for _, want := range []string{`docket_runs{status="completed"} 2`, `docket_actions{class="keyed",status="succeeded"} 2`, "docket_duplicates_prevented_total ", "docket_websocket_subscribers 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	// The replay adopted the unchanged actions' outputs by key.
	if strings.Contains(m, "docket_duplicates_prevented_total 0\n") {
		t.Errorf("the replay prevented no duplicate by key:\n%s", m)
	}
	var spec map[string]any
	if code := b.callWith("GET", "/v1/openapi.json", nil, &spec, nil); code != http.StatusOK || spec["openapi"] != "3.1.0" {
		t.Fatalf("openapi = %d", code)
	}
}

// Shutdown lets a drive in flight finish within its deadline.
func TestShutdownWaitsForDrives(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-stop", "plan": onboardingPlan(t), "approve": "all"}, nil)
	b.hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	doc, err := b.led.Doc(context.Background(), "r-stop")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("after a graceful shutdown the run is %s", doc.Run.Status)
	}
	if err := b.led.Close(); err != nil {
		t.Fatal(err)
	}
	b.hs = nil
}

// The webhook hears about a run that waits for a person.
func TestNotifyWebhook(t *testing.T) {
	t.Parallel()
	got := make(chan map[string]any, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		got <- body
	}))
	t.Cleanup(hook.Close)
	b := setup(t, options{tune: func(c *ui.Config) { c.Notify = hook.URL }})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-hook", "plan": onboardingPlan(t), "approve": "none"}, nil)
	select {
	case body := <-got:
		if body["run_id"] != "r-hook" || body["status"] != "awaiting_approval" || !strings.Contains(fmt.Sprint(body["waiting"]), "price") {
			t.Fatalf("webhook body %v", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the webhook was not called")
	}
}

// The request preview the page shows never carries a secret: environment
// templates are masked.
func TestToolsPreviewMasksSecrets(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_very_secret_value"
	b := setup(t, options{
		env: map[string]string{"PAYMENTS_KEY": secret},
		toolsFile: func(w *demoworld.World) []byte {
			var f map[string]any
			json.Unmarshal(w.ToolsFile(demoworld.ToolsOptions{}), &f)
			for _, tl := range f["tools"].([]any) {
				tool := tl.(map[string]any)
				if tool["name"] == "payments_create_invoice" {
					tool["request"].(map[string]any)["headers"] = map[string]any{"Authorization": `Bearer {{env "PAYMENTS_KEY"}}`}
				}
			}
			out, _ := json.Marshal(f)
			return out
		},
	})
	var list struct {
		Tools []struct {
			Name    string `json:"name"`
			Class   string `json:"class"`
			Request *struct {
				Method    string            `json:"method"`
				URL       string            `json:"url"`
				Headers   map[string]string `json:"headers"`
				KeyHeader string            `json:"key_header"`
			} `json:"request"`
		} `json:"tools"`
	}
	raw := map[string]any{}
	if code := b.call("GET", "/v1/tools", nil, &raw); code != http.StatusOK {
		t.Fatalf("tools = %d", code)
	}
	enc, _ := json.Marshal(raw)
	if strings.Contains(string(enc), secret) {
		t.Fatal("the secret reached the page")
	}
	json.Unmarshal(enc, &list)
	found := false
	for _, tl := range list.Tools {
		if tl.Name == "payments_create_invoice" {
			found = true
			if tl.Class != "keyed" || tl.Request == nil || tl.Request.Headers["Authorization"] != "Bearer ••••" || tl.Request.KeyHeader != "Idempotency-Key" {
				t.Fatalf("payments tool = %+v %+v", tl, tl.Request)
			}
		}
	}
	if !found {
		t.Fatal("no payments tool listed")
	}
}

// Rejecting the whole plan rejects every action not claimed yet.
func TestRejectPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.call("POST", "/v1/runs", map[string]any{"run_id": "r-rej", "plan": onboardingPlan(t), "approve": "none"}, nil)
	if code := b.call("POST", "/v1/runs/r-rej/reject", map[string]any{"all": true, "reason": "wrong customer"}, nil); code != http.StatusOK {
		t.Fatalf("reject plan = %d", code)
	}
	final := b.waitStatus("r-rej", ledger.RunFailed)
	rejected := 0
	for _, a := range final.Actions {
		if a.Attempts != 0 {
			t.Fatalf("action %s was attempted", a.ID)
		}
		if a.Status == ledger.StatusRejected {
			rejected++
		}
	}
	if rejected == 0 {
		t.Fatalf("no action rejected: %+v", final.Actions)
	}
	var e errorBody
	if code := b.call("POST", "/v1/runs/r-rej/reject", map[string]any{"all": true}, &e); code != http.StatusConflict {
		t.Fatalf("rejecting again = %d %+v, want 409", code, e)
	}
}
