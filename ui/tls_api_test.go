package ui_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger"
)

// TestAPIOverTLS runs the API's main flows over HTTPS and WSS with a
// certificate the test made (the whole suite runs over TLS too with
// DOCKET_TEST_TLS=1, as make test does): sign in (the cookie is Secure) and
// use the session; follow /v1/ws; create a run from a plan; approve on the
// run's socket and over HTTP; an at-most-once email whose outcome is unknown
// is resolved over HTTP; the run's socket resumed with after= misses
// nothing; replay; metrics. Requests go over HTTP/2 and sockets over
// HTTP/1.1, as with docket serve. Plain HTTP to the port is refused.
func TestAPIOverTLS(t *testing.T) {
	t.Parallel()
	drop, hits := dropServer(t)
	b := setup(t, options{tls: true, toolsFile: func(w *demoworld.World) []byte {
		return []byte(strings.Replace(string(w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"})), w.Email.URL, drop, 1))
	}})
	if !b.secure() || b.hs.TLS == nil {
		t.Fatalf("the bundle serves %s", b.hs.URL)
	}
	// Plain HTTP to the TLS port gets no API.
	if resp, err := http.Get("http://" + strings.TrimPrefix(b.hs.URL, "https://") + "/v1/runs"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the TLS port = %d", resp.StatusCode)
		}
	}

	// The session: its cookie is Secure (and HttpOnly, SameSite=Strict),
	// and it authenticates what follows over TLS.
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
	if resp.ProtoMajor != 2 {
		t.Fatalf("the API over TLS speaks %s, want HTTP/2 (as docket serve offers it)", resp.Proto)
	}
	if resp.StatusCode != http.StatusOK || cookie == nil || !cookie.Secure || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session = %d, cookie %+v", resp.StatusCode, cookie)
	}
	var me struct {
		Who    string          `json:"who"`
		Name   string          `json:"name"`
		Scopes []string        `json:"scopes"`
		May    map[string]bool `json:"may"`
	}
	if code := b.callWith("GET", "/v1/session", nil, &me, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}); code != http.StatusOK ||
		me.Who != "token:alice" || !slices.Contains(me.Scopes, "admin") || !me.May["approve"] || !me.May["resolve"] {
		t.Fatalf("GET /v1/session with the cookie = %d %+v", code, me)
	}

	// The all-runs stream over WSS.
	all, _, err := b.dialer().Dial(b.wsURL("/v1/ws"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	readUntil := allRunsReader(t, all)

	var doc runDoc
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "tls-1", "plan": onboardingPlan(t), "approve": "none"}, &doc); code != http.StatusCreated || doc.Status != "awaiting_approval" {
		t.Fatalf("create = %d %s", code, doc.Status)
	}
	readUntil("tls-1", "run.awaiting_approval")

	// The run's socket over WSS: its backlog, then an approval on it.
	c := b.mustDial("tls-1", 0)
	backlog := collect(t, c, 0, func(ev ledger.Event) bool { return ev.Type == "run.awaiting_approval" }, nil)
	if err := c.WriteJSON(map[string]any{"id": "a1", "op": "approve", "all": true}); err != nil {
		t.Fatal(err)
	}
	for {
		m := read(t, c)
		if m.Type == "ack" && m.ID == "a1" {
			break
		}
		if m.Type == "error" {
			t.Fatalf("approve on the socket: %+v", m.Error)
		}
	}
	c.Close()

	// Whatever waits again is approved over HTTP, until the email, whose
	// outcome is unknown (the receiver drops the connection), pauses the run.
	paused := b.approveUntilDone("tls-1")
	if paused.Run.Status != ledger.RunPaused {
		t.Fatalf("run is %s, want paused on the email", paused.Run.Status)
	}
	if hits() != 1 {
		t.Fatalf("the at-most-once email was sent %d times, want 1", hits())
	}
	b.call("GET", "/v1/runs/tls-1", nil, &doc)
	if st, _ := doc.action("welcome"); st != "needs_review" {
		t.Fatalf("welcome is %q, want needs_review", st)
	}
	if code := b.call("POST", "/v1/runs/tls-1/actions/welcome/resolve", map[string]any{"done": map[string]any{"message_id": "msg_tls"}}, nil); code != http.StatusOK {
		t.Fatalf("resolve = %d", code)
	}
	readUntil("tls-1", "run.completed")

	// Resumed after the backlog's last event: every later event once, in
	// order, to the end.
	last := backlog[len(backlog)-1].Seq
	c = b.mustDial("tls-1", last)
	rest := collect(t, c, last, isEnd, nil)
	stored, err := b.led.Events(t.Context(), "tls-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(backlog)+len(rest) != len(stored) || rest[len(rest)-1].Type != "run.completed" {
		t.Fatalf("over WSS: %d + %d events, the ledger has %d", len(backlog), len(rest), len(stored))
	}
	c.Close()
	if hits() != 1 {
		t.Fatalf("email sent %d times after the resolution", hits())
	}

	// Replay with another invoice reference: a second revision runs.
	var p map[string]any
	json.Unmarshal(onboardingPlan(t), &p)
	p["actions"].([]any)[2].(map[string]any)["args"].(map[string]any)["reference"] = "onboarding-acme-tls"
	var replayed runDoc
	if code := b.call("POST", "/v1/runs/tls-1/replay", map[string]any{"plan": p}, &replayed); code != http.StatusOK || replayed.Revision != 2 {
		t.Fatalf("replay = %d revision %d", code, replayed.Revision)
	}
	final := b.approveUntilDone("tls-1")
	if final.Run.Status != ledger.RunCompleted || final.Run.Revision != 2 || b.world.Effect("payments/onboarding-acme-tls") != 1 {
		t.Fatalf("after replay: %s revision %d; %s", final.Run.Status, final.Run.Revision, b.world.Describe())
	}

	m := scrape(t, b)
	if m["docket_plans_recorded_total"] != 2 || m[`docket_reviews_total{kind="resolve"}`] != 1 || m[`docket_reviews_total{kind="approve"}`] < 2 {
		t.Fatalf("metrics over TLS: plans %d, resolves %d, approvals %d", m["docket_plans_recorded_total"], m[`docket_reviews_total{kind="resolve"}`], m[`docket_reviews_total{kind="approve"}`])
	}
}
