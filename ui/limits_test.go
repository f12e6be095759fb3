package ui_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ui"
)

// TestRunBodyTakesWhatTheCLITakes: POST /v1/runs accepts a plan as large as
// `docket run --plan` does (a 2 MiB argument here; the default cap of other
// endpoints, 1 MiB, refused it before), and a body over the endpoint's limit
// is refused with 413 naming the limit and the body's size.
func TestRunBodyTakesWhatTheCLITakes(t *testing.T) {
	t.Parallel()
	file := func(*demoworld.World) []byte {
		return []byte(`{"version": 1, "tools": [{"name": "store", "description": "store a blob", "effect": "keyed",
  "key_header": "Idempotency-Key", "input_schema": {"type": "object", "properties": {"blob": {"type": "string"}}},
  "request": {"method": "POST", "url": "http://127.0.0.1:1/blobs"}}]}`)
	}
	body := `{"run_id": "big", "approve": "none", "plan": {"goal": "store", "actions": [{"id": "a", "tool": "store", "args": {"blob": "` +
		strings.Repeat("x", 2<<20) + `"}}]}}`

	b := setup(t, options{toolsFile: file})
	if code := b.call("POST", "/v1/runs", body, nil); code != 201 {
		t.Fatalf("a 2 MiB plan: %d, want 201", code)
	}

	small := setup(t, options{toolsFile: file, tune: func(c *ui.Config) { c.MaxRunBodyBytes = 1 << 20 }})
	var e errorBody
	code := small.call("POST", "/v1/runs", body, &e)
	if code != 413 || e.Error.Code != "too_large" ||
		!strings.Contains(e.Error.Message, strconv.Itoa(len(body))+" bytes") || !strings.Contains(e.Error.Message, "1048576 bytes") {
		t.Fatalf("over the limit: %d %+v, want 413 naming %d bytes and the 1048576-byte limit", code, e.Error, len(body))
	}
}
