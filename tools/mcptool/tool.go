package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// KeyMeta is the _meta field of every tools/call request that carries the
// action's idempotency key.
const KeyMeta = "io.docket/idempotency_key"

var (
	_ tools.Tool     = (*Tool)(nil)
	_ tools.Looker   = (*LookupTool)(nil)
	_ slog.LogValuer = (*Tool)(nil)
)

// Tool is one tool of an MCP server, registered as "server.tool".
type Tool struct {
	srv     *server
	name    string // the tool's MCP name
	spec    tools.Spec
	output  []string // JSON Pointer tokens selecting the recorded output
	lookup  *toolsfile.MCPLookup
	lookOut []string
	// Why says how the class was chosen ("tools file", "trusted readOnlyHint",
	// "default"), for docket tools check and logs.
	Why string
}

// LookupTool is a Tool whose tools file entry declares a lookup; it also
// implements tools.Looker.
type LookupTool struct{ *Tool }

// Spec returns the tool's definition.
func (t *Tool) Spec() tools.Spec { return t.spec }

// Server returns the name of the tool's server.
func (t *Tool) Server() string { return t.srv.cfg.Name }

// LogValue shows the tool's name, class and server, never headers or
// environment values.
func (t *Tool) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", t.spec.Name), slog.String("class", string(t.spec.Class)),
		slog.String("server", t.srv.cfg.Name))
}

func newTool(s *server, mt *mcp.Tool) (tools.Tool, error) {
	name := s.cfg.Name + "." + mt.Name
	in, err := marshalSchema(mt.InputSchema)
	if err != nil || len(in) == 0 {
		return nil, fmt.Errorf("tool %q: no usable input schema", mt.Name)
	}
	t := &Tool{srv: s, name: mt.Name}
	t.spec = tools.Spec{
		Name:        name,
		Description: strings.TrimSpace(mt.Description),
		InputSchema: in,
		Binding:     s.cfg.Binding(mt.Name), // the server and the file's entry: part of the tools hash
	}
	if t.spec.Description == "" {
		t.spec.Description = mt.Title
	}
	ft, classified := s.cfg.Tools[mt.Name]
	t.spec.Class, t.Why = classify(s.cfg.TrustAnnotations, ft, classified, mt.Annotations)
	if classified {
		t.spec.Timeout = ft.Timeout
		t.spec.KeyTTL = ft.KeyTTL
		t.spec.VisibilityLag = ft.VisibilityLag
		t.spec.Approval = ft.Approval
		t.spec.Compensate = ft.Compensate
		t.spec.Policy = ft.Policy
		t.spec.Retry = ft.Retry
		t.spec.Limits = ft.Limits
		if t.output, err = toolsfile.SplitPointer(ft.Output); err != nil {
			return nil, fmt.Errorf("tool %q: output: %v", mt.Name, err)
		}
		if ft.Lookup != nil {
			t.lookup = ft.Lookup
			if t.lookOut, err = toolsfile.SplitPointer(ft.Lookup.Output); err != nil {
				return nil, fmt.Errorf("tool %q: lookup output: %v", mt.Name, err)
			}
		}
	}
	if len(t.output) == 0 && mt.OutputSchema != nil {
		// The recorded output is the structuredContent the schema describes.
		if t.spec.OutputSchema, err = marshalSchema(mt.OutputSchema); err != nil {
			return nil, fmt.Errorf("tool %q: output schema: %v", mt.Name, err)
		}
	}
	if t.lookup != nil {
		return &LookupTool{t}, nil
	}
	return t, nil
}

// classify picks a tool's effect class (see the package doc).
func classify(trust bool, ft toolsfile.MCPTool, classified bool, a *mcp.ToolAnnotations) (tools.Class, string) {
	switch {
	case classified:
		return ft.Effect, "tools file"
	case trust && a != nil && a.ReadOnlyHint:
		return tools.ReadOnly, "trusted readOnlyHint"
	case trust && a != nil && a.IdempotentHint:
		return tools.Idempotent, "trusted idempotentHint"
	}
	return tools.AtMostOnce, "default for an unclassified MCP tool"
}

// Call calls the tool with the call's arguments, sending the key in _meta.
func (t *Tool) Call(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	res, err := t.srv.callTool(ctx, t.name, call.Args, call.Key)
	if err != nil {
		return nil, t.wrap("calling", err)
	}
	out, err := selectValue(res, t.output)
	if err != nil {
		// The effect happened; the answer is not what the file expects.
		return nil, t.wrap("reading the result", err)
	}
	return out, nil
}

