// Package mcptool connects to the MCP servers a tools file lists
// (mcp_servers) and offers their tools to the executor as tools.Tool values
// named "server.tool".
//
// Connect starts each local server (a command spoken to over stdio) or
// reaches each remote one (streamable HTTP, with headers rendered from the
// environment), lists its tools with their input schemas and returns one
// *Tool per server tool. Add them to the registry next to the HTTP tools:
//
//	f, _ := httptool.Load(path, os.Getenv)
//	set, err := mcptool.Connect(ctx, f.MCPServers, nil)
//	defer set.Close()
//	reg, err := tools.NewRegistry(append(f.Tools, set.Tools()...)...)
//
// Effect classes follow tools/README.md, MCP servers: the tools file's classification of a tool
// is used as it is; a tool the file does not classify is at_most_once, unless
// the server is marked trust_annotations and the tool says readOnlyHint
// (read_only) or idempotentHint (idempotent). Annotations are hints: from an
// untrusted server they are ignored, and they never override the file.
//
// A tool may declare a lookup as another tool of the same server plus a
// "found" rule (a *Tool whose class is lookup or keyed then also implements
// tools.Looker). Every call carries the action's key in the request's _meta
// ("io.docket/idempotency_key"), so a server that deduplicates by it can be
// classified keyed.
//
// Failures are classified for the executor:
//   - the server could not be started or reached, or the call's context ended
//     before the request was written: not sent (tools.NotSent);
//   - a JSON-RPC error answer saying the request was malformed or named an
//     unknown method or tool (-32700, -32600, -32601, -32602): definite
//     (tools.Permanent);
//   - a result with isError set: definite (the tool ran and reported that it
//     failed; its text is in the error);
//   - anything else after the request was written (the server exited or the
//     connection broke during the call, the call timed out, an internal
//     error -32603 or a server-defined code): unknown.
//
// A server whose process exits or whose connection breaks is reconnected (a
// new process, a new session) on the next call; a call that times out drops
// its session too, so a server that hangs is restarted rather than waited on.
//
// Results: the recorded output is the result's structuredContent when it has
// one, else {"content": [...]} with the MCP content blocks. Numbers are kept
// exactly as the server wrote them (the raw JSON-RPC result is read, never
// decoded through float64). The tools file's "output" JSON Pointer selects a
// part of it.
//
// Header values and environment values rendered into a server's settings
// never appear in errors or logs: a Tool logs its name, class and server.
//
// A call whose context holds a span (the executor's attempt span when
// tracing is on) carries its W3C trace context in _meta too: "traceparent"
// and, when set, "tracestate".
//
// Imports: the standard library, tools, tools/toolsfile (for the parsed
// mcp_servers entries), github.com/modelcontextprotocol/go-sdk and
// go.opentelemetry.io/otel/propagation (the API only). Never ledger.
package mcptool
