package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor/mcpserve"
	"github.com/docketrun/docket/executor/mcpserve/mcpservetest"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
)

// mcpChild is `docket mcp` over stdio as a child process (this test binary),
// with the go-sdk client connected to it, as a desktop assistant runs it.
type mcpChild struct {
	cs     *mcp.ClientSession
	cmd    *exec.Cmd
	stderr *markerWriter
}

// markerWriter collects the child's stderr and reports the crash marker.
type markerWriter struct {
	mu     sync.Mutex
	buf    strings.Builder
	marked chan struct{}
	once   sync.Once
}

func (w *markerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), crashMarker) {
		w.once.Do(func() { close(w.marked) })
	}
	return len(p), nil
}

func (w *markerWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startMCPChild starts docket mcp with args; crash ("POINT:ACTION") stops it
// at that executor hook (see crashHooks) for the test to SIGKILL.
func startMCPChild(t *testing.T, crash string, args ...string) *mcpChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), asDocketEnv+"=1", skewEnv+"="+testSkew.String())
	if crash != "" {
		cmd.Env = append(cmd.Env, crashAtEnv+"="+crash)
	}
	c := &mcpChild{cmd: cmd, stderr: &markerWriter{marked: make(chan struct{})}}
	cmd.Stderr = c.stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test-assistant", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connecting to docket mcp: %v\nstderr: %s", err, c.stderr)
	}
	c.cs = cs
	t.Cleanup(func() { cs.Close() })
	return c
}

// callAsync calls a tool and delivers its result (or error) on the channel.
func (c *mcpChild) callAsync(tool string, args any, meta mcp.Meta) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
		done <- err
	}()
	return done
}

// kill waits for the crash marker, then SIGKILLs the child.
func (c *mcpChild) kill(t *testing.T, call <-chan error) {
	t.Helper()
	select {
	case <-c.stderr.marked:
	case err := <-call:
		t.Fatalf("the call ended before the crash point: %v\nstderr: %s", err, c.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("docket mcp never reached its crash point\nstderr: %s", c.stderr)
	}
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-call; err == nil {
		t.Fatal("the call in flight when docket mcp was killed returned no error")
	}
	c.cs.Close()
}

func (c *mcpChild) call(t *testing.T, tool string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("call %s: %v\nstderr: %s", tool, err, c.stderr)
	}
	return r
}

