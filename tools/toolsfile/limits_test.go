package toolsfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/tools"
)

// TestLimits: a tool's "max_in_flight" and "rate" become its Spec.Limits
// (an MCP tool's its MCPTool.Limits), durations as plan.ParseDuration
// reads them ("1d"); a tool without them has none, and they stay out of
// the binding (the tools hash).
func TestLimits(t *testing.T) {
	t.Parallel()
	f, err := Load("testdata/valid/limits.json", testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]tools.Limits{
		"charge": {MaxInFlight: 4, Rate: 10, Per: time.Second},
		"status": {Rate: 1000, Per: 24 * time.Hour},
		"notify": {},
	}
	if len(f.Tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(f.Tools), len(want))
	}
	for _, tl := range f.Tools {
		if w, ok := want[tl.Spec.Name]; !ok || tl.Spec.Limits != w {
			t.Errorf("%s: limits %+v, want %+v", tl.Spec.Name, tl.Spec.Limits, w)
		}
		if b := string(tl.Spec.Binding); strings.Contains(b, "max_in_flight") || strings.Contains(b, "rate") {
			t.Errorf("%s: the limits are in the binding (the tools hash): %s", tl.Spec.Name, b)
		}
	}
	if got := f.MCPServers[0].Tools["write"].Limits; got != (tools.Limits{MaxInFlight: 1}) {
		t.Errorf("mcp files.write: limits %+v", got)
	}
}

// TestLimitProblems: each wrong limit is one problem naming the tool and
// the field, alongside the file's other problems.
func TestLimitProblems(t *testing.T) {
	t.Parallel()
	const head = `{"version": 1, "tools": [{"name": "pay", "effect": "keyed", "key_header": "K", "input_schema": {"type": "object"},
		"request": {"method": "POST", "url": "https://pay.example/charges"}, `
	for limits, want := range map[string]string{
		`"max_in_flight": 0`:                            `tool "pay": max_in_flight: must be a whole number of at least 1`,
		`"max_in_flight": -2`:                           `tool "pay": max_in_flight: must be a whole number of at least 1 (how many calls of the tool may be in flight at once), got -2`,
		`"max_in_flight": 1.5`:                          `tool "pay": max_in_flight: must be a whole number`,
		`"max_in_flight": "4"`:                          `tool "pay": max_in_flight: must be a whole number`,
		`"rate": {"per": "1s", "limit": 0}`:             `tool "pay": rate.limit: must be a whole number from 1 to 1000`,
		`"rate": {"per": "1s", "limit": -1}`:            `tool "pay": rate.limit: must be a whole number from 1 to 1000`,
		`"rate": {"per": "1s", "limit": 1001}`:          `tool "pay": rate.limit: must be a whole number from 1 to 1000`,
		`"rate": {"per": "0s", "limit": 5}`:             `tool "pay": rate.per: must be longer than 0`,
		`"rate": {"per": "-1s", "limit": 5}`:            `tool "pay": rate.per:`,
		`"rate": {"per": "a second", "limit": 5}`:       `tool "pay": rate.per: bad duration "a second"`,
		`"rate": {"limit": 5}`:                          `tool "pay": rate.per: missing`,
		`"rate": {"per": "1s"}`:                         `tool "pay": rate.limit: missing`,
		`"rate": {"per": "1s", "limit": 5, "burst": 2}`: `tool "pay": rate.burst: unknown field (known: per, limit)`,
		`"rate": 10`:                                    `tool "pay": rate: must be a JSON object`,
		`"max_inflight": 4`:                             `tool "pay": max_inflight: unknown field`,
	} {
		_, err := Parse([]byte(head+limits+`}]}`), testEnv(nil))
		var le *LoadError
		if !errors.As(err, &le) || len(le.Problems) != 1 || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v\nwant exactly one problem containing %q", limits, err, want)
		}
	}
	for _, ok := range []string{`"max_in_flight": 1`, `"rate": {"per": "2w", "limit": 1000}`, `"max_in_flight": 64, "rate": {"per": "100ms", "limit": 1}`} {
		if _, err := Parse([]byte(head+ok+`}]}`), testEnv(nil)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	// An MCP tool's limits are named by their place.
	_, err := Parse([]byte(`{"version": 1, "tools": [], "mcp_servers": [{"name": "files", "command": "files-mcp",
		"tools": {"write": {"effect": "idempotent", "max_in_flight": 0}}}]}`), testEnv(nil))
	if err == nil || !strings.Contains(err.Error(), "mcp_servers[0].tools.write.max_in_flight: must be a whole number of at least 1") {
		t.Errorf("mcp max_in_flight 0: %v", err)
	}
}
