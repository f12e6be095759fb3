package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/evals"
)

// evalRun runs a docket eval command line in process with an environment
// that holds only env (no OPENAI_* from the machine running the tests).
func evalRun(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	err := runEnv(context.Background(), append([]string{"eval"}, args...), e)
	code := report(err, &errb)
	return result{args: append([]string{"eval"}, args...), code: code, stdout: out.String(), stderr: errb.String()}
}

const (
	bfclDir        = "../../evals/testdata/bfcl"
	starterDir     = "../../evals/testdata/starter"
	starterDataset = starterDir + "/dataset.jsonl"
)

type scoreJSON struct {
	Overall    evals.Stats `json:"overall"`
	Cost       *evals.Cost `json:"cost"`
	Categories []evals.Stats
	Cases      []struct {
		ID      string   `json:"id"`
		Pass    bool     `json:"pass"`
		Reasons []string `json:"reasons"`
		Codes   []string `json:"codes"`
	} `json:"cases"`
}

func TestEvalImportBFCLAndScore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ds := filepath.Join(dir, "simple.jsonl")
	r := evalRun(t, nil, "import-bfcl", "--questions", bfclDir+"/BFCL_v4_simple_python.json.gz", "--out", ds)
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stderr, "wrote 400 simple_python cases") || !strings.Contains(r.stderr, "Apache-2.0") {
		t.Fatalf("import message:\n%s", r)
	}
	d, err := evals.LoadDataset(ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	// case 0 right, case 1 with a changed value, case 2 calling a wrong
	// function, every other case without a plan
	var plans bytes.Buffer
	right := evals.GroundTruthCalls(d.Cases[0], 0)
	wrong := evals.GroundTruthCalls(d.Cases[1], 0)
	var args map[string]any
	json.Unmarshal(wrong[0].Args, &args)
	for k, v := range args {
		if n, ok := v.(float64); ok {
			args[k] = n + 1000
		}
	}
	wrong[0].Args, _ = json.Marshal(args)
	for _, pl := range []evals.PlanLine{
		{ID: d.Cases[0].ID, Calls: right},
		{ID: d.Cases[1].ID, Calls: wrong},
		{ID: d.Cases[2].ID, Calls: []evals.Call{{Tool: "nothing_like_it", Args: json.RawMessage(`{}`)}}},
	} {
		evals.WritePlanLine(&plans, pl)
	}
	pf := filepath.Join(dir, "plans.jsonl")
	os.WriteFile(pf, plans.Bytes(), 0o644)
	r = evalRun(t, nil, "score", "--dataset", ds, "--plans", pf, "--json", "--out", filepath.Join(dir, "a.json"), "--html", filepath.Join(dir, "a.html"))
	wantCode(t, r, exitOK)
	var got scoreJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("score --json output: %v\n%s", err, r)
	}
	if len(got.Cases) != 400 || got.Overall.Passed != 1 || len(got.Categories) != 1 || got.Categories[0].Category != "simple_python" {
		t.Fatalf("report: %d cases, %d passed, categories %+v", len(got.Cases), got.Overall.Passed, got.Categories)
	}
	c0, c1, c2, c3 := got.Cases[0], got.Cases[1], got.Cases[2], got.Cases[3]
	if !c0.Pass || len(c0.Reasons) != 0 {
		t.Errorf("right plan: %+v", c0)
	}
	if c1.Pass || !strings.Contains(strings.Join(c1.Codes, " "), "value_error") {
		t.Errorf("changed value: %+v", c1)
	}
	if c2.Pass || !strings.Contains(strings.Join(c2.Codes, " "), "wrong_func_name") {
		t.Errorf("wrong function: %+v", c2)
	}
	if c3.Pass || !strings.Contains(strings.Join(c3.Reasons, " "), "no plan for this case") {
		t.Errorf("no plan: %+v", c3)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "a.html"))
	if !bytes.Contains(html, []byte("<svg")) || !bytes.Contains(html, []byte(c1.ID)) {
		t.Errorf("HTML report lacks the chart or the failures")
	}
	// the table, and --min-pass
	r = evalRun(t, nil, "score", "--dataset", ds, "--plans", pf, "--min-pass", "0.5", "--show", "2")
	wantCode(t, r, exitFailed)
	if !strings.Contains(r.stdout, "simple_python") || !strings.Contains(r.stdout, "399 failing cases") || !strings.Contains(r.stderr, "below --min-pass") {
		t.Errorf("table:\n%s", r)
	}
	// a saved report renders again
	r = evalRun(t, nil, "report", "--in", filepath.Join(dir, "a.json"))
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "0.2%") {
		t.Errorf("report:\n%s", r)
	}
}

func TestEvalBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ds := filepath.Join(dir, "d.jsonl")
	os.WriteFile(ds, []byte(`{"id": "a", "goal": "g", "tools": [], "expect": {"no_action": true}}`+"\n"+`{"id": "b", "goal": "g", "tools": [], "expect": {"no_action": true}, "colour": 1}`+"\n"), 0o644)
	good := filepath.Join(dir, "good.jsonl")
	os.WriteFile(good, []byte(`{"id": "a", "goal": "g", "tools": [], "expect": {"no_action": true}}`+"\n"), 0o644)
	plans := filepath.Join(dir, "p.jsonl")
	os.WriteFile(plans, []byte(`{"id": "a", "calls": []}`+"\n"+`{"id": "zz", "calls": []}`+"\n"), 0o644)
	broken := filepath.Join(dir, "broken.jsonl")
	os.WriteFile(broken, []byte(`{"id": "a", "calls": []}`+"\n"+`{"id": "b", "calls": [{"tool": 3}]}`+"\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{nil, exitBad, "eval needs a subcommand"},
		{[]string{"frob"}, exitBad, `unknown eval subcommand "frob"`},
		{[]string{"import-bfcl", "--out", "x"}, exitBad, "needs --questions"},
		{[]string{"import-bfcl", "--questions", bfclDir + "/BFCL_v4_irrelevance.json.gz", "--answers", bfclDir + "/possible_answer/BFCL_v4_simple_python.json.gz", "--out", filepath.Join(dir, "x")}, exitBad, "has no answers"},
		{[]string{"import-bfcl", "--questions", "BFCL_v4_multi_turn_base.json", "--out", filepath.Join(dir, "x")}, exitBad, "not supported"},
		{[]string{"import-bfcl", "--questions", filepath.Join(dir, "missing.json"), "--out", filepath.Join(dir, "x")}, exitBad, "reading questions"},
		{[]string{"score", "--dataset", ds, "--plans", plans}, exitBad, `d.jsonl:2: case "b": unknown field "colour"`},
		{[]string{"score", "--dataset", good, "--plans", plans}, exitBad, `case "zz", field id: the dataset`},
		{[]string{"score", "--dataset", good, "--plans", broken}, exitBad, "broken.jsonl:2"},
		{[]string{"score", "--dataset", good}, exitBad, "--plans FILE is required"},
		{[]string{"score", "--plans", plans}, exitBad, "--dataset DATASET is required"},
		{[]string{"score", "--dataset", good, "--plans", plans, "--min-pass", "2"}, exitBad, "--min-pass"},
		{[]string{"run", "--dataset", good}, exitBad, "no model"},
		{[]string{"run", "--dataset", good, "--replay", dir, "--record", dir}, exitBad, "not both"},
		{[]string{"run", "--dataset", good, "--repeat", "0"}, exitBad, "--repeat"},
		{[]string{"run", "--dataset", good, "--replay", filepath.Join(dir, "none"), "--model", "m"}, exitBad, "record first"},
		{[]string{"compare", "a.json"}, exitBad, "two reports"},
		{[]string{"compare", ds, ds}, exitBad, "report"},
		{[]string{"check"}, exitBad, "--dataset DATASET is required"},
	} {
		r := evalRun(t, nil, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.err) {
			t.Errorf("want exit %d and %q in stderr\n%s", c.code, c.err, r)
		}
	}
}

