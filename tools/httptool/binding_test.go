package httptool

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/docketrun/docket/tools"
)

// hashBase is a tools file that uses every field the tools hash covers.
const hashBase = `{"version": 1,
 "tools": [
  {"name": "mk", "description": "Create a contact.", "effect": "lookup",
   "input_schema": {"type": "object", "properties": {"email": {"type": "string"}, "amount": {"type": "integer"}}},
   "output_schema": {"type": "object"},
   "request": {"method": "POST", "url": "{{env \"BASE\"}}/contacts",
               "headers": {"X-Tenant": "acme", "Authorization": "Bearer {{env \"TOKEN\"}}"},
               "body": {"email": "{{.email}}", "note": "{{key}}"}},
   "output": "/contact",
   "lookup": {"method": "POST", "url": "{{env \"BASE\"}}/contacts/search", "headers": {"X-Tenant": "acme"},
              "body": {"note": "{{key}}"}, "found": "nonempty", "output": "/results"},
   "timeout": "10s", "visibility_lag": "2s", "approval": "always", "approve_above": {"amount": 100},
   "compensate": {"tool": "undo", "args": {"id": "${output.id}"}}},
  {"name": "pay", "effect": "keyed", "input_schema": {"type": "object"},
   "request": {"method": "POST", "url": "{{env \"BASE\"}}/charges"}, "key_header": "Idempotency-Key", "key_ttl": "24h"},
  {"name": "undo", "effect": "idempotent", "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
   "request": {"method": "DELETE", "url": "{{env \"BASE\"}}/contacts/{{.id}}"}}
 ],
 "mcp_servers": [
  {"name": "mem", "command": "mem-server", "args": ["--db", "a"], "env": {"MEM_TOKEN": "{{env \"TOKEN\"}}", "MEM_MODE": "fast"},
   "tools": {"create": {"effect": "lookup", "output": "/id",
                        "lookup": {"tool": "find", "args": {"q": "${input.name}"}, "found": "nonempty", "output": "/items"}}}},
  {"name": "remote", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer {{env \"TOKEN\"}}"}}
 ]}`

var hashEnv = map[string]string{"BASE": "https://api.example.com", "TOKEN": "tok-1", "TOKEN2": "tok-2", "BASE2": "https://other.example.com"}

// fileHash loads a tools file and returns the hash of a registry of its HTTP
// tools plus one tool per MCP server entry (as mcptool builds them: the spec
// from the file's classification, the binding from the server).
func fileHash(t *testing.T, doc map[string]any, env map[string]string) string {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(data, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	all := append([]tools.Tool(nil), f.Tools...)
	for _, s := range f.MCPServers {
		name := "create"
		spec := tools.Spec{Name: s.Name + "." + name, Class: tools.AtMostOnce, Binding: s.Binding(name)}
		if ft, ok := s.Tools[name]; ok {
			spec.Class, spec.Timeout, spec.Approval = tools.Idempotent, ft.Timeout, ft.Approval // a class without a Looker
		}
		all = append(all, tools.Func(spec, func(context.Context, tools.Call, struct{}) (struct{}, error) { return struct{}{}, nil }))
	}
	reg, err := tools.NewRegistry(all...)
	if err != nil {
		t.Fatal(err)
	}
	return reg.Hash()
}

// at returns the object at a dotted path of doc ("tools.0.request").
func at(t *testing.T, doc map[string]any, path string) map[string]any {
	t.Helper()
	var cur any = doc
	for _, seg := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[seg]
		case []any:
			var i int
			if err := json.Unmarshal([]byte(seg), &i); err != nil {
				t.Fatalf("path %s: %v", path, err)
			}
			cur = c[i]
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("path %s: not an object", path)
	}
	return m
}

