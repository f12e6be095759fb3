package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
)

// stepRequestJSON builds a step request.
func stepRequestJSON(t *testing.T, runID string, planJSON []byte, approve string) string {
	t.Helper()
	req := map[string]any{"run_id": runID}
	if planJSON != nil {
		req["plan"] = json.RawMessage(planJSON)
	}
	if approve != "" {
		req["approve"] = approve
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stepInproc runs `docket step` in this process with stdin.
func stepInproc(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := testEnv(&out, &errb)
	env.Stdin = strings.NewReader(stdin)
	args = append([]string{"step"}, args...)
	code := report(runEnv(context.Background(), args, env), &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// stepChild runs `docket step` as a child process (this test binary) with
// stdin; with crash = "POINT:ACTION" it is SIGKILLed at that point.
func stepChild(t *testing.T, crash, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	args = append([]string{"step"}, args...)
	p := &proc{args: args, cancel: cancel}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asDocketEnv+"=1", skewEnv+"="+testSkew.String())
	if crash != "" {
		cmd.Env = append(cmd.Env, crashAtEnv+"="+crash)
	}
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout = &p.out
	var err error
	if p.c, err = startCrashChild(cmd); err != nil {
		t.Fatal(err)
	}
	return p.finish(t, p.waitMarker() && crash != "")
}

func (b *bundle) stepArgs() []string { return []string{"--data", b.data, "--tools", b.tools} }

// stepOutputs maps action id → status and output, to compare two answers.
func stepOutputs(d runJSON) map[string]string {
	m := map[string]string{}
	for _, a := range d.Actions {
		m[a.ID] = a.Status + " " + a.Key + " " + string(a.Output)
	}
	return m
}

// TestStepPausedApprovedAndDone follows a host engine polling one step: the
// first request records the plan and waits for a person (the email is
// at_most_once); re-sending says the same; after the approval the next
// request finishes the run; re-sending after that returns the same result
// without calling any tool.
func TestStepPausedApprovedAndDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	req := stepRequestJSON(t, "ci-job-42-step-3", demoworld.OnboardingPlan(), "safe")

	first := stepInproc(t, req, b.stepArgs()...)
	wantCode(t, first, exitPaused)
	d := doc(t, first)
	if d.RunID != "ci-job-42-step-3" || d.Status != "paused" {
		t.Fatalf("first answer: run %q status %q, want the step's run waiting for a person\n%s", d.RunID, d.Status, first)
	}
	if d.action("welcome").Status != "pending" || b.world.Effect("email/billing@acme.example/welcome-pack") != 0 {
		t.Fatalf("the email ran without approval: %s", first)
	}
	if !strings.Contains(first.stderr, "docket approve") {
		t.Errorf("stderr does not say how to approve:\n%s", first.stderr)
	}

	again := stepInproc(t, req, b.stepArgs()...)
	wantCode(t, again, exitPaused)
	if d2 := doc(t, again); d2.Status != d.Status || !reflect.DeepEqual(stepOutputs(d2), stepOutputs(d)) {
		t.Fatalf("re-sent while waiting: %s\nfirst: %s", again, first)
	}

	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "ci-job-42-step-3", "welcome"), exitOK)
	done := stepInproc(t, req, b.stepArgs()...)
	wantCode(t, done, exitOK)
	dd := doc(t, done)
	if dd.Status != "completed" {
		t.Fatalf("after approval: %s", done)
	}
	for _, e := range demoworld.OnboardingEffects {
		if n := b.world.Effect(e); n != 1 {
			t.Errorf("effect %s happened %d times, want 1", e, n)
		}
	}
	requests := map[string]int{}
	for _, s := range []string{"catalogue", "crm", "payments", "settings", "email"} {
		requests[s] = b.world.Requests(s)
	}
	for i := 0; i < 2; i++ {
		rerun := stepInproc(t, req, b.stepArgs()...)
		wantCode(t, rerun, exitOK)
		if dr := doc(t, rerun); dr.Status != "completed" || !reflect.DeepEqual(stepOutputs(dr), stepOutputs(dd)) {
			t.Fatalf("re-sent after completion: %s\nfirst completion: %s", rerun, done)
		}
	}
	for s, n := range requests {
		if got := b.world.Requests(s); got != n {
			t.Errorf("%s received %d requests after the run completed, want %d (no tool is called again)", s, got-n, 0)
		}
	}
	// A request with only the run id continues (here: reports) the same run.
	only := stepInproc(t, `{"run_id": "ci-job-42-step-3"}`, b.stepArgs()...)
	wantCode(t, only, exitOK)
	if !reflect.DeepEqual(stepOutputs(doc(t, only)), stepOutputs(dd)) {
		t.Errorf("run id alone: %s", only)
	}
}

// TestStepKilledAndResent kills `docket step` (SIGKILL) after the keyed
// invoice call reached the payment provider and before its outcome was
// recorded, then re-sends the same request as a host engine's retry would:
// the run completes with every effect exactly once.
func TestStepKilledAndResent(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"after_call:invoice", "after_claim:contact", "after_call:contact"} {
		t.Run(crash, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			req := stepRequestJSON(t, "argo-wf-7-node-"+strings.ReplaceAll(crash, ":", "-"), demoworld.OnboardingPlan(), "all")
			killed := stepChild(t, crash, req, b.stepArgs()...)
			if !killed.killed {
				t.Fatalf("the step never reached %s:\n%s", crash, killed)
			}
			again := stepChild(t, "", req, b.stepArgs()...)
			wantCode(t, again, exitOK)
			if d := doc(t, again); d.Status != "completed" {
				t.Fatalf("re-sent after the kill: %s", again)
			}
			for _, e := range demoworld.OnboardingEffects {
				if n := b.world.Effect(e); n != 1 {
					t.Errorf("effect %s happened %d times, want 1 (%s)", e, n, b.world.Describe())
				}
			}
		})
	}
}

func TestStepBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plan := string(demoworld.OnboardingPlan())
	for _, c := range []struct{ name, stdin, want string }{
		{"empty stdin", "", "needs a request on stdin"},
		{"not JSON", "{run_id", "not valid"},
		{"unknown field", `{"run_id": "r", "plan": ` + plan + `, "policy": "all"}`, "unknown field"},
		{"no run id", `{"plan": ` + plan + `}`, `needs "run_id"`},
		{"plan and goal", `{"run_id": "r", "goal": "g", "plan": ` + plan + `}`, "not both"},
		{"bad policy", `{"run_id": "r", "plan": ` + plan + `, "approve": "most"}`, "all, safe or none"},
		{"unknown run without plan", `{"run_id": "never-started"}`, "does not exist"},
		{"invalid plan", `{"run_id": "r", "plan": {"actions": [{"id": "a", "tool": "no_such_tool", "args": {}}]}}`, "no_such_tool"},
		{"trailing data", `{"run_id": "r", "plan": ` + plan + `} {}`, "after the JSON object"},
	} {
		r := stepInproc(t, c.stdin, b.stepArgs()...)
		if r.code != exitBad || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, want 2 with %q\n%s", c.name, r.code, c.want, r)
			continue
		}
		// No run exists: nothing on stdout rather than a made-up Run JSON.
		if r.stdout != "" {
			t.Errorf("%s: a refusal printed a Run JSON for a run that does not exist\n%s", c.name, r)
		}
	}
	// The same run id with another plan is refused and shows the recorded run.
	wantCode(t, stepInproc(t, stepRequestJSON(t, "same-id", demoworld.OnboardingPlan(), "all"), b.stepArgs()...), exitOK)
	other := `{"goal": "other", "actions": [{"id": "p", "tool": "catalogue_price", "args": {"plan": "basic"}}]}`
	r := stepInproc(t, stepRequestJSON(t, "same-id", []byte(other), "all"), b.stepArgs()...)
	wantCode(t, r, exitBad)
	if d := doc(t, r); d.RunID != "same-id" || d.Status != "completed" {
		t.Errorf("mismatch answer should show the recorded run: %s", r)
	}
}

// fakeModel is an OpenAI-compatible chat-completions endpoint that plans one
// settings_put call, then stops; it counts the requests it answered.
type fakeModel struct {
	mu       sync.Mutex
	requests int
}

func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	m.mu.Lock()
	m.requests++
	n := m.requests
	m.mu.Unlock()
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	message := `{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
	  "function": {"name": "settings_put", "arguments": "{\"account\": \"acct-7\", \"settings\": {\"plan\": \"pro\"}}"}}]}`
	finish := "tool_calls"
	if n%2 == 0 { // the model saw the queued call's placeholder result: done
		message, finish = `{"role": "assistant", "content": "Queued the settings change."}`, "stop"
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id": "chatcmpl-%d", "object": "chat.completion", "created": 1764460800, "model": "fake-planner",
	  "choices": [{"index": 0, "message": %s, "finish_reason": %q}],
	  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}`, n, message, finish)
}

func (m *fakeModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}

// TestStepGoal: a goal is planned with the model once; re-sending the request
// continues the recorded run without calling the model again.
func TestStepGoal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	model := &fakeModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	env := map[string]string{"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test-not-a-secret", "OPENAI_MODEL": "fake-planner"}
	step := func() result {
		var out, errb bytes.Buffer
		e := testEnv(&out, &errb)
		e.Stdin = strings.NewReader(`{"run_id": "airflow-dag-1-task-plan", "goal": "put acct-7 on the pro plan", "approve": "all"}`)
		e.Getenv = func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return os.Getenv(k)
		}
		args := append([]string{"step"}, b.stepArgs()...)
		code := report(runEnv(context.Background(), args, e), &errb)
		return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
	}
	first := step()
	wantCode(t, first, exitOK)
	d := doc(t, first)
	if d.Status != "completed" || d.Goal != "put acct-7 on the pro plan" || len(d.Actions) != 1 || d.Actions[0].Tool != "settings_put" {
		t.Fatalf("goal step: %s", first)
	}
	if n := model.count(); n != 2 {
		t.Fatalf("the model answered %d requests, want 2 (one call, then done)", n)
	}
	again := step()
	wantCode(t, again, exitOK)
	if n := model.count(); n != 2 {
		t.Errorf("re-sent: the model was called again (%d requests)", n)
	}
	if b.world.Effect("settings/acct-7") != 1 {
		t.Errorf("settings effect %d, want 1", b.world.Effect("settings/acct-7"))
	}
	if strings.Contains(first.stdout+first.stderr+again.stdout+again.stderr, "sk-test-not-a-secret") {
		t.Error("the API key appears in the step's output")
	}
	// Same run id, another goal: refused.
	var out, errb bytes.Buffer
	e := testEnv(&out, &errb)
	e.Stdin = strings.NewReader(`{"run_id": "airflow-dag-1-task-plan", "goal": "something else"}`)
	if code := report(runEnv(context.Background(), append([]string{"step"}, b.stepArgs()...), e), &errb); code != exitBad || !strings.Contains(errb.String(), "another goal") {
		t.Errorf("another goal under the same run id: exit %d\n%s", code, errb.String())
	}
}
