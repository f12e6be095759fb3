package planner_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/planner"
)

// The main path: a read-only lookup runs while the model thinks; side effects
// are queued with placeholders; a reference makes a dependency.
func TestPlanReadOnlyThenQueued(t *testing.T) {
	t.Parallel()
	p, b := setup(t, planner.Config{},
		toolCalls("", call{"call_s1", "crm_search", `{"query":"Ada","limit":null}`}),
		toolCalls("Creating the contact first.", call{"call_c1", "crm_create_contact", `{"name":"Ada Lovelace","email":"ada@example.com","note":null,"tags":[{"label":"vip","color":null}]}`}),
		toolCalls("", call{"call_m1", "mail_send", `{"to":"ada@example.com","subject":"Welcome","body":"${a1.output.id}"}`}),
		text("Planned: create Ada's contact, then email her."),
	)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "Add Ada as a contact and welcome her"})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Plan
	if got.Goal != "Add Ada as a contact and welcome her" || len(got.Actions) != 2 {
		t.Fatalf("plan = %s", mustJSON(t, got))
	}
	a1, a2 := got.Actions[0], got.Actions[1]
	if a1.ID != "a1" || a1.Tool != "crm.create_contact" || string(a1.Args) != `{"name":"Ada Lovelace","email":"ada@example.com","tags":[{"label":"vip"}]}` || len(a1.DependsOn) != 0 {
		t.Errorf("a1 = %s (the optional nulls must be dropped)", mustJSON(t, a1))
	}
	if a1.Why != "Creating the contact first." {
		t.Errorf("a1.why = %q, want the message's content", a1.Why)
	}
	if a2.ID != "a2" || a2.Tool != "mail/send" || !reflect.DeepEqual(a2.DependsOn, []string{"a1"}) {
		t.Errorf("a2 = %s, want mail/send depending on a1", mustJSON(t, a2))
	}
	if err := got.Validate(b.reg); err != nil {
		t.Errorf("returned plan does not validate: %v", err)
	}
	if res.Reply != "Planned: create Ada's contact, then email her." || res.Rounds != 4 || res.Repairs != 0 {
		t.Errorf("reply %q rounds %d repairs %d", res.Reply, res.Rounds, res.Repairs)
	}
	if res.Usage.TotalTokens != 3*120+110 {
		t.Errorf("usage = %+v", res.Usage)
	}
	// Only the read-only tool ran, once, with its null dropped.
	if calls := b.search.Calls(); len(calls) != 1 || string(calls[0].Args) != `{"query":"Ada"}` {
		t.Errorf("search calls = %+v", calls)
	}
	if len(b.create.Calls()) != 0 || len(b.send.Calls()) != 0 {
		t.Errorf("side-effecting tools ran while planning")
	}

	reqs := b.model.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, r := range reqs {
		if got := r.header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("request %d: Authorization %q", i, got)
		}
		if r.body["model"] != "gpt-test" || r.body["max_tokens"] != float64(4096) {
			t.Errorf("request %d: model %v max_tokens %v", i, r.body["model"], r.body["max_tokens"])
		}
	}
	// Strict definitions, names mapped.
	def := toolDef(t, reqs[0], "crm_create_contact")
	if def["strict"] != true {
		t.Errorf("crm_create_contact not strict: %s", mustJSON(t, def))
	}
	params := mustJSON(t, def["parameters"])
	for _, want := range []string{`"additionalProperties":false`, `"required":["email","name","note","tags"]`, `"note":{"type":["string","null"]}`,
		`"color":{"enum":["red","blue",null],"type":["string","null"]}`, `"required":["color","label"]`} {
		if !strings.Contains(params, want) {
			t.Errorf("strict schema lacks %s: %s", want, params)
		}
	}
	if d := toolDef(t, reqs[0], "pay_charge"); d["strict"] == true {
		t.Errorf("pay_charge has a free-form object and must be sent non-strict: %s", mustJSON(t, d))
	}
	if d := toolDef(t, reqs[0], "crm_search"); !strings.HasPrefix(d["description"].(string), "[read-only]") {
		t.Errorf("description = %v", d["description"])
	}
	// The read-only result went back to the model.
	if got := toolResults(t, reqs[1])["call_s1"]; !strings.Contains(got, `"c_17"`) {
		t.Errorf("search result sent back = %q", got)
	}
	// The placeholder carries the references.
	ph := toolResults(t, reqs[2])["call_c1"]
	for _, want := range []string{`"action_id":"a1"`, `"output":"${a1.output}"`, `"id":"${a1.output.id}"`, `"queued":true`} {
		if !strings.Contains(ph, want) {
			t.Errorf("placeholder lacks %s: %s", want, ph)
		}
	}
	// Provenance.
	m := got.Meta
	if m["model"] != "gpt-test" || m["served_model"] != "gpt-test-2026-01-01" || !strings.HasPrefix(m["prompt_hash"], "sha256:") ||
		m["tools_hash"] != b.reg.Hash() || m["total_tokens"] != "470" || m["rounds"] != "4" {
		t.Errorf("meta = %v", m)
	}
	if string(got.Transcript) != string(res.Exchange) || !json.Valid(res.Exchange) {
		t.Errorf("transcript and exchange differ or are not JSON")
	}
	var ex struct {
		Messages []openai.ChatCompletionMessage `json:"messages"`
		Attempts []map[string]any               `json:"attempts"`
	}
	if err := json.Unmarshal(res.Exchange, &ex); err != nil || len(ex.Attempts) != 4 || len(ex.Messages) != 9 {
		t.Errorf("exchange: %v, %d attempts, %d messages", err, len(ex.Attempts), len(ex.Messages))
	}
	if strings.Contains(string(res.Exchange), testKey) {
		t.Errorf("the API key is in the exchange")
	}
	if len(res.Messages) != 8 || res.Messages[0].Role != "user" {
		t.Errorf("conversation = %d messages, first %q", len(res.Messages), res.Messages[0].Role)
	}
}

