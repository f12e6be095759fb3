// Package mcpserve is docket as an MCP server: it puts the executor between
// any MCP client (a desktop assistant, an IDE agent, the OpenAI Agents SDK)
// and the tools of a tools file, so that every call that is not read-only is
// recorded before it runs, keyed, performed by its effect class exactly as
// `docket run` performs a plan's action, and held for a person where the
// policy or the tools file says so.
//
// # Tools offered
//
// Every tool of the registry (HTTP tools and "server.tool" tools of the MCP
// servers behind the tools file) with its input schema and annotations that
// say what docket does with it, from its effect class. Clients see each under
// a name in [a-zA-Z0-9_-]{1,64}, the alphabet of the model APIs agents pass
// tools on to, mapped by the planner's rule ("memory.create_entities" is
// "memory_create_entities"; the registry name is the tool's title and its
// _meta["io.docket/tool"], and keys are derived from it):
//
//	class         readOnlyHint idempotentHint destructiveHint openWorldHint
//	read_only     true         true           false           true
//	idempotent    false        true           true            true
//	keyed         false        true           true            true
//	lookup        false        true           true            true
//	at_most_once  false        false          true            true
//
// idempotentHint is true for keyed and lookup tools because docket makes them
// so: an identical call in the session returns the first call's outcome. The
// tools file says nothing about destructiveness, so every writing tool keeps
// MCP's conservative default (destructive). The class itself is in the tool's
// _meta["io.docket/effect"].
//
// docket's own tools, for agents that plan for themselves: docket_propose_plan
// (record a whole plan as a run in which every action waits for a person),
// docket_run_status (a run's Run JSON) and docket_waiting (the runs that wait
// for a person and what each waits for). No tool of the tools file may be
// seen under a name starting with "docket_".
//
// # Who may call what
//
// Over stdio the client is the process that started docket, and may call
// every tool. Over HTTP the server in front decides: ui.Server.ServeMCP
// (what docket serve --mcp and docket mcp --addr mount at /mcp) takes a
// bearer token and gives each tool the scope the API gives the same thing:
// docket_run_status and docket_waiting need read (as GET /v1/runs/{id}),
// docket_propose_plan and every tool of the tools file need submit (as
// POST /v1/runs). A call without the scope is a tool error naming it, and
// tools/list lists only the tools the token may call.
//
// # Runs, actions and keys
//
// A session has a session id S: the client's _meta["io.docket/run_id"] on the
// call when it gives one (letters, digits and "_.:-", at most 128), else
// "mcp_" + the first 16 hex digits of sha256 of the MCP session id (streamable
// HTTP), else Config.Session (stdio: one session per process). Each call is a
// run of one action, so that one call's definite failure or rejection never
// fails, skips or compensates another call of the session (a plan's run does
// that to its other actions); the session's runs share the prefix S, and
// their plans name the session in Meta["mcp_session"] (the page's search
// finds them by the prefix). With h = lowercase hex of
// sha256(JCS([tool, arguments])) (RFC 8785, numbers kept exact; an integer
// outside ±2^53 is refused, as in plans):
//
//   - A call with a client key K in _meta["io.docket/idempotency_key"] is run
//     "mcpkey_" + the first 32 hex digits of sha256(K), action "call",
//     whatever its session: the same key is the same call, exactly once, also
//     after a reconnect or a restart of docket (a new MCP session). The same
//     key with another tool or other arguments is refused (isError), as an
//     Idempotency-Key reused for another request is.
//   - A call without a key, of a tool that is not read-only, is run
//     S + ".c_" + h[:16] (its nth repeat: S + ".c_" + h[:16] + "." + n),
//     action "c_" + h[:16]. An identical call in the same session is a possible
//     retry (the client lost the answer, or docket restarted): while an earlier
//     identical call is going on (or waiting for a person) it waits for that
//     one; once one took effect, idempotent, keyed and lookup tools return
//     its outcome, and an at_most_once repeat is a new run that waits for a
//     person whatever the policy ("the same call was made at T in this
//     session: do it again?"); when none took effect (definite failures,
//     rejections, skips), it is a new attempt under the policy. A repeat is
//     never a second effect unless a person says so. Why: MCP has no
//     idempotency on tools/call, so for a client that sends no key an
//     identical call in its session is the only sign of a retry; treating
//     it as one costs an agent that means to repeat a write either a key or,
//     for an at-most-once tool, a person's yes, while treating it as new
//     would let every lost answer repeat a payment or an email.
//   - A read-only call without a key runs at once every time (fresh data), as
//     run S + ".r_" + a random suffix, recorded like any other.
//
// The action's idempotency key is then docket's key (plan/README.md) of that run and action,
// dk1(run, action, tool, arguments): the key sent to the tool (headers,
// {{key}}, the MCP server's _meta) is the same for every retry of one call
// and differs between two intended calls. Arguments are the client's as
// given: a string containing "${" is refused (references belong to plans).
//
// # Waiting for a person
//
// A call that needs approval, or whose outcome is unknown (needs_review),
// stays open while a person decides (on the page, the CLI or the API, which
// show the call's run like any other), with a progress notification every
// Config.Progress when the client asked for progress, for at most
// Config.Wait. Past it the result says that the call waits, with the run and
// the action (not an error: nothing was refused); calling again with the same
// arguments (and key) picks up the decision and never makes a second effect.
// Drives run under the server's own context, not the request's: a client
// that disconnects mid-call does not cut the call short, and its retry waits
// for the same drive.
//
// Results: success is the recorded output (as text, and as structured content
// when it is a JSON object); definite failures, rejections, skips and
// cancellations are isError results that say so; an unknown outcome says "may
// or may not have happened: a person is checking".
//
// Imports: the standard library, plan, tools (and tools/mcptool, for the
// name of the key's _meta field), ledger, executor (with executor/runs,
// where its calls' runs are created) and the MCP go-sdk.
package mcpserve
