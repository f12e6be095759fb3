package mcpserve

import (
	"strings"
	"testing"

	"github.com/docketrun/docket/tools"
)

// TestWireNames: the names MCP clients see are the planner's (tools.WireNames).
func TestWireNames(t *testing.T) {
	long := strings.Repeat("x", 70)
	got := tools.WireNames([]string{"charge", "memory.create_entities", "a.b", "a_b", long, "crm create"})
	want := map[string]string{"charge": "charge", "memory.create_entities": "memory_create_entities", "a_b": "a_b", "crm create": "crm_create"}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%q → %q, want %q", n, got[n], w)
		}
	}
	if w := got["a.b"]; !strings.HasPrefix(w, "a_b_") || len(w) != len("a_b_")+8 {
		t.Errorf("a.b (collides with a_b) → %q, want a_b_ and 8 hex digits", w)
	}
	if w := got[long]; len(w) > tools.MaxWireName || !tools.ValidWireName(w) {
		t.Errorf("a 70-byte name → %q (%d bytes)", w, len(w))
	}
	seen := map[string]bool{}
	for _, w := range got {
		if seen[w] || !tools.ValidWireName(w) {
			t.Errorf("wire name %q repeated or invalid", w)
		}
		seen[w] = true
	}
}
