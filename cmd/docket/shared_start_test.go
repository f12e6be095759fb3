package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// holdWorld is a payments API whose charges never answer: each request is
// counted by reference, announced, and held until the caller goes away (a
// SIGKILLed node) or the test ends.
type holdWorld struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	arrived chan string
	end     chan struct{}
}

func newHoldWorld(t *testing.T) *holdWorld {
	w := &holdWorld{calls: map[string]int{}, arrived: make(chan string, 16), end: make(chan struct{})}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			Reference string `json:"reference"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.calls[body.Reference]++
		w.mu.Unlock()
		w.arrived <- body.Reference
		select {
		case <-r.Context().Done():
		case <-w.end:
		}
	}))
	t.Cleanup(func() {
		close(w.end)
		w.srv.Close()
	})
	return w
}

func (w *holdWorld) toolsFile(t *testing.T) string {
	t.Helper()
	tools := fmt.Sprintf(`{"version": 1, "tools": [{
  "name": "charge", "description": "Charge a customer; deduplicated by Idempotency-Key.", "effect": "keyed",
  "input_schema": {"type": "object", "properties": {"reference": {"type": "string"}, "amount": {"type": "integer"}},
                   "required": ["reference", "amount"], "additionalProperties": false},
  "request": {"method": "POST", "url": %q}, "key_header": "Idempotency-Key", "key_ttl": "24h", "timeout": "120s"}]}`, w.srv.URL+"/charges")
	p := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(p, []byte(tools), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (w *holdWorld) callsOf(ref string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[ref]
}

// runDoc reads a run from node s (status 404: ok false).
func runDoc(t *testing.T, s *servedChild, token, runID string) (doc struct {
	Status  string `json:"status"`
	Actions []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"actions"`
}, ok bool) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/v1/runs/"+runID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return doc, false
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/runs/%s: %d", runID, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc, true
}

