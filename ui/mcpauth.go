package ui

import (
	"net/http"
	"strings"

	"github.com/docketrun/docket/executor/mcpserve"
)

// MCPPath is where MountMCP serves MCP over streamable HTTP.
const MCPPath = "/mcp"

// mcpTokenPrefix is the path under which MountMCP takes the token from the
// URL (MCPOptions.TokenInPath): /mcp/t/{token}.
const mcpTokenPrefix = MCPPath + "/t/"

// ResourceMetadataPath is the OAuth 2.0 protected-resource metadata document
// (RFC 9728) of /mcp, at the path the MCP authorization spec's clients
// derive from the endpoint's URL. MountMCP also serves it without the /mcp
// suffix, where older clients look.
const ResourceMetadataPath = "/.well-known/oauth-protected-resource" + MCPPath

// MCPOptions are how MountMCP serves MCP; the zero value takes the token
// from the Authorization header only.
type MCPOptions struct {
	// TokenInPath also serves MCP at /mcp/t/{token}, for clients that
	// cannot send an Authorization header. The token is moved to the
	// header before anything reads or logs the request, and every scope
	// check applies as with the header. Off by default: a token in a URL
	// ends up in proxies' access logs, shell history and client settings.
	TokenInPath bool
}

// MountMCP serves ms on mux beside the API, as ServeMCP describes, at
// MCPPath; the protected-resource metadata at ResourceMetadataPath (public:
// it holds no secret); and with o.TokenInPath at /mcp/t/{token}; all under
// the API's Host allowlist. The caller mounts s.Handler() at "/" on the
// same mux.
func (s *Server) MountMCP(mux *http.ServeMux, ms *mcpserve.Server, o MCPOptions) {
	h := s.ServeMCP(ms)
	mux.Handle(MCPPath, h)
	md := s.guard(http.HandlerFunc(s.resourceMetadata))
	mux.Handle("GET "+ResourceMetadataPath, md)
	mux.Handle("GET /.well-known/oauth-protected-resource", md)
	if o.TokenInPath {
		// Guarded before the token leaves the path (a request for another
		// host name is refused first), and again by h: harmless.
		mux.Handle(mcpTokenPrefix, s.guard(s.mcpTokenInPath(h)))
	}
}

// resourceMetadata answers the protected-resource metadata of /mcp: a bearer
// token in the Authorization header, with docket's scopes. It names no
// authorization server: docket's tokens come from its tokens file (or
// --token), not from an OAuth flow, so a client configures one by hand.
func (s *Server) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	scopes := make([]string, len(Scopes))
	for i, sc := range Scopes {
		scopes[i] = string(sc)
	}
	w.Header().Set("Cache-Control", "max-age=3600")
	writeJSON(w, http.StatusOK, map[string]any{
		"resource":                 s.requestBase(r) + MCPPath,
		"resource_name":            "docket",
		"bearer_methods_supported": []string{"header"},
		"scopes_supported":         scopes,
	})
}

// mcpChallenge is the WWW-Authenticate of a refused MCP request: where the
// resource's metadata is (RFC 9728, section 5.1).
func (s *Server) mcpChallenge(r *http.Request, errCode string) string {
	c := `Bearer realm="docket", resource_metadata="` + s.requestBase(r) + ResourceMetadataPath + `"`
	if errCode != "" {
		c += `, error="` + errCode + `"`
	}
	return c
}

// requestBase is the scheme and host the client used: https when the
// connection is TLS or a trusted proxy says so (Config.TrustProxy); the
// host is one the Host allowlist accepted.
func (s *Server) requestBase(r *http.Request) string {
	scheme := "http"
	if s.secure(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// mcpTokenInPath serves /mcp/t/{token} as /mcp with the token in the
// Authorization header. The token leaves the path before the request goes
// on, so that refusals log /mcp, never the token. A request that also sends
// an Authorization header is refused: one token, one place.
func (s *Server) mcpTokenInPath(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.URL.Path, mcpTokenPrefix)
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = MCPPath, ""
		r.RequestURI = r.URL.RequestURI()
		if r.Header.Get("Authorization") != "" {
			w.Header().Set("WWW-Authenticate", s.mcpChallenge(r, "invalid_request"))
			s.authFailed(w, r, "two_tokens", "send the token either in the path (/mcp/t/TOKEN) or in the Authorization header, not both")
			return
		}
		if tok == "" || strings.Contains(tok, "/") {
			w.Header().Set("WWW-Authenticate", s.mcpChallenge(r, ""))
			s.authFailed(w, r, "no_token", "MCP at /mcp/t/TOKEN takes the token as the last path segment")
			return
		}
		r.Header.Set("Authorization", "Bearer "+tok)
		h.ServeHTTP(w, r)
	})
}
