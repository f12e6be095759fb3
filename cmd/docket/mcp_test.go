package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/mcptool"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
	"github.com/docketrun/docket/tools/toolsfile"
)

// The memory tools file runs the real server-memory behind `tee`, which
// appends every JSON-RPC line docket sends it to a log: the log counts the
// create_entities calls the server received, whatever the server does with
// repeats. create_entities is classified lookup, found with open_nodes.
const memoryToolsFile = `{
  "version": 1,
  "tools": [],
  "mcp_servers": [{
    "name": "memory",
    "command": "/bin/sh",
    "args": ["-c", "tee -a \"$CALL_LOG\" | exec \"$NODE\" \"$SERVER\""],
    "env": {"CALL_LOG": %q, "NODE": %q, "SERVER": %q, "MEMORY_FILE_PATH": %q},
    "tools": {
      "add_observations": {"effect": "idempotent"},
      "create_entities": {
        "effect": "lookup", "timeout": "1s", "output": "/entities",
        "lookup": {"tool": "open_nodes", "args": {"names": ["${input.entities.0.name}"]}, "found": "nonempty", "output": "/entities"}
      }
    }
  }]
}`

type memoryBundle struct {
	dir, data, tools, log, graph string
	paths                        mcptest.Paths
}

func setupMemory(t *testing.T) *memoryBundle {
	t.Helper()
	p := mcptest.Servers(t)
	dir := t.TempDir()
	b := &memoryBundle{dir: dir, data: filepath.Join(dir, "data"), tools: filepath.Join(dir, "tools.json"),
		log: filepath.Join(dir, "calls.log"), graph: filepath.Join(dir, "graph.jsonl"), paths: p}
	file := fmt.Sprintf(memoryToolsFile, b.log, p.Node, p.Memory, b.graph)
	if err := os.WriteFile(b.tools, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

var memoryPeople = []string{"Ada Lovelace", "Grace Hopper", "Barbara Liskov"}

// memoryPlan creates one entity per action, each after the previous one.
func memoryPlan() []byte {
	var acts []string
	for i, name := range memoryPeople {
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf(`, "depends_on": ["p%d"]`, i)
		}
		acts = append(acts, fmt.Sprintf(`{"id": "p%d", "tool": "memory.create_entities", "args": {"entities": [{"name": %q, "entityType": "person", "observations": ["pioneer"]}]}%s}`, i+1, name, dep))
	}
	return []byte(`{"goal": "remember three pioneers", "actions": [` + strings.Join(acts, ",") + `]}`)
}

// createCalls counts the create_entities requests the server received per
// entity name, from the tee log.
func (b *memoryBundle) createCalls(t *testing.T) map[string]int {
	t.Helper()
	data, err := os.ReadFile(b.log)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Entities []struct{ Name string } `json:"entities"`
				} `json:"arguments"`
				Meta map[string]any `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil || msg.Method != "tools/call" || msg.Params.Name != "create_entities" {
			continue
		}
		if k, _ := msg.Params.Meta[mcptool.KeyMeta].(string); !strings.HasPrefix(k, "dk1_") {
			t.Errorf("a create_entities call without the action's key in _meta: %s", line)
		}
		for _, e := range msg.Params.Arguments.Entities {
			n[e.Name]++
		}
	}
	return n
}

// readGraph asks a fresh server-memory on the same graph file, with its own
// read_graph tool, which entities exist and how often.
func (b *memoryBundle) readGraph(t *testing.T) map[string]int {
	t.Helper()
	set, err := mcptool.Connect(context.Background(), []toolsfile.MCPServer{{
		Name: "check", Command: b.paths.Node, Args: []string{b.paths.Memory},
		Env: map[string]string{"MEMORY_FILE_PATH": b.graph},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	reg, err := tools.NewRegistry(set.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	rg, _ := reg.Get("check.read_graph")
	out, err := rg.Call(context.Background(), tools.Call{Key: "check", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Entities []struct{ Name string } `json:"entities"`
	}
	if err := json.Unmarshal(out, &g); err != nil {
		t.Fatalf("read_graph: %s: %v", out, err)
	}
	n := map[string]int{}
	for _, e := range g.Entities {
		n[e.Name]++
	}
	return n
}

// TestMCPMemoryKilledMidPlan runs a plan that creates memory entities with the
// real server-memory through `docket step`, SIGKILLs docket in the middle of
// the plan (which also ends its server), re-sends the request, and checks with
// the server's own read_graph that every entity exists once, and with the call
// log that the server was asked to create each entity exactly once.
func TestMCPMemoryKilledMidPlan(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"after_call:p2", "after_claim:p2", "after_outcome:p1"} {
		t.Run(crash, func(t *testing.T) {
			t.Parallel()
			b := setupMemory(t)
			req := stepRequestJSON(t, "mcp-"+strings.ReplaceAll(crash, ":", "-"), memoryPlan(), "safe")
			args := []string{"--data", b.data, "--tools", b.tools}
			killed := stepChild(t, crash, req, args...)
			if !killed.killed {
				t.Fatalf("the step never reached %s:\n%s", crash, killed)
			}
			done := stepChild(t, "", req, args...)
			wantCode(t, done, exitOK)
			d := doc(t, done)
			if d.Status != "completed" {
				t.Fatalf("after the kill and re-send: %s", done)
			}
			for i, name := range memoryPeople {
				a := d.action(fmt.Sprintf("p%d", i+1))
				if a.Class != "lookup" || a.Tool != "memory.create_entities" || !strings.Contains(string(a.Output), name) {
					t.Errorf("action %s: class %s tool %s output %s", a.ID, a.Class, a.Tool, a.Output)
				}
			}
			calls, graph := b.createCalls(t), b.readGraph(t)
			for _, name := range memoryPeople {
				if calls[name] != 1 {
					t.Errorf("the server was asked to create %q %d times, want 1 (calls: %v)", name, calls[name], calls)
				}
				if graph[name] != 1 {
					t.Errorf("read_graph shows %q %d times, want 1 (graph: %v)", name, graph[name], graph)
				}
			}
			if len(graph) != len(memoryPeople) {
				t.Errorf("read_graph shows %v, want exactly %v", graph, memoryPeople)
			}
			// Re-sending once more calls no tool at all.
			before := b.createCalls(t)
			wantCode(t, stepChild(t, "", req, args...), exitOK)
			if after := b.createCalls(t); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("re-sent after completion: calls %v, before %v", after, before)
			}
		})
	}
}

// TestMCPUnclassifiedToolWaitsForPerson: a tool the file does not classify,
// on a server not trusted for its annotations, is at_most_once: under the
// safe policy the step answers paused and nothing is sent to the server.
func TestMCPUnclassifiedToolWaitsForPerson(t *testing.T) {
	t.Parallel()
	b := setupMemory(t)
	p := `{"goal": "forget", "actions": [{"id": "o1", "tool": "memory.delete_entities", "args": {"entityNames": ["Ada Lovelace"]}}]}`
	r := stepInproc(t, stepRequestJSON(t, "mcp-amo", []byte(p), "safe"), "--data", b.data, "--tools", b.tools)
	wantCode(t, r, exitPaused)
	d := doc(t, r)
	if a := d.action("o1"); a.Class != "at_most_once" || a.Status != "pending" {
		t.Fatalf("unclassified MCP tool: %s", r)
	}
	data, _ := os.ReadFile(b.log)
	if strings.Contains(string(data), "delete_entities") && strings.Contains(string(data), `"tools/call"`) {
		t.Errorf("the at_most_once call reached the server before approval:\n%s", data)
	}
}

// TestMCPToolErrorFailsRun: a tool that answers isError (server-memory's
// add_observations for an entity that does not exist) is a definite failure:
// the run fails (exit 1) and the action's error quotes the tool.
func TestMCPToolErrorFailsRun(t *testing.T) {
	t.Parallel()
	b := setupMemory(t)
	p := `{"goal": "note", "actions": [{"id": "o1", "tool": "memory.add_observations", "args": {"observations": [{"entityName": "Nobody", "contents": ["x"]}]}}]}`
	r := stepInproc(t, stepRequestJSON(t, "mcp-iserror", []byte(p), "safe"), "--data", b.data, "--tools", b.tools)
	wantCode(t, r, exitFailed)
	d := doc(t, r)
	a := d.action("o1")
	if d.Status != "failed" || a.Status != "failed" || a.Attempts != 1 || !strings.Contains(a.Error, "Entity with name Nobody not found") {
		t.Fatalf("isError result: run %s, action %s after %d attempts: %q\n%s", d.Status, a.Status, a.Attempts, a.Error, r)
	}
}

// TestMCPHangingServerTimesOut: server-everything's long-running operation
// does not answer within the tool's timeout; the tool is at_most_once, so the
// unknown outcome pauses the run for a person, and the events say why. The
// bearer token the tools file renders into the server's environment appears
// in no event.
func TestMCPHangingServerTimesOut(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	dir := t.TempDir()
	toolsPath, data := filepath.Join(dir, "tools.json"), filepath.Join(dir, "data")
	file := fmt.Sprintf(`{"version": 1, "tools": [], "mcp_servers": [{
	  "name": "every", "command": %q, "args": [%q], "env": {"EVERY_TOKEN": "{{env \"PATH\"}}-tok-9f8e7d"},
	  "tools": {"trigger-long-running-operation": {"effect": "at_most_once", "timeout": "1s"}}}]}`, p.Node, p.Everything)
	if err := os.WriteFile(toolsPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	plan := `{"goal": "wait", "actions": [{"id": "w", "tool": "every.trigger-long-running-operation", "args": {"duration": 60, "steps": 2}}]}`
	r := stepInproc(t, stepRequestJSON(t, "mcp-hang", []byte(plan), "all"), "--data", data, "--tools", toolsPath)
	wantCode(t, r, exitPaused)
	d := doc(t, r)
	if a := d.action("w"); a.Status != "needs_review" || !strings.Contains(a.Error, "deadline") {
		t.Fatalf("hung call: %s", r)
	}
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	evs, err := l.Events(context.Background(), "mcp-hang", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
		if strings.Contains(string(e.Data), "tok-9f8e7d") {
			t.Errorf("event %s shows the server's secret: %s", e.Type, e.Data)
		}
	}
	joined := strings.Join(types, " ")
	if !strings.Contains(joined, "action.needs_review") || !strings.Contains(joined, "run.paused") {
		t.Errorf("events %v lack the needs_review and the pause", types)
	}
}
