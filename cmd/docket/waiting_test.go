package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecondApprovalShowsTheResolvedArguments: an action of a tool with
// approval: always and a reference is approved as planned, then asked again
// once its reference resolved (the approval binds what is sent). The message shows what will be sent, so the person
// sees why they are asked twice.
func TestSecondApprovalShowsTheResolvedArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	api := startKeyedAPI(t, false, 1)
	toolsPath := api.toolsFile(t, dir, map[string]any{"approval": "always"})
	data := filepath.Join(dir, "data")
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, shapePlan(t, "chain", "a b:a"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := inproc(t, "run", "--data", data, "--tools", toolsPath, "--plan", planPath, "--run-id", "r", "--approve", "none")
	wantCode(t, first, exitPaused)
	if !strings.Contains(first.stderr, `b waits for approval: op {"id":"b","in0":"${a.output.id}"}`) {
		t.Fatalf("first message does not show b as planned:\n%s", first.stderr)
	}
	wantCode(t, inproc(t, "approve", "--data", data, "--tools", toolsPath, "r"), exitPaused)
	second := inproc(t, "run", "--data", data, "--tools", toolsPath, "--plan", planPath, "--run-id", "r")
	wantCode(t, second, exitPaused)
	if !strings.Contains(second.stderr, `b waits for approval: op {"id":"b","in0":"op-1"}`) {
		t.Fatalf("second message does not show b resolved:\n%s", second.stderr)
	}
	wantCode(t, inproc(t, "approve", "--data", data, "--tools", toolsPath, "r", "b"), exitOK)
	api.check(t, 2)
}
