package toolsfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/tools"
)

// TestRetryBlocks: a tool's "retry" block becomes its Spec.Retry (an MCP
// tool's its MCPTool.Retry), fields left out stay zero (the executor's
// settings), and a tool without one has none.
func TestRetryBlocks(t *testing.T) {
	t.Parallel()
	f, err := Load("testdata/valid/retry.json", testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]tools.Retry{
		"charge": {Attempts: 8, MaxBackoff: 30 * time.Second, Budget: 2 * time.Minute},
		"status": {Attempts: 1},
		"notify": {},
	}
	if len(f.Tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(f.Tools), len(want))
	}
	for _, tl := range f.Tools {
		if w, ok := want[tl.Spec.Name]; !ok || tl.Spec.Retry != w {
			t.Errorf("%s: retry %+v, want %+v", tl.Spec.Name, tl.Spec.Retry, w)
		}
		if strings.Contains(string(tl.Spec.Binding), "retry") || strings.Contains(string(tl.Spec.Binding), "attempts") {
			t.Errorf("%s: the retry budget is in the binding (the tools hash): %s", tl.Spec.Name, tl.Spec.Binding)
		}
	}
	if got := f.MCPServers[0].Tools["write"].Retry; got != (tools.Retry{Budget: 5 * time.Minute}) {
		t.Errorf("mcp files.write: retry %+v", got)
	}
}

// TestRetryBlockProblems: each wrong retry block is one problem naming the
// tool and the field, alongside the file's other problems.
func TestRetryBlockProblems(t *testing.T) {
	t.Parallel()
	const head = `{"version": 1, "tools": [{"name": "pay", "effect": "keyed", "key_header": "K", "input_schema": {"type": "object"},
		"request": {"method": "POST", "url": "https://pay.example/charges"}, "retry": `
	for retry, want := range map[string]string{
		`{"attempts": 0}`:                         `tool "pay": retry.attempts: must be a whole number of at least 1`,
		`{"attempts": null}`:                      `tool "pay": retry.attempts: must be a whole number of at least 1 (the first attempt counts: 1 never retries), got null`,
		`{"max_backoff": ""}`:                     `tool "pay": retry.max_backoff: empty duration`,
		`{"max_backoff": "0s"}`:                   `tool "pay": retry.max_backoff: must be longer than 0`,
		`{"budget": "2 minutes"}`:                 `tool "pay": retry.budget: bad duration "2 minutes"`,
		`{"max_backoff": "31s", "budget": "30s"}`: `tool "pay": retry.max_backoff: 31s is longer than budget 30s`,
		`{"Attempts": 3}`:                         `tool "pay": retry.Attempts: unknown field (known: attempts, max_backoff, budget)`,
		`[8, "30s", "2m"]`:                        `tool "pay": retry: must be a JSON object`,
		`null`:                                    `tool "pay": retry: must be a JSON object`,
	} {
		_, err := Parse([]byte(head+retry+`}]}`), testEnv(nil))
		var le *LoadError
		if !errors.As(err, &le) || len(le.Problems) != 1 || !strings.Contains(err.Error(), want) {
			t.Errorf("retry %s: error %v\nwant exactly one problem containing %q", retry, err, want)
		}
	}
	for _, ok := range []string{`{}`, `{"max_backoff": "30s", "budget": "30s"}`, `{"attempts": 1000, "max_backoff": "1h"}`} {
		if _, err := Parse([]byte(head+ok+`}]}`), testEnv(nil)); err != nil {
			t.Errorf("retry %s refused: %v", ok, err)
		}
	}
}
