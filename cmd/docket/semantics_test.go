package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// countingWorld counts the effects sent to it, per path, with their bodies.
type countingWorld struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies map[string][]string
}

func newCountingWorld(t *testing.T) *countingWorld {
	w := &countingWorld{bodies: map[string][]string{}}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.bodies[r.URL.Path] = append(w.bodies[r.URL.Path], string(b))
		w.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprint(rw, `{"ok":true}`)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *countingWorld) sent(path string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies[path]...)
}

// toolsFile writes the world's tools file: put (keyed), email (at most once);
// timeout lets a test change the tool definitions.
func (w *countingWorld) toolsFile(t *testing.T, path, timeout string) {
	t.Helper()
	tool := func(name, effect string) map[string]any {
		m := map[string]any{"name": name, "description": name, "effect": effect,
			"input_schema": map[string]any{"type": "object"}, "timeout": timeout,
			"request": map[string]any{"method": "POST", "url": w.srv.URL + "/" + name}}
		if effect == "keyed" {
			m["key_header"] = "Idempotency-Key"
		}
		return m
	}
	b, _ := json.Marshal(map[string]any{"version": 1, "tools": []any{tool("put", "keyed"), tool("email", "at_most_once")}})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func semSetup(t *testing.T) (*bundle, *countingWorld) {
	w := newCountingWorld(t)
	dir := t.TempDir()
	b := &bundle{dir: dir, data: filepath.Join(dir, "data"), tools: filepath.Join(dir, "tools.json")}
	w.toolsFile(t, b.tools, "5s")
	return b, w
}

// stepIn runs `docket step` in this process with req on stdin.
func stepIn(t *testing.T, b *bundle, req string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := testEnv(&out, &errb)
	env.Stdin = strings.NewReader(req)
	args := []string{"step", "--data", b.data, "--tools", b.tools}
	code := report(runEnv(context.Background(), args, env), &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// A person's pause holds (issue 24.10): approving, rerunning `docket run` and
// re-sending a `docket step` request leave the run paused and send nothing;
// each says to use docket resume, which continues it.
func TestPauseHoldsUntilDocketResume(t *testing.T) {
	t.Parallel()
	b, w := semSetup(t)
	planJSON := `{"goal":"g","actions":[{"id":"e","tool":"email","args":{"to":"ann"}},{"id":"p","tool":"put","args":{"v":1},"depends_on":["e"]}]}`
	args := append(b.runArgs(b.plan(t, "plan", planJSON)), "--run-id", "r")
	wantCode(t, inproc(t, args...), exitPaused) // e (at most once) waits for approval
	wantCode(t, inproc(t, "pause", "--data", b.data, "r"), exitPaused)

	steps := []struct {
		name string
		do   func() result
	}{
		{"approve", func() result { return inproc(t, "approve", "--data", b.data, "--tools", b.tools, "r", "e") }},
		{"run again", func() result { return inproc(t, args...) }},
		{"step again", func() result {
			return stepIn(t, b, fmt.Sprintf(`{"run_id":"r","plan":%s}`, planJSON))
		}},
	}
	for _, s := range steps {
		r := s.do()
		wantCode(t, r, exitPaused)
		if d := doc(t, r); d.Status != "paused" {
			t.Fatalf("%s: run is %s, want paused\n%s", s.name, d.Status, r)
		}
		if !strings.Contains(r.stderr, "docket resume") {
			t.Fatalf("%s: the message should name docket resume\n%s", s.name, r)
		}
		if n := len(w.sent("/email")) + len(w.sent("/put")); n != 0 {
			t.Fatalf("%s on a paused run sent %d effects", s.name, n)
		}
	}
	r := inproc(t, "resume", "--data", b.data, "--tools", b.tools, "r")
	wantCode(t, r, exitOK)
	if e, p := len(w.sent("/email")), len(w.sent("/put")); e != 1 || p != 1 {
		t.Fatalf("after resume: %d emails, %d puts; want 1 and 1\n%s", e, p, r)
	}
}

// Replay follows the same rules as every other way of continuing a run
// (issue 24.11, 24.12): it refuses to abandon an action whose outcome is
// unknown (naming docket resolve) and refuses changed tools unless
// --accept-tools-change is given.
func TestReplayRefusesOpenReviewsAndChangedTools(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		prepare  func(t *testing.T, b *bundle, w *countingWorld, args []string)
		wantText string
		accept   []string // flags that make the replay go through (none: it never does as is)
	}{
		{
			name: "needs_review",
			prepare: func(t *testing.T, b *bundle, w *countingWorld, args []string) {
				if r := child(t, "after_call:e", args...); !r.killed {
					t.Fatalf("never reached the crash point:\n%s", r)
				}
				wantCode(t, child(t, "", args...), exitPaused) // e: outcome unknown, needs_review
			},
			wantText: "docket resolve",
		},
		{
			name: "tools changed",
			prepare: func(t *testing.T, b *bundle, w *countingWorld, args []string) {
				wantCode(t, inproc(t, args...), exitOK)
				w.toolsFile(t, b.tools, "7s")
			},
			wantText: "--accept-tools-change",
			accept:   []string{"--accept-tools-change"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, w := semSetup(t)
			planJSON := `{"goal":"g","actions":[{"id":"e","tool":"email","args":{"to":"ann"}},{"id":"p","tool":"put","args":{"v":1},"depends_on":["e"]}]}`
			args := append(b.runArgs(b.plan(t, "plan", planJSON)), "--run-id", "r", "--approve", "all")
			tc.prepare(t, b, w, args)
			before := len(w.sent("/email")) + len(w.sent("/put"))
			edited := b.plan(t, "edited", `{"goal":"g","actions":[{"id":"e","tool":"email","args":{"to":"bob"}},{"id":"p","tool":"put","args":{"v":2},"depends_on":["e"]}]}`)
			replay := []string{"replay", "--data", b.data, "--tools", b.tools, "r", "--plan", edited}
			r := inproc(t, replay...)
			wantCode(t, r, exitBad)
			if !strings.Contains(r.stderr, tc.wantText) {
				t.Fatalf("the refusal should say %q\n%s", tc.wantText, r)
			}
			if n := len(w.sent("/email")) + len(w.sent("/put")); n != before {
				t.Fatalf("a refused replay sent %d effects", n-before)
			}
			if tc.accept != nil {
				r = inproc(t, append(replay, tc.accept...)...)
				wantCode(t, r, exitOK)
				if d := doc(t, r); d.Revision != 2 {
					t.Fatalf("accepted replay: revision %d\n%s", d.Revision, r)
				}
			}
		})
	}
}
