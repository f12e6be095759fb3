package toolsfile

import (
	"errors"
	"strings"
	"testing"
)

// warningsOf parses one tool (with opts) and returns its warnings by field.
func warningsOf(t *testing.T, tool string, opts *Options) map[string]string {
	t.Helper()
	f, err := Parse([]byte(`{"version":1,"tools":[`+tool+`]}`), opts)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	out := map[string]string{}
	for _, w := range f.Warnings {
		out[w.Field] += w.Msg
	}
	return out
}

// TestWarnsOpenOrigin: tools check warns about a URL whose origin an
// argument could reach (the text does not end it with a "/" before the
// first argument, or the environment value does not), never quoting the
// value; a URL whose origin the file fixes gets no warning.
func TestWarnsOpenOrigin(t *testing.T) {
	t.Parallel()
	env := testEnv(map[string]string{"API_HOST": "http://127.0.0.1", "SCHEME": "https:"})
	const schema = `"input_schema":{"type":"object","properties":{"path":{"type":"string"},"id":{"type":"string"}}}`
	for _, c := range []struct {
		url  string
		opts *Options
		warn bool
	}{
		{`{{env \"API_HOST\"}}{{.path}}`, env, true},
		{`{{env \"API_HOST\"}}{{.path}}`, &Options{NoEnv: true}, true},
		{`{{env \"API_HOST\"}}v1{{.id}}`, env, true},
		{`{{env \"API_HOST\"}}{{key}}/x`, env, true},
		{`{{env \"SCHEME\"}}//{{.path}}/x`, env, true},
		{`{{env \"API_HOST\"}}/users/{{.id}}`, env, false},
		{`{{env \"API_HOST\"}}/users/{{.id}}`, &Options{NoEnv: true}, false},
		{`{{env \"API_HOST\"}}?q={{.id}}`, env, false},
		{`https://api.example.com/users/{{.id}}`, env, false},
		{`https://{{env \"API_HOST2\"}}/users/{{.id}}`, testEnv(map[string]string{"API_HOST2": "api.example.com"}), false},
		{`{{env \"API_HOST\"}}/fixed`, env, false},
	} {
		w := warningsOf(t, `{"name":"t","effect":"read_only",`+schema+`,"request":{"method":"GET","url":"`+c.url+`"}}`, c.opts)
		msg, got := w["request.url"]
		if got != c.warn {
			t.Errorf("%s (NoEnv %v): warned %v, want %v: %q", c.url, c.opts.NoEnv, got, c.warn, msg)
		}
		if got && (!strings.Contains(msg, `{{env "`) || !strings.Contains(msg, "refuses") || strings.Contains(msg, "127.0.0.1")) {
			t.Errorf("%s: the warning does not name the variable or say what docket does, or quotes its value: %s", c.url, msg)
		}
	}
}

// TestWarnsOpenInputSchema: a request that sends the arguments themselves
// as its body warns when the input schema does not refuse undeclared
// properties (saying whether docket refuses them at the call or sends
// them); a body template, a GET, or "additionalProperties": false does not.
func TestWarnsOpenInputSchema(t *testing.T) {
	t.Parallel()
	const props = `"properties":{"amount":{"type":"integer"}}`
	for _, c := range []struct {
		schema, request, want string
	}{
		{`{"type":"object",` + props + `}`, `{"method":"POST","url":"https://h.example/c"}`, "docket refuses a call"},
		{`{"type":"object",` + props + `,"additionalProperties":true}`, `{"method":"PUT","url":"https://h.example/c"}`, "reaches the service unchecked"},
		{`{"type":"object",` + props + `,"patternProperties":{"^x_":{}}}`, `{"method":"PATCH","url":"https://h.example/c"}`, "reaches the service unchecked"},
		{`{"type":"object"}`, `{"method":"POST","url":"https://h.example/c"}`, "reaches the service unchecked"},
		{`{"type":"object",` + props + `,"additionalProperties":false}`, `{"method":"POST","url":"https://h.example/c"}`, ""},
		{`{"type":"object",` + props + `}`, `{"method":"POST","url":"https://h.example/c","body":{"amount":"{{.amount}}"}}`, ""},
		{`{"type":"object",` + props + `}`, `{"method":"GET","url":"https://h.example/c?a={{.amount}}"}`, ""},
		{`{"type":"object",` + props + `}`, `{"method":"DELETE","url":"https://h.example/c/{{.amount}}"}`, ""},
	} {
		w := warningsOf(t, `{"name":"t","effect":"idempotent","input_schema":`+c.schema+`,"request":`+c.request+`}`, testEnv(nil))
		msg := w["input_schema"]
		if (c.want == "") != (msg == "") || !strings.Contains(msg, c.want) {
			t.Errorf("%s %s: warning %q, want one saying %q", c.schema, c.request, msg, c.want)
		}
	}
}

