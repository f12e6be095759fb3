package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/plan"
)

// Runs recorded before request identities were (no executor.RequestMeta in
// their first revision; POST-created ones carry the old
// docket.request_sha256 instead) are judged by what the ledger always kept:
// the same plan (or goal) is the same request; a conversation cannot be
// matched and is refused with a message that says so.
func TestCreateIdentityOfOldRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	eng, err := executor.New(executor.Config{Ledger: b.led, Tools: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	record := func(id string, meta map[string]string, raw json.RawMessage) {
		t.Helper()
		p, err := plan.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		p.Meta = meta
		if _, _, err := eng.Record(context.Background(), id, p, &executor.RunOptions{Policy: executor.PolicyNone}); err != nil {
			t.Fatal(err)
		}
	}
	good := onboardingPlan(t)
	other := json.RawMessage(strings.Replace(string(good), "1200", "1300", 1))
	record("old-cli", nil, good)
	record("old-post", map[string]string{"docket.request_sha256": "0123abcd"}, good)
	for _, id := range []string{"old-cli", "old-post"} {
		var e errorBody
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": id, "plan": good}, nil); code != http.StatusOK {
			t.Errorf("%s: the same plan = %d, want 200", id, code)
		}
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": id, "plan": other}, &e); code != http.StatusUnprocessableEntity || e.Error.Code != "identity_reused" {
			t.Errorf("%s: another plan = %d %+v, want 422", id, code, e)
		}
		msgs := []map[string]string{{"role": "user", "content": "Onboard ACME"}}
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": id, "messages": msgs}, &e); code != http.StatusUnprocessableEntity || !strings.Contains(e.Error.Message, "older docket") {
			t.Errorf("%s: a conversation = %d %+v, want 422 saying the run is too old to match it", id, code, e)
		}
	}
}
