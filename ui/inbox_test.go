package ui_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

type inboxAnswer struct {
	Items []struct {
		RunID     string          `json:"run_id"`
		ActionID  string          `json:"action_id"`
		Tool      string          `json:"tool"`
		Class     string          `json:"class"`
		Kind      string          `json:"kind"`
		Args      json.RawMessage `json:"args"`
		Resolved  bool            `json:"resolved"`
		Since     string          `json:"since"`
		DependsOn []string        `json:"depends_on"`
	} `json:"items"`
	Count int `json:"count"`
}

// GET /v1/inbox lists every action waiting for a person across runs, oldest
// first, with its arguments resolved where the outputs they refer to exist;
// ?run= narrows it to one run; settled actions leave it.
func TestInboxAcrossRuns(t *testing.T) {
	b := setup(t, options{})
	for i, id := range []string{"in-1", "in-2"} {
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": id, "plan": diamondPlan(id, i), "approve": "none"}, nil); code != 201 {
			t.Fatalf("creating %s: %d", id, code)
		}
	}
	onboarding := onboardingPlan(t)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "in-3", "plan": onboarding, "approve": "none"}, nil); code != 201 {
		t.Fatal("creating in-3")
	}
	var in inboxAnswer
	if code := b.call("GET", "/v1/inbox", nil, &in); code != 200 {
		t.Fatalf("GET /v1/inbox: %d", code)
	}
	if in.Count != 13 || len(in.Items) != 13 {
		t.Fatalf("count %d, %d items: want 13 (4 + 4 + 5)", in.Count, len(in.Items))
	}
	for i, it := range in.Items {
		if it.Kind != "approval" || it.Class == "" || it.Tool == "" || it.Since == "" {
			t.Fatalf("item %d: %+v", i, it)
		}
		if i > 0 && it.Since < in.Items[i-1].Since {
			t.Fatalf("item %d is older than item %d", i, i-1)
		}
	}
	if in.Items[0].RunID != "in-1" {
		t.Fatalf("the oldest item is of %s", in.Items[0].RunID)
	}
	// Approve the onboarding's price and contact: the invoice's references
	// resolve in the inbox.
	for _, a := range []string{"price", "contact"} {
		if code := b.call("POST", "/v1/runs/in-3/actions/"+a+"/approve", map[string]any{}, nil); code != 200 {
			t.Fatalf("approve %s: %d", a, code)
		}
	}
	b.call("GET", "/v1/runs/in-3?wait=10s", nil, nil)
	var one inboxAnswer
	if code := b.call("GET", "/v1/inbox?run=in-3", nil, &one); code != 200 {
		t.Fatalf("GET /v1/inbox?run=in-3: %d", code)
	}
	ids := []string{}
	for _, it := range one.Items {
		ids = append(ids, it.ActionID)
		if it.RunID != "in-3" {
			t.Fatalf("an item of %s in run in-3's inbox", it.RunID)
		}
		if it.ActionID == "invoice" && (!it.Resolved || strings.Contains(string(it.Args), "${")) {
			t.Fatalf("the invoice's arguments are not resolved: %s", it.Args)
		}
	}
	// The invoice waits again since its references were resolved: it is
	// the newest.
	if strings.Join(ids, " ") != "settings welcome invoice" {
		t.Fatalf("run in-3 waits for %v, oldest first", ids)
	}
	if code := b.call("GET", "/v1/inbox?run=nope", nil, nil); code != 404 {
		t.Fatalf("GET /v1/inbox?run=nope: %d", code)
	}
	if code := b.call("GET", "/v1/inbox?limit=0", nil, nil); code != 400 {
		t.Fatalf("limit=0: %d", code)
	}
}

