package ui_test

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
)

// TestBrowserApprovesMCPCall: an MCP client's email call waits for a person
// (policy safe, at most once) with the call open; a person signs in on the
// page, opens the call's run and approves it in the browser; the open call
// returns the email's output. docket's MCP server runs on the page's engine
// (as docket serve --mcp mounts it).
func TestBrowserApprovesMCPCall(t *testing.T) {
	if _, err := exec.LookPath(chromiumPath); err != nil {
		testextra.Missing(t, "Chromium at "+chromiumPath+" ("+err.Error()+")",
			"apt-get install -y chromium (Debian's package; `make test` installs it when it runs as root or with passwordless sudo)")
	}
	b := setup(t, options{})
	ms, err := mcpserve.New(mcpserve.Config{Engine: b.srv.Engine(), Ledger: b.led, Tools: b.reg, Wait: 2 * time.Minute, ReviewHint: "on the page"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Close)
	mh := httptest.NewServer(ms.Handler())
	t.Cleanup(mh.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := mcptest.NewProgressClient("assistant")
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: mh.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	p := &mcp.CallToolParams{Name: "email_send", Arguments: map[string]any{"to": "ada@acme.example", "template": "welcome-pack"},
		Meta: mcp.Meta{mcpserve.MetaRunID: "desk"}}
	msg, res := client.CallWaiting(t, ctx, cs, p)
	_, runID, _ := strings.Cut(msg, "(run ")
	runID, _, _ = strings.Cut(runID, ",")
	if !strings.HasPrefix(runID, "desk.c_") {
		t.Fatalf("progress %q names no run of the session", msg)
	}

	pg := openBrowser(t, 1280, 900)
	pg.signIn(b.hs.URL)
	pg.do("open the call's run", chromedp.Navigate(b.hs.URL+"/#run="+runID))
	pg.poll("the call's run, waiting", `document.getElementById("run-status").dataset.status === "awaiting_approval" && document.querySelector("#actions [data-action][data-status=pending]") !== null && !document.getElementById("approve-all").disabled`)
	if n := b.world.Requests("email"); n != 0 {
		t.Fatalf("%d email requests before the approval", n)
	}
	pg.click("#approve-all")
	var r *mcp.CallToolResult
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatal("the MCP call did not return after the approval on the page")
	}
	if r == nil || r.IsError {
		t.Fatalf("the approved call: %+v", r)
	}
	var text string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if !strings.Contains(text, `"message_id"`) {
		t.Errorf("the approved call returned %q, want the email's output", text)
	}
	pg.poll("the run completed on the page", `document.getElementById("run-status").dataset.status === "completed"`)
	if n := b.world.Effect("email/ada@acme.example/welcome-pack"); n != 1 {
		t.Errorf("emails %d, want 1", n)
	}
}
