package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/docketrun/docket/ledger"
)

// payMailPlan is a plan of two independent actions: pay (keyed) and mail
// (at-most-once: a duplicate cannot be prevented, so it must never run
// unless a person named it). The email goes to <runID>@x.example, so the
// world counts each run's email apart.
func payMailPlan(runID string) json.RawMessage {
	return json.RawMessage(`{"goal": "pay and mail", "actions": [
  {"id": "pay", "tool": "payments_create_invoice", "args": {"customer": "c_1", "amount": 100, "currency": "EUR", "reference": "` + runID + `"}},
  {"id": "mail", "tool": "email_send", "args": {"to": "` + runID + `@x.example", "template": "welcome-pack"}}
]}`)
}

func (b *bundle) createPayMail(runID string) {
	b.t.Helper()
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": runID, "plan": payMailPlan(runID), "approve": "none"}, nil); code != http.StatusCreated {
		b.t.Fatalf("creating %s = %d", runID, code)
	}
	b.waitStatus(runID, ledger.RunAwaitingApproval)
}

// approvedActions lists the actions of the run that have an action.approved
// event, sorted.
func (b *bundle) approvedActions(runID string) []string {
	b.t.Helper()
	evs, err := b.led.Events(context.Background(), runID, 0, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	var ids []string
	for _, ev := range evs {
		if ev.Type == "action.approved" && !slices.Contains(ids, ev.ActionID) {
			ids = append(ids, ev.ActionID)
		}
	}
	slices.Sort(ids)
	return ids
}

func (b *bundle) eventCount(runID string) int {
	b.t.Helper()
	evs, err := b.led.Events(context.Background(), runID, 0, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	return len(evs)
}

// wsAnswer sends one message on the run's socket and returns the answer to
// it (ack or error), skipping events.
func (b *bundle) wsAnswer(t *testing.T, runID, msg string) wsMsg {
	t.Helper()
	c := b.mustDial(runID, 0)
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	for {
		m := read(t, c)
		if m.Type == "ack" || m.Type == "error" {
			return m
		}
	}
}

// reviewCase is one review request in its WebSocket form and its HTTP form
// (path under /v1/runs/{id}, body). An empty ws or path means that form
// cannot say it (HTTP always names the action of edit and resolve in the
// path; the socket has no per-action endpoints).
type reviewCase struct {
	name     string
	ws       string
	path     string
	body     string
	ok       bool   // the shape is accepted (the op may still be refused by the run's state: 409)
	approves string // the actions an accepted request approves, "pay,mail" sorted; "" none
}

var reviewCases = []reviewCase{
	// approve: missing, empty, singular, plural, all, and fields it does not take.
	{name: "approve missing", ws: `{"op":"approve"}`, path: "/approve", body: ``},
	{name: "approve empty object", ws: `{"op":"approve"}`, path: "/approve", body: `{}`},
	{name: "approve empty list", ws: `{"op":"approve","actions":[]}`, path: "/approve", body: `{"actions":[]}`},
	{name: "approve null list", ws: `{"op":"approve","actions":null}`, path: "/approve", body: `{"actions":null}`},
	{name: "approve singular", ws: `{"op":"approve","action":"pay"}`, path: "/approve", body: `{"action":"pay"}`, ok: true, approves: "pay"},
	{name: "approve singular path", ws: `{"op":"approve","action":"pay"}`, path: "/actions/pay/approve", body: ``, ok: true, approves: "pay"},
	{name: "approve plural", ws: `{"op":"approve","actions":["pay"]}`, path: "/approve", body: `{"actions":["pay"]}`, ok: true, approves: "pay"},
	{name: "approve plural both", ws: `{"op":"approve","actions":["pay","mail"]}`, path: "/approve", body: `{"actions":["pay","mail"]}`, ok: true, approves: "mail,pay"},
	{name: "approve all", ws: `{"op":"approve","all":true}`, path: "/approve", body: `{"all":true}`, ok: true, approves: "mail,pay"},
	{name: "approve all false", ws: `{"op":"approve","all":false}`, path: "/approve", body: `{"all":false}`},
	{name: "approve all and action", ws: `{"op":"approve","all":true,"action":"pay"}`, path: "/approve", body: `{"all":true,"action":"pay"}`},
	{name: "approve singular and plural", ws: `{"op":"approve","action":"pay","actions":["mail"]}`, path: "/approve", body: `{"action":"pay","actions":["mail"]}`},
	{name: "approve empty id", ws: `{"op":"approve","action":""}`, path: "/approve", body: `{"action":""}`},
	{name: "approve twice named", ws: `{"op":"approve","actions":["pay","pay"]}`, path: "/approve", body: `{"actions":["pay","pay"]}`},
	{name: "approve with reason", ws: `{"op":"approve","action":"pay","reason":"ok"}`, path: "/approve", body: `{"action":"pay","reason":"ok"}`},
	{name: "approve unknown field", ws: `{"op":"approve","action":"pay","colour":"red"}`, path: "/approve", body: `{"action":"pay","colour":"red"}`},
	{name: "approve field in another case", ws: `{"op":"approve","Actions":["pay"]}`, path: "/approve", body: `{"Actions":["pay"]}`},
	{name: "approve path and action", path: "/actions/pay/approve", body: `{"action":"mail"}`},
	{name: "approve path and plural", path: "/actions/pay/approve", body: `{"actions":["mail"]}`},
	{name: "approve path and all", path: "/actions/pay/approve", body: `{"all":true}`},
	{name: "approve http envelope", path: "/approve", body: `{"op":"approve","all":true}`},
	{name: "approve http id", path: "/approve", body: `{"id":"m1","all":true}`},
	{name: "approve not an object", ws: `["pay"]`, path: "/approve", body: `["pay"]`},

	// reject
	{name: "reject missing", ws: `{"op":"reject"}`, path: "/reject", body: ``},
	{name: "reject reason only", ws: `{"op":"reject","reason":"no"}`, path: "/reject", body: `{"reason":"no"}`},
	{name: "reject empty list", ws: `{"op":"reject","actions":[]}`, path: "/reject", body: `{"actions":[]}`},
	{name: "reject plural", ws: `{"op":"reject","actions":["pay"]}`, path: "/reject", body: `{"actions":["pay"]}`},
	{name: "reject singular", ws: `{"op":"reject","action":"pay","reason":"no"}`, path: "/reject", body: `{"action":"pay","reason":"no"}`, ok: true},
	{name: "reject singular path", ws: `{"op":"reject","action":"pay","reason":"no"}`, path: "/actions/pay/reject", body: `{"reason":"no"}`, ok: true},
	{name: "reject all", ws: `{"op":"reject","all":true,"reason":"no"}`, path: "/reject", body: `{"all":true,"reason":"no"}`, ok: true},
	{name: "reject all and action", ws: `{"op":"reject","all":true,"action":"pay"}`, path: "/reject", body: `{"all":true,"action":"pay"}`},
	{name: "reject path and action", path: "/actions/pay/reject", body: `{"action":"mail"}`},
	{name: "reject unknown field", ws: `{"op":"reject","action":"pay","args":{}}`, path: "/actions/pay/reject", body: `{"args":{}}`},

	// edit
	{name: "edit missing action", ws: `{"op":"edit","args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"}}`},
	{name: "edit plural", ws: `{"op":"edit","actions":["pay"],"args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"}}`, path: "/actions/pay/edit", body: `{"actions":["pay"],"args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"}}`},
	{name: "edit singular", ws: `{"op":"edit","action":"pay","args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"}}`, path: "/actions/pay/edit", body: `{"args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"}}`, ok: true},
	{name: "edit no args", ws: `{"op":"edit","action":"pay"}`, path: "/actions/pay/edit", body: ``},
	{name: "edit args not an object", ws: `{"op":"edit","action":"pay","args":[1]}`, path: "/actions/pay/edit", body: `{"args":[1]}`},
	{name: "edit with reason", ws: `{"op":"edit","action":"pay","args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"},"reason":"x"}`, path: "/actions/pay/edit", body: `{"args":{"customer":"c_2","amount":5,"currency":"EUR","reference":"r"},"reason":"x"}`},
	{name: "edit all", ws: `{"op":"edit","all":true,"args":{}}`, path: "/actions/pay/edit", body: `{"all":true,"args":{}}`},

	// resolve (the run's actions are not in needs_review: accepted shapes get 409)
	{name: "resolve missing action", ws: `{"op":"resolve","skip":true}`},
	{name: "resolve plural", ws: `{"op":"resolve","actions":["pay"],"skip":true}`, path: "/actions/pay/resolve", body: `{"actions":["pay"],"skip":true}`},
	{name: "resolve singular", ws: `{"op":"resolve","action":"pay","skip":true}`, path: "/actions/pay/resolve", body: `{"skip":true}`, ok: true},
	{name: "resolve done", ws: `{"op":"resolve","action":"pay","done":{"id":"inv_1"},"retry":false}`, path: "/actions/pay/resolve", body: `{"done":{"id":"inv_1"},"retry":false}`, ok: true},
	{name: "resolve no choice", ws: `{"op":"resolve","action":"pay"}`, path: "/actions/pay/resolve", body: ``},
	{name: "resolve done null", ws: `{"op":"resolve","action":"pay","done":null}`, path: "/actions/pay/resolve", body: `{"done":null}`},
	{name: "resolve two choices", ws: `{"op":"resolve","action":"pay","retry":true,"skip":true}`, path: "/actions/pay/resolve", body: `{"retry":true,"skip":true}`},
	{name: "resolve with reason", ws: `{"op":"resolve","action":"pay","skip":true,"reason":"x"}`, path: "/actions/pay/resolve", body: `{"skip":true,"reason":"x"}`},

	// pause, resume, cancel take nothing else
	{name: "pause", ws: `{"op":"pause"}`, path: "/pause", body: ``, ok: true},
	{name: "pause empty object", ws: `{"op":"pause"}`, path: "/pause", body: `{}`, ok: true},
	{name: "pause singular", ws: `{"op":"pause","action":"pay"}`, path: "/pause", body: `{"action":"pay"}`},
	{name: "resume", ws: `{"op":"resume"}`, path: "/resume", body: ``, ok: true},
	{name: "resume all", ws: `{"op":"resume","all":true}`, path: "/resume", body: `{"all":true}`},
	{name: "resume plural", ws: `{"op":"resume","actions":["mail"]}`, path: "/resume", body: `{"actions":["mail"]}`},
	{name: "cancel", ws: `{"op":"cancel"}`, path: "/cancel", body: ``, ok: true},
	{name: "cancel empty list", ws: `{"op":"cancel","actions":[]}`, path: "/cancel", body: `{"actions":[]}`},
	{name: "cancel reason", ws: `{"op":"cancel","reason":"x"}`, path: "/cancel", body: `{"reason":"x"}`},

	// no op, unknown op
	{name: "no op", ws: `{"action":"pay"}`},
	{name: "unknown op", ws: `{"op":"launch","action":"pay"}`},
	{name: "replay is HTTP only", ws: `{"op":"replay","plan":{}}`},
}

// Every review op over HTTP and over the socket, with missing, empty,
// singular and plural action fields and fields the op does not take: both
// paths accept exactly the same shapes, OpenAPI's schemas say the same, a
// refused request changes nothing, and an at-most-once action is approved
// only by a request that names it (or says all: true).
func TestReviewShapes(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	message, bodyOf := openAPIReviewSchemas(t, b)
	var unnamed []string // runs whose mail no request named
	for i, c := range reviewCases {
		// No subtests: the bundle's helpers fail the test they were made for.
		func() {
			t.Logf("case %d: %s", i, c.name)
			if c.ws != "" {
				msg := c.ws
				var obj map[string]any
				if json.Unmarshal([]byte(c.ws), &obj) == nil {
					obj["id"] = fmt.Sprintf("m%d", i)
					raw, _ := json.Marshal(obj)
					msg = string(raw)
				}
				if err := message.Validate(instance(t, msg)); (err == nil) != c.ok {
					t.Errorf("%s: openapi.json ReviewMessage says valid=%v for %s, want %v: %v", c.name, err == nil, msg, c.ok, err)
				}
				runID := fmt.Sprintf("shape-%02d-ws", i)
				b.createPayMail(runID)
				before := b.eventCount(runID)
				m := b.wsAnswer(t, runID, msg)
				if obj != nil && m.ID != obj["id"] {
					t.Errorf("answer id %q, want %q", m.ID, obj["id"])
				}
				switch {
				case !c.ok && (m.Type != "error" || m.Error == nil || m.Error.Code != "bad_request" || m.Error.Message == ""):
					t.Errorf("socket %s answered %+v, want a bad_request error", msg, m)
				case !c.ok && b.eventCount(runID) != before:
					t.Errorf("socket %s was refused but the run changed", msg)
				case c.ok && m.Type == "error" && m.Error.Code == "bad_request":
					t.Errorf("socket %s refused: %s", msg, m.Error.Message)
				}
				b.checkApproved(t, runID, c, &unnamed)
			}
			if c.path != "" {
				if err := bodyOf(c.path).Validate(instance(t, cmpOr(c.body, "{}"))); (err == nil) != c.ok {
					t.Errorf("openapi.json says the body %s of %s is valid=%v, want %v: %v", c.body, c.path, err == nil, c.ok, err)
				}
				runID := fmt.Sprintf("shape-%02d-http", i)
				b.createPayMail(runID)
				before := b.eventCount(runID)
				var body any
				if c.body != "" {
					body = c.body
				}
				var raw json.RawMessage
				var e errorBody
				code := b.call("POST", "/v1/runs/"+runID+c.path, body, &raw)
				if code >= 400 {
					json.Unmarshal(raw, &e)
				}
				switch {
				case !c.ok && (code != http.StatusBadRequest || e.Error.Code != "bad_request" || e.Error.Message == ""):
					t.Errorf("POST %s %s = %d %+v, want 400 bad_request", c.path, c.body, code, e.Error)
				case !c.ok && b.eventCount(runID) != before:
					t.Errorf("POST %s %s was refused but the run changed", c.path, c.body)
				case c.ok && code == http.StatusBadRequest:
					t.Errorf("POST %s %s refused: %s", c.path, c.body, e.Error.Message)
				}
				b.checkApproved(t, runID, c, &unnamed)
			}
		}()
	}
	// The mail no request named was never sent, whatever the drives did
	// after the answers.
	for _, runID := range unnamed {
		b.waitFor(runID, "the run to settle", func(d ledger.RunDoc) bool {
			return d.Run.Status != ledger.RunRunning && d.Run.Status != ledger.RunPlanning
		})
		if slices.Contains(b.approvedActions(runID), "mail") {
			t.Errorf("run %s: mail was approved later", runID)
		}
		if n := b.world.Effect("email/" + runID + "@x.example/welcome-pack"); n != 0 {
			t.Errorf("run %s: the unnamed at-most-once email was sent %d times", runID, n)
		}
	}
}

// checkApproved compares the run's approvals with what the case names.
func (b *bundle) checkApproved(t *testing.T, runID string, c reviewCase, unnamed *[]string) {
	t.Helper()
	got := strings.Join(b.approvedActions(runID), ",")
	want := ""
	if c.ok {
		want = c.approves
	}
	if got != want {
		t.Errorf("run %s: approved %q, want %q", runID, got, want)
	}
	if !strings.Contains(want, "mail") {
		*unnamed = append(*unnamed, runID)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func instance(t *testing.T, s string) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// openAPIReviewSchemas compiles, from the served openapi.json, the
// WebSocket's ReviewMessage schema and a function giving the request body
// schema of a review endpoint (a path under /v1/runs/{id}).
func openAPIReviewSchemas(t *testing.T, b *bundle) (*jsonschema.Schema, func(path string) *jsonschema.Schema) {
	t.Helper()
	resp, err := b.client().Get(b.hs.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	doc, err := jsonschema.UnmarshalJSON(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://docket.test/openapi.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(base, doc); err != nil {
		t.Fatal(err)
	}
	compile := func(ptr string) *jsonschema.Schema {
		t.Helper()
		s, err := c.Compile(base + "#" + ptr)
		if err != nil {
			t.Fatalf("compiling %s: %v", ptr, err)
		}
		return s
	}
	msg := compile("/components/schemas/ReviewMessage")
	bodies := map[string]*jsonschema.Schema{}
	return msg, func(path string) *jsonschema.Schema {
		t.Helper()
		tmpl := "/v1/runs/{id}" + path
		if strings.HasPrefix(path, "/actions/") {
			parts := strings.Split(path, "/") // "", actions, ID, op
			tmpl = "/v1/runs/{id}/actions/{action}/" + parts[3]
		}
		if s, ok := bodies[tmpl]; ok {
			return s
		}
		esc := strings.ReplaceAll(strings.ReplaceAll(tmpl, "~", "~0"), "/", "~1")
		s := compile("/paths/" + url.PathEscape(esc) + "/post/requestBody/content/application~1json/schema")
		bodies[tmpl] = s
		return s
	}
}

// The report's case: {"op":"approve","action":"pay"} on a run's socket
// approved pay and the at-most-once mail, which was sent. Now it approves pay
// alone: pay runs, mail waits, and no email reaches the world; messages that
// name nothing are refused. The same over HTTP.
func TestApproveOneActionLeavesAtMostOnceAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	check := func(runID string) {
		t.Helper()
		doc := b.waitFor(runID, "pay to succeed and the run to stop", func(d ledger.RunDoc) bool {
			switch d.Run.Status {
			case ledger.RunRunning, ledger.RunPlanning:
				return false
			}
			for _, a := range d.Actions {
				if a.ID == "pay" && a.Status == ledger.StatusSucceeded {
					return true
				}
			}
			return false
		})
		if doc.Run.Status != ledger.RunAwaitingApproval {
			t.Errorf("run %s is %s, want awaiting_approval (mail waits)", runID, doc.Run.Status)
		}
		for _, a := range doc.Actions {
			if a.ID == "mail" && (a.Status != ledger.StatusPending || a.Attempts != 0) {
				t.Fatalf("run %s: mail is %s after %d attempts, want pending, never tried", runID, a.Status, a.Attempts)
			}
		}
		if got := b.approvedActions(runID); !slices.Equal(got, []string{"pay"}) {
			t.Fatalf("run %s: approved %v, want [pay]", runID, got)
		}
		if n := b.world.Requests("email"); n != 0 {
			t.Fatalf("run %s: %d email requests: %s", runID, n, b.world.Describe())
		}
		if n := b.world.Effect("payments/" + runID); n != 1 {
			t.Fatalf("run %s: payment effect %d, want 1", runID, n)
		}
	}

	b.createPayMail("one-ws")
	c := b.mustDial("one-ws", 0)
	answer := func(msg string) wsMsg {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		for {
			if m := read(t, c); m.Type != "event" {
				return m
			}
		}
	}
	if m := answer(`{"id":"1","op":"approve","action":"pay"}`); m.Type != "ack" || m.ID != "1" || m.Op != "approve" {
		t.Fatalf("approving pay answered %+v", m)
	}
	check("one-ws")
	for _, msg := range []string{`{"id":"2","op":"approve"}`, `{"id":"3","op":"approve","actions":[]}`, `{"id":"4","op":"approve","action":"mail","reason":"ok"}`} {
		m := answer(msg)
		if m.Type != "error" || m.Error == nil || m.Error.Code != "bad_request" || !strings.Contains(m.Error.Message, "approve") {
			t.Fatalf("%s answered %+v", msg, m)
		}
	}
	check("one-ws")

	b.createPayMail("one-http")
	if code := b.call("POST", "/v1/runs/one-http/approve", map[string]any{"action": "pay"}, nil); code != http.StatusOK {
		t.Fatalf("approving pay over HTTP = %d", code)
	}
	check("one-http")
	for _, body := range []string{``, `{}`, `{"actions":[]}`} {
		var e errorBody
		var in any
		if body != "" {
			in = body
		}
		if code := b.call("POST", "/v1/runs/one-http/approve", in, &e); code != http.StatusBadRequest || !strings.Contains(e.Error.Message, "all: true") {
			t.Fatalf("approve with %q = %d %+v", body, code, e.Error)
		}
	}
	check("one-http")
}

// Replay and fork are HTTP only (the socket refuses them as unknown ops,
// above); their bodies are read as strictly: a missing plan or a field they
// do not take is a 400, and nothing is recorded.
func TestReplayAndForkBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.createPayMail("rf")
	before := b.eventCount("rf")
	cases := []struct {
		path, body string
		code       int
	}{
		{"/replay", ``, http.StatusBadRequest},
		{"/replay", `{}`, http.StatusBadRequest},
		{"/replay", `{"plan":` + string(payMailPlan("rf")) + `,"all":true}`, http.StatusBadRequest},
		{"/replay", `{"actions":["pay"]}`, http.StatusBadRequest},
		{"/replay", `{"plan":null}`, http.StatusUnprocessableEntity},
		{"/fork", `{"run_id":"rf-2","actions":["pay"]}`, http.StatusBadRequest},
		{"/fork", `{"run_id":"rf-2","all":true}`, http.StatusBadRequest},
	}
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		var e errorBody
		if code := b.call("POST", "/v1/runs/rf"+c.path, body, &e); code != c.code || e.Error.Message == "" {
			t.Errorf("POST %s %s = %d %+v, want %d", c.path, c.body, code, e.Error, c.code)
		}
	}
	if n := b.eventCount("rf"); n != before {
		t.Fatalf("refused replays and forks changed the run: %d events, had %d", n, before)
	}
	var e errorBody
	if code := b.call("GET", "/v1/runs/rf-2", nil, &e); code != http.StatusNotFound {
		t.Fatalf("a refused fork created rf-2: %d", code)
	}
}