func TestEvalCheckStarter(t *testing.T) {
	t.Parallel()
	r := evalRun(t, nil, "check", "--dataset", starterDataset)
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "70 cases valid; 70 reference plans checked, 0 failed") {
		t.Errorf("check:\n%s", r)
	}
	// a reference that contradicts its expectation is found
	dir := t.TempDir()
	data, _ := os.ReadFile(starterDataset)
	bad := strings.Replace(string(data), `"customer_id": "cus_881", "amount": 450,`, `"customer_id": "cus_881", "amount": 451,`, 1)
	if bad == string(data) {
		t.Fatal("fixture changed: pay-01's reference amount not found")
	}
	os.WriteFile(filepath.Join(dir, "d.jsonl"), []byte(bad), 0o644)
	tf, _ := os.ReadFile(starterDir + "/tools.json")
	os.WriteFile(filepath.Join(dir, "tools.json"), tf, 0o644)
	r = evalRun(t, nil, "check", "--dataset", filepath.Join(dir, "d.jsonl"))
	wantCode(t, r, exitFailed)
	if !strings.Contains(r.stdout, "pay-01") || !strings.Contains(r.stdout, "argument amount is 451, expected 450 ± 0.001") {
		t.Errorf("check:\n%s", r)
	}
}

// TestEvalRunReplayStarter is the README's quick start: the starter dataset
// replayed from its committed recordings, with no network and no key.
func TestEvalRunReplayStarter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "run.json")
	r := evalRun(t, map[string]string{"OPENAI_MODEL": "scripted-planner"}, "run", "--dataset", starterDataset,
		"--replay", starterDir+"/recordings", "--json", "--out", out, "--plans-out", filepath.Join(dir, "plans.jsonl"),
		"--price-prompt", "2.5", "--price-completion", "10")
	wantCode(t, r, exitOK)
	var got scoreJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("run --json: %v\n%s", err, r)
	}
	// 48: the 22 deliberate mistakes fail; since issue 18 the 3 plans whose
	// order has no data link pass (planner.OrderTurns; 45 before).
	if got.Overall.Cases != 70 || got.Overall.Passed != 48 || got.Overall.Usage == nil || got.Overall.Usage.TotalTokens == 0 {
		t.Fatalf("replayed starter: %+v", got.Overall)
	}
	u := got.Overall.Usage
	if want := (float64(u.PromptTokens)*2.5 + float64(u.CompletionTokens)*10) / 1e6; got.Cost == nil || got.Cost.Total != want {
		t.Errorf("cost %+v, want %f", got.Cost, want)
	}
	if !strings.Contains(r.stderr, "70/70 planned (100%)") {
		t.Errorf("no progress lines on stderr:\n%s", r.stderr)
	}
	// the plans it wrote score the same offline
	r2 := evalRun(t, nil, "score", "--dataset", starterDataset, "--plans", filepath.Join(dir, "plans.jsonl"), "--out", filepath.Join(dir, "score.json"))
	wantCode(t, r2, exitOK)
	r3 := evalRun(t, nil, "compare", out, filepath.Join(dir, "score.json"))
	wantCode(t, r3, exitOK)
	if !strings.Contains(r3.stdout, "0 cases flipped") {
		t.Errorf("score of the run's plans differs from the run:\n%s", r3)
	}
	// a different model's requests do not match the recordings
	r4 := evalRun(t, nil, "run", "--dataset", starterDataset, "--replay", starterDir+"/recordings", "--model", "gpt-other", "--concurrency", "8", "--retries", "0")
	wantCode(t, r4, exitOK)
	if !strings.Contains(r4.stdout, `$.model: \"scripted-planner\" → \"gpt-other\"`) && !strings.Contains(r4.stdout, `$.model: "scripted-planner" → "gpt-other"`) {
		t.Errorf("mismatch not shown:\n%s", clipOut(r4.stdout))
	}
	// compare against the references: the scripted mistakes flip
	var refs bytes.Buffer
	d, _ := evals.LoadDataset(starterDataset, nil)
	for _, c := range d.Cases {
		evals.WritePlanLine(&refs, evals.PlanLine{ID: c.ID, Calls: c.Reference})
	}
	os.WriteFile(filepath.Join(dir, "refs.jsonl"), refs.Bytes(), 0o644)
	wantCode(t, evalRun(t, nil, "score", "--dataset", starterDataset, "--plans", filepath.Join(dir, "refs.jsonl"), "--out", filepath.Join(dir, "refs.json")), exitOK)
	r5 := evalRun(t, nil, "compare", filepath.Join(dir, "refs.json"), out)
	wantCode(t, r5, exitOK)
	// 22 (25 before issue 18: the three order-only plans now pass)
	if !strings.Contains(r5.stdout, "22 cases flipped: 0 now pass, 22 now fail") || !strings.Contains(r5.stdout, "pass_rate") {
		t.Errorf("compare:\n%s", clipOut(r5.stdout))
	}
}