// A run cancelled while its action was in flight on node A, after which A
// is SIGKILLed, is concluded by another node: its action goes from claimed
// to needs_review (its outcome is unknown: a person checks), the run stays
// cancelled, and the tool is never called again. Both ways: the run
// cancelled on A itself (its driver is gone), and cancelled on B while A
// called the tool (B, alive, concludes it once A's lease expired).
func TestSharedLedgerCancelledInFlight(t *testing.T) {
	t.Parallel()
	url, _ := sharedLedger(t)
	w := newHoldWorld(t)
	tools := w.toolsFile(t)
	const token = "shared-cancel-test-token"
	args := []string{"--ledger", url, "--tools", tools, "--token", token, "--lease", "2s"}
	a := startServeChild(t, args...)
	b := startServeChild(t, args...)

	submit := func(runID string) {
		t.Helper()
		body := fmt.Sprintf(`{"run_id": %q, "approve": "all", "plan": {"goal": "one charge", "actions": [
			{"id": "pay", "tool": "charge", "args": {"reference": %q, "amount": 5}}]}}`, runID, runID)
		if status, _, code := a.call(t, "POST", "/v1/runs", token, body); status != http.StatusCreated {
			t.Fatalf("POST %s on A: %d %s", runID, status, code)
		}
		select {
		case ref := <-w.arrived:
			if ref != runID {
				t.Fatalf("the provider got %s, want %s", ref, runID)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("A never called the provider for %s\n%s", runID, a.output())
		}
	}
	cancel := func(s *servedChild, runID string) {
		t.Helper()
		if status, _, code := s.call(t, "POST", "/v1/runs/"+runID+"/cancel", token, `{}`); status != http.StatusOK && status != http.StatusAccepted {
			t.Fatalf("cancel %s: %d %s", runID, status, code)
		}
	}
	submit("on-a")
	cancel(a, "on-a")
	submit("on-b")
	cancel(b, "on-b")
	for _, id := range []string{"on-a", "on-b"} {
		if doc, _ := runDoc(t, b, token, id); doc.Status != "cancelled" || len(doc.Actions) != 1 || doc.Actions[0].Status != "claimed" {
			t.Fatalf("run %s before the kill: %+v, want cancelled with its action claimed", id, doc)
		}
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}

	for _, id := range []string{"on-a", "on-b"} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			doc, _ := runDoc(t, b, token, id)
			if doc.Status != "cancelled" {
				t.Fatalf("run %s is %s, want cancelled", id, doc.Status)
			}
			if st := doc.Actions[0].Status; st != "claimed" {
				if st != "needs_review" || !strings.Contains(doc.Actions[0].Error, "cancelled") {
					t.Fatalf("run %s's action after A was killed: %+v, want needs_review (outcome unknown)", id, doc.Actions[0])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s's action is still claimed 60s after A was killed: nothing concluded it\nB:\n%s", id, b.output())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := w.callsOf(id); n != 1 {
			t.Errorf("the provider was called %d times for %s, want 1", n, id)
		}
	}
}

// stallModel is an OpenAI-compatible chat-completions endpoint whose first
// request never answers (the model is "thinking" when the node planning with
// it is killed); every later planning queues one charge, then stops.
type stallModel struct {
	srv      *httptest.Server
	mu       sync.Mutex
	requests int
	stalled  chan struct{} // closed when the first request arrived
}

func newStallModel(t *testing.T) *stallModel {
	m := &stallModel{stalled: make(chan struct{})}
	end := make(chan struct{})
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.requests++
		n := m.requests
		m.mu.Unlock()
		if n == 1 {
			close(m.stalled)
			select {
			case <-r.Context().Done():
			case <-end:
			}
			return
		}
		message := `{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
		  "function": {"name": "charge", "arguments": "{\"reference\": \"planned\", \"amount\": 3}"}}]}`
		finish := "tool_calls"
		for _, msg := range req.Messages {
			if msg.Role == "tool" { // the queued call's placeholder: done
				message, finish = `{"role": "assistant", "content": "Queued the charge."}`, "stop"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id": "chatcmpl-%d", "object": "chat.completion", "created": 1764460800, "model": "stall",
		  "choices": [{"index": 0, "message": %s, "finish_reason": %q}],
		  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}`, n, message, finish)
	}))
	t.Cleanup(func() {
		close(end)
		m.srv.Close()
	})
	return m
}

func (m *stallModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}

// A node SIGKILLed while the model plans a run leaves nothing recorded; the
// client's retry of the same request on another node answers 409 while the
// dead node's lease holds the run id, then plans the run afresh (201) and
// it completes with one charge: a crash while the model thinks re-plans,
// harmlessly.
func TestSharedLedgerPlanningNodeKilled(t *testing.T) {
	t.Parallel()
	url, _ := sharedLedger(t)
	w := newChargeWorld(t)
	close(w.open)
	tools := w.toolsFile(t, t.TempDir())
	m := newStallModel(t)
	env := append(os.Environ(), "OPENAI_BASE_URL="+m.srv.URL+"/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=stall")
	const token = "shared-planning-test-token"
	args := []string{"--ledger", url, "--tools", tools, "--token", token, "--lease", "3s"}
	a := startServeChildEnv(t, env, args...)
	b := startServeChildEnv(t, env, args...)

	const body = `{"run_id": "planned-once", "goal": "charge 3 for planned", "approve": "all"}`
	go func() {
		req, _ := http.NewRequest("POST", a.base+"/v1/runs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil { // A is killed: an error
			resp.Body.Close()
		}
	}()
	select {
	case <-m.stalled:
	case <-time.After(60 * time.Second):
		t.Fatalf("A never asked the model\n%s", a.output())
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL while the model thinks
		t.Fatal(err)
	}
	if _, ok := runDoc(t, b, token, "planned-once"); ok {
		t.Fatal("a run was recorded although its planning never ended")
	}

	// The client retries on B as 409's Retry-After says.
	conflicts := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, retry, code := b.call(t, "POST", "/v1/runs", token, body)
		if status == http.StatusCreated {
			break
		}
		if status != http.StatusConflict || code != "in_progress" {
			t.Fatalf("POST on B: %d %s, want 409 in_progress until A's lease expires, then 201\n%s", status, code, b.output())
		}
		conflicts++
		if time.Now().After(deadline) {
			t.Fatalf("B still answers 409 60s after A was killed\n%s", b.output())
		}
		secs, err := strconv.Atoi(retry)
		if err != nil || secs < 1 {
			t.Fatalf("409 with Retry-After %q", retry)
		}
		time.Sleep(time.Duration(secs) * time.Second)
	}
	t.Logf("%d answers 409 before B planned the run (A's lease: 3s)", conflicts)
	if n := m.count(); n < 2 {
		t.Fatalf("the model was asked %d times: B did not plan the run again", n)
	}
	waitStatus(t, b, token, "planned-once", "completed")
	if n := w.effectsOf("planned")["planned"]; n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	// The same request again answers the recorded run.
	if status, _, code := b.call(t, "POST", "/v1/runs", token, body); status != http.StatusOK {
		t.Fatalf("the same POST after the run completed: %d %s, want 200", status, code)
	}
}
