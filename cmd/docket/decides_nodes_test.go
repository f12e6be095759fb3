package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestSharedLedgerNodesDecide: two `docket serve` nodes on one PostgreSQL
// ledger. Node A drives a run and holds a call at the provider; meanwhile a
// person acts on node B, whose answer reaches A only through the ledger.
// When the held call returns, A's claim of the next action is checked in
// the ledger against what B recorded: after B's pause nothing more is
// charged (until B resumes), after B's edit only the edited arguments are
// sent, after B's reject the action never runs.
func TestSharedLedgerNodesDecide(t *testing.T) {
	t.Parallel()
	url, _ := sharedLedger(t)
	const token = "shared-nodes-decide-token"
	cases := []struct {
		name string
		// act is what the person does on B while A holds the gate call.
		act    func(t *testing.T, b *servedChild, runID string)
		status string         // the run's status once A has moved on
		want   map[string]int // charges per reference at the provider then
		// after, if set, is what B does next and the charges it leads to.
		after     func(t *testing.T, b *servedChild, runID string)
		wantAfter map[string]int
	}{
		{
			name: "pause",
			act: func(t *testing.T, b *servedChild, runID string) {
				mustCall(t, b, token, "POST", "/v1/runs/"+runID+"/pause", `{}`)
			},
			status: "paused",
			want:   map[string]int{"first": 1, "gate": 1, "last": 0},
			after: func(t *testing.T, b *servedChild, runID string) {
				mustCall(t, b, token, "POST", "/v1/runs/"+runID+"/resume", `{}`)
				waitStatus(t, b, token, runID, "completed")
			},
			wantAfter: map[string]int{"first": 1, "gate": 1, "last": 1},
		},
		{
			name: "edit",
			act: func(t *testing.T, b *servedChild, runID string) {
				mustCall(t, b, token, "POST", "/v1/runs/"+runID+"/actions/last/edit", `{"args": {"reference": "last-edited", "amount": 30}}`)
			},
			status: "completed",
			want:   map[string]int{"first": 1, "gate": 1, "last": 0, "last-edited": 1},
		},
		{
			name: "reject",
			act: func(t *testing.T, b *servedChild, runID string) {
				mustCall(t, b, token, "POST", "/v1/runs/"+runID+"/actions/last/reject", `{"reason": "not this one"}`)
			},
			status: "failed",
			want:   map[string]int{"first": 1, "gate": 1, "last": 0},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newChargeWorld(t)
			tools := w.toolsFile(t, t.TempDir())
			args := []string{"--ledger", url, "--tools", tools, "--token", token, "--lease", "2s"}
			a := startServeChild(t, args...)
			b := startServeChild(t, args...)
			runID := "decide-" + tc.name
			body := fmt.Sprintf(`{"run_id": %q, "approve": "all", "plan": %s}`, runID, diskPlan)
			if status, _, code := a.call(t, "POST", "/v1/runs", token, body); status != http.StatusCreated {
				t.Fatalf("POST /v1/runs on A: %d %s", status, code)
			}
			waitClosed(t, w.arrived, "the gate charge at the provider")
			tc.act(t, b, runID)
			close(w.open)
			waitAction(t, a, token, runID, "gate", "succeeded")
			waitStatus(t, a, token, runID, tc.status)
			// A has recorded the gate's outcome and decided what comes next
			// in the same commit; give it time to do anything more it would.
			time.Sleep(500 * time.Millisecond)
			if got := w.effectsOf(keys(tc.want)...); !equalCounts(got, tc.want) {
				t.Fatalf("charges %v, want %v\nA:\n%s\nB:\n%s", got, tc.want, a.output(), b.output())
			}
			if tc.after != nil {
				tc.after(t, b, runID)
				if got := w.effectsOf(keys(tc.wantAfter)...); !equalCounts(got, tc.wantAfter) {
					t.Fatalf("charges after B went on: %v, want %v", got, tc.wantAfter)
				}
			}
		})
	}
}

func mustCall(t *testing.T, s *servedChild, token, method, path, body string) {
	t.Helper()
	if status, _, code := s.call(t, method, path, token, body); status != http.StatusOK && status != http.StatusAccepted {
		t.Fatalf("%s %s: %d %s", method, path, status, code)
	}
}

