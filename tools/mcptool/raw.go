package mcptool

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK decodes a result's structuredContent into Go values, where numbers
// become float64. To record outputs exactly, the connection is wrapped: a
// tools/call request carries a progress token unique to the call, and the
// raw JSON-RPC result of that request is kept under the token.

// rawResults holds raw results by call token.
type rawResults struct {
	next atomic.Uint64

	mu    sync.Mutex
	byID  map[jsonrpc.ID]string // request id → token, until the response
	calls map[string]*rawCall   // token → call in progress
}

type rawCall struct {
	written bool            // the request was handed to the connection
	result  json.RawMessage // the raw result, once received
}

func newRawResults() *rawResults {
	return &rawResults{byID: map[jsonrpc.ID]string{}, calls: map[string]*rawCall{}}
}

// token registers a new call and returns its progress token.
func (r *rawResults) token() string {
	tok := fmt.Sprintf("docket-%d", r.next.Add(1))
	r.mu.Lock()
	r.calls[tok] = &rawCall{}
	r.mu.Unlock()
	return tok
}

// take returns and forgets the call with token tok: whether its request was
// written to the connection, and its raw result if one arrived.
func (r *rawResults) take(tok string) (written bool, result json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[tok]
	delete(r.calls, tok)
	for id, t := range r.byID {
		if t == tok {
			delete(r.byID, id)
		}
	}
	if c == nil {
		return false, nil
	}
	return c.written, c.result
}

func (r *rawResults) sent(req *jsonrpc.Request) {
	if req.Method != "tools/call" || !req.ID.IsValid() {
		return
	}
	var p struct {
		Meta struct {
			ProgressToken any `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return
	}
	tok, ok := p.Meta.ProgressToken.(string)
	if !ok {
		return
	}
	r.mu.Lock()
	if c := r.calls[tok]; c != nil {
		c.written = true
		r.byID[req.ID] = tok
	}
	r.mu.Unlock()
}

func (r *rawResults) received(resp *jsonrpc.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tok, ok := r.byID[resp.ID]
	if !ok {
		return
	}
	delete(r.byID, resp.ID)
	if c := r.calls[tok]; c != nil && resp.Result != nil {
		c.result = append(json.RawMessage(nil), resp.Result...)
	}
}

// rawTransport wraps a transport so that its connection reports tools/call
// requests and their responses to raw.
type rawTransport struct {
	inner mcp.Transport
	raw   *rawResults
}

func (t rawTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &rawConn{Connection: c, raw: t.raw}, nil
}

type rawConn struct {
	mcp.Connection
	raw *rawResults
}

func (c *rawConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok {
		c.raw.sent(req)
	}
	return c.Connection.Write(ctx, msg)
}

func (c *rawConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil {
		c.raw.received(resp)
	}
	return msg, err
}
