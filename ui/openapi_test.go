package ui

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// Every endpoint is described in openapi.json and every described operation
// exists.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var spec struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &spec); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			described[strings.ToUpper(method)+" "+path] = true
		}
	}
	s := &Server{}
	served := map[string]bool{}
	for _, rt := range s.routeTable() {
		served[rt.method+" "+rt.path] = true
	}
	var missing, extra []string
	for k := range served {
		if !described[k] {
			missing = append(missing, k)
		}
	}
	for k := range described {
		if !served[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("openapi.json lacks %v and describes %v that is not served", missing, extra)
	}
}

// specOps reads openapi.json's operations, keyed "METHOD PATH".
func specOps(t *testing.T) (ops map[string]specOp, components struct {
	Responses map[string]struct {
		Headers map[string]json.RawMessage `json:"headers"`
	} `json:"responses"`
	Schemas map[string]struct {
		Properties map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"properties"`
	} `json:"schemas"`
}) {
	t.Helper()
	var spec struct {
		Paths      map[string]map[string]specOp `json:"paths"`
		Components json.RawMessage              `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &spec); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(spec.Components, &components); err != nil {
		t.Fatal(err)
	}
	ops = map[string]specOp{}
	for path, byMethod := range spec.Paths {
		for method, op := range byMethod {
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops, components
}

type specOp struct {
	Security  *[]json.RawMessage `json:"security"` // [] on public routes
	Scope     *string            `json:"x-docket-scope"`
	HasScope  bool               `json:"-"`
	Responses map[string]struct {
		Ref string `json:"$ref"`
	} `json:"responses"`
}

func (o *specOp) UnmarshalJSON(b []byte) error {
	type plain specOp
	if err := json.Unmarshal(b, (*plain)(o)); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	_, o.HasScope = keys["x-docket-scope"]
	return nil
}

// Every authenticated route is described with the scope it needs
// (x-docket-scope, as routeScopes says; null: any valid token) and its 401,
// 403 (Forbidden: the missing scope) and 429 (TooManyRequests, with
// Retry-After) answers; every route of the scope table has its 403; public
// routes are public in the spec; the session answers list what they carry.
func TestOpenAPIScopesAndRefusals(t *testing.T) {
	ops, comp := specOps(t)
	for _, rt := range (&Server{}).routeTable() {
		key := rt.method + " " + rt.path
		op, ok := ops[key]
		if !ok {
			t.Errorf("%s is not described", key)
			continue
		}
		public := op.Security != nil && len(*op.Security) == 0
		if public != rt.public {
			t.Errorf("%s: public in the spec %v, served public %v", key, public, rt.public)
		}
		if rt.public {
			if op.HasScope {
				t.Errorf("%s is public but names a scope", key)
			}
			continue
		}
		want := routeScope(rt.method, rt.path)
		switch {
		case !op.HasScope:
			t.Errorf("%s: no x-docket-scope (it needs %q)", key, want)
		case want == scopeSignedIn && op.Scope != nil, want != scopeSignedIn && (op.Scope == nil || Scope(*op.Scope) != want):
			got := "null"
			if op.Scope != nil {
				got = *op.Scope
			}
			t.Errorf("%s: x-docket-scope %s, the server needs %q", key, got, want)
		}
		for code, ref := range map[string]string{"401": "#/components/responses/Error", "403": "#/components/responses/Forbidden", "429": "#/components/responses/TooManyRequests"} {
			if got := op.Responses[code].Ref; got != ref {
				t.Errorf("%s: response %s is %q, want %s", key, code, got, ref)
			}
		}
	}
	for key := range routeScopes {
		if _, ok := ops[key].Responses["403"]; !ok {
			t.Errorf("%s (in routeScopes) has no 403 described", key)
		}
	}
	if _, ok := comp.Responses["TooManyRequests"].Headers["Retry-After"]; !ok {
		t.Errorf("TooManyRequests does not describe Retry-After")
	}
	details := comp.Schemas["ForbiddenError"].Properties["error"].Properties["details"]
	var d struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	json.Unmarshal(details, &d)
	for _, f := range []string{"missing_scope", "token", "scopes"} {
		if _, ok := d.Properties[f]; !ok {
			t.Errorf("ForbiddenError's details lack %s", f)
		}
	}
	// The session answers: every field the server sends is described, and
	// may lists exactly what principal.may says.
	whoami := comp.Schemas["Whoami"].Properties
	for _, f := range []string{"who", "planner", "name", "scopes", "groups", "may"} {
		if _, ok := whoami[f]; !ok {
			t.Errorf("Whoami lacks %s", f)
		}
	}
	var may []string
	for k := range whoami["may"].Properties {
		may = append(may, k)
	}
	var served []string
	for k := range (principal{}).may() {
		served = append(served, k)
	}
	sort.Strings(may)
	sort.Strings(served)
	if strings.Join(may, ",") != strings.Join(served, ",") {
		t.Errorf("Whoami's may describes %v, the server sends %v", may, served)
	}
	for _, f := range []string{"name", "scopes", "expires_at"} {
		if _, ok := comp.Schemas["Session"].Properties[f]; !ok {
			t.Errorf("Session lacks %s", f)
		}
	}
}
