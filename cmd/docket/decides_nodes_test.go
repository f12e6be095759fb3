package main

import (
	"encoding/json"
	"fmt"
	"net/http"
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
func waitAction(t *testing.T, s *servedChild, token, runID, id, want string) {
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
			if a.ID == id && a.Status == want {
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
