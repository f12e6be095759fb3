package toolsfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// testEnv is the environment the fixtures are loaded with.
func testEnv(extra map[string]string) *Options {
	env := map[string]string{
		"CRM_URL":   "https://crm.example.com/api",
		"CRM_TOKEN": "crm-secret-token-123",
		"PAY_URL":   "https://pay.example.com",
		"PAY_KEY":   "sk_live_paysecret",
		"SMS_URL":   "https://sms.example.com",
	}
	for k, v := range extra {
		env[k] = v
	}
	return &Options{Env: func(k string) string { return env[k] }}
}

func TestLoadInvalid(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"unknown_effect": {
			`tool "a": effect: unknown effect "sometimes" (want one of read_only, idempotent, keyed, lookup, at_most_once)`,
			`tool "b": lookup: effect lookup needs a lookup block`,
		},
		"unknown_fields": {
			`extra: unknown field`,
			`tool "a": request.query: unknown field`,
			`tool "a": retries: unknown field`,
			`tool "b": timout: unknown field`,
		},
		"version": {`version: unsupported version 2 (want 1)`},
		"retry": {
			`tool "zero": retry.attempts: must be a whole number of at least 1 (the first attempt counts: 1 never retries), got 0`,
			`tool "negative": retry.attempts: must be a whole number of at least 1 (the first attempt counts: 1 never retries), got -3`,
			`tool "negative": retry.budget: bad duration "-1m"`,
			`tool "words": retry.attempts: must be a whole number of at least 1 (the first attempt counts: 1 never retries), got "8"`,
			`tool "words": retry.max_backoff: bad duration "soon"`,
			`tool "words": retry.budget: must be longer than 0`,
			`tool "fraction": retry.attempts: must be a whole number of at least 1 (the first attempt counts: 1 never retries), got 2.5`,
			`tool "inverted": retry.max_backoff: 2m0s is longer than budget 1m0s: no wait may reach past the budget`,
			`tool "typo": retry.max_wait: unknown field (known: attempts, max_backoff, budget)`,
			`tool "scalar": retry: must be a JSON object`,
			`mcp_servers[0].tools.write.retry.attempts: must be a whole number of at least 1 (the first attempt counts: 1 never retries), got 0`,
			`mcp_servers[0].tools.write.retry.max_backoff: 1h0m0s is longer than budget 10m0s`,
		},
		"truncated": {`not valid JSON: unexpected end of JSON input`},
		"fields_and_values": {
			`tool "pay": key_header: invalid header name "Idempotency Key"`,
			`tool "pay": request.url: template "https://pay.example/{{.acount}}": the input schema has no field "acount"`,
			`tool "pay": request.headers.X-Memo: template "{{.memo": unclosed {{ at offset 0`,
			`tool "pay": timeout: bad duration "soon"`,
			`tool "pay": key_ttl: bad duration "-5s"`,
			`tool "pay": output: bad JSON pointer "data/id"`,
			`tool "pay": approval: must be "always" or "never", got "sometimes"`,
			`tool "pay": approve_above.amount: limit must be a number, got a string`,
			`tool "pay": approve_above.fee: the input schema has no field "fee"`,
			`tool "pay": approve_above.memo: field "memo" is not numeric`,
			`tool "note": key_header: only a keyed tool sends its key in a header (effect is "idempotent")`,
			`tool "note": request.url: bad URL "ftp://notes.example/{{.text}}": want an http or https URL`,
			`tool "note": request.body: a GET request has no body`,
			`tool "note": lookup: a lookup block needs effect lookup (or keyed, for calls past key_ttl); effect is "idempotent"`,
			`tool "note": lookup.found: must be "nonempty" or "status_200", got "maybe"`,
			`tool "note": lookup.output: bad JSON pointer "~2"`,
			`tool "secret": request.url: environment variable DOCKET_TEST_UNSET_VAR is not set`,
			`tool "hosty": request.method: unsupported method "FETCH"`,
			`tool "hosty": request.url: template "https://{{.host}}/x": arguments and {{key}} may not appear in the URL's scheme or host`,
			`tool "hosty": key_header: effect keyed but the key is never sent`,
			`tool "badschema": input_schema: not a valid JSON Schema: at /properties/x/type: value must be one of`,
			`tool "badschema": output_schema: not a valid JSON Schema: at /minimum: got string, want number`,
			`tool "badschema": compensate.tool: unknown tool "ghost"`,
			`tool "badschema": compensate.args: at /id: "id-${output.id}": a string containing "${" must be exactly`,
			`tool "strschema": input_schema: not an object schema`,
			`tool "strschema": compensate.args: ${input.nothere}: the input schema has no field "nothere"`,
			`tool "note": name: duplicate tool name`,
		},
	}
	for name, want := range cases {
		path := "testdata/invalid/" + name + ".json"
		_, err := Load(path, testEnv(nil))
		var le *LoadError
		if !errors.As(err, &le) {
			t.Errorf("%s: want *LoadError, got %v", name, err)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "invalid tools file "+path) {
			t.Errorf("%s: message does not name the file: %s", name, msg)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: missing problem %q in:\n%s", name, w, msg)
			}
		}
		if len(le.Problems) != len(want) {
			t.Errorf("%s: %d problems, want %d:\n%s", name, len(le.Problems), len(want), msg)
		}
	}
	if _, err := Load("testdata/invalid/does_not_exist.json", nil); err == nil || !strings.Contains(err.Error(), "reading tools file") {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadEnvValueNeverInErrors(t *testing.T) {
	t.Parallel()
	// The URL does not parse once the environment is filled in; the error
	// shows the template, not the value.
	data := []byte(`{"version":1,"tools":[{"name":"a","effect":"read_only","input_schema":{"type":"object"},
		"request":{"method":"GET","url":"{{env \"BASE\"}}/x"}}]}`)
	_, err := Parse(data, testEnv(map[string]string{"BASE": "ftp://user:hunter2secret@host"}))
	if err == nil || strings.Contains(err.Error(), "hunter2secret") || !strings.Contains(err.Error(), `{{env \"BASE\"}}/x`) {
		t.Errorf("error = %v", err)
	}
}

// TestSchemaFixtures checks the shipped JSON Schema against the fixtures: the
// valid files pass; the structurally broken ones fail.
func TestSchemaFixtures(t *testing.T) {
	t.Parallel()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("toolsfile.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("toolsfile.schema.json")
	if err != nil {
		t.Fatalf("the shipped schema does not compile: %v", err)
	}
	validate := func(path string) error {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return err
		}
		return sch.Validate(v)
	}
	valid, _ := filepath.Glob("testdata/valid/*.json")
	if len(valid) < 3 {
		t.Fatalf("fixtures missing: %v", valid)
	}
	for _, p := range valid {
		if err := validate(p); err != nil {
			t.Errorf("%s does not validate: %v", p, err)
		}
	}
	invalid, _ := filepath.Glob("testdata/invalid/*.json")
	for _, p := range invalid {
		if err := validate(p); err == nil {
			t.Errorf("%s validates against the schema", p)
		}
	}
	if !json.Valid(Schema()) {
		t.Error("Schema() is not JSON")
	}
}

func TestURLEscapingContexts(t *testing.T) {
	t.Parallel()
	tmpl, err := ParseURLTemplate(`{{env "BASE"}}/a/{{.p}}/b?q={{.q}}&k={{key}}#{{.f}}`)
	if err != nil {
		t.Fatal(err)
	}
	got := tmpl.Render(&Data{
		Args: map[string]any{"p": "x/../y z", "q": "a b&c=d/é", "f": "h"},
		Key:  "dk1_ab", Env: map[string]string{"BASE": "https://h.example:8443/v1"},
	})
	want := "https://h.example:8443/v1/a/x%2F..%2Fy%20z/b?q=a+b%26c%3Dd%2F%C3%A9&k=dk1_ab#h"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	absent, err := ParseURLTemplate(`https://h.example/a/{{.p}}?q={{.q}}&limit={{.limit}}&x=pre{{.limit}}#f{{.limit}}`)
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		`{"q":"a","limit":5,"p":"x"}`: "https://h.example/a/x?q=a&limit=5&x=pre5#f5",
		`{"q":"a"}`:                   "https://h.example/a/?q=a&x=pre#f",
		`{"limit":0}`:                 "https://h.example/a/?limit=0&x=pre0#f0",
		`{"q":""}`:                    "https://h.example/a/?q=&x=pre#f",
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(args), &m); err != nil {
			t.Fatal(err)
		}
		if got := absent.RenderURL(&Data{Args: m}); got != want {
			t.Errorf("%s: got %s, want %s", args, got, want)
		}
	}
	only, _ := ParseURLTemplate(`https://h.example/?limit={{.limit}}`)
	if got := only.RenderURL(&Data{Args: map[string]any{}}); got != "https://h.example/" {
		t.Errorf("only parameter absent: %s", got)
	}
	for _, bad := range []string{"https://{{.h}}.example/", "{{.base}}/x", "http://x{{key}}/"} {
		if _, err := ParseURLTemplate(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestTemplateParseErrors(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"{{.a":          "unclosed {{ at offset 0",
		"x {{ nope }}":  "unknown action",
		"{{env X}}":     "env needs a quoted variable name",
		`{{env "1X"}}`:  `bad environment variable name "1X"`,
		"{{.a..b}}":     `bad field name ""`,
		"{{ .a }}{{.b}": "unclosed {{ at offset 8",
	} {
		_, err := ParseTemplate(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
	tm, err := ParseTemplate("a {{ .x.y }} b {{key}} {{ env \"HOME\" }}}}")
	if err != nil || len(tm.parts) != 7 {
		t.Fatalf("%v %+v", err, tm)
	}
}

// TestParseErrorPositions: a file that is not JSON is refused with the line
// and column of the syntax error; a wrong field names the tool and the
// field; a template error its offset in the template; Load names the file
// once when it cannot be read.
func TestParseErrorPositions(t *testing.T) {
	t.Parallel()
	cases := []struct{ data, want string }{
		{"{\"version\": 1,\n  \"tools\": [\n    {\"name\": \"a\",, }]}", "invalid character ',' looking for beginning of object key string (line 3, column 18)"},
		{"{\"version\": 1, \"tools\": [", "not valid JSON: unexpected end of JSON input (line 1, column 26)"},
		{`{"version":1,"tools":[{"name":"a","effect":"read_only","input_schema":{"type":"object"},
		  "request":{"method":"GET","url":"https://x.example/{{.id"}}]}`, `tool "a": request.url: template "https://x.example/{{.id": unclosed {{ at offset 18`},
		{`{"version":1,"tools":[{"name":"a","effect":"read_only","input_schema":{"type":"object"},
		  "request":{"method":"GET","url":"https://x.example/"},"output":"items"}]}`, `tool "a": output: bad JSON pointer "items"`},
		{`{"version":1,"tools":[{"effect":"read_only","input_schema":{"type":"object"},"request":{"method":"GET","url":"https://x.example/"}}]}`, `tool #1: name: missing`},
		{`{"version":1,"tools":[],"mcp_servers":[{"name":"m"}]}`, `mcp_servers[0]: needs exactly one of command and url`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.data), testEnv(nil))
		var le *LoadError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\nerror %v\nwant it to contain %q", c.data, err, c.want)
		}
	}
	_, err := Load("testdata/invalid/does_not_exist.json", nil)
	if err == nil || err.Error() != "reading tools file testdata/invalid/does_not_exist.json: no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
	for _, p := range []struct {
		data      string
		off       int64
		line, col int
	}{{"ab\ncd", 0, 1, 1}, {"ab\ncd", 3, 2, 1}, {"ab\ncd", 4, 2, 2}, {"ab\ncd", 99, 2, 3}, {"", 0, 1, 1}} {
		if l, c := Position([]byte(p.data), p.off); l != p.line || c != p.col {
			t.Errorf("Position(%q, %d) = %d:%d, want %d:%d", p.data, p.off, l, c, p.line, p.col)
		}
	}
}

// TestNoEnvParsesWithoutTheEnvironment: with NoEnv a file parses without
// any of its variables set, and no value is kept.
func TestNoEnvParsesWithoutTheEnvironment(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/valid/crm.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data, &Options{Env: func(string) string { return "" }}); err == nil {
		t.Fatal("crm.json parsed with its variables unset")
	}
	f, err := Parse(data, &Options{NoEnv: true, Env: func(k string) string { t.Errorf("read %s", k); return "" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range f.Tools {
		if len(tl.Env) != 0 || len(tl.Spec.Binding) == 0 {
			t.Errorf("%s: env %d values, binding %s", tl.Spec.Name, len(tl.Env), tl.Spec.Binding)
		}
	}
}
