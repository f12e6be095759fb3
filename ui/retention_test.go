package ui_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// POST /v1/runs takes the run's own retention ("retention": "30d"): it is
// stored with the run and shown in the Run JSON; a bad one is a 400 and
// records nothing.
func TestCreateWithRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var e errorBody
	for _, bad := range []string{"soon", "-1d", "0s"} {
		body := map[string]any{"run_id": "r-bad", "plan": onboardingPlan(t), "approve": "none", "retention": bad}
		if code := b.call("POST", "/v1/runs", body, &e); code != http.StatusBadRequest || e.Error.Code != "bad_request" {
			t.Fatalf("retention %q = %d %+v, want 400 bad_request", bad, code, e)
		}
	}
	if code := b.call("GET", "/v1/runs/r-bad", nil, &e); code != http.StatusNotFound {
		t.Fatalf("a refused request recorded a run: %d", code)
	}
	body := map[string]any{"run_id": "r-kept", "plan": onboardingPlan(t), "approve": "none", "retention": "30d"}
	var raw json.RawMessage
	if code := b.call("POST", "/v1/runs", body, &raw); code != http.StatusCreated {
		t.Fatalf("create = %d %s", code, raw)
	}
	var doc struct {
		Retention string `json:"retention"`
	}
	if code := b.call("GET", "/v1/runs/r-kept", nil, &raw); code != http.StatusOK {
		t.Fatalf("get = %d", code)
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.Retention != "30d" {
		t.Fatalf("Run JSON retention = %q, %v; want 30d: %s", doc.Retention, err, raw)
	}
}
