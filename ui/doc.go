// Package ui is docket's service face: the HTTP API (JSON under /v1), the
// WebSocket event streams and the review page (static files embedded in the
// binary, no CDN), served by `docket serve`.
//
// A Server drives runs in the background: a run created through the API is
// planned (from a goal, with the planner) or taken as given (a plan), recorded,
// and then executed by the executor while people watch its events over a
// WebSocket and approve, reject, edit or resolve its actions. POST /v1/runs
// answers once the plan is recorded and its drive has begun (ui/README.md, Runs:
// identity rules: 201 new, 200 the same request again, 422 a different request
// under the same identity, 409 while the first is still being accepted; "the
// same request" is executor.SameRequest, applied by executor/runs, where
// docket run, docket step and docket mcp create their runs too); execution
// goes on after the answer. The server
// builds one executor.Engine and learns what it does through its Observer:
// the metrics of /metrics and the signals requests wait for come from there,
// never from log records or test hooks. On start, Server.ResumeRunning drives every run that was running
// when the service stopped.
//
// Streams: GET /v1/runs/{id}/ws?after=SEQ sends a run's backlog after SEQ,
// then its live events, in order, none missed and none twice across
// reconnects; GET /v1/ws sends the live events of every run the server
// touches. Both take review messages ({"id","op",...}), each answered with an
// ack or an error, ping their clients, cap client messages, and disconnect a
// client that falls behind (close code CloseLagged, with a reason naming where
// to resume). Every endpoint is described by GET /v1/openapi.json.
//
// Authentication: programs send "Authorization: Bearer TOKEN" on every call
// and upgrade. The page trades a token once (POST /v1/session) for an
// HttpOnly, SameSite=Strict session cookie, which its requests and WebSocket
// upgrades carry; upgrades and cookie-authenticated writes check Origin.
// Tokens are named, and every approval, rejection, edit and resolution
// records who made it ("token:NAME"). Tokens never appear in logs, URLs or
// events; the server keeps only their SHA-256.
//
// Scopes: every token holds some of read, submit, review, control and admin
// (scopes.go holds the one table of what each route and socket op needs); a
// missing scope answers 403 "forbidden" naming it, so an agent's token
// (read, submit) cannot approve what it submitted. Each token has a request
// rate limit and a cap on open sockets (429 with Retry-After). Webhook calls
// are signed (notify.go) and a TLS certificate can be reloaded in place
// (CertReloader).
//
// Imports: the standard library, github.com/gorilla/websocket,
// and docket's plan, tools (with tools/toolsfile, for request previews),
// ledger, executor (with executor/runs, where runs are created) and planner
// (whose Message is the message type of conversations). Never go-openai: its
// types stay inside planner.
package ui
