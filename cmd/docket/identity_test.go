package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
)

// TestOneIdentityAcrossEntryPoints: docket run, docket step and POST
// /v1/runs decide "same request, same run" by one rule
// (executor.SameRequest), so a run any of them created is recognised by the
// others: the same request continues it, a different one is refused (422 from
// the service, exit 2 from the commands).
func TestOneIdentityAcrossEntryPoints(t *testing.T) {
	b := setup(t)
	plan := string(demoworld.OnboardingPlan())
	other := strings.Replace(plan, "1200", "1300", 1)
	if other == plan {
		t.Fatal("the demo plan has no 1200 to change")
	}
	planPath, otherPath := b.plan(t, "plan", plan), b.plan(t, "other", other)
	step := func(req string) result {
		t.Helper()
		var out, errb bytes.Buffer
		e := testEnv(&out, &errb)
		e.Stdin = strings.NewReader(req)
		code := report(runEnv(context.Background(), append([]string{"step"}, b.stepArgs()...), e), &errb)
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	stepReq := func(runID, p, approve string) string {
		m := map[string]any{"run_id": runID, "plan": json.RawMessage(p)}
		if approve != "" {
			m["approve"] = approve
		}
		j, _ := json.Marshal(m)
		return string(j)
	}

	// Created by docket run and by docket step (every action waits).
	wantCode(t, inproc(t, b.runArgs(planPath, "--run-id", "by-run", "--approve", "none")...), exitPaused)
	wantCode(t, step(stepReq("by-step", plan, "none")), exitPaused)

	s := startServe(t, map[string]string{"DOCKET_TOKEN": "0123456789abcdef0123"}, "--data", b.data, "--tools", b.tools)
	s.token = "0123456789abcdef0123"
	post := func(runID, p, approve string) (int, string) {
		t.Helper()
		body := map[string]any{"run_id": runID, "plan": json.RawMessage(p)}
		if approve != "" {
			body["approve"] = approve
		}
		var e struct {
			RunID string `json:"run_id"`
			Error struct{ Code, Message string }
		}
		code := s.post(t, "/v1/runs", body, &e)
		return code, e.Error.Code + " " + e.Error.Message
	}
	for _, runID := range []string{"by-run", "by-step"} {
		if code, msg := post(runID, plan, ""); code != http.StatusOK {
			t.Errorf("POST the same plan to %s = %d %s, want 200", runID, code, msg)
		}
		if code, msg := post(runID, plan, "none"); code != http.StatusOK {
			t.Errorf("POST the same plan and policy to %s = %d %s, want 200", runID, code, msg)
		}
		if code, msg := post(runID, other, ""); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "identity_reused") || !strings.Contains(msg, "different plan") {
			t.Errorf("POST another plan to %s = %d %s, want 422 identity_reused", runID, code, msg)
		}
		if code, msg := post(runID, plan, "all"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, `policy "none"`) {
			t.Errorf("POST the plan under another policy to %s = %d %s, want 422", runID, code, msg)
		}
	}
	if code, msg := post("by-post", plan, "none"); code != http.StatusCreated {
		t.Fatalf("POST a new run = %d %s", code, msg)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	// The reverse directions: the commands recognise what the service made,
	// and each other's runs.
	for _, runID := range []string{"by-post", "by-run"} {
		if r := step(stepReq(runID, plan, "")); r.code != exitPaused {
			t.Errorf("step with the same plan on %s: exit %d, want 3 (continued)\n%s", runID, r.code, r.stderr)
		}
		if r := step(stepReq(runID, other, "")); r.code != exitBad || !strings.Contains(r.stderr, "different plan") {
			t.Errorf("step with another plan on %s: exit %d, want 2\n%s", runID, r.code, r.stderr)
		}
	}
	for _, runID := range []string{"by-post", "by-step"} {
		wantCode(t, inproc(t, b.runArgs(planPath, "--run-id", runID)...), exitPaused)
		if r := inproc(t, b.runArgs(otherPath, "--run-id", runID)...); r.code != exitBad || !strings.Contains(r.stderr, "different") {
			t.Errorf("run with another plan on %s: exit %d, want 2\n%s", runID, r.code, r.stderr)
		}
		if r := inproc(t, b.runArgs(planPath, "--run-id", runID, "--approve", "all")...); r.code != exitBad || !strings.Contains(r.stderr, "policy") {
			t.Errorf("run naming another policy on %s: exit %d, want 2\n%s", runID, r.code, r.stderr)
		}
	}
	if n := b.world.Effects(); len(n) != 0 {
		t.Fatalf("effects happened while every action waited for a person: %v", n)
	}
}