// TestHashCoversWhatACallDoes: every field of the tools file that changes
// what a call does or how it is protected changes the tools hash; the
// description, header-name spelling and JSON formatting do not.
func TestHashCoversWhatACallDoes(t *testing.T) {
	t.Parallel()
	load := func() map[string]any {
		var doc map[string]any
		if err := json.Unmarshal([]byte(hashBase), &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	base := fileHash(t, load(), hashEnv)
	obj := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	differ := []struct {
		field string
		mod   func(doc map[string]any)
	}{
		{"name", func(d map[string]any) { at(t, d, "tools.1")["name"] = "pay2" }},
		{"effect", func(d map[string]any) { at(t, d, "tools.2")["effect"] = "read_only" }},
		{"input_schema", func(d map[string]any) {
			at(t, d, "tools.1")["input_schema"] = obj(`{"type":"object","required":["x"]}`)
		}},
		{"output_schema", func(d map[string]any) {
			at(t, d, "tools.0")["output_schema"] = obj(`{"type":"object","required":["id"]}`)
		}},
		{"request.method", func(d map[string]any) { at(t, d, "tools.1.request")["method"] = "PUT" }},
		{"request.url", func(d map[string]any) { at(t, d, "tools.1.request")["url"] = `{{env "BASE"}}/v2/charges` }},
		{"request.url host variable", func(d map[string]any) { at(t, d, "tools.1.request")["url"] = `{{env "BASE2"}}/charges` }},
		{"request.headers value", func(d map[string]any) { at(t, d, "tools.0.request.headers")["X-Tenant"] = "acme2" }},
		{"request.headers credential", func(d map[string]any) {
			at(t, d, "tools.0.request.headers")["Authorization"] = `Bearer {{env "TOKEN2"}}`
		}},
		{"request.headers added", func(d map[string]any) { at(t, d, "tools.1.request")["headers"] = obj(`{"X-Mode":"live"}`) }},
		{"request.body", func(d map[string]any) { at(t, d, "tools.0.request")["body"] = obj(`{"email":"{{.email}}"}`) }},
		{"output", func(d map[string]any) { at(t, d, "tools.0")["output"] = "/contact/id" }},
		{"key_header", func(d map[string]any) { at(t, d, "tools.1")["key_header"] = "X-Request-Id" }},
		{"key_ttl", func(d map[string]any) { at(t, d, "tools.1")["key_ttl"] = "1h" }},
		{"lookup.method", func(d map[string]any) { at(t, d, "tools.0.lookup")["method"] = "PUT" }},
		{"lookup.url", func(d map[string]any) { at(t, d, "tools.0.lookup")["url"] = `{{env "BASE"}}/contacts/find` }},
		{"lookup.headers", func(d map[string]any) { at(t, d, "tools.0.lookup.headers")["X-Tenant"] = "other" }},
		{"lookup.body", func(d map[string]any) { at(t, d, "tools.0.lookup")["body"] = obj(`{"email":"{{.email}}"}`) }},
		{"lookup.found", func(d map[string]any) { at(t, d, "tools.0.lookup")["found"] = "status_200" }},
		{"lookup.output", func(d map[string]any) { at(t, d, "tools.0.lookup")["output"] = "/results/0/contact" }},
		{"timeout", func(d map[string]any) { at(t, d, "tools.0")["timeout"] = "20s" }},
		{"visibility_lag", func(d map[string]any) { at(t, d, "tools.0")["visibility_lag"] = "5s" }},
		{"approval", func(d map[string]any) { delete(at(t, d, "tools.0"), "approval") }},
		{"approve_above", func(d map[string]any) { at(t, d, "tools.0.approve_above")["amount"] = 200 }},
		{"compensate.args", func(d map[string]any) { at(t, d, "tools.0.compensate")["args"] = obj(`{"id":"${input.email}"}`) }},
		{"compensate.tool", func(d map[string]any) { at(t, d, "tools.0.compensate")["tool"] = "pay" }},
		{"mcp_servers.command", func(d map[string]any) { at(t, d, "mcp_servers.0")["command"] = "other-server" }},
		{"mcp_servers.args", func(d map[string]any) { at(t, d, "mcp_servers.0")["args"] = obj(`["--db","b"]`) }},
		{"mcp_servers.env", func(d map[string]any) { at(t, d, "mcp_servers.0.env")["MEM_MODE"] = "safe" }},
		{"mcp_servers.env credential", func(d map[string]any) { at(t, d, "mcp_servers.0.env")["MEM_TOKEN"] = `{{env "TOKEN2"}}` }},
		{"mcp_servers.url", func(d map[string]any) { at(t, d, "mcp_servers.1")["url"] = "https://mcp2.example.com/mcp" }},
		{"mcp_servers.headers", func(d map[string]any) {
			at(t, d, "mcp_servers.1.headers")["Authorization"] = `Bearer {{env "TOKEN2"}}`
		}},
		{"mcp_servers.trust_annotations", func(d map[string]any) { at(t, d, "mcp_servers.1")["trust_annotations"] = true }},
		{"mcp_servers.tools.output", func(d map[string]any) { at(t, d, "mcp_servers.0.tools.create")["output"] = "/ids" }},
		{"mcp_servers.tools.lookup", func(d map[string]any) { at(t, d, "mcp_servers.0.tools.create.lookup")["tool"] = "search" }},
		{"mcp_servers.tools classification", func(d map[string]any) { at(t, d, "mcp_servers.1")["tools"] = obj(`{"create":{"effect":"idempotent"}}`) }},
	}
	seen := map[string]string{base: "base"}
	for _, c := range differ {
		doc := load()
		c.mod(doc)
		h := fileHash(t, doc, hashEnv)
		if h == base {
			t.Errorf("changing %s kept the tools hash", c.field)
		} else if prev, dup := seen[h]; dup {
			t.Errorf("changing %s gave the same hash as changing %s", c.field, prev)
		}
		seen[h] = c.field
	}
	same := []struct {
		what string
		mod  func(doc map[string]any)
		env  map[string]string
	}{
		{"description", func(d map[string]any) { at(t, d, "tools.0")["description"] = "Something else." }, nil},
		{"header name case", func(d map[string]any) {
			h := at(t, d, "tools.0.request.headers")
			h["x-tenant"] = h["X-Tenant"]
			delete(h, "X-Tenant")
		}, nil},
		{"key_header case", func(d map[string]any) { at(t, d, "tools.1")["key_header"] = "idempotency-key" }, nil},
		{"approve_above spelling", func(d map[string]any) { at(t, d, "tools.0.approve_above")["amount"] = json.Number("1e2") }, nil},
		{"a secret's value (the environment is not hashed)", func(map[string]any) {}, map[string]string{"BASE": hashEnv["BASE"], "TOKEN": "rotated"}},
	}
	for _, c := range same {
		doc := load()
		c.mod(doc)
		env := hashEnv
		if c.env != nil {
			env = c.env
		}
		if h := fileHash(t, doc, env); h != base {
			t.Errorf("changing %s changed the tools hash", c.what)
		}
	}
}

// TestBindingHoldsNoSecret: a credential typed into the file reaches the
// spec's binding only as a digest, and environment values never.
func TestBindingHoldsNoSecret(t *testing.T) {
	t.Parallel()
	defs := `{"version":1,"tools":[{"name":"t","effect":"idempotent","input_schema":{"type":"object"},
	  "request":{"method":"PUT","url":"{{env \"BASE\"}}/x?token={{env \"TOKEN\"}}","headers":{"Authorization":"Bearer sk_live_typed_in","X-Api-Key":"{{env \"TOKEN\"}}"}}}],
	 "mcp_servers":[{"name":"m","command":"srv","env":{"GITHUB_TOKEN":"ghp_typed_in"},"headers":{}}]}`
	f, err := Parse([]byte(defs), func(k string) string { return map[string]string{"BASE": "https://h.example", "TOKEN": secret}[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{string(f.Tools[0].Spec().Binding), string(f.MCPServers[0].Binding("x"))} {
		for _, s := range []string{secret, "sk_live_typed_in", "ghp_typed_in"} {
			if strings.Contains(b, s) {
				t.Errorf("binding holds %q: %s", s, b)
			}
		}
		if !strings.Contains(b, "sha256:") {
			t.Errorf("credential not digested: %s", b)
		}
	}
}
