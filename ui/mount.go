package ui

import (
	"context"
	"net/http"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/mcpserve"
)

// Engine is the server's one engine. Parts served beside the API on the same
// ledger (docket serve --mcp's MCP endpoint) perform their runs with it, so
// that the page, the API and they share one executor.
func (s *Server) Engine() *executor.Engine { return s.eng }

// Protect wraps h, served beside the API (e.g. at /mcp), so that it needs
// what an API route needs: a bearer token (or the page's session) that holds
// scope, within the token's rate limit, under the same Host allowlist, body
// timeout and cap; refusals answer as the API's do. For docket's MCP server
// use ServeMCP, which checks each tool's scope.
func (s *Server) Protect(scope Scope, h http.Handler) http.Handler {
	return s.guard(s.auth(scope, h.ServeHTTP))
}

// ServeMCP serves ms over streamable HTTP beside the API (mount it at /mcp)
// under the API's rules. Every request needs a bearer token (any scope; the
// page's session cookie is not taken) within the token's rate limit. Each
// tools/call needs the scope mcpToolScopes gives its tool: a token without
// it gets a tool error (isError) that names the missing scope, and nothing
// is read or recorded; tools/list lists only the tools the token may call.
// An MCP session belongs to the token that opened it: another token that
// sends its session id is refused (403). A call that reaches ms some other
// way (stdio on the same server) is refused. The Host allowlist, body
// timeout and cap of the API apply. A refusal for a missing or bad token
// (401) carries WWW-Authenticate with the resource_metadata URL of the
// protected-resource metadata (MountMCP serves it, and the path-token way
// for clients that cannot send the header).
func (s *Server) ServeMCP(ms *mcpserve.Server) http.Handler {
	ms.MCP().AddReceivingMiddleware(s.mcpScopes)
	// The go-sdk takes a caller's identity only from its bearer-token
	// middleware: the verifier hands it the principal s.auth found for the
	// same header.
	withCaller := auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		p, ok := caller(r)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: "token:" + p.name, Scopes: p.scopeNames(), Extra: map[string]any{mcpPrincipal: p}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(ms.Handler())
	protected := s.auth(scopeSignedIn, withCaller.ServeHTTP)
	return s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", s.mcpChallenge(r, ""))
			s.authFailed(w, r, "no_token", "MCP takes a bearer token: send Authorization: Bearer TOKEN (the page's session is not accepted here)")
			return
		}
		if _, ok := s.tokenPrincipal(tok); !ok {
			w.Header().Set("WWW-Authenticate", s.mcpChallenge(r, "invalid_token"))
		}
		protected(w, r)
	}))
}

// mcpPrincipal is the TokenInfo.Extra entry holding the caller's principal.
const mcpPrincipal = "io.docket/principal"

// mcpCaller is the principal ServeMCP attached to an MCP request.
func mcpCaller(req mcp.Request) (principal, bool) {
	extra := req.GetExtra()
	if extra == nil || extra.TokenInfo == nil {
		return principal{}, false
	}
	p, ok := extra.TokenInfo.Extra[mcpPrincipal].(principal)
	return p, ok
}

// mcpScopes is the MCP middleware of ServeMCP: tools/call needs the tool's
// scope, tools/list shows only the tools the caller may call. Other methods
// (initialize, ping, notifications) need only the token.
func (s *Server) mcpScopes(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call":
			name := ""
			if cr, ok := req.(*mcp.CallToolRequest); ok && cr.Params != nil {
				name = cr.Params.Name
			}
			sc := mcpToolScope(name)
			p, ok := mcpCaller(req)
			if ok && p.has(sc) {
				break
			}
			if !ok {
				p = principal{name: "unknown"} // fail closed
			}
			s.metrics.forbidden.add(string(sc))
			e := forbidden(p, sc, "call "+name)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "docket refused this call, nothing was read or recorded: " + e.Message}}}, nil
		case "tools/list":
			res, err := next(ctx, method, req)
			list, isList := res.(*mcp.ListToolsResult)
			if err != nil || !isList {
				return res, err
			}
			p, ok := mcpCaller(req)
			list.Tools = slices.DeleteFunc(list.Tools, func(t *mcp.Tool) bool { return !ok || !p.has(mcpToolScope(t.Name)) })
			return list, nil
		}
		return next(ctx, method, req)
	}
}