// Parallel calls in one message become independent actions; a reference to an
// action of the same message is refused and repaired. Under OrderReferences
// only the reference orders the later call; OrderTurns (TestPlanOrderTurns)
// also orders it after the earlier message's other action.
func TestPlanParallelCalls(t *testing.T) {
	t.Parallel()
	p, b := setup(t, planner.Config{Order: planner.OrderReferences},
		toolCalls("",
			call{"call_1", "crm_create_contact", `{"name":"A","email":"a@x","note":null,"tags":null}`},
			call{"call_2", "crm_create_contact", `{"name":"B","email":"b@x","note":null,"tags":null}`},
			call{"call_3", "mail_send", `{"to":"a@x","subject":"hi","body":"${a1.output.id}"}`},
		),
		toolCalls("", call{"call_4", "mail_send", `{"to":"a@x","subject":"hi","body":"${a1.output.id}"}`}),
		text("done"),
	)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "two contacts, then mail"})
	if err != nil {
		t.Fatal(err)
	}
	acts := res.Plan.Actions
	if len(acts) != 3 || len(acts[0].DependsOn)+len(acts[1].DependsOn) != 0 || !reflect.DeepEqual(acts[2].DependsOn, []string{"a1"}) {
		t.Fatalf("actions = %s", mustJSON(t, acts))
	}
	if res.Repairs != 1 {
		t.Errorf("repairs = %d, want 1", res.Repairs)
	}
	r := toolResults(t, b.model.requests()[1])
	if !strings.Contains(r["call_3"], "same message") || !strings.Contains(r["call_3"], "rejected") {
		t.Errorf("same-message reference answer = %q", r["call_3"])
	}
	if !strings.Contains(r["call_1"], `"a1"`) || !strings.Contains(r["call_2"], `"a2"`) {
		t.Errorf("placeholders = %v", r)
	}
}

