package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/executor/mcpserve/mcpservetest"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
)

// The official TypeScript SDK's client, sending no Authorization header,
// against docket serve --mcp --mcp-url-token (a real process): /mcp refuses
// it with a challenge whose resource_metadata the SDK's OAuth discovery
// follows to metadata naming this /mcp; at /mcp/t/TOKEN it connects, sees
// only the tools its token's scopes allow and is refused the one that
// needs read; the token never reaches the server's log.
func TestMCPNodeClientWithoutHeader(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	modules := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(p.Memory)))) // .../node_modules
	sdk := filepath.Join(modules, "@modelcontextprotocol", "sdk")
	if _, err := os.Stat(filepath.Join(sdk, "dist", "esm", "client", "streamableHttp.js")); err != nil {
		t.Fatalf("the TypeScript MCP SDK is not where the pinned servers' lock file puts it: %v", err)
	}
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	const bot = "bot-token-0123456789abcdef"
	sum := sha256.Sum256([]byte(bot))
	tokensPath := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokensPath, []byte(`{"version": 1, "tokens": [
  {"name": "bot", "scopes": ["submit"], "sha256": "`+hex.EncodeToString(sum[:])+`"}
]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeChild(t, "--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--tokens", tokensPath, "--mcp", "--mcp-url-token")
	script, err := filepath.Abs(filepath.Join("testdata", "mcpnode", "http_client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Node, script, sdk, s.base, bot)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\nstderr: %s", err, stderr.String())
	}
	var got struct {
		WithoutToken        string `json:"without_token"`
		Status              int    `json:"status"`
		ResourceMetadataURL string `json:"resource_metadata_url"`
		Metadata            struct {
			Resource string   `json:"resource"`
			Methods  []string `json:"bearer_methods_supported"`
			Scopes   []string `json:"scopes_supported"`
		} `json:"metadata"`
		Resource   string   `json:"resource"`
		Tools      []string `json:"tools"`
		StatusCall struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"status_call"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node client output %q: %v", out, err)
	}
	if got.WithoutToken == "connected" || got.Status != 401 {
		t.Errorf("without a token: %q, status %d; want refused with 401", got.WithoutToken, got.Status)
	}
	if got.ResourceMetadataURL != s.base+"/.well-known/oauth-protected-resource/mcp" ||
		got.Metadata.Resource != s.base+"/mcp" || got.Resource != s.base+"/mcp" ||
		!slices.Equal(got.Metadata.Methods, []string{"header"}) || !slices.Contains(got.Metadata.Scopes, "read") {
		t.Errorf("discovery: %+v; want the metadata of %s/mcp", got, s.base)
	}
	if len(got.Tools) == 0 || slices.Contains(got.Tools, mcpserve.ToolRunStatus) || !slices.Contains(got.Tools, mcpserve.ToolProposePlan) {
		t.Errorf("tools offered to the submit-only token: %v", got.Tools)
	}
	text := ""
	for _, c := range got.StatusCall.Content {
		text += c.Text
	}
	if !got.StatusCall.IsError || !strings.Contains(text, "read scope") {
		t.Errorf("docket_run_status with a submit-only token in the path: isError=%v %q; want refused for read", got.StatusCall.IsError, text)
	}
	if strings.Contains(s.stderr.String(), bot) {
		t.Errorf("the server's log holds the token:\n%s", s.stderr.String())
	}
}

// --mcp-url-token without --mcp is bad input (exit 2), not ignored.
func TestServeMCPURLTokenNeedsMCP(t *testing.T) {
	t.Parallel()
	r := inproc(t, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "d"), "--mcp-url-token")
	if r.code != exitBad || !strings.Contains(r.stderr, "--mcp-url-token") || !strings.Contains(r.stderr, "needs --mcp") {
		t.Errorf("--mcp-url-token alone: %s", r)
	}
}
