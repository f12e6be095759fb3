// Package httptool makes callable HTTP tools of a tools file's definitions
// (JSON, version 1; tools/README.md, "The tools file"; parsed and checked by
// tools/toolsfile) and calls them.
//
// Each tool becomes a tools.Tool (a *Tool, or a *LookupTool that also
// implements tools.Looker when it declares a lookup block). Loading refuses a
// wrong file with every problem listed, each naming the tool and the field.
// Decisions beyond tools/README.md:
//   - key_header is refused on a tool that is not keyed (a provider that
//     deduplicates by a header makes the tool keyed; to send the key anyway use
//     {{key}} in a header), and a keyed tool must send its key somewhere.
//   - a lookup block is allowed on lookup tools and on keyed tools (used past
//     key_ttl), refused on others.
//   - environment variables are read once, at load; every one used must be set.
//   - in a URL, {{env}} at the start or in the host is inserted verbatim (a base
//     URL); arguments and {{key}} are path-segment-escaped in the path and
//     query-escaped after "?", and refused in the scheme and host.
//   - a call whose arguments (or key) would change the URL's scheme, user
//     information, host or port from what the text before the first
//     argument gives ("{{env \"API\"}}{{.path}}" with path "@other:8080"),
//     or make a path segment empty or "." or ".." (also percent-encoded), is
//     refused before anything is sent: tools.Permanent, wrapping
//     toolsfile.ErrURLArgument and naming the argument.
//   - arguments with two member names that differ only in letter case
//     ("customer" and "cuſtomer", which Go's encoding/json reads as one), or
//     an undeclared one that differs from a declared one only so, are
//     refused; so is any undeclared argument of a request that sends the
//     arguments themselves as its body (no body template), unless the input
//     schema lets them through on purpose (toolsfile.InputNames). Other
//     requests send only the arguments their templates name.
//   - an absent argument: in a JSON body, a string exactly "{{.field}}" drops
//     its object member (null in an array); in a URL query, a parameter whose
//     value is exactly {{.field}} is left out; elsewhere it renders as "".
//   - responses are read up to Options.MaxResponseBytes (8 MiB by default);
//     a larger 2xx response is an error whose outcome is unknown.
//   - redirects are not followed; a 3xx answer, 409 on a tool that is not
//     keyed, and 425 count as outcome unknown (a 303 after a POST may mean done).
//
// Environment values and credentials typed into the file
// (toolsfile.Request.LiteralSecrets) never appear in errors (they are
// redacted even from response bodies quoted in errors), and a Tool's log
// value shows only its name, class, method and URL template, redacted alike.
//
// Tool.Destination resolves where a call would go (origin with its port,
// path) with the same checks and sends nothing: for the approval view.
//
// Every request carries the W3C trace context (traceparent, tracestate) of
// the span its context holds, when it holds one: the executor's attempt or
// lookup span when tracing is on (executor/oteltrace).
//
// Imports: the standard library, tools and tools/toolsfile (the format:
// httptool builds tools from its definitions and renders its templates),
// and go.opentelemetry.io/otel/propagation (the trace context header; the
// API only, no SDK).
package httptool
