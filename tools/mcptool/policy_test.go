package mcptool

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
	"github.com/docketrun/docket/tools/policy"
)

// An MCP tool's own policy rules (mcp_servers[].tools.NAME.policy) become
// its spec's rules, as an HTTP tool's, and part of the tools hash.
func TestMCPToolPolicy(t *testing.T) {
	t.Parallel()
	paths := mcptest.Servers(t)
	file := func(rules string) string {
		return fmt.Sprintf(`{"version": 1, "tools": [], "mcp_servers": [{"name": "memory", "command": %q, "args": [%q],
  "env": {"MEMORY_FILE_PATH": %q},
  "tools": {"delete_entities": {"effect": "at_most_once"%s}}}]}`, paths.Node, paths.Memory, filepath.Join(t.TempDir(), "g.jsonl"), rules)
	}
	connect := func(src string) *tools.Registry {
		f, err := httptool.Parse([]byte(src), nil)
		if err != nil {
			t.Fatalf("parsing: %v", err)
		}
		set, err := Connect(context.Background(), f.MCPServers, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { set.Close() })
		reg, err := tools.NewRegistry(set.Tools()...)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	reg := connect(file(`, "policy": [{"name": "keep-admins", "when": "action.args.entityNames.exists(n, n.startsWith('admin'))", "outcome": "deny", "message": "admins stay"}]`))
	tl, _ := reg.Get("memory.delete_entities")
	rules := tl.Spec().Policy
	if len(rules) != 1 || rules[0].Name != "keep-admins" || rules[0].Where != "mcp_servers[0].tools.delete_entities.policy[0]" {
		t.Fatalf("rules %+v", rules)
	}
	d := policy.Eval(rules, policy.Input{Tool: "memory.delete_entities", Args: json.RawMessage(`{"entityNames": ["bob", "admin-1"]}`)})
	if d.Outcome != policy.Deny || d.Rule != "keep-admins" {
		t.Fatalf("decision %+v", d)
	}
	if plain := connect(file("")); plain.Hash() == reg.Hash() {
		t.Fatal("the MCP tool's policy is not part of the tools hash")
	}
	if _, err := httptool.Parse([]byte(file(`, "policy": [{"when": "action.args.x >", "outcome": "deny"}]`)), nil); err == nil ||
		!strings.Contains(err.Error(), "mcp_servers[0].tools.delete_entities.policy[0].when: ERROR") {
		t.Fatalf("a rule that does not compile: %v", err)
	}
}