// Each problem a call can have is answered as its tool result, and the model
// gets to repair it.
func TestPlanRepairs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		bad     call
		wantMsg string
	}{
		{"unknown tool", call{"c1", "crm_delete_everything", `{}`}, `unknown tool \"crm_delete_everything\"; the tools are: crm_create_contact, crm_search, mail_send, pay_charge`},
		{"invalid JSON", call{"c1", "mail_send", `{"to":"a@x","subject":`}, "arguments"},
		{"not an object", call{"c1", "mail_send", `["a@x"]`}, "must be a JSON object"},
		{"schema", call{"c1", "mail_send", `{"to":"a@x","subject":7}`}, "invalid arguments"},
		{"duplicate key", call{"c1", "mail_send", `{"to":"a@x","to":"b@x","subject":"s","body":"b"}`}, "duplicate"},
		{"interpolation", call{"c1", "mail_send", `{"to":"a@x","subject":"s","body":"id: ${a1.output.id}"}`}, "reference"},
		{"dangling reference", call{"c1", "mail_send", `{"to":"a@x","subject":"s","body":"${a9.output}"}`}, "names no queued action"},
		{"reference in read-only call", call{"c1", "crm_search", `{"query":"${a1.output}","limit":null}`}, "read-only"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, planner.Config{},
				toolCalls("", tc.bad),
				toolCalls("", call{"c2", "mail_send", `{"to":"a@x","subject":"s","body":"b"}`}),
				text("ok"),
			)
			res, err := p.Plan(context.Background(), planner.Request{Goal: "mail a"})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Plan.Actions) != 1 || res.Plan.Actions[0].ID != "a1" || res.Repairs != 1 {
				t.Fatalf("actions %s, repairs %d", mustJSON(t, res.Plan.Actions), res.Repairs)
			}
			got := toolResults(t, b.model.requests()[1])["c1"]
			if !strings.Contains(got, tc.wantMsg) || !strings.Contains(got, "rejected, not queued") {
				t.Errorf("tool result = %s, want it to mention %q", got, tc.wantMsg)
			}
			if len(b.search.Calls()) != 0 {
				t.Errorf("a rejected read-only call ran")
			}
		})
	}
}

// Still invalid after the allowed repairs: a PlanningError listing every
// problem of the last reply.
func TestPlanRepairsExhausted(t *testing.T) {
	t.Parallel()
	bad := toolCalls("",
		call{"c1", "mail_send", `{"to":"a@x"}`},
		call{"c2", "nope", `{}`},
	)
	p, b := setup(t, planner.Config{MaxRepairs: 2}, bad, bad, bad)
	_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
	var pe *planner.PlanningError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *PlanningError", err)
	}
	if pe.Reason != planner.ReasonInvalid || pe.Repairs != 2 || pe.Rounds != 3 || len(pe.Problems) != 2 {
		t.Fatalf("PlanningError = %+v", pe)
	}
	msg := err.Error()
	for _, want := range []string{"2 problems", "round 3", `call of "mail_send": args: invalid arguments`, `unknown tool \"nope\"`} {
		if !strings.Contains(strings.ReplaceAll(msg, `"nope"`, `\"nope\"`), want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if len(b.model.requests()) != 3 {
		t.Errorf("%d requests, want 3", len(b.model.requests()))
	}
}

// Duplicate and missing tool call ids get fresh ids, so every result answers
// exactly one call.
func TestPlanDuplicateCallIDs(t *testing.T) {
	t.Parallel()
	p, b := setup(t, planner.Config{},
		toolCalls("",
			call{"call_0", "mail_send", `{"to":"a@x","subject":"s","body":"1"}`},
			call{"call_0", "mail_send", `{"to":"b@x","subject":"s","body":"2"}`},
			call{"", "mail_send", `{"to":"c@x","subject":"s","body":"3"}`},
		),
		toolCalls("", call{"call_0", "mail_send", `{"to":"d@x","subject":"s","body":"4"}`}),
		text("ok"),
	)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "mail four"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Actions) != 4 {
		t.Fatalf("%d actions", len(res.Plan.Actions))
	}
	reqs := b.model.requests()
	for i, r := range reqs[1:] {
		ids := map[string]bool{}
		for _, m := range messages(t, r) {
			tcs, _ := m["tool_calls"].([]any)
			for _, tc := range tcs {
				id := tc.(map[string]any)["id"].(string)
				if id == "" || ids[id] {
					t.Errorf("request %d: tool call id %q empty or repeated", i+2, id)
				}
				ids[id] = true
			}
		}
		res := toolResults(t, r)
		if len(res) != len(ids) {
			t.Errorf("request %d: %d calls, %d results", i+2, len(ids), len(res))
		}
		for id := range ids {
			if _, ok := res[id]; !ok {
				t.Errorf("request %d: call %q has no result", i+2, id)
			}
		}
	}
}

