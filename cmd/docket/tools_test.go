package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func toolsEnv(stdout, stderr *bytes.Buffer, vars map[string]string) Env {
	return Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr, Getenv: func(k string) string { return vars[k] }}
}

func TestToolsSchema(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := (&toolsCmd{env: toolsEnv(&out, &errb, nil)}).Run(context.Background(), []string{"schema"}); err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s["$schema"] == nil || s["title"] == nil {
		t.Fatalf("schema output: %v\n%s", err, out.String())
	}
}

func TestToolsCheck(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"CRM_URL": "https://crm.example.com", "CRM_TOKEN": "crm-secret-xyz",
		"PAY_URL": "https://pay.example.com", "PAY_KEY": "sk_secret_abc", "SMS_URL": "https://sms.example.com"}
	var out, errb bytes.Buffer
	cmd := &toolsCmd{env: toolsEnv(&out, &errb, vars)}
	if err := cmd.Run(context.Background(), []string{"check", "--tools", "../../tools/toolsfile/testdata/valid/crm.json"}); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"6 tools, 2 MCP servers",
		"charge ", "keyed", "key_ttl 24h0m0s, approve above amount 100, compensate refund",
		"create_contact", "lookup, visibility_lag 2s, compensate delete_contact",
		"send_sms", "at_most_once", "approval always",
		"MCP server files (command mcp-files", "files.write_file: idempotent",
		"tools hash sha256:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "crm-secret-xyz") || strings.Contains(got, "sk_secret_abc") {
		t.Errorf("a secret was printed:\n%s", got)
	}
}

func TestToolsCheckBadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.json")
	bad := `{"version":1,"tools":[
	  {"name":"a","effect":"sometimes","input_schema":{"type":"object"},"request":{"method":"GET","url":"https://x.example/{{.nope}}"}},
	  {"name":"b","effect":"lookup","input_schema":{"type":"object"},"request":{"method":"POST","url":"https://x.example/?k={{env \"MISSING_TOKEN\"}}"}}]}`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err := (&toolsCmd{env: toolsEnv(&out, &errb, nil)}).Run(context.Background(), []string{"check", "--tools", path})
	if code := exitCode(err); code != exitBad {
		t.Fatalf("exit %d: %v", code, err)
	}
	for _, want := range []string{`tool "a": effect: unknown effect "sometimes"`, `tool "a": request.url: template "https://x.example/{{.nope}}": the input schema has no field "nope"`,
		`tool "b": lookup: effect lookup needs a lookup block`, `tool "b": request.url: environment variable MISSING_TOKEN is not set`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestToolsUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"frobnicate"}, {"check"}, {"schema", "--tools", "x.json"}, {"check", "--tools", "/nonexistent/tools.json"}, {"check", "--bogus"}} {
		var out, errb bytes.Buffer
		err := (&toolsCmd{env: toolsEnv(&out, &errb, nil)}).Run(context.Background(), args)
		if code := exitCode(err); code != exitBad {
			t.Errorf("%v: exit %d (%v)", args, code, err)
		}
	}
}

// fakeAPI is a small API for tools-file tests: charges (keyed by the
// Idempotency-Key header, counted per path), mail, and contacts that can be
// searched by the note they were created with.
type fakeAPI struct {
	srv      *httptest.Server
	mu       sync.Mutex
	posts    map[string]int // requests that take effect, by path
	contacts []map[string]any
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	a := &fakeAPI{posts: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/contacts/search":
			found := []map[string]any{}
			for _, c := range a.contacts {
				if c["note"] == r.URL.Query().Get("note") {
					found = append(found, c)
				}
			}
			json.NewEncoder(w).Encode(map[string]any{"results": found})
		case r.Method == "POST" && r.URL.Path == "/contacts":
			var in map[string]any
			body, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(body, &in); err != nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return
			}
			a.posts[r.URL.Path]++
			c := map[string]any{"id": fmt.Sprintf("c%d", len(a.contacts)+1), "email": in["email"], "note": in["note"]}
			a.contacts = append(a.contacts, c)
			json.NewEncoder(w).Encode(map[string]any{"contact": c})
		case r.Method == "POST":
			a.posts[r.URL.Path]++
			fmt.Fprintf(w, `{"id":"%s-%d"}`, strings.Trim(r.URL.Path, "/"), a.posts[r.URL.Path])
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAPI) count(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.posts[path]
}

