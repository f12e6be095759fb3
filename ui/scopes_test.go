package ui

import (
	"strings"
	"testing"
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
		if i := strings.LastIndex(rt.path, "/"); rt.method == "POST" && i >= 0 {
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
