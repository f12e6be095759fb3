package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
)

// filesToolsFile runs the real @modelcontextprotocol/server-filesystem on
// one directory, trusting its annotations, and classifies two of its tools;
// moveName is how the file spells move_file.
func filesToolsFile(t *testing.T, p mcptest.Paths, root, moveName string) string {
	t.Helper()
	file := fmt.Sprintf(`{"version": 1, "tools": [], "mcp_servers": [{
  "name": "files", "command": %q, "args": [%q, %q], "trust_annotations": true,
  "tools": {"write_file": {"effect": "idempotent"}, %q: {"effect": "at_most_once"}}}]}`, p.Node, p.Filesystem, root, moveName)
	return writeFile(t, filepath.Join(t.TempDir(), "tools.json"), file)
}

var toolsHashLine = regexp.MustCompile(`tools hash (sha256:[0-9a-f]+)`)

// `docket tools check --connect` starts the servers of the tools file and
// checks every name it classifies: a misspelled tool is exit 2 naming it
// (with the name it probably meant), as is `docket run` with that file; an
// unreachable server is exit 1. Plain `tools check` does not connect and
// says so.
func TestToolsCheckConnectMisspelled(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	root := t.TempDir()
	bad := filesToolsFile(t, p, root, "move_fiel")

	r := inproc(t, "tools", "check", "--connect", "--tools", bad)
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, `"move_fiel"`) || !strings.Contains(r.stderr, `did you mean "move_file"`) {
		t.Errorf("check --connect of a misspelled tool: %s", r)
	}
	r = inproc(t, "tools", "check", "--tools", bad)
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stdout, "not connected by check: --connect checks its tools") ||
		!strings.Contains(r.stdout, "the HTTP tools only") {
		t.Errorf("check without --connect does not say what it left out:\n%s", r.stdout)
	}

	plan := writeFile(t, filepath.Join(t.TempDir(), "plan.json"), fmt.Sprintf(
		`{"goal": "write", "actions": [{"id": "w", "tool": "files.write_file", "args": {"path": %q, "content": "hello"}}]}`, filepath.Join(root, "a.txt")))
	r = inproc(t, "run", "--data", filepath.Join(t.TempDir(), "data"), "--tools", bad, "--plan", plan, "--approve", "all")
	wantCode(t, r, exitBad)
	if !strings.Contains(r.stderr, "move_fiel") {
		t.Errorf("run with a misspelled tool: %s", r)
	}

	gone := writeFile(t, filepath.Join(t.TempDir(), "tools.json"), `{"version": 1, "tools": [], "mcp_servers": [{
  "name": "gone", "command": "/nonexistent/mcp-server", "tools": {"x": {"effect": "idempotent"}}}]}`)
	wantCode(t, inproc(t, "tools", "check", "--connect", "--tools", gone), exitFailed)
}

