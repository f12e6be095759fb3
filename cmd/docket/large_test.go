package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestOverCapAnswerIsCalledOnce: an API whose success answer is larger than
// the tools' 8 MiB output cap (it echoes its input many times over) is called
// exactly once, whatever the class. The call took effect, so keyed, lookup
// and at_most_once actions end in needs_review (exit 3) and idempotent ones fail
// (exit 1); none is retried, and the action's error names the cap and the
// answer's size. Before, the over-cap answer counted as "outcome unknown":
// keyed and idempotent actions were called five times with the same answer.
func TestOverCapAnswerIsCalledOnce(t *testing.T) {
	t.Parallel()
	const answer = 9 << 20 // over the 8 MiB cap
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // a lookup: nothing found
			io.WriteString(w, `[]`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		echo := strings.TrimSuffix(strings.TrimPrefix(string(body), "{"), "}")
		io.WriteString(w, `{"echo": [`)
		n := 10
		for ; n < answer; n += len(echo) + 3 {
			io.WriteString(w, "{"+echo+"},")
		}
		io.WriteString(w, `{}]}`)
	}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		class  string
		code   int
		status string
	}{
		{"keyed", exitPaused, "needs_review"},
		{"lookup", exitPaused, "needs_review"},
		{"at_most_once", exitPaused, "needs_review"},
		{"idempotent", exitFailed, "failed"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			extra := ""
			switch tc.class {
			case "keyed":
				extra = `"key_header": "Idempotency-Key",`
			case "lookup":
				extra = `"lookup": {"method": "GET", "url": "` + srv.URL + `/find?key={{key}}", "found": "nonempty"},`
			}
			tools := writeFile(t, filepath.Join(dir, "tools.json"), fmt.Sprintf(`{"version": 1, "tools": [{"name": "echo", "description": "echo",
  "effect": %q, %s "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
  "request": {"method": "POST", "url": "%s/%s"}}]}`, tc.class, extra, srv.URL, tc.class))
			planPath := writeFile(t, filepath.Join(dir, "plan.json"),
				`{"goal": "echo", "actions": [{"id": "say", "tool": "echo", "args": {"text": "hello, echo me a lot"}}]}`)
			r := inproc(t, "run", "--data", filepath.Join(dir, "data"), "--tools", tools, "--plan", planPath, "--approve", "all")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%.3000s", r.code, tc.code, r)
			}
			d := doc(t, r)
			a := d.Actions[0]
			if a.Status != tc.status || a.Attempts != 1 {
				t.Errorf("action %s after %d attempts, want %s after 1", a.Status, a.Attempts, tc.status)
			}
			for _, want := range []string{"took effect", "exceeds the 8 MiB output cap", "9.0 MiB"} {
				if !strings.Contains(a.Error, want) {
					t.Errorf("the action's error does not say %q: %s", want, a.Error)
				}
			}
			mu.Lock()
			n := calls["/"+tc.class]
			mu.Unlock()
			if n != 1 {
				t.Errorf("the API was called %d times, want exactly once", n)
			}
		})
	}
}

// TestStepTakesWhatRunTakes: `docket step` reads a request carrying a plan
// as large as `docket run --plan` takes (a 9 MiB argument; its stdin limit
// was 8 MiB before), and refuses a larger request (exit 2) naming the limit
// and the request's size.
func TestStepTakesWhatRunTakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := writeFile(t, filepath.Join(dir, "tools.json"), `{"version": 1, "tools": [{"name": "store", "description": "store a blob",
  "effect": "keyed", "key_header": "Idempotency-Key", "input_schema": {"type": "object", "properties": {"blob": {"type": "string"}}},
  "request": {"method": "POST", "url": "http://127.0.0.1:1/blobs"}}]}`)
	step := func(req string) result {
		var out, errb strings.Builder
		env := testEnv(&out, &errb)
		env.Stdin = strings.NewReader(req)
		args := []string{"step", "--data", filepath.Join(dir, "data"), "--tools", tools}
		code := report(runEnv(context.Background(), args, env), &errb)
		return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
	}
	req := func(n int) string {
		return `{"run_id": "big", "approve": "none", "plan": {"goal": "store", "actions": [{"id": "a", "tool": "store", "args": {"blob": "` +
			strings.Repeat("x", n) + `"}}]}}`
	}
	if r := step(req(9 << 20)); r.code != exitPaused {
		t.Fatalf("a 9 MiB plan: exit %d, want %d (waiting for approval)\n%.2000s", r.code, exitPaused, r.stderr)
	}
	big := req(18 << 20)
	r := step(big)
	if r.code != exitBad || !strings.Contains(r.stderr, fmt.Sprintf("%d bytes or more", len(big))) || !strings.Contains(r.stderr, "limit of 17825792 bytes") {
		t.Fatalf("an 18 MiB request: exit %d, want %d naming its size and the limit\n%.2000s", r.code, exitBad, r.stderr)
	}
}
