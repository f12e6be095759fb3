package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
	if err := cmd.Run(context.Background(), []string{"check", "--tools", "../../tools/httptool/testdata/valid/crm.json"}); err != nil {
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
