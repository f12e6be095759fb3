package mcptest

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ProgressClient is an MCP client that keeps the progress messages servers
// send it (the newest 64; older ones are dropped when nobody reads them).
type ProgressClient struct {
	*mcp.Client
	Progress chan string
}

// NewProgressClient returns a client named name that keeps progress messages.
func NewProgressClient(name string) *ProgressClient {
	progress := make(chan string, 64)
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params.Message:
			default:
			}
		},
	})
	return &ProgressClient{Client: c, Progress: progress}
}

// CallWaiting starts p (with a progress token) on cs in the background, as
// an agent whose call waits for a person, and returns the first progress
// message and where the call's result arrives (nil after an error, which
// fails t). It fails t when no progress comes before ctx ends.
func (c *ProgressClient) CallWaiting(t testing.TB, ctx context.Context, cs *mcp.ClientSession, p *mcp.CallToolParams) (string, <-chan *mcp.CallToolResult) {
	t.Helper()
	p.SetProgressToken("waiting-" + time.Now().Format("150405.000000000"))
	res := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	select {
	case msg := <-c.Progress:
		return msg, res
	case <-ctx.Done():
		t.Fatalf("no progress notification while %s waits", p.Name)
		return "", nil
	}
}