// serveMCP starts the MCP test world and `docket serve --mcp` with its tools.
func serveMCP(t *testing.T) (*mcpservetest.World, *served) {
	t.Helper()
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return w, startServe(t, nil, "--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--mcp")
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func callAction(t *testing.T, tool string, args any) string {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mcpserve.CallHash(tool, raw)
	if err != nil {
		t.Fatal(err)
	}
	return "c_" + h[:16]
}

// docket mcp is SIGKILLed after the provider acted and before docket
// recorded it; the assistant starts it again and repeats the call: a keyed
// charge is sent again with the same key (one charge), an at-most-once
// email is not sent again (a person is asked). The repeat is recognised by
// the session docket mcp is started with (--session) and by the run the
// client names (_meta).
func TestMCPStdioKilledMidCallAndRestarted(t *testing.T) {
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--approve", "all", "--session", "desk-1", "--wait", "500ms"}

	charge := map[string]any{"customer": "acme", "amount": 1200}
	c := startMCPChild(t, "after_call:"+callAction(t, "charge", charge), args...)
	c.kill(t, c.callAsync("charge", charge, nil))
	if e := w.Effects(); e.Charges != 1 {
		t.Fatalf("charges %d after the crash, want 1 (the provider acted)", e.Charges)
	}
	c = startMCPChild(t, "", args...)
	r := c.call(t, "charge", charge, nil)
	if r.IsError || !strings.Contains(resultText(r), `"id":"ch_1"`) {
		t.Fatalf("repeated charge: %v %s", r.IsError, resultText(r))
	}
	if e := w.Effects(); e.Charges != 1 || e.ChargeRequests != 2 {
		t.Errorf("effects %+v: want 1 charge, 2 requests (the same key again)", e)
	}
	c.cs.Close()

	email := map[string]any{"to": "ada@example.com", "subject": "welcome"}
	meta := mcp.Meta{mcpserve.MetaRunID: "agent-42"}
	c = startMCPChild(t, "after_call:"+callAction(t, "send_email", email), args...)
	c.kill(t, c.callAsync("send_email", email, meta))
	c = startMCPChild(t, "", args...)
	r = c.call(t, "send_email", email, meta)
	if !strings.Contains(resultText(r), "may or may not have happened: a person is checking") {
		t.Fatalf("repeated email after a crash: %v %s", r.IsError, resultText(r))
	}
	r = c.call(t, "send_email", email, meta)
	if !strings.Contains(resultText(r), "may or may not have happened") {
		t.Fatalf("repeated again: %s", resultText(r))
	}
	if e := w.Effects(); e.EmailRequests != 1 || e.Emails["ada@example.com"] != 1 {
		t.Errorf("effects %+v: want one email request (at most once)", e)
	}
}

// The same against the real server-memory behind docket mcp: create_entities
// is a lookup tool; after the kill, the repeat finds the entity with
// open_nodes and never creates it again.
func TestMCPStdioKilledMidCallMemoryServer(t *testing.T) {
	b := setupMemory(t)
	args := []string{"--tools", b.tools, "--data", b.data, "--approve", "all", "--session", "desk-2"}
	ent := map[string]any{"entities": []any{map[string]any{"name": "Ada Lovelace", "entityType": "person", "observations": []string{"pioneer"}}}}
	c := startMCPChild(t, "after_call:"+callAction(t, "memory.create_entities", ent), args...)
	c.kill(t, c.callAsync("memory_create_entities", ent, nil))
	c = startMCPChild(t, "", args...)
	r := c.call(t, "memory_create_entities", ent, nil)
	if r.IsError || !strings.Contains(resultText(r), "Ada Lovelace") {
		t.Fatalf("repeat after the crash: %v %s", r.IsError, resultText(r))
	}
	if n := b.createCalls(t)["Ada Lovelace"]; n != 1 {
		t.Errorf("create_entities reached the server %d times, want 1", n)
	}
	// A second identical call in the session: the first outcome, no call.
	if r := c.call(t, "memory_create_entities", ent, nil); r.IsError {
		t.Fatal(resultText(r))
	}
	if n := b.createCalls(t)["Ada Lovelace"]; n != 1 {
		t.Errorf("create_entities reached the server %d times after a repeat, want 1", n)
	}
}

// bearer adds the token to every request of an MCP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// docket serve --mcp: an MCP client's call that needs approval stays open
// (with progress) while a person approves it through the API of the same
// service; the open call returns the output. /mcp needs a token.
func TestServeMCPApprovalWhileCallWaits(t *testing.T) {
	w, s := serveMCP(t)
	if s.token == "" {
		t.Fatalf("no token printed: %q", s.lines)
	}
	if !strings.Contains(strings.Join(s.lines, "\n"), s.base+"/mcp") {
		t.Errorf("serve does not say where MCP is: %q", s.lines)
	}
	resp, err := http.Post(s.base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/mcp without a token: %d, want 401", resp.StatusCode)
	}

	client := mcptest.NewProgressClient("agent")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.base + "/mcp", HTTPClient: &http.Client{Transport: bearer{s.token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	email := map[string]any{"to": "grace@example.com", "subject": "hello"}
	p := &mcp.CallToolParams{Name: "send_email", Arguments: email, Meta: mcp.Meta{mcpserve.MetaRunID: "desk"}}
	msg, res := client.CallWaiting(t, ctx, cs, p)
	if !strings.Contains(msg, "approval") || !strings.Contains(msg, s.base) {
		t.Errorf("progress %q: want approval and the page's address", msg)
	}
	runID := "desk." + callAction(t, "send_email", email)
	if w.Effects().EmailRequests != 0 {
		t.Fatal("the email was sent before the approval")
	}
	if code := s.post(t, "/v1/runs/"+runID+"/approve", map[string]any{"all": true}, nil); code != http.StatusOK {
		t.Fatalf("approve through the API: %d", code)
	}
	r := <-res
	if r == nil || r.IsError || !strings.Contains(resultText(r), `"sent_to":"grace@example.com"`) {
		t.Fatalf("the waiting call after approval: %+v", r)
	}
	if e := w.Effects(); e.EmailRequests != 1 {
		t.Errorf("email requests %d, want 1", e.EmailRequests)
	}
}

// The official TypeScript SDK's client (installed with the reference
// servers, pinned by their package-lock.json) drives docket mcp over stdio:
// annotations arrive, an identical call returns the first outcome, a keyed
// call is once by its key, an at-most-once call says it waits for a person.
func TestMCPNodeClient(t *testing.T) {
	p := mcptest.Servers(t)
	modules := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(p.Memory)))) // .../node_modules
	sdk := filepath.Join(modules, "@modelcontextprotocol", "sdk")
	if _, err := os.Stat(filepath.Join(sdk, "dist", "esm", "client", "stdio.js")); err != nil {
		t.Fatalf("the TypeScript MCP SDK is not where the pinned servers' lock file puts it: %v", err)
	}
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "mcpnode", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Node, script, sdk, os.Args[0], "mcp", "--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--wait", "0")
	cmd.Env = append(os.Environ(), asDocketEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\nstderr: %s", err, stderr.String())
	}
	type result struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	var got struct {
		Tools                                map[string]map[string]any `json:"tools"`
		First, Repeat, Keyed1, Keyed2, Email result
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node client output %q: %v", out, err)
	}
	txt := func(r result) string {
		if len(r.Content) == 0 {
			return ""
		}
		return r.Content[0].Text
	}
	if a := got.Tools["send_email"]; a["readOnlyHint"] != false || a["idempotentHint"] != false || a["destructiveHint"] != true {
		t.Errorf("send_email annotations seen by the Node client: %v", a)
	}
	if a := got.Tools["catalog"]; a["readOnlyHint"] != true {
		t.Errorf("catalog annotations seen by the Node client: %v", a)
	}
	if got.First.IsError || txt(got.First) != txt(got.Repeat) || !strings.Contains(txt(got.First), `"ch_`) {
		t.Errorf("identical calls: %q then %q", txt(got.First), txt(got.Repeat))
	}
	if got.Keyed1.IsError || txt(got.Keyed1) != txt(got.Keyed2) {
		t.Errorf("keyed calls: %q then %q", txt(got.Keyed1), txt(got.Keyed2))
	}
	if got.Email.IsError || !strings.HasPrefix(txt(got.Email), "WAITING FOR A PERSON") {
		t.Errorf("email under policy safe: %v %q", got.Email.IsError, txt(got.Email))
	}
	if e := w.Effects(); e.Charges != 2 || e.ChargeRequests != 2 || e.EmailRequests != 0 {
		t.Errorf("effects %+v: want 2 charges from 2 requests, no email", e)
	}
}

