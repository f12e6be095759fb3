package ui_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/docketrun/docket/ui"
)

func TestParseTokensFile(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ALICE_TOKEN": "alice-token-0123456789", "SHORT": "short"}
	getenv := func(k string) string { return env[k] }
	good := `{"version": 1, "tokens": [
  {"name": "agent", "scopes": ["read", "submit"], "sha256": "` + hashOf(agentToken) + `"},
  {"name": "alice", "scopes": ["read", "review", "control"], "env": "ALICE_TOKEN"}
]}`
	toks, err := ui.ParseTokensFile([]byte(good), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 || toks[0].SHA256 != hashOf(agentToken) || toks[1].Secret != env["ALICE_TOKEN"] || len(toks[1].Scopes) != 3 {
		t.Fatalf("%+v", toks)
	}
	h := hashOf(agentToken)
	for _, c := range []struct{ file, want string }{
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "token": "in-clear-0123456789"}]}`, "1:27: tokens[0]: token: a token is never kept in clear"},
		{"{\"version\": 1,\n \"tokens\": [\n  {\"name\": \"a\", \"scopes\": [\"read\"], \"sha256\": \"" + h + "\"},\n  {\"name\": \"b\", \"scopes\": [\"approve\"], \"sha256\": \"" + h + "\"}]}", `4:3: tokens[1]: b: unknown scope "approve"`},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "sha256": "` + h + `", "env": "X"}]}`, "exactly one of sha256"},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "sha256": "ABC"}]}`, "64 lowercase hex"},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "env": "UNSET"}]}`, "UNSET is not set"},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "env": "SHORT"}]}`, "at least 16"},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": [], "env": "ALICE_TOKEN"}]}`, "scopes is empty"},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "env": "ALICE_TOKEN"}, {"name": "a", "scopes": ["read"], "env": "ALICE_TOKEN"}]}`, "two tokens"},
		{`{"version": 1, "tokens": [{"name": "a b", "scopes": ["read"], "env": "ALICE_TOKEN"}]}`, `name "a b"`},
		{`{"version": 2, "tokens": []}`, "1:2: version 2"},
		{`{"tokens": [{"name": "a", "scopes": ["read"], "env": "ALICE_TOKEN"}]}`, "version is missing"},
		{`{"version": 1, "tokens": []}`, "no tokens"},
		{`{"version": 1, "extra": 1}`, `1:16: unknown field "extra"`},
		{"{\"version\": 1,\n \"tokens\": [\n  {\"name\": \"a\",,}]}", "3:16: invalid character"},
		{`{"version": 1, "tokens": [{"name": "a"`, "ends early"},
		{`[]`, "want a JSON object"},
	} {
		_, err := ui.ParseTokensFile([]byte(c.file), getenv)
		var fe *ui.TokenFileError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %q", c.file, err, c.want)
		}
	}
}

// A token's groups are read from the file and checked with their place.
func TestParseTokensFileGroups(t *testing.T) {
	t.Parallel()
	h := hashOf(agentToken)
	toks, err := ui.ParseTokensFile([]byte(`{"version": 1, "tokens": [
  {"name": "fred", "scopes": ["read", "review"], "sha256": "`+h+`", "groups": ["finance", "ops"]},
  {"name": "agent", "scopes": ["submit"], "sha256": "`+h+`"}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(toks[0].Groups, ",") != "finance,ops" || toks[1].Groups != nil {
		t.Fatalf("%+v", toks)
	}
	for _, c := range []struct{ file, want string }{
		{"{\"version\": 1, \"tokens\": [\n {\"name\": \"a\", \"scopes\": [\"read\"], \"sha256\": \"" + h + "\", \"groups\": [\"fin ance\"]}]}", `2:2: tokens[0]: a: groups: group "fin ance": a letter`},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "sha256": "` + h + `", "groups": ["x", "x"]}]}`, "a: groups: group x is listed twice"},
		{`{"version": 1, "tokens": [{"name": "a", "scopes": ["read"], "sha256": "` + h + `", "groups": "finance"}]}`, "cannot unmarshal string"},
	} {
		_, err := ui.ParseTokensFile([]byte(c.file), nil)
		var fe *ui.TokenFileError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %q", c.file, err, c.want)
		}
	}
}