func writeFile(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestToolsChangeAcceptedOnce: changing a keyed tool's URL is a tools change
// (the resume is refused, exit 2, nothing sent); --accept-tools-change
// records the new tools on the run, so the next resume without the flag goes
// on, and the charge already made is not made again at the new URL.
func TestToolsChangeAcceptedOnce(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	dir := t.TempDir()
	toolsFile := func(chargePath string) string {
		return `{"version": 1, "tools": [
		  {"name": "charge", "effect": "keyed", "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
		   "request": {"method": "POST", "url": "` + api.srv.URL + chargePath + `"}, "key_header": "Idempotency-Key"},
		  {"name": "mail", "effect": "at_most_once", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
		   "request": {"method": "POST", "url": "` + api.srv.URL + `/mail"}}]}`
	}
	tools := writeFile(t, filepath.Join(dir, "tools.json"), toolsFile("/v1/charges"))
	planPath := writeFile(t, filepath.Join(dir, "plan.json"), `{"goal": "charge then mail", "actions": [
	  {"id": "charge", "tool": "charge", "args": {"amount": 5}},
	  {"id": "mail", "tool": "mail", "args": {"to": "a@example.com"}, "depends_on": ["charge"]}]}`)
	data := filepath.Join(dir, "data")
	args := []string{"run", "--data", data, "--tools", tools, "--plan", planPath}

	first := inproc(t, args...)
	wantCode(t, first, exitPaused) // the mail waits for a person
	runID := doc(t, first).RunID

	writeFile(t, tools, toolsFile("/v2/charges"))
	refused := inproc(t, args...)
	wantCode(t, refused, exitBad)
	if !strings.Contains(refused.stderr, "--accept-tools-change") {
		t.Fatalf("the refusal should say how to accept the change:\n%s", refused)
	}
	accepted := inproc(t, append(args, "--accept-tools-change")...)
	wantCode(t, accepted, exitPaused)
	again := inproc(t, args...)
	wantCode(t, again, exitPaused) // recorded: no need to accept again
	done := inproc(t, "approve", "--data", data, "--tools", tools, runID, "mail")
	wantCode(t, done, exitOK)
	if d := doc(t, done); d.Status != "completed" {
		t.Fatalf("after approving the mail: %+v", d)
	}
	if v1, v2, m := api.count("/v1/charges"), api.count("/v2/charges"), api.count("/mail"); v1 != 1 || v2 != 0 || m != 1 {
		t.Fatalf("charges v1 %d, v2 %d, mails %d: want 1, 0, 1", v1, v2, m)
	}
}

// TestLookupEmptyArrayAfterCrash: after a crash, a lookup whose search
// answers {"results": []} means "not found" whether its output pointer is
// "/results" or "/results/0", so the write goes out exactly once; when the
// write went out before the crash, the lookup finds it and nothing is sent
// again.
func TestLookupEmptyArrayAfterCrash(t *testing.T) {
	t.Parallel()
	for _, ptr := range []string{"/results", "/results/0"} {
		for _, point := range []string{"after_claim", "after_call"} {
			t.Run(strings.Trim(ptr, "/")+"_"+point, func(t *testing.T) {
				t.Parallel()
				api := newFakeAPI(t)
				dir := t.TempDir()
				tools := writeFile(t, filepath.Join(dir, "tools.json"), `{"version": 1, "tools": [
				  {"name": "mk", "effect": "lookup", "timeout": "1s",
				   "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}},
				   "request": {"method": "POST", "url": "`+api.srv.URL+`/contacts", "body": {"email": "{{.email}}", "note": "{{key}}"}},
				   "output": "/contact",
				   "lookup": {"method": "GET", "url": "`+api.srv.URL+`/contacts/search?note={{key}}", "found": "nonempty", "output": "`+ptr+`"}}]}`)
				planPath := writeFile(t, filepath.Join(dir, "plan.json"), `{"goal": "one contact", "actions": [
				  {"id": "mk", "tool": "mk", "args": {"email": "a@example.com"}}]}`)
				args := []string{"run", "--data", filepath.Join(dir, "data"), "--tools", tools, "--plan", planPath}
				if r := child(t, point+":mk", args...); !r.killed {
					t.Fatalf("never reached the crash point:\n%s", r)
				}
				resumed := inproc(t, args...)
				wantCode(t, resumed, exitOK)
				d := doc(t, resumed)
				if n := api.count("/contacts"); n != 1 {
					t.Fatalf("%d contacts created, want exactly 1\n%s", n, resumed)
				}
				var out struct{ ID string }
				if err := json.Unmarshal(d.action("mk").Output, &out); err != nil || out.ID != "c1" {
					t.Fatalf("recorded output %s (%v), want the contact c1", d.action("mk").Output, err)
				}
			})
		}
	}
}

// TestToolsCheckSecretsAndLookups: tools check warns about a credential typed
// into the file and never prints it, and says what each lookup will do.
func TestToolsCheckSecretsAndLookups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, "tools.json"), `{"version": 1, "tools": [
	  {"name": "mk", "effect": "lookup", "input_schema": {"type": "object"},
	   "request": {"method": "POST", "url": "https://crm.example.com/contacts",
	               "headers": {"Authorization": "Bearer sk_live_typed_in", "X-Api-Key": "{{env \"CRM_KEY\"}}", "X-Tenant": "acme"},
	               "body": {"note": "{{key}}", "api_token": "tok_typed_in"}},
	   "output": "/contact",
	   "lookup": {"method": "GET", "url": "https://crm.example.com/contacts?note={{key}}", "headers": {"Cookie": "session=abc123typed"},
	              "found": "nonempty", "output": "/results/0"}}],
	 "mcp_servers": [{"name": "gh", "command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp_typed_in"},
	   "tools": {"create_issue": {"effect": "lookup", "lookup": {"tool": "search_issues", "args": {"q": "${input.title}"}, "found": "nonempty", "output": "/items"}}}}]}`)
	var out, errb bytes.Buffer
	cmd := &toolsCmd{env: toolsEnv(&out, &errb, map[string]string{"CRM_KEY": "crm-key-from-env"})}
	if err := cmd.Run(context.Background(), []string{"check", "--tools", path}); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	all := out.String() + errb.String()
	for _, secret := range []string{"sk_live_typed_in", "tok_typed_in", "abc123typed", "ghp_typed_in", "crm-key-from-env"} {
		if strings.Contains(all, secret) {
			t.Errorf("%s was printed:\n%s", secret, all)
		}
	}
	for _, want := range []string{
		`tool "mk": request.headers.Authorization: header Authorization looks like a credential typed into the tools file`,
		`tool "mk": lookup.headers.Cookie: header Cookie looks like a credential`,
		`mcp_servers[0].env.GITHUB_TOKEN: variable GITHUB_TOKEN looks like a credential`,
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	for _, bad := range []string{"X-Api-Key looks like", "X-Tenant looks like"} {
		if strings.Contains(errb.String(), bad) {
			t.Errorf("warned about a header that is not typed in (%s):\n%s", bad, errb.String())
		}
	}
	for _, want := range []string{
		"header Authorization: ••••", `header X-Api-Key: {{env "CRM_KEY"}}`, "header X-Tenant: acme", "header Cookie: ••••",
		`"api_token":"••••"`,
		"found: a 2xx answer with a non-empty object or array at /results/0; records that value",
		"not found: a 404 answer, or at /results/0 null, an empty array or object (or an empty first element), or an index past the end of an array",
		"what it records must have the shape of the call's /contact",
		"lookup: calls gh.search_issues; found: a non-empty object or array at /items",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