// lineWriter collects what is written and reports the first line that
// contains want.
type lineWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	want  string
	found chan string
	once  sync.Once
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for _, line := range strings.Split(w.buf.String(), "\n") {
		if strings.Contains(line, w.want) {
			w.once.Do(func() { w.found <- line })
		}
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// docket mcp over stdio with --listen: the review page and API are served
// on the side, so a person approves a waiting call while it stays open.
func TestMCPStdioListenApproveThroughAPI(t *testing.T) {
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "listen-test-token-0123456789"
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &lineWriter{want: "review page and API at ", found: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		env := testEnv(outW, stderr)
		env.Stdin = inR
		done <- runEnv(ctx, []string{"mcp", "--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--token", token}, env)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("docket mcp: %v", err)
		}
	})
	var base string
	select {
	case line := <-stderr.found:
		_, base, _ = strings.Cut(line, "review page and API at ")
		base = strings.TrimSuffix(strings.TrimSpace(base), "/")
	case err := <-done:
		t.Fatalf("docket mcp ended: %v\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("docket mcp never said where its page is\n%s", stderr)
	}
	client := mcptest.NewProgressClient("desk")
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	cs, err := client.Connect(cctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	email := map[string]any{"to": "linus@example.com", "subject": "hello"}
	p := &mcp.CallToolParams{Name: "send_email", Arguments: email}
	msg, res := client.CallWaiting(t, cctx, cs, p)
	if !strings.Contains(msg, base) {
		t.Errorf("progress %q does not name the page %s", msg, base)
	}
	_, runID, _ := strings.Cut(msg, "(run ")
	runID, _, _ = strings.Cut(runID, ",")
	s := &served{base: base, token: token}
	if code := s.post(t, "/v1/runs/"+runID+"/approve", map[string]any{"all": true}, nil); code != http.StatusOK {
		t.Fatalf("approve run %q through the API: %d", runID, code)
	}
	r := <-res
	if r == nil || r.IsError || !strings.Contains(resultText(r), `"sent_to":"linus@example.com"`) {
		t.Fatalf("the waiting call after approval: %+v", r)
	}
	if e := w.Effects(); e.EmailRequests != 1 {
		t.Errorf("email requests %d, want 1", e.EmailRequests)
	}
	cs.Close()
}

// docket mcp --addr: MCP over streamable HTTP at /mcp (a token needed), the
// page and the API beside it.
func TestMCPOverHTTPWithAddr(t *testing.T) {
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "addr-test-token-0123456789"
	stdout := &lineWriter{want: "MCP (streamable HTTP) at ", found: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runEnv(ctx, []string{"mcp", "--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--addr", "127.0.0.1:0", "--token", token, "--approve", "all"}, testEnv(stdout, io.Discard))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("docket mcp: %v", err)
		}
	})
	var endpoint string
	select {
	case line := <-stdout.found:
		_, endpoint, _ = strings.Cut(line, "MCP (streamable HTTP) at ")
		endpoint, _, _ = strings.Cut(endpoint, ",")
	case err := <-done:
		t.Fatalf("docket mcp ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("docket mcp never said where it listens: %s", stdout)
	}
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("%s without a token: %d, want 401", endpoint, resp.StatusCode)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	cs, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"name": "tz", "value": "UTC"}
	for range 2 {
		r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "set_setting", Arguments: args})
		if err != nil || r.IsError {
			t.Fatalf("set_setting: %v %+v", err, r)
		}
	}
	if e := w.Effects(); e.SettingPuts != 1 || e.SettingReqs != 1 {
		t.Errorf("setting writes %d from %d requests, want 1 from 1 (the repeat returns the first outcome)", e.SettingPuts, e.SettingReqs)
	}
}