// GET /v1/search/runs filters by status, tool and text and pages with after
// through every match, newest first, none twice.
func TestInboxSearchRuns(t *testing.T) {
	b := setup(t, options{})
	for i := range 7 {
		var p json.RawMessage = diamondPlan(fmt.Sprintf("s%d", i), 1)
		if i%2 == 1 {
			p = json.RawMessage(fmt.Sprintf(`{"goal": "catalogue %d", "actions": [{"id": "p", "tool": "catalogue_price", "args": {"plan": "pro"}}]}`, i))
		}
		if code := b.call("POST", "/v1/runs", map[string]any{"run_id": fmt.Sprintf("run-%d", i), "plan": p, "approve": "none"}, nil); code != 201 {
			t.Fatalf("creating run-%d: %d", i, code)
		}
	}
	page := func(q string) (ids []string, next string) {
		t.Helper()
		var ans struct {
			Runs []struct {
				ID string `json:"run_id"`
			} `json:"runs"`
			Next string `json:"next"`
		}
		if code := b.call("GET", "/v1/search/runs?"+q, nil, &ans); code != 200 {
			t.Fatalf("search %s: %d", q, code)
		}
		for _, r := range ans.Runs {
			ids = append(ids, r.ID)
		}
		return ids, ans.Next
	}
	var all []string
	next := ""
	for range 10 {
		ids, n := page("tool=settings_put&limit=2&after=" + next)
		all = append(all, ids...)
		if next = n; next == "" {
			break
		}
	}
	if got := strings.Join(all, " "); got != "run-6 run-4 run-2 run-0" {
		t.Fatalf("settings runs, paged by 2: %s", got)
	}
	if ids, _ := page("q=CATALOGUE%205"); strings.Join(ids, " ") != "run-5" {
		t.Fatalf("text search: %v", ids)
	}
	if ids, _ := page("q=run-&status=completed"); len(ids) != 0 {
		t.Fatalf("completed runs: %v", ids)
	}
	if code := b.call("GET", "/v1/search/runs?status=bogus", nil, nil); code != 400 {
		t.Fatalf("a bad status: %d", code)
	}
}

type diffAnswer struct {
	From, To int
	Actions  []struct {
		ActionID string `json:"action_id"`
		Change   string `json:"change"`
		Why      string `json:"why"`
		OldKey   string `json:"old_key"`
		NewKey   string `json:"new_key"`
		Args     []struct {
			Path   string          `json:"path"`
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
		} `json:"args"`
	} `json:"actions"`
	Counts map[string]int `json:"counts"`
}

func (d diffAnswer) changes() string {
	var s []string
	for _, a := range d.Actions {
		s = append(s, a.ActionID+":"+a.Change)
	}
	return strings.Join(s, " ")
}

