package mcptool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
	"github.com/docketrun/docket/tools/toolsfile"
)

// memoryFile is a tools file using server-memory: create_entities is
// classified lookup (repeating it with the same names creates nothing, but the
// server does not say so), found with open_nodes by the entity's name.
const memoryFile = `{
  "version": 1,
  "tools": [],
  "mcp_servers": [{
    "name": "memory",
    "command": %q,
    "args": [%q],
    "env": {"MEMORY_FILE_PATH": %q},
    "trust_annotations": %v,
    "tools": {
      "create_entities": {
        "effect": "lookup", "timeout": "5s", "output": "/entities",
        "lookup": {"tool": "open_nodes", "args": {"names": ["${input.entities.0.name}"]}, "found": "nonempty", "output": "/entities"}
      },
      "delete_entities": {"effect": "at_most_once"}
    }
  }]
}`

type bundle struct {
	paths  mcptest.Paths
	memory string // the memory server's graph file
	set    *Set
	reg    *tools.Registry
}

func setup(t *testing.T, trust bool) *bundle {
	t.Helper()
	b := &bundle{paths: mcptest.Servers(t), memory: filepath.Join(t.TempDir(), "graph.jsonl")}
	f, err := httptool.Parse([]byte(fmt.Sprintf(memoryFile, b.paths.Node, b.paths.Memory, b.memory, trust)), nil)
	if err != nil {
		t.Fatalf("parsing the tools file: %v", err)
	}
	b.set, err = Connect(context.Background(), f.MCPServers, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.set.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if b.reg, err = tools.NewRegistry(b.set.Tools()...); err != nil {
		t.Fatalf("registry: %v", err)
	}
	return b
}

func (b *bundle) tool(t *testing.T, name string) tools.Tool {
	t.Helper()
	tl, ok := b.reg.Get(name)
	if !ok {
		t.Fatalf("tool %q not registered; have %v", name, b.reg.Names())
	}
	return tl
}

func (b *bundle) call(t *testing.T, name, args string) (json.RawMessage, error) {
	t.Helper()
	return b.tool(t, name).Call(context.Background(), tools.Call{Key: "dk1_test", RunID: "r", Action: "a1", Attempt: 1, Args: json.RawMessage(args)})
}

func entity(name string) string {
	return fmt.Sprintf(`{"entities":[{"name":%q,"entityType":"person","observations":["met at the test"]}]}`, name)
}

// graphNames reads the graph with the server's own read_graph tool.
func (b *bundle) graphNames(t *testing.T) []string {
	t.Helper()
	out, err := b.call(t, "memory.read_graph", `{}`)
	if err != nil {
		t.Fatalf("read_graph: %v", err)
	}
	var g struct {
		Entities []struct{ Name string } `json:"entities"`
	}
	if err := json.Unmarshal(out, &g); err != nil {
		t.Fatalf("read_graph output %s: %v", out, err)
	}
	var names []string
	for _, e := range g.Entities {
		names = append(names, e.Name)
	}
	return names
}

func TestClasses(t *testing.T) {
	t.Parallel()
	for _, trust := range []bool{false, true} {
		t.Run(fmt.Sprintf("trust=%v", trust), func(t *testing.T) {
			t.Parallel()
			b := setup(t, trust)
			want := map[string]tools.Class{
				"memory.create_entities":  tools.Lookup,     // the file
				"memory.delete_entities":  tools.AtMostOnce, // the file, although the server says idempotentHint
				"memory.add_observations": tools.AtMostOnce,
				"memory.read_graph":       tools.AtMostOnce,
				"memory.open_nodes":       tools.AtMostOnce,
			}
			if trust {
				want["memory.read_graph"] = tools.ReadOnly // readOnlyHint, trusted
				want["memory.open_nodes"] = tools.ReadOnly
			}
			for name, class := range want {
				if got := b.tool(t, name).Spec().Class; got != class {
					t.Errorf("%s: class %s, want %s (why: %s)", name, got, class, toolOf(b.tool(t, name)).Why)
				}
			}
			if _, ok := b.tool(t, "memory.create_entities").(tools.Looker); !ok {
				t.Error("create_entities declares a lookup but is not a tools.Looker")
			}
			if _, ok := b.tool(t, "memory.read_graph").(tools.Looker); ok {
				t.Error("read_graph declares no lookup but is a tools.Looker")
			}
		})
	}
}

func toolOf(tl tools.Tool) *Tool {
	if lt, ok := tl.(*LookupTool); ok {
		return lt.Tool
	}
	return tl.(*Tool)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	yes := true
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	idem := &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes}
	none := &mcp.ToolAnnotations{}
	file := func(c tools.Class) toolsfile.MCPTool { return toolsfile.MCPTool{Effect: c} }
	for _, c := range []struct {
		name       string
		trust      bool
		ft         toolsfile.MCPTool
		classified bool
		a          *mcp.ToolAnnotations
		want       tools.Class
	}{
		{"untrusted readOnly", false, toolsfile.MCPTool{}, false, ro, tools.AtMostOnce},
		{"untrusted idempotent", false, toolsfile.MCPTool{}, false, idem, tools.AtMostOnce},
		{"trusted readOnly", true, toolsfile.MCPTool{}, false, ro, tools.ReadOnly},
		{"trusted idempotent", true, toolsfile.MCPTool{}, false, idem, tools.Idempotent},
		{"trusted, no hints", true, toolsfile.MCPTool{}, false, none, tools.AtMostOnce},
		{"trusted, no annotations", true, toolsfile.MCPTool{}, false, nil, tools.AtMostOnce},
		{"file wins over trusted readOnly", true, file(tools.AtMostOnce), true, ro, tools.AtMostOnce},
		{"file keyed, untrusted readOnly", false, file(tools.Keyed), true, ro, tools.Keyed},
		{"file idempotent", false, file(tools.Idempotent), true, none, tools.Idempotent},
	} {
		if got, _ := classify(c.trust, c.ft, c.classified, c.a); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestCallLookupAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ctx := context.Background()
	create := b.tool(t, "memory.create_entities").(tools.Looker)
	call := tools.Call{Key: "dk1_x", Args: json.RawMessage(entity("Ada"))}

	if _, found, err := create.Lookup(ctx, call); err != nil || found {
		t.Fatalf("lookup before the write: found=%v err=%v, want not found", found, err)
	}
	out, err := b.call(t, "memory.create_entities", entity("Ada"))
	if err != nil {
		t.Fatal(err)
	}
	found, ok, err := create.Lookup(ctx, call)
	if err != nil || !ok {
		t.Fatalf("lookup after the write: found=%v err=%v", ok, err)
	}
	if !jsonEqual(t, out, found) {
		t.Errorf("the call recorded %s, the lookup %s: both paths must record the same shape", out, found)
	}

	// isError: the tool ran and said it failed.
	_, err = b.call(t, "memory.add_observations", `{"observations":[{"entityName":"Nobody","contents":["x"]}]}`)
	if o, _ := tools.Classify(err); err == nil || o != tools.Definite || !strings.Contains(err.Error(), "Nobody not found") {
		t.Errorf("isError result: err=%v outcome=%v, want a definite error quoting the tool", err, o)
	}
	// Arguments the server refuses.
	_, err = b.call(t, "memory.open_nodes", `{"names":5}`)
	if o, _ := tools.Classify(err); err == nil || o != tools.Definite {
		t.Errorf("invalid arguments: err=%v outcome=%v, want definite", err, o)
	}
	// A tool the server does not have (protocol-level refusal).
	_, err = toolOf(b.tool(t, "memory.open_nodes")).srv.callTool(ctx, "no_such_tool", json.RawMessage(`{}`), "k")
	if o, _ := tools.Classify(err); err == nil || o != tools.Definite {
		t.Errorf("unknown tool: err=%v outcome=%v, want definite", err, o)
	}
	if got := b.graphNames(t); len(got) != 1 || got[0] != "Ada" {
		t.Errorf("graph holds %v, want [Ada]", got)
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestServerKilledBetweenCalls: the server process dies (SIGKILL); the next
// call starts a new one, which reads the same graph file.
func TestServerKilledBetweenCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	if _, err := b.call(t, "memory.create_entities", entity("Grace")); err != nil {
		t.Fatal(err)
	}
	srv := toolOf(b.tool(t, "memory.read_graph")).srv
	first := killServer(t, srv)
	if got := b.graphNames(t); len(got) != 1 || got[0] != "Grace" {
		t.Fatalf("after the restart the graph holds %v, want [Grace]", got)
	}
	srv.mu.Lock()
	second := srv.sess
	srv.mu.Unlock()
	if second == nil || second == first || second.cmd.Process.Pid == first.cmd.Process.Pid {
		t.Fatal("the call after the kill did not start a new server process")
	}
}

// killServer SIGKILLs the server's current process and waits until the
// session has noticed.
func killServer(t *testing.T, srv *server) *session {
	t.Helper()
	srv.mu.Lock()
	sess := srv.sess
	srv.mu.Unlock()
	if sess == nil || sess.cmd == nil {
		t.Fatal("no live local session")
	}
	if err := sess.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not notice that its server was killed")
	}
	return sess
}

// everything connects server-everything over stdio.
func everything(t *testing.T, trust bool) (*Set, *tools.Registry) {
	t.Helper()
	p := mcptest.Servers(t)
	set, err := Connect(context.Background(), []toolsfile.MCPServer{{Name: "every", Command: p.Node, Args: []string{p.Everything}, TrustAnnotations: trust}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	reg, err := tools.NewRegistry(set.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	return set, reg
}

// TestServerKilledDuringCall: the process dies while a call is in flight:
// the outcome is unknown, and the next call reconnects.
func TestServerKilledDuringCall(t *testing.T) {
	t.Parallel()
	_, reg := everything(t, true)
	long, _ := reg.Get("every.trigger-long-running-operation")
	srv := toolOf(long).srv
	progressed := make(chan struct{}, 100)
	srv.progress = func() { progressed <- struct{}{} }
	errc := make(chan error, 1)
	go func() {
		_, err := long.Call(context.Background(), tools.Call{Key: "k", Args: json.RawMessage(`{"duration":60,"steps":120}`)})
		errc <- err
	}()
	select {
	case <-progressed: // the call is running on the server
	case err := <-errc:
		t.Fatalf("the call ended before the kill: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no progress from the long-running operation")
	}
	killServer(t, srv)
	err := <-errc
	if o, _ := tools.Classify(err); err == nil || o != tools.Unknown {
		t.Fatalf("killed during the call: err=%v outcome=%v, want unknown", err, o)
	}
	echo, _ := reg.Get("every.echo")
	out, err := echo.Call(context.Background(), tools.Call{Key: "k2", Args: json.RawMessage(`{"message":"back"}`)})
	if err != nil || !strings.Contains(string(out), "back") {
		t.Fatalf("after the kill: out=%s err=%v", out, err)
	}
}

// TestHangTimesOut: a call the server does not answer in time ends with an
// unknown outcome when its context ends, and the hung session is replaced.
func TestHangTimesOut(t *testing.T) {
	t.Parallel()
	_, reg := everything(t, true)
	long, _ := reg.Get("every.trigger-long-running-operation")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := long.Call(ctx, tools.Call{Key: "k", Args: json.RawMessage(`{"duration":60,"steps":2}`)})
	if o, _ := tools.Classify(err); err == nil || o != tools.Unknown || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("hung call: err=%v outcome=%v, want unknown with the deadline", err, o)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Fatalf("the call took %v to give up", d)
	}
	srv := toolOf(long).srv
	srv.mu.Lock()
	dropped := srv.sess == nil
	srv.mu.Unlock()
	if !dropped {
		t.Error("the session of the timed-out call was kept")
	}
	echo, _ := reg.Get("every.echo")
	if _, err := echo.Call(context.Background(), tools.Call{Key: "k2", Args: json.RawMessage(`{"message":"x"}`)}); err != nil {
		t.Fatalf("after the timeout: %v", err)
	}
	// A context that ended before the call: nothing was sent.
	_, err = echo.Call(ctx, tools.Call{Key: "k3", Args: json.RawMessage(`{"message":"x"}`)})
	if o, _ := tools.Classify(err); o != tools.NotSentOutcome {
		t.Errorf("ended context: err=%v outcome=%v, want not sent", err, o)
	}
}

func TestExactNumbersAndStructuredContent(t *testing.T) {
	t.Parallel()
	_, reg := everything(t, false)
	// server-everything computes in float64 (9007199254740993 becomes ...992),
	// but what it wrote is recorded exactly: echo returns the text as sent.
	echo, _ := reg.Get("every.echo")
	out, err := echo.Call(context.Background(), tools.Call{Key: "k", Args: json.RawMessage(`{"message":"n=9007199254740993"}`)})
	if err != nil || !strings.Contains(string(out), "n=9007199254740993") {
		t.Fatalf("echo: %s %v", out, err)
	}
	sc, _ := reg.Get("every.get-structured-content")
	out, err = sc.Call(context.Background(), tools.Call{Key: "k", Args: json.RawMessage(`{"location":"New York"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil || v["temperature"] == nil {
		t.Fatalf("structured content not recorded as the output: %s (%v)", out, err)
	}
	if err := reg.ValidateOutput("every.get-structured-content", out); err != nil {
		t.Errorf("the output does not fit the tool's own output schema: %v", err)
	}
	if got := string(mustRaw(t, `{"content":[{"type":"text","text":"a"}]}`)); got != `{"content":[{"type":"text","text":"a"}]}` {
		t.Errorf("recorded: %s", got)
	}
}

func mustRaw(t *testing.T, result string) json.RawMessage {
	t.Helper()
	out, err := recorded(json.RawMessage(result))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConnectErrors(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	ctx := context.Background()
	_, err := Connect(ctx, []toolsfile.MCPServer{{Name: "gone", Command: filepath.Join(t.TempDir(), "no-such-server")}}, nil)
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.Server != "gone" {
		t.Errorf("missing command: %v, want a ConnectError naming the server", err)
	}
	// A server that exits at once, saying why on stderr (secrets redacted).
	_, err = Connect(ctx, []toolsfile.MCPServer{{
		Name: "dies", Command: "/bin/sh", Args: []string{"-c", `echo "bad token $TOKEN" >&2; exit 3`},
		Env: map[string]string{"TOKEN": `{{env "SECRET_TOKEN"}}`},
	}}, &Options{Env: func(string) string { return "s3cr3t-value" }})
	if err == nil || !strings.Contains(err.Error(), "bad token [redacted]") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("dying server: %v, want its stderr quoted with the secret redacted", err)
	}
	// The file classifies a tool the server does not have.
	_, err = Connect(ctx, []toolsfile.MCPServer{{
		Name: "memory", Command: p.Node, Args: []string{p.Memory},
		Env:   map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "g.jsonl")},
		Tools: map[string]toolsfile.MCPTool{"create_entitys": {Effect: tools.AtMostOnce}},
	}}, nil)
	if err == nil || !strings.Contains(err.Error(), `"create_entitys"`) {
		t.Errorf("misspelled tool: %v, want it named", err)
	}
}

func TestToolsFileLookupChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, tool, want string }{
		{"lookup needs lookup class", `{"effect": "at_most_once", "lookup": {"tool": "open_nodes", "found": "nonempty"}}`, "allowed only with effect"},
		{"lookup class needs lookup", `{"effect": "lookup"}`, "needs a lookup"},
		{"found rule", `{"effect": "lookup", "lookup": {"tool": "open_nodes", "found": "status_200"}}`, `must be "nonempty"`},
		{"no output refs", `{"effect": "lookup", "lookup": {"tool": "open_nodes", "found": "nonempty", "args": {"x": "${output.id}"}}}`, "only ${input"},
		{"bad pointer", `{"effect": "idempotent", "output": "entities"}`, "bad JSON pointer"},
	} {
		data := `{"version": 1, "tools": [], "mcp_servers": [{"name": "m", "command": "x", "tools": {"t": ` + c.tool + `}}]}`
		_, err := httptool.Parse([]byte(data), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	ok := `{"version": 1, "tools": [], "mcp_servers": [{"name": "m", "command": "x", "tools": {"t": {"effect": "keyed", "output": "/a", "lookup": {"tool": "find", "args": {"q": "${input.name}"}, "found": "nonempty", "output": "/items"}}}}]}`
	f, err := httptool.Parse([]byte(ok), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := f.MCPServers[0].Tools["t"].Lookup
	if l == nil || l.Tool != "find" || l.Output != "/items" || f.MCPServers[0].Tools["t"].Output != "/a" {
		t.Errorf("parsed lookup: %+v", l)
	}
}

// TestStreamableHTTP reaches server-everything over streamable HTTP through
// a proxy that requires the header the tools file renders from the
// environment; the secret never appears in errors.
func TestStreamableHTTP(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, p.Node, p.Everything, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				once.Do(func() { close(listening) })
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not start listening")
	}
	target, _ := url.Parse("http://127.0.0.1:" + port)
	const secret = "Bearer tok-4242-secret"
	var mu sync.Mutex
	var seen, refused int
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Header.Get("Authorization") != secret {
			refused++
			mu.Unlock()
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		seen++
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	env := func(k string) string {
		if k == "EVERY_TOKEN" {
			return "tok-4242-secret"
		}
		return ""
	}
	set, err := Connect(context.Background(), []toolsfile.MCPServer{{
		Name: "remote", URL: proxy.URL + "/mcp",
		Headers: map[string]string{"Authorization": `Bearer {{env "EVERY_TOKEN"}}`},
	}}, &Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	reg, err := tools.NewRegistry(set.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	echo, ok := reg.Get("remote.echo")
	if !ok {
		t.Fatalf("no remote.echo in %v", reg.Names())
	}
	out, err := echo.Call(context.Background(), tools.Call{Key: "k", Args: json.RawMessage(`{"message":"over http"}`)})
	if err != nil || !strings.Contains(string(out), "over http") {
		t.Fatalf("echo over HTTP: %s %v", out, err)
	}
	mu.Lock()
	if seen == 0 || refused != 0 {
		t.Errorf("proxy saw %d requests with the header and refused %d", seen, refused)
	}
	mu.Unlock()
	if s := fmt.Sprint(toolOf(echo).LogValue()); strings.Contains(s, "tok-4242") {
		t.Errorf("log value shows the header: %s", s)
	}
	// Without the header the server is refused: a connect error without the secret.
	_, err = Connect(context.Background(), []toolsfile.MCPServer{{Name: "remote", URL: proxy.URL + "/mcp",
		Headers: map[string]string{"Authorization": `Bearer {{env "EVERY_TOKEN"}}`}}},
		&Options{Env: func(string) string { return "wrong-token-value" }})
	if err == nil || strings.Contains(err.Error(), "wrong-token-value") {
		t.Errorf("refused connect: %v", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestReconnectFailsNotSent: the server died and cannot be started again:
// the call fails before anything was sent, which is safe to retry for every
// class.
func TestReconnectFailsNotSent(t *testing.T) {
	t.Parallel()
	p := mcptest.Servers(t)
	script := filepath.Join(t.TempDir(), "server.sh")
	if err := os.WriteFile(script, []byte("exec \"$NODE\" \"$SERVER\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := Connect(context.Background(), []toolsfile.MCPServer{{
		Name: "memory", Command: "/bin/sh", Args: []string{script},
		Env: map[string]string{"NODE": p.Node, "SERVER": p.Memory, "MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "g.jsonl")},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var rg tools.Tool
	for _, tl := range set.Tools() {
		if tl.Spec().Name == "memory.read_graph" {
			rg = tl
		}
	}
	if err := os.Remove(script); err != nil {
		t.Fatal(err)
	}
	killServer(t, toolOf(rg).srv)
	_, err = rg.Call(context.Background(), tools.Call{Key: "k", Args: json.RawMessage(`{}`)})
	if o, _ := tools.Classify(err); err == nil || o != tools.NotSentOutcome || !strings.Contains(err.Error(), "server.sh") {
		t.Fatalf("reconnect to a server that cannot start: err=%v outcome=%v, want not sent, quoting its stderr", err, o)
	}
}