// Empty replies are answered with a reminder (a repair); too many end planning.
func TestPlanEmptyReply(t *testing.T) {
	t.Parallel()
	empty := reply{body: completion(map[string]any{"role": "assistant", "content": ""}, "stop", 10, 0)}
	noChoices := reply{body: `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}`}
	t.Run("repaired", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{}, empty, noChoices, toolCalls("", call{"c", "mail_send", `{"to":"a","subject":"s","body":"b"}`}), text("ok"))
		res, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Repairs != 2 || len(res.Plan.Actions) != 1 {
			t.Errorf("repairs %d, actions %d", res.Repairs, len(res.Plan.Actions))
		}
		if got := lastUser(t, b.model.requests()[1]); !strings.Contains(got, "Your reply was empty") {
			t.Errorf("reminder = %q", got)
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		t.Parallel()
		p, _ := setup(t, planner.Config{MaxRepairs: -1}, empty)
		_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		var pe *planner.PlanningError
		if !errors.As(err, &pe) || pe.Reason != planner.ReasonEmpty {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("text only is an empty plan", func(t *testing.T) {
		t.Parallel()
		p, _ := setup(t, planner.Config{}, text("Nothing to do: Ada is already a contact."))
		res, err := p.Plan(context.Background(), planner.Request{Goal: "make sure Ada is a contact"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Plan.Actions) != 0 || res.Reply == "" {
			t.Errorf("plan %s reply %q", mustJSON(t, res.Plan), res.Reply)
		}
	})
}

// Replies that must never become a plan, from real wire-format fixtures.
func TestPlanStoppedReplies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		dir    string
		reason planner.Reason
		want   string
	}{
		{"finish_length", planner.ReasonTruncated, "cut off at its token limit"},
		{"content_filter", planner.ReasonContentFilter, "content filter"},
		{"refusal", planner.ReasonRefused, "the model refused: I can't help with moving money"},
	}
	for _, tc := range cases {
		t.Run(tc.dir, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, planner.Config{}, fixture(t, tc.dir, "reply1.json"))
			res, err := p.Plan(context.Background(), planner.Request{Goal: "do it"})
			var pe *planner.PlanningError
			if !errors.As(err, &pe) || pe.Reason != tc.reason || !strings.Contains(err.Error(), tc.want) || res != nil {
				t.Fatalf("res %v, err = %v; want reason %s mentioning %q", res, err, tc.reason, tc.want)
			}
			if len(b.create.Calls())+len(b.send.Calls()) != 0 {
				t.Errorf("tools ran")
			}
		})
	}
}

// Wire-format fixtures that do become plans.
func TestPlanFixtures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		dir     string
		replies int
		want    []plan.Action
	}{
		// content next to parallel tool calls; ids reused by a server
		{"content_and_calls", 2, []plan.Action{
			{ID: "a1", Tool: "crm.create_contact", Args: json.RawMessage(`{"name":"Grace Hopper","email":"grace@example.com"}`), Why: "I'll add both contacts."},
			{ID: "a2", Tool: "crm.create_contact", Args: json.RawMessage(`{"name":"Alan Turing","email":"alan@example.com"}`), Why: "I'll add both contacts."},
		}},
		// an Ollama-style reply: tool calls with finish_reason "stop", arguments with spaces
		{"ollama_stop_with_calls", 2, []plan.Action{
			{ID: "a1", Tool: "mail/send", Args: json.RawMessage(`{"body":"All good","subject":"Status","to":"ops@example.com"}`)},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.dir, func(t *testing.T) {
			t.Parallel()
			var script []reply
			for i := 1; i <= tc.replies; i++ {
				script = append(script, fixture(t, tc.dir, "reply"+string(rune('0'+i))+".json"))
			}
			p, _ := setup(t, planner.Config{}, script...)
			res, err := p.Plan(context.Background(), planner.Request{Goal: "fixture " + tc.dir})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := mustJSON(t, res.Plan.Actions), mustJSON(t, tc.want); got != want {
				t.Errorf("actions\n got %s\nwant %s", got, want)
			}
		})
	}
}