// waitAction polls a run on node s until its action id has status want.
func waitAction(t *testing.T, s *servedChild, token, runID, id string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("GET", s.base+"/v1/runs/"+runID, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Actions []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"actions"`
		}
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		for _, a := range doc.Actions {
			if a.ID == id && slices.Contains(want, a.Status) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("action %s of run %s never became %s\n%s", id, runID, want, s.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestSharedLedgerNodesBudgets: two nodes, one PostgreSQL ledger, a budget
// of 100 over all runs (deny past it) and a rule "deny past 50 in one run"
// on the run's totals. Two independent charges of 40 and 20 of one run
// start together: the one decided second sees the first and is denied. A
// charge of 45 answered 429 + Retry-After on node A gives its reservation
// back; while it waits, a run on node B takes the room (the test expects
// that run to finish inside the 10 s the provider asked to wait); A's retry is
// checked against the limit and does not run: the provider is charged what
// the budget says (85), never past it.
func TestSharedLedgerNodesBudgets(t *testing.T) {
	t.Parallel()
	url, _ := sharedLedger(t)
	const token = "shared-nodes-budget-token"
	var mu sync.Mutex
	charged := map[string]int{}
	amounts := map[string]int{}
	throttled := make(chan struct{})
	first := true
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			Reference string `json:"reference"`
			Amount    int    `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		throttle := body.Reference == "x1" && first
		if throttle {
			first = false
		}
		mu.Unlock()
		if throttle {
			// Nothing processed: come back in 10 s, long after the other
			// node's run has taken the room (a fraction of a second).
			rw.Header().Set("Retry-After", "10")
			http.Error(rw, "slow down", http.StatusTooManyRequests)
			close(throttled)
			return
		}
		mu.Lock()
		if _, ok := charged[r.Header.Get("Idempotency-Key")]; !ok {
			amounts[body.Reference] += body.Amount
		}
		charged[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(rw, `{"id": "ch_%s"}`, body.Reference)
	}))
	t.Cleanup(srv.Close)
	tools := fmt.Sprintf(`{"version": 1,
  "tools": [{"name": "charge", "description": "Charge; deduplicated by Idempotency-Key.", "effect": "keyed",
    "input_schema": {"type": "object", "properties": {"reference": {"type": "string"}, "amount": {"type": "integer"}},
                     "required": ["reference", "amount"], "additionalProperties": false},
    "request": {"method": "POST", "url": %q}, "key_header": "Idempotency-Key", "key_ttl": "24h", "timeout": "5s"}],
  "policy": [{"name": "run-cap", "when": "(has(run.totals.charge) ? run.totals.charge.sum.amount : 0) + action.args.amount > 50", "outcome": "deny", "message": "at most 50 per run"}],
  "budgets": [{"name": "spend", "tools": ["charge"], "per": "all", "sum": "amount", "limit": "100", "outcome": "deny", "message": "100 in all"}]}`, srv.URL+"/charges")
	toolsPath := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsPath, []byte(tools), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--ledger", url, "--tools", toolsPath, "--token", token, "--lease", "2s"}
	a := startServeChild(t, args...)
	b := startServeChild(t, args...)
	submit := func(s *servedChild, runID, actions string) {
		t.Helper()
		body := fmt.Sprintf(`{"run_id": %q, "approve": "all", "plan": {"goal": "charges", "actions": [%s]}}`, runID, actions)
		if status, _, code := s.call(t, "POST", "/v1/runs", token, body); status != http.StatusCreated {
			t.Fatalf("POST /v1/runs %s: %d %s", runID, status, code)
		}
	}

	submit(a, "siblings", `{"id": "s1", "tool": "charge", "args": {"reference": "s1", "amount": 40}},
		{"id": "s2", "tool": "charge", "args": {"reference": "s2", "amount": 20}}`)
	waitStatus(t, a, token, "siblings", "failed")
	waitAction(t, a, token, "siblings", "s2", "rejected")

	submit(a, "x", `{"id": "x1", "tool": "charge", "args": {"reference": "x1", "amount": 45}}`)
	waitClosed(t, throttled, "x1's first request at the provider")
	// The 429 recorded (x1 no longer claimed: its hold of the budget given
	// back) before the other node's run asks for the room; the provider's
	// answer alone comes before that record.
	waitAction(t, a, token, "x", "x1", "pending", "approved")
	submit(b, "y", `{"id": "y1", "tool": "charge", "args": {"reference": "y1", "amount": 45}}`)
	waitStatus(t, b, token, "y", "completed")
	waitStatus(t, a, token, "x", "failed")
	waitAction(t, a, token, "x", "x1", "skipped")

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range amounts {
		total += n
	}
	if amounts["s2"] != 0 || amounts["x1"] != 0 || total != 85 {
		t.Fatalf("charged %v (%d in all), want s1 40 and y1 45 only\nA:\n%s\nB:\n%s", amounts, total, a.output(), b.output())
	}
	req, _ := http.NewRequest("GET", b.base+"/v1/budgets", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Budgets []struct {
			Budget string `json:"budget"`
			Used   string `json:"used"`
		} `json:"budgets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/budgets: %d %v", resp.StatusCode, err)
	}
	usage := list.Budgets
	if len(usage) != 1 || usage[0].Used != "85" {
		t.Fatalf("budget usage %+v, want 85 (what the provider charged)", usage)
	}
}
