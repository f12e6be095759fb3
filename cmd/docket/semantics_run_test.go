package main

import (
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

// effectWorld is an HTTP world for issue 24's findings: every POST to
// /NAME is one request; script decides, per tool and per request number,
// whether it commits (an effect) and what it answers. It remembers keyed
// requests by Idempotency-Key (a repeated key answers the stored result, no
// new effect) and records each request's body.
type effectWorld struct {
	srv    *httptest.Server
	mu     sync.Mutex
	n      map[string]int      // requests per tool
	eff    map[string]int      // effects per tool
	keys   map[string]string   // Idempotency-Key → stored answer
	bodies map[string][]string // request bodies per tool
	script func(tool string, n int) step
	forget bool // the provider has forgotten every key (past its key_ttl)
}

// step is one request's fate: commit it or not, then answer status (0:
// drop the connection) with body and headers.
type step struct {
	commit bool
	status int
	body   string
	header map[string]string
}

func ok(body string) step { return step{commit: true, status: 200, body: body} }

func startEffectWorld(t *testing.T, script func(tool string, n int) step) *effectWorld {
	t.Helper()
	w := &effectWorld{n: map[string]int{}, eff: map[string]int{}, keys: map[string]string{}, bodies: map[string][]string{}, script: script}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		tool := strings.TrimPrefix(r.URL.Path, "/")
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		w.mu.Lock()
		if stored, seen := w.keys[key]; key != "" && seen && !w.forget {
			w.mu.Unlock()
			fmt.Fprint(rw, stored)
			return
		}
		w.n[tool]++
		st := w.script(tool, w.n[tool])
		if st.status == 0 && !st.commit {
			st = ok(fmt.Sprintf(`{"id":"%s-%d"}`, tool, w.n[tool]))
		}
		if st.commit {
			w.eff[tool]++
			w.bodies[tool] = append(w.bodies[tool], string(body))
			if key != "" {
				w.keys[key] = cmpStr(st.body, fmt.Sprintf(`{"id":"%s-%d"}`, tool, w.n[tool]))
			}
		}
		w.mu.Unlock()
		if st.status == 0 {
			if hj, ok := rw.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // the connection drops after the commit
					return
				}
			}
		}
		for k, v := range st.header {
			rw.Header().Set(k, v)
		}
		rw.WriteHeader(st.status)
		fmt.Fprint(rw, cmpStr(st.body, fmt.Sprintf(`{"id":"%s-%d"}`, tool, w.n[tool])))
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (w *effectWorld) effects(tool string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.eff[tool]
}

func (w *effectWorld) sent(tool string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies[tool]...)
}

// tool is a tools-file entry posting to the world.
func (w *effectWorld) tool(name, effect string, extra map[string]any) map[string]any {
	t := map[string]any{"name": name, "description": name, "effect": effect,
		"input_schema": map[string]any{"type": "object"},
		"request":      map[string]any{"method": "POST", "url": w.srv.URL + "/" + name},
		"timeout":      "2s"}
	if effect == "keyed" {
		t["key_header"] = "Idempotency-Key"
	}
	for k, v := range extra {
		t[k] = v
	}
	return t
}

type semCase struct {
	dir, data, tools, plan string
}