// `docket tools list` shows every tool of every server with the class a run
// gives it and where that class comes from; the tools hash that `tools
// check --connect` and `tools list` print is the one `docket run` records
// for the run (it covers the MCP tools' definitions), and differs from the
// HTTP-only hash plain `tools check` prints.
func TestToolsListAndHashWithFilesystem(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	root := t.TempDir()
	good := filesToolsFile(t, p, root, "move_file")

	r := inproc(t, "tools", "list", "--json", "--tools", good)
	wantCode(t, r, exitOK)
	var listed struct {
		Tools []struct {
			Name, Source, Server, Class, Why string
		} `json:"tools"`
		Hash string `json:"tools_hash"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil {
		t.Fatalf("tools list --json: %v\n%s", err, r.stdout)
	}
	got := map[string]string{}
	for _, tl := range listed.Tools {
		if tl.Source != "mcp" || tl.Server != "files" {
			t.Errorf("%s: source %s server %s", tl.Name, tl.Source, tl.Server)
		}
		got[tl.Name] = tl.Class + " / " + tl.Why
	}
	for name, want := range map[string]string{
		"files.write_file":     "idempotent / tools file",
		"files.move_file":      "at_most_once / tools file",
		"files.edit_file":      "at_most_once / default for an unclassified MCP tool",
		"files.read_text_file": "read_only / trusted readOnlyHint",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q (all: %v)", name, got[name], want, got)
		}
	}
	text := inproc(t, "tools", "list", "--tools", good)
	wantCode(t, text, exitOK)
	if !regexp.MustCompile(`files\.move_file\s+at_most_once\s+mcp server files\s+tools file`).MatchString(text.stdout) {
		t.Errorf("tools list:\n%s", text.stdout)
	}

	connected := inproc(t, "tools", "check", "--connect", "--tools", good)
	wantCode(t, connected, exitOK)
	plain := inproc(t, "tools", "check", "--tools", good)
	wantCode(t, plain, exitOK)
	hc, hp := toolsHashLine.FindStringSubmatch(connected.stdout), toolsHashLine.FindStringSubmatch(plain.stdout)
	if hc == nil || hp == nil {
		t.Fatalf("no tools hash printed:\n%s\n%s", connected.stdout, plain.stdout)
	}
	if hc[1] != listed.Hash || hc[1] == hp[1] {
		t.Errorf("check --connect hash %s, list hash %s, plain check hash %s: want the first two equal and the third different", hc[1], listed.Hash, hp[1])
	}

	data := filepath.Join(t.TempDir(), "data")
	target := filepath.Join(root, "a.txt")
	plan := writeFile(t, filepath.Join(t.TempDir(), "plan.json"), fmt.Sprintf(
		`{"goal": "write", "actions": [{"id": "w", "tool": "files.write_file", "args": {"path": %q, "content": "hello"}}]}`, target))
	run := inproc(t, "run", "--data", data, "--tools", good, "--plan", plan, "--approve", "all", "--run-id", "files-1")
	wantCode(t, run, exitOK)
	if b, err := os.ReadFile(target); err != nil || string(b) != "hello" {
		t.Fatalf("the file server wrote %q (%v)", b, err)
	}
	led, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	rec, err := led.GetRun(context.Background(), "files-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.ToolsHash != hc[1] || rec.Status != ledger.RunCompleted {
		t.Errorf("the run recorded tools hash %s (status %s); tools check --connect printed %s", rec.ToolsHash, rec.Status, hc[1])
	}
}

// The real server-filesystem behind `docket step`, killed (SIGKILL) right
// after a call returned and before docket recorded it: the idempotent
// write_file is simply written again on the re-send; the at_most_once
// move_file is never repeated: the run waits in needs_review (exit 3), a
// person resolves it as done, and the re-send completes with the file moved
// once.
func TestMCPFilesystemKilled(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	for _, crash := range []string{"after_call:w", "after_call:m"} {
		t.Run(crash, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			tf := filesToolsFile(t, p, root, "move_file")
			data := filepath.Join(t.TempDir(), "data")
			src, dst := filepath.Join(root, "draft.txt"), filepath.Join(root, "final.txt")
			plan := fmt.Sprintf(`{"goal": "write and file", "actions": [
  {"id": "w", "tool": "files.write_file", "args": {"path": %q, "content": "report"}},
  {"id": "m", "tool": "files.move_file", "depends_on": ["w"], "args": {"source": %q, "destination": %q}}]}`, src, src, dst)
			runID := "files-" + strings.ReplaceAll(crash, ":", "-")
			req := stepRequestJSON(t, runID, []byte(plan), "all")
			args := []string{"--data", data, "--tools", tf}
			if k := stepChild(t, crash, req, args...); !k.killed {
				t.Fatalf("the step never reached %s:\n%s", crash, k)
			}
			again := stepChild(t, "", req, args...)
			if crash == "after_call:m" {
				// The move may have happened: docket does not move again.
				wantCode(t, again, exitPaused)
				if a := doc(t, again).action("m"); a.Status != "needs_review" {
					t.Fatalf("move_file after the kill: %s, want needs_review\n%s", a.Status, again)
				}
				if _, err := os.Stat(dst); err != nil {
					t.Fatalf("the killed call did not move the file: %v", err)
				}
				r := inproc(t, "resolve", runID, "m", "--done", `{"content": "moved by hand"}`, "--data", data, "--tools", tf)
				wantCode(t, r, exitOK)
				again = stepChild(t, "", req, args...)
			}
			wantCode(t, again, exitOK)
			d := doc(t, again)
			if d.Status != "completed" || d.action("w").Status != "succeeded" || d.action("m").Status != "succeeded" {
				t.Fatalf("after the re-send: %s", again)
			}
			if b, err := os.ReadFile(dst); err != nil || string(b) != "report" {
				t.Errorf("final.txt = %q (%v), want the report, moved once", b, err)
			}
			if _, err := os.Stat(src); !os.IsNotExist(err) {
				t.Errorf("draft.txt still exists (%v): the move did not happen, or the write ran after it", err)
			}
		})
	}
}
