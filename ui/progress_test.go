package ui_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// A run planned by the model shows its planning on the all-runs stream as
// "planning" messages (no seq, not events) before its first event, and the
// recorded plan follows as events from seq 1.
func TestPlanningProgressOnAllRunsStream(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	all, _, err := b.dialer().Dial(b.wsURL("/v1/ws"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	body := map[string]any{"run_id": "r-progress", "goal": "onboard ACME: create the CRM contact", "approve": "none"}
	if code := b.call("POST", "/v1/runs", body, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	var kinds []string
	done, actions := false, 0
	for {
		all.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, raw, err := all.ReadMessage()
		if err != nil {
			t.Fatalf("reading the stream: %v (planning kinds so far %v)", err, kinds)
		}
		var m struct {
			Type     string          `json:"type"`
			RunID    string          `json:"run_id"`
			Done     bool            `json:"done"`
			Error    string          `json:"error"`
			Seq      *uint64         `json:"seq"`
			Progress json.RawMessage `json:"progress"`
			Event    *struct {
				Seq   uint64 `json:"seq"`
				RunID string `json:"run_id"`
				Type  string `json:"type"`
			} `json:"event"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case "planning":
			if m.RunID != "r-progress" || m.Seq != nil || m.Event != nil {
				t.Fatalf("planning message %s", raw)
			}
			if m.Done {
				if m.Error != "" {
					t.Fatalf("planning failed: %s", m.Error)
				}
				done = true
				continue
			}
			var pr struct {
				Kind   string `json:"kind"`
				Action *struct {
					ID string `json:"id"`
				} `json:"action"`
			}
			json.Unmarshal(m.Progress, &pr)
			kinds = append(kinds, pr.Kind)
			if pr.Kind == "action" && pr.Action != nil && pr.Action.ID != "" {
				actions++
			}
		case "event":
			if m.Event.RunID != "r-progress" {
				continue
			}
			if !done || actions == 0 {
				t.Fatalf("event %s before the planning ended (done %v, %d actions shown; kinds %v)", m.Event.Type, done, actions, kinds)
			}
			if m.Event.Type == "plan.recorded" || m.Event.Type == "run.awaiting_approval" {
				return
			}
		}
	}
}
