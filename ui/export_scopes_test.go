package ui

// RouteScope is one route of the route table and the scope it needs, for
// tests that walk every route.
type RouteScope struct {
	Method, Path string
	Public       bool
	Scope        Scope // "": any signed-in token
	Listed       bool  // the route has its own entry in routeScopes
}

// Routes lists the route table, as served, with each route's scope.
func Routes() []RouteScope {
	var out []RouteScope
	for _, rt := range (&Server{}).routeTable() {
		_, listed := routeScopes[rt.method+" "+rt.path]
		out = append(out, RouteScope{Method: rt.method, Path: rt.path, Public: rt.public, Scope: routeScope(rt.method, rt.path), Listed: listed})
	}
	return out
}

// OpScopes is the socket ops' table.
func OpScopes() map[string]Scope { return opScopes }

// ReviewOps lists every socket op.
func ReviewOps() []string { return reviewOps }