// TestWarnsTypedQueryCredential: a query parameter named like a credential
// with a literal value is warned about (without the value) and masked.
func TestWarnsTypedQueryCredential(t *testing.T) {
	t.Parallel()
	const url = `https://h.example/x?api_key=typed123secret&q={{.q}}&token={{env \"CRM_TOKEN\"}}`
	w := warningsOf(t, `{"name":"t","effect":"read_only","input_schema":{"type":"object","properties":{"q":{"type":"string"}}},
	  "request":{"method":"GET","url":"`+url+`"}}`, testEnv(nil))
	if msg := w["request.url"]; !strings.Contains(msg, "api_key") || strings.Contains(msg, "typed123secret") || strings.Contains(msg, "token") {
		t.Errorf("warning: %q", msg)
	}
	if got := MaskURL(strings.ReplaceAll(url, `\"`, `"`)); got != `https://h.example/x?api_key=••••&q={{.q}}&token={{env "CRM_TOKEN"}}` {
		t.Errorf("masked: %s", got)
	}
}

// TestRenderGuardedURL: the refusals wrap ErrURLArgument and name the
// argument; a fixed origin with safe arguments renders as RenderURL does.
func TestRenderGuardedURL(t *testing.T) {
	t.Parallel()
	tm, err := ParseURLTemplate(`{{env "B"}}{{.a}}/x/{{.b}}?q={{.c}}&o={{.o}}`)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"B": "https://h.example"}
	for _, c := range []struct {
		args map[string]any
		arg  string
	}{
		{map[string]any{"a": "@evil.example", "b": "1"}, "a"},
		{map[string]any{"a": ":8443", "b": "1"}, "a"},
		{map[string]any{"a": ".evil.example", "b": "1"}, "a"},
		{map[string]any{"a": "", "b": ".."}, "a"},
	} {
		_, err := tm.RenderGuardedURL(&Data{Args: c.args, Env: env})
		var ue *URLArgError
		if !errors.Is(err, ErrURLArgument) || !errors.As(err, &ue) || ue.Arg != c.arg || strings.Contains(err.Error(), "h.example") {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	fixed, _ := ParseURLTemplate(`{{env "B"}}/v1/{{.b}}/{{key}}?q={{.c}}&o={{.o}}`)
	d := &Data{Args: map[string]any{"b": "a/b", "c": "../x"}, Key: "dk1_k", Env: env}
	got, err := fixed.RenderGuardedURL(d)
	if err != nil || got != fixed.RenderURL(d) || got != "https://h.example/v1/a%2Fb/dk1_k?q=..%2Fx" {
		t.Errorf("got %s, %v", got, err)
	}
	_, err = fixed.RenderGuardedURL(&Data{Args: map[string]any{"b": "x"}, Key: "", Env: env})
	var ue *URLArgError
	if !errors.As(err, &ue) || ue.Arg != "key" {
		t.Errorf("empty key segment: %v", err)
	}
}
