package mcptool

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// TestTraceContextInMeta: a call whose context holds a span carries its W3C
// trace context in the request's _meta ("traceparent"), next to the key; a
// call without a span carries none. The server is an in-process MCP server
// (the official SDK) over streamable HTTP that keeps the _meta it received.
func TestTraceContextInMeta(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var metas []map[string]any
	srv := mcp.NewServer(&mcp.Implementation{Name: "meta", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			metas = append(metas, req.Params.GetMeta())
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	set, err := Connect(context.Background(), []toolsfile.MCPServer{{Name: "m", URL: hs.URL,
		Tools: map[string]toolsfile.MCPTool{"echo": {Effect: "idempotent"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	reg, err := tools.NewRegistry(set.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	echo, ok := reg.Get("m.echo")
	if !ok {
		t.Fatalf("no m.echo in %v", reg.Names())
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	if _, err := echo.Call(ctx, tools.Call{Key: "dk1_k", Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := echo.Call(context.Background(), tools.Call{Key: "dk1_k2", Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(metas) != 2 {
		t.Fatalf("%d calls reached the server", len(metas))
	}
	if got := metas[0]["traceparent"]; got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || metas[0][KeyMeta] != "dk1_k" {
		t.Errorf("_meta with a span: %v", metas[0])
	}
	if _, ok := metas[1]["traceparent"]; ok || metas[1][KeyMeta] != "dk1_k2" {
		t.Errorf("_meta without a span: %v", metas[1])
	}
}
