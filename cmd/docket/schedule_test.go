package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// docket schedule on a data directory: create (a plan checked against the
// tools file), list, show, pause, resume, delete; bad input exits 2 and
// stores nothing; a retried create is the same schedule, another
// definition under its id is refused.
func TestScheduleCLI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pl := b.plan(t, "inv", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 5, "currency": "EUR", "reference": "cli"}}]}`)
	create := []string{"schedule", "create", "--data", b.data, "--tools", b.tools, "--plan", pl,
		"--id", "nightly", "--spec", "30 2 * * *", "--tz", "Europe/Paris", "--overlap", "queue", "--json"}
	r := inproc(t, create...)
	wantCode(t, r, 0)
	var view struct {
		ID      string   `json:"id"`
		Overlap string   `json:"overlap"`
		CatchUp string   `json:"catch_up"`
		Paused  bool     `json:"paused"`
		Next    []string `json:"next"`
		Plan    any      `json:"plan"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil || view.ID != "nightly" || view.Overlap != "queue" ||
		view.CatchUp != "latest" || len(view.Next) != 3 || view.Plan == nil {
		t.Fatalf("create: %+v, %v\n%s", view, err, r)
	}
	wantCode(t, inproc(t, create...), 0) // the same schedule again
	other := append([]string{}, create...)
	other[len(other)-6] = "0 3 * * *" // --spec
	wantCode(t, inproc(t, other...), 1)

	for _, bad := range [][]string{
		{"--spec", "61 * * * *", "--goal", "g"},
		{"--spec", "@daily", "--tz", "Mars/Olympus", "--goal", "g"},
		{"--spec", "@daily", "--catch-up", "some", "--goal", "g"},
		{"--spec", "@daily"},
		{"--spec", "@daily", "--plan", pl},
		{"--spec", "@daily", "--goal", "g", "--approve", "maybe"},
		{"--spec", "@daily", "--goal", "g", "--id", "a/b"},
	} {
		r := inproc(t, append([]string{"schedule", "create", "--data", b.data, "--id", "bad"}, bad...)...)
		if r.code != 2 || r.stderr == "" {
			t.Errorf("create %v: exit %d, want 2 with a message\n%s", bad, r.code, r)
		}
	}
	r = inproc(t, "schedule", "list", "--data", b.data)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "nightly") || strings.Contains(r.stdout, "bad") || !strings.Contains(r.stdout, "active") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	r = inproc(t, "schedule", "pause", "--data", b.data, "nightly")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "paused") {
		t.Fatalf("pause:\n%s", r.stdout)
	}
	r = inproc(t, "schedule", "show", "--data", b.data, "--json", "nightly")
	wantCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil || !view.Paused || len(view.Next) != 0 {
		t.Fatalf("show after pause: %+v, %v", view, err)
	}
	wantCode(t, inproc(t, "schedule", "resume", "--data", b.data, "nightly"), 0)
	wantCode(t, inproc(t, "schedule", "delete", "--data", b.data, "nightly"), 0)
	r = inproc(t, "schedule", "show", "--data", b.data, "nightly")
	if r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("show after delete:\n%s", r)
	}
	wantCode(t, inproc(t, "schedule", "frobnicate"), 2)
	wantCode(t, inproc(t, "schedule"), 2)
}

// docket schedule --server: created through a running docket serve (on a
// data directory), which fires it; shown, listed and deleted through it.
func TestScheduleCLIServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const token = "schedule-cli-server-token"
	s := startServeChild(t, "--data", b.data, "--tools", b.tools, "--token", token)
	pl := b.plan(t, "inv", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 5, "currency": "EUR", "reference": "cli-server"}}]}`)
	srv := []string{"--server", s.base, "--token", token}
	wantCode(t, inproc(t, append([]string{"schedule", "create", "--id", "tick", "--spec", "every 1s", "--plan", pl}, srv...)...), 0)
	r := inproc(t, append([]string{"schedule", "list"}, srv...)...)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "tick") || !strings.Contains(r.stdout, "every 1s") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	var view struct {
		LastRunID string `json:"last_run_id"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for view.LastRunID == "" {
		r = inproc(t, append([]string{"schedule", "show", "--json", "tick"}, srv...)...)
		wantCode(t, r, 0)
		if err := json.Unmarshal([]byte(r.stdout), &view); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("docket serve fired no slot\n%s", s.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.HasPrefix(view.LastRunID, "sched:tick:") {
		t.Fatalf("last run %q", view.LastRunID)
	}
	waitStatus(t, s, token, view.LastRunID, "completed")
	wantCode(t, inproc(t, append([]string{"schedule", "delete", "tick"}, srv...)...), 0)
	r = inproc(t, append([]string{"schedule", "show", "tick"}, srv...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "not_found") && !strings.Contains(r.stderr, "not found") {
		t.Fatalf("show after delete:\n%s", r)
	}
}
