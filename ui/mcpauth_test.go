package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/ui"
)

// syncBuffer is a log sink the server's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mcpServer serves MCP as docket serve --mcp does (ui.Server.MountMCP) and
// returns its base URL and the server's log.
func mcpServer(t *testing.T, o ui.MCPOptions) (string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	b := setup(t, options{tune: func(c *ui.Config) {
		withScopedTokens(c)
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}})
	ms, err := mcpserve.New(mcpserve.Config{Engine: b.srv.Engine(), Ledger: b.led, Tools: b.reg, Wait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Close)
	mux := http.NewServeMux()
	b.srv.MountMCP(mux, ms, o)
	mux.Handle("/", b.srv.Handler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL, logs
}

// TestMCPResourceMetadata: a request to /mcp without a token, or with a bad
// one, is answered 401 with WWW-Authenticate naming the protected-resource
// metadata (RFC 9728); the metadata is public and names /mcp as the
// resource, the header as the way to send the token and docket's scopes.
func TestMCPResourceMetadata(t *testing.T) {
	t.Parallel()
	base, _ := mcpServer(t, ui.MCPOptions{})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	want := `resource_metadata="` + base + ui.ResourceMetadataPath + `"`
	for _, tok := range []string{"", "not-a-token"} {
		req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(got, want) || !strings.HasPrefix(got, "Bearer ") {
			t.Errorf("token %q: %d, WWW-Authenticate %q; want 401 with %s", tok, resp.StatusCode, got, want)
		}
	}
	// The document names the host it was asked by: only one the service
	// answers to.
	req, _ := http.NewRequest("GET", base+ui.ResourceMetadataPath, nil)
	req.Host = "attacker.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("the metadata asked for by another host name: %d, want 421", resp.StatusCode)
	}
	for _, path := range []string{ui.ResourceMetadataPath, "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Resource string   `json:"resource"`
			Methods  []string `json:"bearer_methods_supported"`
			Scopes   []string `json:"scopes_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || md.Resource != base+"/mcp" ||
			!slices.Equal(md.Methods, []string{"header"}) || !slices.Contains(md.Scopes, "submit") {
			t.Errorf("GET %s: %d %+v (%v); want the metadata of %s/mcp", path, resp.StatusCode, md, err, base)
		}
	}
}

// TestMCPTokenInPath: an MCP client that sends no Authorization header (the
// go-sdk client with a plain HTTP client) reaches /mcp/t/{token} when the
// server allows it, under the same scope checks as the header: a
// submit-only token is not offered docket_run_status and is refused when it
// calls it; a read token reads. A bad token, a header and a path token
// together, and the path way when it is off are refused, and no log line
// holds a token.
func TestMCPTokenInPath(t *testing.T) {
	t.Parallel()
	base, logs := mcpServer(t, ui.MCPOptions{TokenInPath: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(endpoint string) (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "headerless", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{}}, nil)
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

	bot, err := connect(base + "/mcp/t/" + botToken)
	if err != nil {
		t.Fatalf("connecting with the token in the path: %v", err)
	}
	defer bot.Close()
	if names := listed(bot); slices.Contains(names, mcpserve.ToolRunStatus) || len(names) == 0 {
		t.Errorf("a submit-only token is offered %v; want the tools without %s", names, mcpserve.ToolRunStatus)
	}
	r, err := bot.CallTool(ctx, &mcp.CallToolParams{Name: mcpserve.ToolRunStatus, Arguments: map[string]any{"run_id": "any"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := mcpText(r); !r.IsError || !strings.Contains(text, "needs the read scope") || !strings.Contains(text, "token bot") {
		t.Errorf("docket_run_status with a submit-only path token: isError=%v %q; want refused for the read scope", r.IsError, text)
	}

	agent, err := connect(base + "/mcp/t/" + agentToken)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	if names := listed(agent); !slices.Contains(names, mcpserve.ToolRunStatus) {
		t.Errorf("a read token is offered %v; want %s", names, mcpserve.ToolRunStatus)
	}

	if _, err := connect(base + "/mcp/t/not-a-token"); err == nil {
		t.Error("a bad token in the path connected")
	}
	req, _ := http.NewRequest("POST", base+"/mcp/t/"+agentToken, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+botToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a path token and a header: %d, want 401", resp.StatusCode)
	}

	off, _ := mcpServer(t, ui.MCPOptions{})
	if _, err := connect(off + "/mcp/t/" + agentToken); err == nil {
		t.Error("the token in the path connected while TokenInPath is off")
	}

	if l := logs.String(); strings.Contains(l, "not-a-token") || strings.Contains(l, agentToken) || strings.Contains(l, botToken) {
		t.Errorf("the log holds a token:\n%s", l)
	}
	if !strings.Contains(logs.String(), "authentication failed") {
		t.Errorf("the refusals were not logged:\n%s", logs.String())
	}
}