// 429 and 5xx are retried with backoff honouring Retry-After; other 4xx fail
// at once; running out of retries is a ModelError.
func TestPlanHTTPFailures(t *testing.T) {
	t.Parallel()
	ok := []reply{toolCalls("", call{"c", "mail_send", `{"to":"a","subject":"s","body":"b"}`}), text("ok")}
	t.Run("429 Retry-After", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{},
			append([]reply{apiError(429, "Rate limit reached", "requests", map[string]string{"Retry-After": "2"}),
				apiError(429, "Rate limit reached", "requests", map[string]string{"Retry-After-Ms": "1500"})}, ok...)...)
		res, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*b.sleeps, []time.Duration{2 * time.Second, 1500 * time.Millisecond}) {
			t.Errorf("waits = %v, want [2s 1.5s]", *b.sleeps)
		}
		var ex struct{ Attempts []struct{ Status int } }
		json.Unmarshal(res.Exchange, &ex)
		if len(ex.Attempts) != 4 || ex.Attempts[0].Status != 429 {
			t.Errorf("attempts = %+v", ex.Attempts)
		}
	})
	t.Run("5xx backoff", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{RetryBase: 100 * time.Millisecond},
			append([]reply{apiError(500, "oops", "server_error", nil), {status: 502, body: "<html>bad gateway</html>"},
				apiError(503, "overloaded", "server_error", nil)}, ok...)...)
		if _, err := p.Plan(context.Background(), planner.Request{Goal: "mail"}); err != nil {
			t.Fatal(err)
		}
		if len(*b.sleeps) != 3 {
			t.Fatalf("waits = %v", *b.sleeps)
		}
		for i, d := range *b.sleeps {
			if limit := 100 * time.Millisecond << i; d < 0 || d > limit {
				t.Errorf("wait %d = %v, want within [0, %v]", i, d, limit)
			}
		}
	})
	t.Run("retries run out", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{MaxRetries: 2},
			apiError(500, "oops", "server_error", nil), apiError(500, "oops", "server_error", nil), apiError(503, "still down", "server_error", nil))
		_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		var me *planner.ModelError
		if !errors.As(err, &me) || me.Status != 503 || me.Attempts != 3 || !me.Retryable() || !errors.Is(err, planner.ErrModel) {
			t.Fatalf("err = %v (%+v)", err, me)
		}
		if !strings.Contains(err.Error(), "still down") || len(*b.sleeps) != 2 {
			t.Errorf("err %q, waits %v", err, *b.sleeps)
		}
		// The server sent "code": null: no made-up "(code 0)".
		if strings.Contains(err.Error(), "(code") {
			t.Errorf("err %q names a code the server did not send", err)
		}
	})
	t.Run("401 not retried, key redacted", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{}, apiError(401, "Incorrect API key provided: "+testKey+". You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", nil))
		_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		var me *planner.ModelError
		if !errors.As(err, &me) || me.Status != 401 || me.Attempts != 1 || me.Retryable() {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), testKey) || !strings.Contains(err.Error(), "[REDACTED]") {
			t.Errorf("error = %q: the key must be redacted", err)
		}
		if len(*b.sleeps) != 0 {
			t.Errorf("a 401 was retried")
		}
	})
	t.Run("Retry-After beyond RetryMax", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{RetryMax: 10 * time.Second}, apiError(429, "quota", "insufficient_quota", map[string]string{"Retry-After": "3600"}))
		_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		var me *planner.ModelError
		if !errors.As(err, &me) || me.After != time.Hour || len(*b.sleeps) != 0 {
			t.Fatalf("err = %v (%+v), waits %v", err, me, *b.sleeps)
		}
	})
	t.Run("error object in a 200", func(t *testing.T) {
		t.Parallel()
		p, _ := setup(t, planner.Config{}, reply{body: `{"error":{"message":"model 'llama9' not found","type":"not_found"}}`})
		_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		var me *planner.ModelError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), "model 'llama9' not found") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unreadable 200 retried", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{}, append([]reply{{body: `{"id":"x","choices":[{"mess`}}, ok...)...)
		if _, err := p.Plan(context.Background(), planner.Request{Goal: "mail"}); err != nil {
			t.Fatal(err)
		}
		if len(*b.sleeps) != 1 {
			t.Errorf("waits = %v, want one retry", *b.sleeps)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		// 500ms, not less: on a loaded machine a shorter deadline can pass
		// before the request even reaches the fake model.
		p, b := setup(t, planner.Config{Timeout: 500 * time.Millisecond, MaxRetries: 1}, reply{hang: true}, reply{hang: true})
		_, err := p.Plan(context.Background(), planner.Request{Goal: "mail"})
		var me *planner.ModelError
		if !errors.As(err, &me) || me.Attempts != 2 || !strings.Contains(err.Error(), "no answer within 500ms") {
			t.Fatalf("err = %v", err)
		}
		if len(b.model.requests()) != 2 {
			t.Errorf("%d requests", len(b.model.requests()))
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{}, reply{hang: true})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-b.model.got
			cancel()
		}()
		_, err := p.Plan(ctx, planner.Request{Goal: "mail"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
}

// Bounded rounds and tokens.
func TestPlanBounds(t *testing.T) {
	t.Parallel()
	search := toolCalls("", call{"s", "crm_search", `{"query":"x","limit":null}`})
	t.Run("rounds", func(t *testing.T) {
		t.Parallel()
		p, b := setup(t, planner.Config{MaxRounds: 3}, search, search, search)
		_, err := p.Plan(context.Background(), planner.Request{Goal: "look forever"})
		var pe *planner.PlanningError
		if !errors.As(err, &pe) || pe.Reason != planner.ReasonRounds || len(b.model.requests()) != 3 {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("tokens", func(t *testing.T) {
		t.Parallel()
		p, _ := setup(t, planner.Config{TokenBudget: 200}, search, search)
		_, err := p.Plan(context.Background(), planner.Request{Goal: "look"})
		var pe *planner.PlanningError
		if !errors.As(err, &pe) || pe.Reason != planner.ReasonTokens || !strings.Contains(err.Error(), "240 tokens") {
			t.Fatalf("err = %v", err)
		}
	})
}

// Structured output for models without tool calling.
func TestPlanJSONSchemaMode(t *testing.T) {
	t.Parallel()
	bad := `{"actions":[{"id":"a1","tool":"crm_nuke","args":{},"depends_on":[],"why":""}]}`
	good := "```json\n" + `{"actions":[{"id":"a1","tool":"crm_create_contact","args":{"name":"Ada","email":"ada@x","note":null,"tags":null},"depends_on":[],"why":"add her"},` +
		`{"id":"a2","tool":"mail_send","args":{"to":"ada@x","subject":"Hi","body":"${a1.output.id}"},"depends_on":[],"why":"welcome"}]}` + "\n```"
	p, b := setup(t, planner.Config{Mode: planner.ModeJSONSchema},
		reply{body: completion(map[string]any{"role": "assistant", "content": bad}, "stop", 50, 20)},
		reply{body: completion(map[string]any{"role": "assistant", "content": good}, "stop", 80, 40)},
	)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "add Ada and welcome her"})
	if err != nil {
		t.Fatal(err)
	}
	acts := res.Plan.Actions
	if len(acts) != 2 || string(acts[0].Args) != `{"name":"Ada","email":"ada@x"}` || !reflect.DeepEqual(acts[1].DependsOn, []string{"a1"}) || acts[1].Tool != "mail/send" {
		t.Fatalf("actions = %s", mustJSON(t, acts))
	}
	reqs := b.model.requests()
	if _, has := reqs[0].body["tools"]; has {
		t.Errorf("structured mode sent tools")
	}
	rf := mustJSON(t, reqs[0].body["response_format"])
	for _, want := range []string{`"type":"json_schema"`, `"name":"docket_plan"`, `"strict":false`, `"enum":["crm_create_contact"]`, `"anyOf"`} {
		if !strings.Contains(rf, want) {
			t.Errorf("response_format lacks %s: %s", want, rf)
		}
	}
	if got := lastUser(t, reqs[1]); !strings.Contains(got, `unknown tool \"crm_nuke\"`) && !strings.Contains(got, `unknown tool "crm_nuke"`) {
		t.Errorf("repair message = %q", got)
	}
	if res.Plan.Meta["mode"] != "json_schema" || res.Repairs != 1 {
		t.Errorf("meta %v repairs %d", res.Plan.Meta, res.Repairs)
	}
}