func clipOut(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "…"
	}
	return s
}

// TestEvalWorld scores execution-level cases: each plan runs against a
// fresh simulated world and the final effects decide, so two different but
// equivalent plans both pass and a plan with a double effect fails.
func TestEvalWorld(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ds := "../../evals/testdata/world/dataset.jsonl"
	plans := strings.Join([]string{
		// the reference: price looked up, references everywhere
		`{"id": "world-onboard", "try": 1, "calls": [
		  {"id": "price", "tool": "catalogue_price", "args": {"plan": "pro"}},
		  {"id": "contact", "tool": "crm_create_contact", "args": {"company": "ACME", "email": "billing@acme.example"}, "depends_on": ["price"]},
		  {"id": "invoice", "tool": "payments_create_invoice", "args": {"customer": "${contact.output.id}", "amount": "${price.output.amount}", "currency": "${price.output.currency}", "reference": "onboarding-acme"}, "depends_on": ["price", "contact"]},
		  {"id": "settings", "tool": "settings_put", "args": {"account": "${contact.output.id}", "settings": {"plan": "pro"}}, "depends_on": ["contact", "invoice"]},
		  {"id": "welcome", "tool": "email_send", "args": {"to": "billing@acme.example", "template": "welcome-pack"}, "depends_on": ["settings"]}]}`,
		// another plan to the same end: literal amount, other ids and order
		`{"id": "world-onboard", "try": 2, "calls": [
		  {"id": "m", "tool": "email_send", "args": {"to": "billing@acme.example", "template": "welcome-pack"}, "depends_on": ["s"]},
		  {"id": "c", "tool": "crm_create_contact", "args": {"company": "ACME", "email": "billing@acme.example"}},
		  {"id": "s", "tool": "settings_put", "args": {"account": "${c.output.id}", "settings": {"plan": "pro", "seats": 5}}, "depends_on": ["c"]},
		  {"id": "i", "tool": "payments_create_invoice", "args": {"customer": "${c.output.id}", "amount": 1200, "currency": "EUR", "reference": "onboarding-acme"}, "depends_on": ["c"]}]}`,
		// the wrong account
		`{"id": "world-settings", "calls": [{"tool": "settings_put", "args": {"account": "c_2", "settings": {"plan": "pro"}}}]}`,
		// the welcome pack twice
		`{"id": "world-email-once", "calls": [{"tool": "email_send", "args": {"to": "ana@bolt.example", "template": "welcome-pack"}}, {"tool": "email_send", "args": {"to": "ana@bolt.example", "template": "welcome-pack", "contact_id": "x"}}]}`,
	}, "\n")
	pf := filepath.Join(dir, "plans.jsonl")
	os.WriteFile(pf, []byte(strings.ReplaceAll(plans, "\n\t\t  ", " ")+"\n"), 0o644)
	r := evalRun(t, nil, "score", "--dataset", ds, "--plans", pf, "--json")
	wantCode(t, r, exitOK)
	var got struct {
		Cases []struct {
			ID      string   `json:"id"`
			Pass    bool     `json:"pass"`
			Reasons []string `json:"reasons"`
			Tries   int      `json:"tries"`
			Passes  int      `json:"passes"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	byID := map[string]int{}
	for i, c := range got.Cases {
		byID[c.ID] = i
	}
	on := got.Cases[byID["world-onboard"]]
	if !on.Pass || on.Tries != 2 || on.Passes != 2 {
		t.Errorf("two equivalent onboarding plans: %+v", on)
	}
	st := strings.Join(got.Cases[byID["world-settings"]].Reasons, "\n")
	if got.Cases[byID["world-settings"]].Pass || !strings.Contains(st, "settings/c_1 happened 0 times, expected 1") || !strings.Contains(st, "settings/c_2 happened 1 time, which the request did not ask for") {
		t.Errorf("wrong account: %s", st)
	}
	em := strings.Join(got.Cases[byID["world-email-once"]].Reasons, "\n")
	if got.Cases[byID["world-email-once"]].Pass || !strings.Contains(em, "email/ana@bolt.example/welcome-pack happened 2 times, expected 1") {
		t.Errorf("double email: %s", em)
	}
	r = evalRun(t, nil, "check", "--dataset", ds)
	wantCode(t, r, exitOK)
}

// TestEvalRunRecordThenReplay runs against a live (fake) endpoint with
// --record, then replays the recordings with no endpoint at all.
func TestEvalRunRecordThenReplay(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer sk-test-live-key" {
			http.Error(w, `{"error": {"message": "bad key"}}`, http.StatusUnauthorized)
			return
		}
		if n == 1 {
			// one passing failure: the planner retries it, the recording keeps both
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error": {"message": "slow down"}}`, http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "x", "object": "chat.completion", "created": 1, "model": "fake-1",
		  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Nothing to do with these tools."}, "finish_reason": "stop"}],
		  "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	ds := filepath.Join(dir, "d.jsonl")
	var lines []string
	for _, id := range []string{"q1", "q2", "q3"} {
		lines = append(lines, `{"id": "`+id+`", "category": "irrelevance", "goal": "What is the capital of `+id+`?", "tools": [{"name": "crm.note", "effect": "at_most_once", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}], "expect": {"no_action": true}}`)
	}
	os.WriteFile(ds, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	recs := filepath.Join(dir, "recs")
	env := map[string]string{"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test-live-key", "OPENAI_MODEL": "fake-1"}
	r := evalRun(t, env, "run", "--dataset", ds, "--record", recs, "--concurrency", "2", "--out", filepath.Join(dir, "live.json"))
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "all 3 cases passed") || !strings.Contains(r.stdout, "tokens: 300 prompt + 21 completion") {
		t.Fatalf("live run:\n%s", r)
	}
	files, _ := filepath.Glob(filepath.Join(recs, "*.json.gz"))
	if len(files) != 3 {
		t.Fatalf("%d recordings", len(files))
	}
	for _, f := range files {
		data, _ := evals.OpenFile(f)
		b, _ := io.ReadAll(data)
		data.Close()
		if bytes.Contains(b, []byte("sk-test-live-key")) || bytes.Contains(bytes.ToLower(b), []byte("authorization")) {
			t.Fatalf("%s holds the key", f)
		}
	}
	srv.Close()
	before := requests.Load()
	r = evalRun(t, map[string]string{"OPENAI_MODEL": "fake-1"}, "run", "--dataset", ds, "--replay", recs, "--out", filepath.Join(dir, "replay.json"))
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "all 3 cases passed") || requests.Load() != before {
		t.Fatalf("replay:\n%s", r)
	}
	r = evalRun(t, nil, "compare", filepath.Join(dir, "live.json"), filepath.Join(dir, "replay.json"))
	if !strings.Contains(r.stdout, "0 cases flipped") {
		t.Errorf("replay differs from the live run:\n%s", r)
	}
}
