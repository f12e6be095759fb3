// Package toolsfile owns the tools-file format (JSON, version 1; tools/README.md,
// "The tools file"): it parses and checks a file
// once, for everyone — tools/httptool builds callable HTTP tools from its
// definitions, tools/mcptool connects its mcp_servers, cmd/docket loads and
// checks files, ui previews requests, evals reads specs.
//
// Parse reports every problem at once in a *LoadError, each naming the tool
// and the field ("tool \"pay\": request.url: ..."), and a file that is not
// JSON with the line and column of the syntax error. What it checks beyond
// the JSON Schema it ships (Schema):
//   - effect classes and the blocks they need or refuse: key_header and
//     key_ttl only on keyed tools, a keyed tool must send its key, a lookup
//     block on lookup tools (and keyed ones, for calls past key_ttl);
//   - templates ({{.field}}, {{key}}, {{env "NAME"}}; see Template): every
//     field they name exists in the input schema, every environment variable
//     they read is set (its value is kept in Tool.Env, never in errors);
//   - URLs: absolute http(s), no credentials, arguments never in the host;
//   - output and lookup output JSON Pointers (SplitPointer);
//   - approve_above limits against numeric input fields;
//   - compensation templates ("${input.PATH}", "${output.PATH}", parsed with
//     plan's reference parser) and their target tools;
//   - retry blocks (tools.Spec.Retry): attempts a whole number of at least
//     1, max_backoff and budget positive durations, max_backoff no longer
//     than budget;
//   - mcp_servers: one of command or url, tools classified with the same
//     vocabulary, lookups through a tool of the same server.
//
// Warnings (File.Warnings, printed by docket tools check) never quote a
// value: a credential typed into the file (a header, MCP variable or URL
// query parameter named like one); a URL whose origin an argument could
// reach (Template.OriginFixed); a request that sends the arguments
// themselves as its body while the input schema does not refuse undeclared
// properties.
//
// It also renders templates (Template.Render, RenderURL, RenderBody), since
// what a template means is part of the format (RenderGuardedURL: the URL of
// a request, refused when an argument would change its origin or make a
// dot or empty path segment), and computes each tool's
// tools.Spec.Binding (what decides where a call goes, for the tools hash).
//
// Imports: the standard library and tools. Never ledger, executor or a
// connector (they import it).
package toolsfile