// A chat continues: the conversation, the results of the executed plan and
// the next message go into the next request; action ids do not repeat.
func TestPlanChatContinues(t *testing.T) {
	t.Parallel()
	p, b := setup(t, planner.Config{},
		toolCalls("", call{"c1", "crm_create_contact", `{"name":"Ada","email":"ada@x","note":null,"tags":null}`}),
		text("Queued the contact."),
		toolCalls("", call{"c2", "mail_send", `{"to":"ada@x","subject":"Your id","body":"c_99"}`}),
		text("Queued the mail."),
	)
	first, err := p.Plan(context.Background(), planner.Request{Goal: "add Ada",
		Messages: []planner.Message{{Role: "system", Content: "Answer in French."}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Messages) != 5 || first.Messages[0].Role != "system" || first.Messages[0].Content != "Answer in French." {
		t.Fatalf("the caller's system message must stay in the conversation: %s", mustJSON(t, first.Messages))
	}
	msgs := append(first.Messages, planner.ResultsMessage("run_1", nil))
	second, err := p.Plan(context.Background(), planner.Request{Messages: msgs, Goal: "now mail her the id"})
	if err != nil {
		t.Fatal(err)
	}
	if id := second.Plan.Actions[0].ID; id != "a2" {
		t.Errorf("second turn's action id = %s, want a2 (ids continue)", id)
	}
	if second.Plan.Goal != "now mail her the id" {
		t.Errorf("goal = %q", second.Plan.Goal)
	}
	ms := messages(t, b.model.requests()[2])
	if len(ms) != 7 || ms[0]["role"] != "system" || !strings.HasSuffix(ms[0]["content"].(string), "\n\nAnswer in French.") || ms[1]["content"] != "add Ada" || !strings.Contains(ms[5]["content"].(string), "Results of run run_1") || ms[6]["content"] != "now mail her the id" {
		t.Errorf("third request's messages = %s", mustJSON(t, ms))
	}
	sys := 0
	for _, m := range ms {
		if m["role"] == "system" {
			sys++
		}
	}
	if sys != 1 {
		t.Errorf("%d system messages", sys)
	}
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	reg, _, _, _, _ := registry(t)
	_, err := planner.New(planner.Config{Tools: reg, BaseURL: "ftp://x"})
	if !errors.Is(err, planner.ErrConfig) || !strings.Contains(err.Error(), "model name is required") || !strings.Contains(err.Error(), "not an http(s) URL") {
		t.Errorf("err = %v", err)
	}
	cfg := planner.ConfigFromEnv(func(k string) string {
		return map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_API_KEY": testKey, "OPENAI_MODEL": "llama3.1"}[k]
	})
	if cfg.BaseURL != "http://localhost:11434/v1" || cfg.Model != "llama3.1" || cfg.APIKey != testKey {
		t.Errorf("ConfigFromEnv = %+v", cfg)
	}
	var sb strings.Builder
	cfg.Tools = reg
	slogText(&sb, cfg)
	if strings.Contains(sb.String(), testKey) || !strings.Contains(sb.String(), "api_key=set") {
		t.Errorf("logged config = %s", sb.String())
	}
	if _, err := planner.New(cfg); err != nil {
		t.Errorf("New: %v", err)
	}
	p, _ := planner.New(cfg)
	if _, err := p.Plan(context.Background(), planner.Request{}); !errors.Is(err, planner.ErrBadRequest) {
		t.Errorf("empty request: %v", err)
	}
}

// OrderTurns: calls made together stay independent; a call made in a later
// message runs after the actions of the most recent message that queued
// any, with or without a reference; read-only calls order nothing.
func TestPlanOrderTurns(t *testing.T) {
	t.Parallel()
	p, b := setup(t, planner.Config{},
		toolCalls("",
			call{"call_1", "crm_create_contact", `{"name":"A","email":"a@x","note":null,"tags":null}`},
			call{"call_2", "crm_create_contact", `{"name":"B","email":"b@x","note":null,"tags":null}`},
		),
		toolCalls("", call{"call_3", "crm_search", `{"query":"x","limit":null}`}),
		toolCalls("", call{"call_4", "mail_send", `{"to":"a@x","subject":"after both","body":"no data link"}`}),
		toolCalls("",
			call{"call_5", "mail_send", `{"to":"b@x","subject":"then","body":"${a1.output.id}"}`},
			call{"call_6", "mail_send", `{"to":"c@x","subject":"then too","body":"x"}`},
		),
		text("done"),
	)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "two contacts, then mail, then two more mails"})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{nil, nil, {"a1", "a2"}, {"a1", "a3"}, {"a3"}}
	acts := res.Plan.Actions
	if len(acts) != len(want) {
		t.Fatalf("actions = %s", mustJSON(t, acts))
	}
	for i, a := range acts {
		if !reflect.DeepEqual(a.DependsOn, want[i]) {
			t.Errorf("%s depends on %v, want %v", a.ID, a.DependsOn, want[i])
		}
	}
	sys := b.model.requests()[0].body["messages"].([]any)[0].(map[string]any)["content"].(string)
	if !strings.Contains(sys, "runs after the actions you queued in earlier messages") {
		t.Errorf("the system prompt does not tell the model how order works: %s", sys)
	}
}
