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
	bobToken   = "bob-token-0123456789abcdef"
	carolToken = "carol-token-0123456789abcdef"
)

// fourEyesTools is the demo world's tools file with a four-eyes rule on
// invoices over 1000: two people, never the run's creator.
func fourEyesTools(w *demoworld.World) []byte {
	var f map[string]any
	if err := json.Unmarshal(w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"}), &f); err != nil {
		panic(err)
	}
	for _, t := range f["tools"].([]any) {
		if t := t.(map[string]any); t["name"] == "payments_create_invoice" {
			t["policy"] = []any{map[string]any{"name": "four-eyes", "when": "action.args.amount > 1000", "outcome": "approve",
				"approvers": 2, "exclude_creator": true, "message": "invoices over 1000 need two people"}}
		}
	}
	out, _ := json.Marshal(f)
	return out
}

func fourEyesSetup(t *testing.T) *bundle {
	return setup(t, options{toolsFile: fourEyesTools, tune: func(c *ui.Config) {
		c.ScopedTokens = append(c.ScopedTokens,
			ui.Token{Name: "bob", Scopes: []ui.Scope{ui.ScopeRead, ui.ScopeReview}, Secret: bobToken},
			ui.Token{Name: "carol", Scopes: []ui.Scope{ui.ScopeRead, ui.ScopeReview}, Secret: carolToken})
	}})
}

func payments(w *demoworld.World) int {
	n := 0
	for k, v := range w.Effects() {
		if strings.HasPrefix(k, "payments") {
			n += v
		}
	}
	return n
}

type approvalInbox struct {
	Items []struct {
		ActionID string `json:"action_id"`
		Approval *struct {
			Rule        string `json:"rule"`
			Need        int    `json:"need"`
			StillNeeded int    `json:"still_needed"`
			ApprovedBy  []struct {
				By string `json:"by"`
			} `json:"approved_by"`
			Creator string `json:"creator"`
		} `json:"approval"`
	} `json:"items"`
}

// TestFourEyesOverHTTPAndSocket: a two-approver invoice created by alice;
// alice's own approval is refused (403), bob's alone leaves it waiting (the
// inbox says one more is needed), carol's over the socket runs it, once.
func TestFourEyesOverHTTPAndSocket(t *testing.T) {
	t.Parallel()
	b := fourEyesSetup(t)
	plan := json.RawMessage(`{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "four-eyes"}}]}`)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "fe", "plan": plan, "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	b.waitStatus("fe", ledger.RunAwaitingApproval)

	if code := b.callWith("POST", "/v1/runs/fe/actions/pay/approve", map[string]any{}, nil, bearerOf(testToken)); code != http.StatusForbidden {
		t.Fatalf("the creator's approval = %d, want 403", code)
	}
	if code := b.callWith("POST", "/v1/runs/fe/actions/pay/approve", map[string]any{}, nil, bearerOf(bobToken)); code != http.StatusOK {
		t.Fatalf("bob's approval = %d", code)
	}
	doc := b.waitStatus("fe", ledger.RunAwaitingApproval)
	if payments(b.world) != 0 {
		t.Fatalf("the invoice was sent with one approval (%v)", doc)
	}
	var in approvalInbox
	if code := b.call("GET", "/v1/inbox?run=fe", nil, &in); code != http.StatusOK || len(in.Items) != 1 || in.Items[0].Approval == nil {
		t.Fatalf("inbox = %d %+v", code, in)
	}
	ap := in.Items[0].Approval
	if ap.Rule != "four-eyes" || ap.Need != 2 || ap.StillNeeded != 1 || len(ap.ApprovedBy) != 1 || ap.ApprovedBy[0].By != "token:bob" || ap.Creator != "token:alice" {
		t.Fatalf("approval view %+v", ap)
	}

	c, _, err := b.dialer().Dial(b.wsURL("/v1/runs/fe/ws"), http.Header{"Authorization": {"Bearer " + carolToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"op": "approve", "id": "1", "actions": ["pay"]}`)); err != nil {
		t.Fatal(err)
	}
	for {
		m := read(t, c)
		if m.Type == "error" {
			t.Fatalf("carol's approval: %+v", m.Error)
		}
		if m.Type == "ack" {
			break
		}
	}
	b.waitStatus("fe", ledger.RunCompleted)
	if n := payments(b.world); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}
}

// TestBrowserFourEyes: the page shows, for a two-approver invoice, who
// approved and who is still needed (never the run's creator); the creator's
// click on Approve is refused; the run's audit downloads as a verified
// hash chain.
func TestBrowserFourEyes(t *testing.T) {
	b := fourEyesSetup(t)
	plan := json.RawMessage(`{"goal": "invoice ACME", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1500, "currency": "EUR", "reference": "page"}}]}`)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "fe-page", "plan": plan, "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	b.waitStatus("fe-page", ledger.RunAwaitingApproval)
	if code := b.callWith("POST", "/v1/runs/fe-page/actions/pay/approve", map[string]any{}, nil, bearerOf(bobToken)); code != http.StatusOK {
		t.Fatalf("bob's approval = %d", code)
	}
	p := openBrowser(t, 1280, 900)
	p.signIn(b.hs.URL) // as alice, who created the run
	p.do("open the inbox", chromedp.Navigate(b.hs.URL+"/#inbox"))
	note := `document.querySelector('#inbox-list [data-run="fe-page"] .approval-note')`
	p.poll("the approval note", note+` !== null`)
	text := p.eval(note + `.textContent`)
	for _, want := range []string{"Rule four-eyes: 2 approvals needed", "approved by token:bob", "Still needed: 1 approval", "not token:alice (created the run)"} {
		if !strings.Contains(text, want) {
			t.Fatalf("approval note %q lacks %q", text, want)
		}
	}
	p.do("alice approves", chromedp.Click(chromedp.CSS(`#inbox-list [data-run="fe-page"] button[data-op=approve]`)))
	p.poll("the refusal", `[...document.querySelectorAll('[role=alert]')].some(e => e.textContent.includes("does not let the creator approve"))`)
	if payments(b.world) != 0 {
		t.Fatal("the invoice was sent")
	}
	p.do("open the run", chromedp.Navigate("about:blank"), chromedp.Navigate(b.hs.URL+"/#run=fe-page"))
	p.poll("the run", `document.getElementById("run-title").textContent === "fe-page"`)
	if href := p.eval(`document.getElementById("run-audit").getAttribute("href")`); href != "/v1/runs/fe-page/audit" {
		t.Fatalf("audit link %q", href)
	}
	p.eval(`(() => { window.auditCheck = ""; fetch(document.getElementById("run-audit").href).then(async (r) => {
		const lines = (await r.text()).trim().split("\n").map((l) => JSON.parse(l));
		window.auditCheck = r.headers.get("Docket-Audit") + " " + lines.length + " " + lines.every((e) => e.hash && e.hash.startsWith("sha256:"));
	}); return ""; })()`)
	p.poll("the audit download", `window.auditCheck !== ""`)
	got := p.eval(`window.auditCheck`)
	if !strings.HasPrefix(got, "verified ") || !strings.HasSuffix(got, " true") {
		t.Fatalf("audit download: %q", got)
	}
}
