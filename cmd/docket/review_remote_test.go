package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
)

// `docket approve RUN ACTION --server` sends the named actions and approves
// them alone; `docket approve RUN --server` says "all": true explicitly (the
// service refuses a missing or empty list). A recording proxy between the CLI
// and a real `docket serve` keeps the bodies as sent.
func TestApproveThroughServerSendsWhatItNames(t *testing.T) {
	s := startServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"))
	target, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []string // "PATH BODY" of every POST
	proxy := httputil.NewSingleHostReverseProxy(target)
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			mu.Lock()
			sent = append(sent, r.URL.Path+" "+strings.TrimSpace(string(body)))
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	defer rec.Close()
	posts := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(sent)
		sent = nil
		return out
	}

	var doc struct {
		RunID string `json:"run_id"`
	}
	if code := s.post(t, "/v1/runs", map[string]any{"run_id": "cli-approve", "plan": json.RawMessage(demoworld.OnboardingPlan()), "approve": "none"}, &doc); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d", code)
	}
	srv := []string{"--server", rec.URL, "--token", s.token}
	type runJSON struct {
		Status  string `json:"status"`
		Actions []struct {
			ID, Status string
			Attempts   int
		} `json:"actions"`
	}
	status := func(r result) map[string]string {
		t.Helper()
		var d runJSON
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("%s: stdout is not the Run JSON: %v", r, err)
		}
		m := map[string]string{"run": d.Status}
		for _, a := range d.Actions {
			m[a.ID] = a.Status
		}
		return m
	}

	// Two actions named: only they are approved and run; the at-most-once
	// welcome email and the rest keep waiting.
	r := inproc(t, append([]string{"approve", "cli-approve", "price", "contact"}, srv...)...)
	if got := posts(); !slices.Equal(got, []string{`/v1/runs/cli-approve/approve {"actions":["price","contact"]}`}) {
		t.Fatalf("approve with actions sent %q", got)
	}
	st := status(r)
	if r.code != exitPaused || st["contact"] != "succeeded" || st["invoice"] != "pending" || st["settings"] != "pending" || st["welcome"] != "pending" {
		t.Fatalf("after approving price and contact: %v\n%s", st, r)
	}

	// Nothing named: the whole plan, said explicitly.
	r = inproc(t, append([]string{"approve", "cli-approve"}, srv...)...)
	if got := posts(); !slices.Equal(got, []string{`/v1/runs/cli-approve/approve {"all":true}`}) {
		t.Fatalf("approve without actions sent %q", got)
	}
	// The email's reference resolved after that approval: it is shown again.
	if st := status(r); r.code != exitPaused || st["welcome"] != "pending" || st["settings"] != "succeeded" {
		t.Fatalf("after approving everything: %v\n%s", st, r)
	}
	r = inproc(t, append([]string{"approve", "cli-approve", "welcome"}, srv...)...)
	if st := status(r); r.code != exitOK || st["run"] != "completed" {
		t.Fatalf("after approving the resolved email: %v\n%s", st, r)
	}
	if got := posts(); !slices.Equal(got, []string{`/v1/runs/cli-approve/approve {"actions":["welcome"]}`}) {
		t.Fatalf("approve welcome sent %q", got)
	}
}