func newSemCase(t *testing.T, toolDefs []any, planJSON string) semCase {
	t.Helper()
	dir := t.TempDir()
	c := semCase{dir: dir, data: filepath.Join(dir, "data"), tools: filepath.Join(dir, "tools.json"), plan: filepath.Join(dir, "plan.json")}
	tf, _ := json.Marshal(map[string]any{"version": 1, "tools": toolDefs})
	if err := os.WriteFile(c.tools, tf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.plan, []byte(planJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c semCase) cmd(t *testing.T, args ...string) result {
	t.Helper()
	return inproc(t, append(args, "--data", c.data, "--tools", c.tools)...)
}

var refundOf = map[string]any{"compensate": map[string]any{"tool": "refund", "args": map[string]any{"charge": "${output.id}"}}}

const chargeShipPlan = `{"goal":"charge then ship","actions":[
 {"id":"c","tool":"charge","args":{"amount":5000}},
 {"id":"s","tool":"ship","depends_on":["c"],"args":{"to":"%s","charge":"${c.output.id}"}}]}`

// TestExecutionSemanticsThroughTheCLI checks issue 24's findings inside a
// drive through `docket run`, `approve`, `resolve` and `replay`, against an
// HTTP world that counts effects. Each case failed before its fix.
func TestExecutionSemanticsThroughTheCLI(t *testing.T) {
	t.Parallel()

	t.Run("replay never builds on an undone action", func(t *testing.T) {
		t.Parallel()
		w := startEffectWorld(t, func(tool string, n int) step {
			if tool == "ship" && n == 1 {
				return step{status: 400, body: `{"error":"no such address"}`}
			}
			return step{}
		})
		c := newSemCase(t, []any{w.tool("charge", "keyed", refundOf), w.tool("refund", "keyed", nil), w.tool("ship", "keyed", nil)},
			fmt.Sprintf(chargeShipPlan, "nowhere"))
		wantCode(t, c.cmd(t, "run", "--plan", c.plan, "--run-id", "r", "--approve", "all"), exitFailed)
		fixed := filepath.Join(c.dir, "fixed.json")
		os.WriteFile(fixed, []byte(fmt.Sprintf(chargeShipPlan, "somewhere")), 0o600)
		r := c.cmd(t, "replay", "r", "--plan", fixed)
		wantCode(t, r, exitBad)
		if !strings.Contains(r.stderr, "compensated") {
			t.Fatalf("the refusal does not say why:\n%s", r)
		}
		if w.effects("charge") != 1 || w.effects("refund") != 1 || w.effects("ship") != 0 {
			t.Fatalf("effects charge %d refund %d ship %d, want 1 1 0", w.effects("charge"), w.effects("refund"), w.effects("ship"))
		}
	})

	t.Run("data containing ${ is sent as is", func(t *testing.T) {
		t.Parallel()
		w := startEffectWorld(t, func(tool string, n int) step {
			if tool == "quote" {
				return ok(`{"text":"Price: ${price}"}`)
			}
			return step{}
		})
		c := newSemCase(t, []any{w.tool("quote", "read_only", nil), w.tool("mail", "at_most_once", nil)},
			`{"goal":"mail a quote","actions":[{"id":"q","tool":"quote","args":{}},
			 {"id":"m","tool":"mail","depends_on":["q"],"args":{"body":"${q.output.text}"}}]}`)
		wantCode(t, c.cmd(t, "run", "--plan", c.plan, "--run-id", "r", "--approve", "none"), exitPaused)
		wantCode(t, c.cmd(t, "approve", "r"), exitPaused) // m is shown resolved: asked again
		wantCode(t, c.cmd(t, "approve", "r", "m"), exitOK)
		wantCode(t, c.cmd(t, "run", "--plan", c.plan, "--run-id", "r"), exitOK)
		if got := w.sent("mail"); len(got) != 1 || got[0] != `{"body":"Price: ${price}"}` {
			t.Fatalf("mail sent %q", got)
		}
	})

	t.Run("key_ttl is checked before the call after a 429", func(t *testing.T) {
		t.Parallel()
		w := startEffectWorld(t, func(tool string, n int) step {
			switch n {
			case 1:
				return step{commit: true, status: 500}
			case 2:
				return step{status: 429, header: map[string]string{"Retry-After": "3"}}
			}
			return step{}
		})
		// The provider forgets keys after 2s: the third request would charge again.
		w.forget = true
		c := newSemCase(t, []any{w.tool("charge", "keyed", map[string]any{"key_ttl": "2s"})},
			`{"goal":"charge","actions":[{"id":"c","tool":"charge","args":{"amount":1}}]}`)
		r := c.cmd(t, "run", "--plan", c.plan, "--run-id", "r", "--approve", "all")
		wantCode(t, r, exitPaused)
		if d := doc(t, r); d.action("c").Status != "needs_review" || !strings.Contains(r.stderr, "key_ttl") {
			t.Fatalf("c is %s\n%s", d.action("c").Status, r)
		}
		if n := w.effects("charge"); n != 1 {
			t.Fatalf("%d charges", n)
		}
	})

	t.Run("an action a person marked done is undone", func(t *testing.T) {
		t.Parallel()
		w := startEffectWorld(t, func(tool string, n int) step {
			switch tool {
			case "charge":
				return step{commit: true} // committed, then the connection drops
			case "ship":
				return step{status: 400}
			}
			return step{}
		})
		c := newSemCase(t, []any{w.tool("charge", "at_most_once", refundOf), w.tool("refund", "keyed", nil), w.tool("ship", "keyed", nil)},
			fmt.Sprintf(chargeShipPlan, "x"))
		wantCode(t, c.cmd(t, "run", "--plan", c.plan, "--run-id", "r", "--approve", "all"), exitPaused)
		r := c.cmd(t, "resolve", "r", "c", "--done", `{"id":"ch_seen"}`)
		wantCode(t, r, exitFailed)
		if d := doc(t, r); d.action("c").Status != "compensated" {
			t.Fatalf("c is %s, want compensated\n%s", d.action("c").Status, r)
		}
		if got := w.sent("refund"); len(got) != 1 || got[0] != `{"charge":"ch_seen"}` {
			t.Fatalf("refunds sent %q", got)
		}
	})

	t.Run("a refused undo pauses for a person", func(t *testing.T) {
		t.Parallel()
		w := startEffectWorld(t, func(tool string, n int) step {
			if tool == "ship" || tool == "refund" {
				return step{status: 400}
			}
			return step{}
		})
		c := newSemCase(t, []any{w.tool("charge", "keyed", refundOf), w.tool("refund", "keyed", nil), w.tool("ship", "keyed", nil)},
			fmt.Sprintf(chargeShipPlan, "x"))
		r := c.cmd(t, "run", "--plan", c.plan, "--run-id", "r", "--approve", "all")
		wantCode(t, r, exitPaused)
		if !strings.Contains(r.stderr, "c.undo") || !strings.Contains(r.stderr, "compensation of c refused") {
			t.Fatalf("the pause does not name the undo:\n%s", r.stderr)
		}
	})

	t.Run("an undo obeys approval rules", func(t *testing.T) {
		t.Parallel()
		w := startEffectWorld(t, func(tool string, n int) step {
			if tool == "ship" {
				return step{status: 400}
			}
			return step{}
		})
		c := newSemCase(t, []any{w.tool("charge", "keyed", refundOf),
			w.tool("refund", "at_most_once", map[string]any{"approval": "always"}), w.tool("ship", "keyed", nil)},
			fmt.Sprintf(chargeShipPlan, "x"))
		r := c.cmd(t, "run", "--plan", c.plan, "--run-id", "r", "--approve", "all")
		wantCode(t, r, exitPaused)
		if w.effects("refund") != 0 || !strings.Contains(r.stderr, "c.undo") {
			t.Fatalf("refund ran %d times before approval\n%s", w.effects("refund"), r.stderr)
		}
		wantCode(t, c.cmd(t, "approve", "r", "c.undo"), exitFailed)
		if w.effects("refund") != 1 {
			t.Fatalf("refund ran %d times after approval", w.effects("refund"))
		}
	})
}
