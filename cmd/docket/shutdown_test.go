package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
)

// `docket serve` stopped with SIGTERM while two keyed calls hang upstream:
// the one whose own timeout ends during the grace is not attempted again,
// the one still hanging is cut off before the grace ends; both are recorded
// with an unknown outcome (the next start calls them again with their keys),
// and the process exits by itself. The `docket run --server` client that
// waited for the run says that the run was recorded and may have made its
// calls (exit 6), not that nothing was sent; the same command against the
// stopped service says nothing was sent (exit 4).
func TestServeShutdownWithHungCalls(t *testing.T) {
	t.Parallel()
	w := newHoldWorld(t)
	toolsPath := filepath.Join(t.TempDir(), "tools.json")
	tool := func(name, timeout string) string {
		return fmt.Sprintf(`{"name": %q, "description": "Charge; deduplicated by Idempotency-Key.", "effect": "keyed",
  "input_schema": {"type": "object", "properties": {"reference": {"type": "string"}}, "required": ["reference"], "additionalProperties": false},
  "request": {"method": "POST", "url": %q}, "key_header": "Idempotency-Key", "key_ttl": "24h", "timeout": %q}`, name, w.srv.URL+"/charges", timeout)
	}
	tools := `{"version": 1, "tools": [` + tool("charge_short", "1s") + `, ` + tool("charge_long", "120s") + `]}`
	if err := os.WriteFile(toolsPath, []byte(tools), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(`{"goal": "two charges", "actions": [
  {"id": "short", "tool": "charge_short", "args": {"reference": "short"}},
  {"id": "long", "tool": "charge_long", "args": {"reference": "long"}},
  {"id": "after", "tool": "charge_short", "args": {"reference": "after"}, "depends_on": ["short", "long"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "shutdown-test-token-0123456789"
	s := startServeChild(t, "--data", data, "--tools", toolsPath, "--token", token, "--grace", "6s")

	clientArgs := []string{"run", "--server", s.base, "--token", token, "--plan", planPath, "--run-id", "hung", "--approve", "all"}
	client := start(t, "", clientArgs...)
	for range 2 {
		select {
		case <-w.arrived:
		case <-time.After(60 * time.Second):
			t.Fatalf("the calls never reached the upstream\n%s", s.output())
		}
	}
	signalled := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-s.done:
		s.done <- exitErr // for the cleanup
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not exit after SIGTERM\n%s", s.output())
	}
	t.Logf("serve exited %v after SIGTERM (--grace 6s)", time.Since(signalled).Round(time.Millisecond))
	var ee *exec.ExitError
	if exitErr != nil && !errors.As(exitErr, &ee) {
		t.Fatalf("waiting for serve: %v", exitErr)
	}
	if exitErr != nil {
		t.Fatalf("serve exited with %v after SIGTERM\n%s", exitErr, s.output())
	}
	for _, ref := range []string{"short", "long", "after"} {
		want := 1
		if ref == "after" {
			want = 0
		}
		if n := w.callsOf(ref); n != want {
			t.Errorf("the upstream saw %d requests for %s, want %d\n%s", n, ref, want, s.output())
		}
	}
	if !strings.Contains(s.output(), "no new attempt starts") {
		t.Errorf("serve did not say how it shuts down\n%s", s.output())
	}

	cr := client.finish(t, false)
	wantCode(t, cr, exitSentUnknown)
	for _, want := range []string{"run hung", "runs show --server " + s.base + " hung", "calls may have been made"} {
		if !strings.Contains(cr.stderr, want) {
			t.Errorf("the client's message lacks %q\n%s", want, cr)
		}
	}
	if strings.Contains(cr.stderr, "nothing was sent") {
		t.Errorf("the client says nothing was sent for a run the service recorded\n%s", cr)
	}

	// The ledger: both calls' outcomes are unknown (attempted, may have
	// taken effect, to be called again with their keys), none failed or
	// succeeded, and nothing after them was claimed.
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Doc(context.Background(), "hung")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range d.Actions {
		if a.ID == "after" {
			if a.Attempts != 0 || a.Key != "" {
				t.Errorf("action after was claimed: %+v", a)
			}
			continue
		}
		rec, err := l.Key(context.Background(), a.Key)
		if err != nil {
			t.Fatalf("action %s: %v", a.ID, err)
		}
		if rec.State != ledger.StatusPending || rec.Failure != ledger.FailureUnknown || !rec.MaybeTookEffect || rec.Attempt != 1 {
			t.Errorf("action %s: key %+v, want attempt 1 pending with an unknown outcome", a.ID, rec)
		}
	}
	if d.Run.Status != ledger.RunRunning {
		t.Errorf("run status %s, want running (the next start goes on)", d.Run.Status)
	}
	l.Close()

	// Nobody listens any more: nothing is sent.
	r := child(t, "", clientArgs...)
	wantCode(t, r, exitBusy)
	if !strings.Contains(r.stderr, "nothing was sent") {
		t.Errorf("a stopped service: want \"nothing was sent\"\n%s", r)
	}
}
