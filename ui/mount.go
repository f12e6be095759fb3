package ui

import (
	"net/http"

	"github.com/docketrun/docket/executor"
)

// Engine is the server's one engine. Parts served beside the API on the same
// ledger (docket serve --mcp's MCP endpoint) perform their runs with it, so
// that the page, the API and they share one executor.
func (s *Server) Engine() *executor.Engine { return s.eng }

// Protect wraps h, served beside the API (e.g. at /mcp), so that it needs
// what an API route needs: a bearer token (or the page's session) that holds
// scope, within the token's rate limit, under the same Host allowlist, body
// timeout and cap; refusals answer as the API's do.
func (s *Server) Protect(scope Scope, h http.Handler) http.Handler {
	return s.guard(s.auth(scope, h.ServeHTTP))
}