// docket serve --mcp --tokens FILE: at /mcp each tool needs the scope the
// API needs for the same thing. A submit-only token proposes a plan, but
// docket_run_status and docket_waiting refuse it (tool errors naming read),
// as GET /v1/runs/{id} does; a token with read reads the run.
func TestServeMCPToolScopes(t *testing.T) {
	t.Parallel()
	const bot, agent = "bot-token-0123456789abcdef", "agent-token-0123456789abc"
	w := mcpservetest.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, mcpservetest.ToolsFile(w.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(bot))
	tokensPath := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokensPath, []byte(`{"version": 1, "tokens": [
  {"name": "bot", "scopes": ["submit"], "sha256": "`+hex.EncodeToString(sum[:])+`"},
  {"name": "agent", "scopes": ["read", "submit"], "env": "AGENT_TOKEN"}
]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, map[string]string{"AGENT_TOKEN": agent}, "--tools", toolsPath, "--data", filepath.Join(dir, "data"), "--tokens", tokensPath, "--mcp")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(tok string) *mcp.ClientSession {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: s.base + "/mcp", HTTPClient: &http.Client{Transport: bearer{tok}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	b := connect(bot)
	const goal = "mail grace a hello"
	r := call(b, mcpserve.ToolProposePlan, map[string]any{"goal": goal, "run_id": "proposed",
		"actions": []any{map[string]any{"id": "mail", "tool": "send_email", "args": map[string]any{"to": "grace@example.com", "subject": "hello"}}}})
	if r.IsError {
		t.Fatalf("docket_propose_plan with submit: %s", resultText(r))
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/runs/proposed", nil)
	req.Header.Set("Authorization", "Bearer "+bot)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET /v1/runs/proposed with the submit-only token: %d, want 403", resp.StatusCode)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{{mcpserve.ToolRunStatus, map[string]any{"run_id": "proposed"}}, {mcpserve.ToolWaiting, map[string]any{}}} {
		r := call(b, c.tool, c.args)
		if text := resultText(r); !r.IsError || strings.Contains(text, goal) || !strings.Contains(text, "read scope") {
			t.Errorf("%s with the submit-only token: isError=%v %q, want a tool error naming read, without the run", c.tool, r.IsError, text)
		}
	}
	a := connect(agent)
	if r := call(a, mcpserve.ToolRunStatus, map[string]any{"run_id": "proposed"}); r.IsError || !strings.Contains(resultText(r), goal) {
		t.Errorf("docket_run_status with read: isError=%v %q", r.IsError, resultText(r))
	}
	if r := call(a, mcpserve.ToolWaiting, map[string]any{}); r.IsError || !strings.Contains(resultText(r), "proposed") {
		t.Errorf("docket_waiting with read: isError=%v %q", r.IsError, resultText(r))
	}
}
