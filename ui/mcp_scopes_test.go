package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/ledger"
)

// mcpBearer adds a token to every request of an MCP client.
type mcpBearer struct{ token string }

func (b mcpBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpText(r *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

// TestMCPToolsNeedTheirScopes: over the real /mcp of a ui.Server (as docket
// serve --mcp mounts it), docket's own tools need what the API needs for the
// same thing. A submit-only token, which GET /v1/runs/{id} answers 403, gets
// a tool error naming the read scope from docket_run_status and
// docket_waiting, never the run, and tools/list does not offer them; a token
// with read sees the run; a read-only token may read runs but not call a
// tool of the tools file; a token cannot use another token's MCP session.
func TestMCPToolsNeedTheirScopes(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: withScopedTokens})
	ms, err := mcpserve.New(mcpserve.Config{Engine: b.srv.Engine(), Ledger: b.led, Tools: b.reg, Wait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Close)
	mux := http.NewServeMux()
	mux.Handle("/mcp", b.srv.ServeMCP(ms))
	mux.Handle("/", b.srv.Handler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	// A run that waits for a person, submitted by the agent.
	const runID = "r-private"
	if code := b.callWith("POST", "/v1/runs", map[string]any{"run_id": runID, "plan": onboardingPlan(t), "approve": "none"}, nil, bearerOf(agentToken)); code != http.StatusCreated {
		t.Fatalf("creating the run: %d", code)
	}
	doc := b.waitFor(runID, "waiting for approval", func(d ledger.RunDoc) bool { return d.Run.Status == ledger.RunAwaitingApproval })
	goal := doc.Run.Goal
	if goal == "" {
		t.Fatal("the run has no goal to look for")
	}
	if code := b.callWith("GET", "/v1/runs/"+runID, nil, nil, bearerOf(botToken)); code != http.StatusForbidden {
		t.Fatalf("GET /v1/runs/%s with the submit-only token: %d, want 403", runID, code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(tok string) *mcp.ClientSession {
		t.Helper()
		c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: mcpBearer{tok}}}, nil)
		if err != nil {
			t.Fatalf("connecting with token %s: %v", tok, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	listed := func(cs *mcp.ClientSession) []string {
		t.Helper()
		var names []string
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
		}
		return names
	}
	statusArgs := map[string]any{"run_id": runID}

	// Submit only: refused, with the scope named and nothing of the run.
	bot := connect(botToken)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{{mcpserve.ToolRunStatus, statusArgs}, {mcpserve.ToolWaiting, map[string]any{}}} {
		r := call(bot, c.tool, c.args)
		text := mcpText(r)
		if !r.IsError || r.StructuredContent != nil || strings.Contains(text, goal) || strings.Contains(text, `"actions"`) {
			t.Errorf("%s with a submit-only token: isError=%v structured=%v %q; want a tool error without the run", c.tool, r.IsError, r.StructuredContent != nil, text)
		}
		if !strings.Contains(text, "needs the read scope") || !strings.Contains(text, "token bot") {
			t.Errorf("%s refusal %q: want it to name the token and the read scope", c.tool, text)
		}
	}
	botTools := listed(bot)
	if slices.Contains(botTools, mcpserve.ToolRunStatus) || slices.Contains(botTools, mcpserve.ToolWaiting) {
		t.Errorf("tools/list for a submit-only token offers the tools that read runs: %v", botTools)
	}
	if !slices.Contains(botTools, mcpserve.ToolProposePlan) || len(botTools) < 2 {
		t.Errorf("tools/list for a submit-only token: %v, want docket_propose_plan and the tools file's tools", botTools)
	}

	// Read and submit: the run and the waiting list.
	agent := connect(agentToken)
	if r := call(agent, mcpserve.ToolRunStatus, statusArgs); r.IsError || !strings.Contains(mcpText(r), goal) {
		t.Errorf("docket_run_status with read: isError=%v %q, want the run", r.IsError, mcpText(r))
	}
	if r := call(agent, mcpserve.ToolWaiting, map[string]any{}); r.IsError || !strings.Contains(mcpText(r), runID) {
		t.Errorf("docket_waiting with read: isError=%v %q, want the waiting run", r.IsError, mcpText(r))
	}
	agentTools := listed(agent)
	if !slices.Contains(agentTools, mcpserve.ToolRunStatus) || !slices.Contains(agentTools, mcpserve.ToolWaiting) || len(agentTools) <= len(botTools) {
		t.Errorf("tools/list for read and submit: %v", agentTools)
	}

	// Read only: reads runs, calls nothing that records one.
	reader := connect(scopeTokens["read"])
	if r := call(reader, mcpserve.ToolRunStatus, statusArgs); r.IsError || !strings.Contains(mcpText(r), goal) {
		t.Errorf("docket_run_status with a read-only token: isError=%v %q, want the run", r.IsError, mcpText(r))
	}
	var fileTool string
	for _, n := range agentTools {
		if !strings.HasPrefix(n, "docket_") {
			fileTool = n
		}
	}
	runs, _, err := b.led.ListRuns(ctx, ledger.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r := call(reader, fileTool, map[string]any{}); !r.IsError || !strings.Contains(mcpText(r), "needs the submit scope") {
		t.Errorf("%s with a read-only token: isError=%v %q, want refused for submit", fileTool, r.IsError, mcpText(r))
	}
	if r := call(reader, mcpserve.ToolProposePlan, map[string]any{"actions": []any{map[string]any{"id": "a", "tool": fileTool, "args": map[string]any{}}}}); !r.IsError || !strings.Contains(mcpText(r), "needs the submit scope") {
		t.Errorf("docket_propose_plan with a read-only token: isError=%v %q, want refused for submit", r.IsError, mcpText(r))
	}
	if after, _, err := b.led.ListRuns(ctx, ledger.ListOptions{Limit: 100}); err != nil || len(after) != len(runs) {
		t.Errorf("refused calls recorded runs: %d before, %d after (%v)", len(runs), len(after), err)
	}
	if got := listed(reader); !slices.Equal(got, []string{mcpserve.ToolRunStatus, mcpserve.ToolWaiting}) && !slices.Equal(got, []string{mcpserve.ToolWaiting, mcpserve.ToolRunStatus}) {
		t.Errorf("tools/list for a read-only token: %v, want the two tools that read runs", got)
	}

	// The agent's session, used with the bot's token: refused.
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"docket_run_status","arguments":{"run_id":"` + runID + `"}}}`
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+botToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", agent.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the agent's MCP session with the bot's token: %d, want 403", resp.StatusCode)
	}
	// Without a bearer token: 401.
	resp, err = http.Post(hs.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/mcp without a token: %d, want 401", resp.StatusCode)
	}
}
