package ui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

const (
	eveToken  = "eve-token-0123456789abcdef"
	fredToken = "fred-token-0123456789abcdef"
)

// groupsSetup: invoices over 1000 need one approver of group finance; eve
// (review, group sales) and fred (review, group finance).
func groupsSetup(t *testing.T) *bundle {
	return setup(t, options{toolsFile: func(w *demoworld.World) []byte {
		var f map[string]any
		if err := json.Unmarshal(w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"}), &f); err != nil {
			panic(err)
		}
		for _, t := range f["tools"].([]any) {
			if t := t.(map[string]any); t["name"] == "payments_create_invoice" {
				t["policy"] = []any{map[string]any{"name": "finance", "when": "action.args.amount > 1000", "outcome": "approve",
					"approver_groups": []any{"finance"}}}
			}
		}
		out, _ := json.Marshal(f)
		return out
	}, tune: func(c *ui.Config) {
		c.ScopedTokens = append(c.ScopedTokens,
			ui.Token{Name: "eve", Scopes: []ui.Scope{ui.ScopeRead, ui.ScopeReview}, Secret: eveToken, Groups: []string{"sales"}},
			ui.Token{Name: "fred", Scopes: []ui.Scope{ui.ScopeRead, ui.ScopeReview}, Secret: fredToken, Groups: []string{"finance"}})
	}})
}

// socketApprove sends an approve of action over a run's socket as token and
// returns the error message ("" : acknowledged).
func socketApprove(t *testing.T, b *bundle, runID, action, token string) string {
	t.Helper()
	c, _, err := b.dialer().Dial(b.wsURL("/v1/runs/"+runID+"/ws"), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"op": "approve", "id": "1", "actions": ["`+action+`"]}`)); err != nil {
		t.Fatal(err)
	}
	for {
		m := read(t, c)
		if m.Type == "error" {
			return m.Error.Message
		}
		if m.Type == "ack" {
			return ""
		}
	}
}

// TestGroupsOverSocketAndPage: over the socket, eve (not in finance) is
// refused with the group named and nothing runs; the page's inbox says only
// members of group finance may approve; GET /v1/session tells fred his
// groups; fred's approval over the socket runs the invoice, once.
func TestGroupsOverSocketAndPage(t *testing.T) {
	b := groupsSetup(t)
	plan := json.RawMessage(`{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "groups"}}]}`)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "grp", "plan": plan, "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	b.waitStatus("grp", ledger.RunAwaitingApproval)
	if msg := socketApprove(t, b, "grp", "pay", eveToken); !strings.Contains(msg, "lets only members of group finance approve, not token:eve (groups: sales)") {
		t.Fatalf("eve's approval over the socket: %q", msg)
	}
	var me struct {
		Groups []string `json:"groups"`
	}
	if code := b.callWith("GET", "/v1/session", nil, &me, bearerOf(fredToken)); code != http.StatusOK || strings.Join(me.Groups, ",") != "finance" {
		t.Fatalf("fred's session = %d %+v", code, me)
	}

	p := openBrowser(t, 1280, 900)
	p.signIn(b.hs.URL)
	p.do("open the inbox", chromedp.Navigate(b.hs.URL+"/#inbox"))
	note := `document.querySelector('#inbox-list [data-run="grp"] .approval-note')`
	if err := pollPage(p.ctx, note+` !== null`); err != nil {
		// Seen once in a cold CI run (TLS, -race), never again in 35 runs:
		// say what the page and the server showed.
		p.shot("failed")
		var inbox json.RawMessage
		code := b.call("GET", "/v1/inbox", nil, &inbox)
		t.Fatalf("waiting for the approval note: %v\npage: %s\nGET /v1/inbox = %d %s", err,
			p.eval(`location.href + " signed-in=" + document.getElementById("signin").hidden + " inbox-view=" + !document.getElementById("inbox-view").hidden + " msg=" + JSON.stringify(document.getElementById("inbox-msg").textContent) + " list=" + JSON.stringify(document.getElementById("inbox-list").textContent.slice(0, 400))`),
			code, inbox)
	}
	if text := p.eval(note + `.textContent`); !strings.Contains(text, "Still needed: 1 approval (only members of group finance)") {
		t.Fatalf("approval note %q does not say who may approve", text)
	}
	if payments(b.world) != 0 {
		t.Fatal("the invoice was sent before a member of finance approved")
	}

	if msg := socketApprove(t, b, "grp", "pay", fredToken); msg != "" {
		t.Fatalf("fred's approval: %s", msg)
	}
	b.waitStatus("grp", ledger.RunCompleted)
	if n := payments(b.world); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}
}
