package ui

import (
	"slices"
	"strings"
	"testing"

	"github.com/docketrun/docket/executor/mcpserve"
)

// TestEveryRouteHasAScope: every route of the route table that is not public
// has its own entry in routeScopes (a route added later without one fails
// here; at run time it would need admin), every entry names a served route,
// and a review or control route needs what its socket op needs.
func TestEveryRouteHasAScope(t *testing.T) {
	served := map[string]bool{}
	for _, rt := range (&Server{}).routeTable() {
		key := rt.method + " " + rt.path
		served[key] = true
		sc, listed := routeScopes[key]
		switch {
		case rt.public && listed:
			t.Errorf("%s is public and also has a scope (%q): one or the other", key, sc)
		case !rt.public && !listed:
			t.Errorf("%s has no scope: add it to routeScopes (scopes.go)", key)
		}
		// The socket's ops are a run's: /v1/runs/{id}/... routes only.
		if i := strings.LastIndex(rt.path, "/"); rt.method == "POST" && i >= 0 && strings.HasPrefix(rt.path, "/v1/runs/") {
			if opSc, ok := opScopes[rt.path[i+1:]]; ok && opSc != sc {
				t.Errorf("%s needs %q over HTTP but its op needs %q on a socket", key, sc, opSc)
			}
		}
	}
	for key := range routeScopes {
		if !served[key] {
			t.Errorf("routeScopes names %s, which is not served", key)
		}
	}
	for _, op := range reviewOps {
		if _, ok := opScopes[op]; !ok {
			t.Errorf("op %s has no scope in opScopes", op)
		}
	}
	if got := routeScope("GET", "/v1/not-in-the-table"); got != ScopeAdmin {
		t.Errorf("a route without an entry needs %q, want admin (fail closed)", got)
	}
}

// TestEveryMCPToolHasAScope: each of docket's own MCP tools has its entry in
// mcpToolScopes (one added later without one fails here; at run time it
// would need admin), the tools that read runs need read as GET /v1/runs/{id}
// does, and a tool of the tools file needs submit.
func TestEveryMCPToolHasAScope(t *testing.T) {
	for _, name := range mcpserve.OwnTools() {
		if _, ok := mcpToolScopes[name]; !ok {
			t.Errorf("docket's MCP tool %s has no scope: add it to mcpToolScopes (scopes.go)", name)
		}
	}
	for name := range mcpToolScopes {
		if !slices.Contains(mcpserve.OwnTools(), name) {
			t.Errorf("mcpToolScopes names %s, which is not one of docket's tools", name)
		}
	}
	for _, name := range []string{mcpserve.ToolRunStatus, mcpserve.ToolWaiting} {
		if got, want := mcpToolScope(name), routeScope("GET", "/v1/runs/{id}"); got != want {
			t.Errorf("%s needs %q, want %q as reading a run over HTTP", name, got, want)
		}
	}
	if got, want := mcpToolScope(mcpserve.ToolProposePlan), routeScope("POST", "/v1/runs"); got != want {
		t.Errorf("%s needs %q, want %q as creating a run over HTTP", mcpserve.ToolProposePlan, got, want)
	}
	if got := mcpToolScope("crm_create_contact"); got != ScopeSubmit {
		t.Errorf("a tool of the tools file needs %q, want submit", got)
	}
	if got := mcpToolScope("docket_not_in_the_table"); got != ScopeAdmin {
		t.Errorf("an own tool without an entry needs %q, want admin (fail closed)", got)
	}
}