// The replay diff tells kept from changed by keys, before the revision is
// recorded (POST) and after (GET), and follows references: an action that
// refers to a changed action's output follows it until it ran.
func TestInboxReplayDiff(t *testing.T) {
	b := setup(t, options{})
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "d", "plan": onboardingPlan(t), "approve": "all"}, nil); code != 201 {
		t.Fatal("creating the run")
	}
	var doc runDoc
	b.call("GET", "/v1/runs/d?wait=10s", nil, &doc)
	if doc.Status != "completed" {
		t.Fatalf("run d is %s", doc.Status)
	}
	if code := b.call("GET", "/v1/runs/d/diff", nil, nil); code != 400 {
		t.Fatalf("a diff of a run with one revision: %d", code)
	}
	edited := strings.Replace(string(onboardingPlan(t)), `"onboarding-acme"`, `"onboarding-acme-2"`, 1)
	edited = strings.Replace(edited, `{"plan": "pro"}, "why"`, `{"plan": "pro"}, "why"`, 1)
	var pre diffAnswer
	if code := b.call("POST", "/v1/runs/d/diff", map[string]any{"plan": json.RawMessage(edited)}, &pre); code != 200 {
		t.Fatalf("POST diff: %d", code)
	}
	if got := pre.changes(); got != "price:kept contact:kept invoice:changed settings:follows welcome:kept" {
		t.Fatalf("before recording: %s\n%+v", got, pre.Actions[3])
	}
	inv := pre.Actions[2]
	if len(inv.Args) != 1 || inv.Args[0].Path != "reference" || string(inv.Args[0].Before) != `"onboarding-acme"` || string(inv.Args[0].After) != `"onboarding-acme-2"` {
		t.Fatalf("the invoice's argument diff: %+v", inv.Args)
	}
	if pre.Actions[0].OldKey == "" || pre.Actions[0].OldKey != pre.Actions[0].NewKey {
		t.Fatalf("price's keys: %s, %s", pre.Actions[0].OldKey, pre.Actions[0].NewKey)
	}
	if n := b.world.Requests("payments"); n != 1 {
		t.Fatalf("a diff reached the payments API (%d requests)", n)
	}
	if code := b.call("POST", "/v1/runs/d/replay", map[string]any{"plan": json.RawMessage(edited)}, nil); code != 200 {
		t.Fatalf("replay: %d", code)
	}
	b.call("GET", "/v1/runs/d?wait=10s", nil, &doc)
	var post diffAnswer
	if code := b.call("GET", "/v1/runs/d/diff", nil, &post); code != 200 {
		t.Fatalf("GET diff: %d", code)
	}
	// Recorded and run: settings' resolved arguments now differ (a new invoice id).
	if post.From != 1 || post.To != 2 || post.changes() != "price:kept contact:kept invoice:changed settings:changed welcome:kept" {
		t.Fatalf("after recording (run %s): %d→%d %s", doc.Status, post.From, post.To, post.changes())
	}
	if code := b.call("GET", "/v1/runs/d/diff?revision=3", nil, nil); code != 400 {
		t.Fatalf("a revision that does not exist: %d", code)
	}
	if code := b.call("POST", "/v1/runs/d/diff", map[string]any{"plan": map[string]any{"actions": []any{map[string]any{"id": "x", "tool": "nope", "args": map[string]any{}}}}}, nil); code != 422 {
		t.Fatalf("a proposed plan with an unknown tool: %d", code)
	}
}

// GET /v1/inbox shows, for an approval whose arguments are resolved, where
// the HTTP call would go (method, scheme://host:port, path) as the call
// will build it, and why a call would be refused before anything is sent.
func TestInboxShowsDestination(t *testing.T) {
	b := setup(t, options{})
	p := `{"goal": "settings", "actions": [
	  {"id": "ok", "tool": "settings_put", "args": {"account": "acct 1", "settings": {"plan": "pro"}}},
	  {"id": "dots", "tool": "settings_put", "args": {"account": "..", "settings": {"plan": "pro"}}}]}`
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "dest", "plan": json.RawMessage(p), "approve": "none"}, nil); code != 201 {
		t.Fatalf("creating the run: %d", code)
	}
	var in struct {
		Items []struct {
			ActionID    string `json:"action_id"`
			Destination *struct {
				Method, Origin, Path string
			} `json:"destination"`
			DestinationError string `json:"destination_error"`
		} `json:"items"`
	}
	if code := b.call("GET", "/v1/inbox?run=dest", nil, &in); code != 200 || len(in.Items) != 2 {
		t.Fatalf("GET /v1/inbox?run=dest: %d, %d items", code, len(in.Items))
	}
	u, err := url.Parse(b.world.Settings.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range in.Items {
		switch it.ActionID {
		case "ok":
			if d := it.Destination; d == nil || d.Method != "PUT" || d.Origin != "http://"+u.Host || d.Path != "/accounts/acct%201/settings" || it.DestinationError != "" {
				t.Fatalf("destination of ok: %+v %q (want PUT http://%s/accounts/acct%%201/settings)", d, it.DestinationError, u.Host)
			}
		case "dots":
			if it.Destination != nil || !strings.Contains(it.DestinationError, "account") {
				t.Fatalf("a dot segment: destination %+v, error %q", it.Destination, it.DestinationError)
			}
		}
	}
}