// Lookup calls the declared lookup tool with arguments built from the call's
// arguments; the value its output pointer selects is found when it is a
// non-empty array or object.
func (t *LookupTool) Lookup(ctx context.Context, call tools.Call) (json.RawMessage, bool, error) {
	args, err := tools.CompensationArgs(tools.Compensation{Tool: t.lookup.Tool, Args: t.lookup.Args}, call.Args, nil)
	if err != nil {
		return nil, false, t.wrap("building the lookup's arguments", tools.Permanent(err))
	}
	res, err := t.srv.callTool(ctx, t.lookup.Tool, args, call.Key)
	if err != nil {
		return nil, false, t.wrap("looking up with "+t.lookup.Tool, err)
	}
	out, err := selectValue(res, t.lookOut)
	if errors.Is(err, errNoValue) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, t.wrap("reading the lookup's result", err)
	}
	if !nonEmpty(out) {
		return nil, false, nil
	}
	return out, true, nil
}

func (t *Tool) wrap(doing string, err error) error {
	return fmt.Errorf("mcp tool %s: %s: %w", t.spec.Name, doing, err)
}

// callTool makes one tools/call on the current session (connecting first if
// needed) and returns the recorded value: structuredContent, or
// {"content": [...]}. Errors are classified (see the package doc).
func (s *server) callTool(ctx context.Context, name string, args json.RawMessage, key string) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, tools.NotSent(fmt.Errorf("not called: %w", err))
	}
	sess, err := s.current(ctx)
	if err != nil {
		return nil, tools.NotSent(err)
	}
	tok := s.raw.token()
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	if key != "" {
		params.Meta = mcp.Meta{KeyMeta: key}
	}
	// W3C trace context in _meta (traceparent, tracestate), as MCP's trace
	// context propagation carries it, when ctx holds a span.
	tc := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, tc)
	for k, v := range tc {
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		params.Meta[k] = v
	}
	params.SetProgressToken(tok)
	res, err := sess.cs.CallTool(ctx, params)
	written, raw := s.raw.take(tok)
	if err != nil {
		return nil, s.callFailed(ctx, sess, written, err)
	}
	if res.IsError {
		return nil, tools.Permanent(fmt.Errorf("the tool reported an error: %s", s.redact(errorText(res))))
	}
	if raw == nil {
		// The result arrived by a path the wrapper did not see; fall back to
		// the SDK's decoding.
		b, merr := json.Marshal(res)
		if merr != nil {
			return nil, fmt.Errorf("encoding the result: %w", merr)
		}
		raw = b
	}
	return recorded(raw)
}

// callFailed classifies a failed tools/call.
func (s *server) callFailed(ctx context.Context, sess *session, written bool, err error) error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		switch we.Code {
		case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
			return tools.Permanent(fmt.Errorf("the server refused the request (code %d): %s", we.Code, s.redact(we.Message)))
		}
		return fmt.Errorf("the server answered with error code %d, outcome unknown: %s", we.Code, s.redact(we.Message))
	}
	if !written {
		if !sess.alive() {
			s.drop(sess, "session ended")
		}
		return tools.NotSent(fmt.Errorf("the request was not sent: %w", err))
	}
	if ctx.Err() != nil {
		// The server may hang: start afresh next time.
		s.drop(sess, "call timed out or was cancelled")
		return fmt.Errorf("no answer before the call's deadline, outcome unknown: %w", err)
	}
	if !sess.alive() || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) {
		s.drop(sess, "connection lost during a call")
		return fmt.Errorf("the server's connection ended during the call, outcome unknown: %w", err)
	}
	return fmt.Errorf("outcome unknown: %w", err)
}

// errorText joins the text blocks of an isError result (capped).
func errorText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	s := strings.Join(parts, " ")
	if s == "" {
		s = "(no text)"
	}
	const max = 2000
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// recorded extracts the value to record from a raw CallToolResult.
func recorded(raw json.RawMessage) (json.RawMessage, error) {
	var r struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decoding the result: %w", err)
	}
	if len(r.StructuredContent) > 0 && !bytes.Equal(bytes.TrimSpace(r.StructuredContent), []byte("null")) {
		return r.StructuredContent, nil
	}
	content := r.Content
	if len(content) == 0 || bytes.Equal(bytes.TrimSpace(content), []byte("null")) {
		content = json.RawMessage(`[]`)
	}
	return json.Marshal(struct {
		Content json.RawMessage `json:"content"`
	}{content})
}

var errNoValue = errors.New("no value at the output pointer")

// selectValue returns the value at the pointer tokens, numbers kept exactly.
func selectValue(raw json.RawMessage, ptr []string) (json.RawMessage, error) {
	if len(ptr) == 0 {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding the result: %w", err)
	}
	for i, tok := range ptr {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[tok]
			if !ok {
				return nil, fmt.Errorf("%w /%s", errNoValue, strings.Join(ptr[:i+1], "/"))
			}
			v = next
		case []any:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 || n >= len(x) {
				return nil, fmt.Errorf("%w /%s", errNoValue, strings.Join(ptr[:i+1], "/"))
			}
			v = x[n]
		default:
			return nil, fmt.Errorf("%w /%s", errNoValue, strings.Join(ptr[:i+1], "/"))
		}
	}
	return json.Marshal(v)
}

// nonEmpty reports whether v is a non-empty array or object.
func nonEmpty(v json.RawMessage) bool {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return false
	}
	switch x := x.(type) {
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return false
}
