package demomodel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/planner/demomodel"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

func setup(t *testing.T) (*demoworld.World, *tools.Registry) {
	t.Helper()
	w := demoworld.Start()
	t.Cleanup(w.Close)
	f, err := httptool.Parse(w.ToolsFile(demoworld.ToolsOptions{}), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(f.Tools...)
	if err != nil {
		t.Fatal(err)
	}
	return w, reg
}

func newPlanner(t *testing.T, reg *tools.Registry, client *http.Client, base string) *planner.Planner {
	t.Helper()
	p, err := planner.New(planner.Config{BaseURL: base, Model: demomodel.Model, Tools: reg, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The real planner, over the real wire format, gets the onboarding plan with
// references between the actions.
func TestPlansOnboardingThroughThePlanner(t *testing.T) {
	t.Parallel()
	w, reg := setup(t)
	p := newPlanner(t, reg, &http.Client{Transport: demomodel.Transport()}, demomodel.BaseURL)
	res, err := p.Plan(context.Background(), planner.Request{Goal: "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack"})
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, a := range res.Plan.Actions {
		tools = append(tools, a.Tool)
	}
	if got, want := strings.Join(tools, ","), "crm_create_contact,payments_create_invoice,email_send"; got != want {
		t.Fatalf("tools = %s, want %s", got, want)
	}
	inv := res.Plan.Actions[1]
	var args map[string]any
	if err := json.Unmarshal(inv.Args, &args); err != nil {
		t.Fatal(err)
	}
	contact := res.Plan.Actions[0].ID
	if args["customer"] != "${"+contact+".output.id}" || args["amount"] != float64(1200) || args["currency"] != "EUR" {
		t.Fatalf("invoice args = %s", inv.Args)
	}
	if len(inv.DependsOn) != 1 || inv.DependsOn[0] != contact {
		t.Fatalf("invoice depends_on = %v, want [%s]", inv.DependsOn, contact)
	}
	if w.Requests("catalogue") != 0 {
		t.Fatalf("catalogue asked %d times for a goal with an explicit amount", w.Requests("catalogue"))
	}
	if !strings.Contains(res.Reply, "ACME") {
		t.Fatalf("reply %q does not name the customer", res.Reply)
	}
}

// Without an amount, the model reads the price while planning (a read-only
// call the planner runs at once) and uses the value it got.
func TestReadsThePriceWhilePlanning(t *testing.T) {
	t.Parallel()
	w, reg := setup(t)
	srv := httptest.NewServer(demomodel.Handler())
	t.Cleanup(srv.Close)
	p := newPlanner(t, reg, srv.Client(), srv.URL+"/v1")
	res, err := p.Plan(context.Background(), planner.Request{Goal: demoworld.OnboardingGoal})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.Requests("catalogue"); n != 1 {
		t.Fatalf("catalogue requests = %d, want 1", n)
	}
	var tools []string
	for _, a := range res.Plan.Actions {
		tools = append(tools, a.Tool)
	}
	if got, want := strings.Join(tools, ","), "crm_create_contact,payments_create_invoice,settings_put,email_send"; got != want {
		t.Fatalf("tools = %s, want %s", got, want)
	}
	if !bytes.Contains(res.Plan.Actions[1].Args, []byte(`"amount":1200`)) {
		t.Fatalf("invoice args %s do not carry the catalogue price", res.Plan.Actions[1].Args)
	}
	if !bytes.Contains(res.Plan.Actions[2].Args, []byte(`${`+res.Plan.Actions[1].ID+`.output.id}`)) {
		t.Fatalf("settings args %s do not reference the invoice", res.Plan.Actions[2].Args)
	}
}

// A goal the script does not know gets an explanation, no tool calls.
func TestUnknownGoal(t *testing.T) {
	t.Parallel()
	msg, _ := demomodel.Reply(openai.ChatCompletionRequest{
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "write a poem"}},
		Tools:    []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "email_send"}}},
	})
	if len(msg.ToolCalls) != 0 || !strings.Contains(msg.Content, "onboard") {
		t.Fatalf("reply = %+v", msg)
	}
	// It refuses (so the planner does not record an empty plan as if nothing
	// needed doing) and says what it knows of the tools offered.
	if !strings.Contains(msg.Refusal, "cannot plan this goal") || !strings.Contains(msg.Refusal, "email_send") || strings.Contains(msg.Refusal, "crm_create_contact") {
		t.Fatalf("refusal = %q", msg.Refusal)
	}
}

// Through the real planner, a goal the demo model cannot plan is a planning
// error (refused) whose message says so and lists every step it knows, in
// full (the planner clips refusals at 500 bytes).
func TestUnknownGoalIsRefusedThroughThePlanner(t *testing.T) {
	t.Parallel()
	_, reg := setup(t)
	p := newPlanner(t, reg, &http.Client{Transport: demomodel.Transport()}, demomodel.BaseURL)
	for _, goal := range []string{"buy milk and send it to Bob", "onboard ACME"} {
		res, err := p.Plan(context.Background(), planner.Request{Goal: goal})
		var pe *planner.PlanningError
		if !errors.As(err, &pe) || pe.Reason != planner.ReasonRefused {
			t.Fatalf("%q: got %+v, %v; want a refusal", goal, res, err)
		}
		for _, w := range []string{"demo model", "catalogue_price", "crm_create_contact", "payments_create_invoice", "settings_put", "email_send", "OPENAI_MODEL", "or a plan."} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: the refusal lacks %q: %v", goal, w, err)
			}
		}
	}
}

// The endpoint answers errors in the OpenAI error shape.
func TestWireErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(demomodel.Handler())
	t.Cleanup(srv.Close)
	for _, body := range []string{`{"model":"x","messages":[]}`, `not json`} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error.Message == "" {
			t.Fatalf("%s: status %d, error %q", body, resp.StatusCode, e.Error.Message)
		}
	}
}
