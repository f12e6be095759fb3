package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeTool is a minimal Tool for registry tests.
type fakeTool struct{ spec Spec }

func (f fakeTool) Spec() Spec { return f.spec }
func (f fakeTool) Call(context.Context, Call) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

type fakeLooker struct{ fakeTool }

func (fakeLooker) Lookup(context.Context, Call) (json.RawMessage, bool, error) {
	return nil, false, nil
}

const paySchema = `{"type":"object","properties":{
  "amount":{"type":"integer","minimum":1},
  "currency":{"type":"string","enum":["EUR","USD"]},
  "to":{"type":"object","properties":{"iban":{"type":"string","minLength":5}},"required":["iban"],"additionalProperties":false},
  "note":{"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]},
  "tags":{"type":"array","items":{"type":"string"}}
 },"required":["amount","currency"],"additionalProperties":false}`

func payTool() Tool {
	return fakeTool{Spec{Name: "pay", Class: Keyed, InputSchema: json.RawMessage(paySchema),
		OutputSchema: json.RawMessage(`{"type":"object","required":["id"]}`)}}
}

func mustRegistry(t *testing.T, ts ...Tool) *Registry {
	t.Helper()
	r, err := NewRegistry(ts...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return r
}

func problems(t *testing.T, err error) map[string]string {
	t.Helper()
	var ae *ArgsError
	if !errors.As(err, &ae) {
		t.Fatalf("want *ArgsError, got %T: %v", err, err)
	}
	m := map[string]string{}
	for _, p := range ae.Problems {
		m[p.Path] = p.Msg
	}
	return m
}

func TestNewRegistryReportsEveryProblem(t *testing.T) {
	t.Parallel()
	obj := json.RawMessage(`{"type":"object"}`)
	_, err := NewRegistry(
		fakeTool{Spec{Name: "a", Class: ReadOnly, InputSchema: obj}},
		fakeTool{Spec{Name: "a", Class: ReadOnly, InputSchema: obj}},
		fakeTool{Spec{Name: "badclass", Class: "sometimes", InputSchema: obj}},
		fakeTool{Spec{Name: "nolook", Class: Lookup, InputSchema: obj}},
		fakeTool{Spec{Name: "notobj", Class: ReadOnly, InputSchema: json.RawMessage(`{"type":"string"}`)}},
		fakeTool{Spec{Name: "nocompile", Class: ReadOnly, InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"nope"}}}`)}},
		fakeTool{Spec{Name: "badout", Class: ReadOnly, InputSchema: obj, OutputSchema: json.RawMessage(`{"minimum":"x"}`)}},
		fakeTool{Spec{Name: "comp", Class: Keyed, InputSchema: obj, Compensate: &Compensation{Tool: "ghost", Args: json.RawMessage(`{"id":"${output.id}"}`)}}},
		fakeTool{Spec{Name: "comp2", Class: Keyed, InputSchema: obj, Compensate: &Compensation{Tool: "a", Args: json.RawMessage(`{"id":"x ${output.id}"}`)}}},
		fakeTool{Spec{Name: "limit", Class: Keyed, InputSchema: obj, Approval: Approval{Above: map[string]json.Number{"amount": "lots"}}}},
		fakeTool{Spec{Name: "noschema", Class: ReadOnly}},
		fakeTool{Spec{Name: "retry", Class: ReadOnly, InputSchema: obj, Retry: Retry{Attempts: -1, Budget: time.Minute}}},
	)
	var re *RegistryError
	if !errors.As(err, &re) {
		t.Fatalf("want *RegistryError, got %v", err)
	}
	want := []string{
		`tool "a": duplicate name`,
		`tool "badclass": invalid class "sometimes"`,
		`tool "nolook": class "lookup" but the tool has no Lookup method`,
		`tool "notobj": input schema: not an object schema`,
		`tool "nocompile": input schema:`,
		`tool "badout": output schema:`,
		`tool "comp": compensate names unknown tool "ghost"`,
		`tool "comp2": compensate args: at /id:`,
		`tool "limit": approve_above "amount": limit "lots" is not a number`,
		`tool "noschema": input schema: missing`,
		`tool "retry": negative retry setting (attempts -1, max_backoff 0s, budget 1m0s)`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	if len(re.Problems) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(re.Problems), len(want), strings.Join(re.Problems, "\n"))
	}
}

func TestRegistryGetNames(t *testing.T) {
	t.Parallel()
	obj := json.RawMessage(`{"type":"object"}`)
	r := mustRegistry(t, payTool(), fakeLooker{fakeTool{Spec{Name: "find", Class: Lookup, InputSchema: obj}}})
	if got := strings.Join(r.Names(), ","); got != "find,pay" {
		t.Fatalf("Names = %s", got)
	}
	if tl, ok := r.Get("pay"); !ok || tl.Spec().Name != "pay" {
		t.Fatalf("Get(pay) = %v, %v", tl, ok)
	}
	if _, ok := r.Get("nope"); ok {
		t.Fatal("Get(nope) found something")
	}
	for _, f := range []func() error{
		func() error { return r.ValidateArgs("nope", json.RawMessage(`{}`)) },
		func() error { return r.ValidateResolved("nope", json.RawMessage(`{}`)) },
		func() error { return r.ValidateOutput("nope", json.RawMessage(`{}`)) },
	} {
		if err := f(); !errors.Is(err, ErrUnknownTool) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("unknown tool error = %v", err)
		}
	}
}

func TestValidateResolved(t *testing.T) {
	t.Parallel()
	r := mustRegistry(t, payTool())
	if err := r.ValidateResolved("pay", json.RawMessage(`{"amount":5,"currency":"EUR","to":{"iban":"DE123456"}}`)); err != nil {
		t.Fatalf("valid args refused: %v", err)
	}
	err := r.ValidateResolved("pay", json.RawMessage(`{"amount":"x","currency":"GBP","to":{"bic":"x"},"extra":1,"note":"long note"}`))
	got := problems(t, err)
	for _, path := range []string{"/amount", "/currency", "/to/iban", "/to/bic", "/extra", "/note"} {
		if got[path] == "" {
			t.Errorf("no problem at %s; got %v", path, got)
		}
	}
	if !strings.Contains(got["/amount"], "integer") || got["/to/iban"] != "missing required property" {
		t.Errorf("messages: %v", got)
	}
	if !strings.Contains(err.Error(), `invalid arguments for tool "pay": at /amount:`) {
		t.Errorf("Error() = %s", err)
	}
	// Resolved arguments are plain data: a reference-looking string is just a string.
	if got := problems(t, r.ValidateResolved("pay", json.RawMessage(`{"amount":"${a1.output.total}","currency":"EUR"}`))); got["/amount"] == "" {
		t.Errorf("reference string accepted in resolved args: %v", got)
	}
	for _, bad := range []string{``, `[1]`, `{"amount":`, `"x"`} {
		got := problems(t, r.ValidateResolved("pay", json.RawMessage(bad)))
		if got[""] == "" {
			t.Errorf("%q: want a problem at the root, got %v", bad, got)
		}
	}
}

func TestValidateArgsToleratesReferences(t *testing.T) {
	t.Parallel()
	r := mustRegistry(t, payTool())
	ok := []string{
		`{"amount":"${a1.output.total}","currency":"EUR"}`,
		`{"amount":3,"currency":"${a1.output.cur}","to":"${a2.output}"}`,
		`{"amount":3,"currency":"EUR","to":{"iban":"${a2.output.accounts.0.iban}"}}`,
		`{"amount":3,"currency":"EUR","note":"${a2.output.note}"}`,
		`{"amount":3,"currency":"EUR","tags":["a","${a1.output.tag}"]}`,
		`{"amount":3,"currency":"EUR","tags":"${a1.output.tags}"}`,
	}
	for _, a := range ok {
		if err := r.ValidateArgs("pay", json.RawMessage(a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	cases := []struct {
		args string
		path string
		msg  string
	}{
		{`{"amount":"x","currency":"EUR"}`, "/amount", "integer"},
		{`{"amount":"${a1.output.total}"}`, "/currency", "missing required property"},
		{`{"amount":"${a1.output.total}","currency":"EUR","extra":"${a1.output}"}`, "/extra", "unknown property"},
		{`{"amount":"total: ${a1.output.total}","currency":"EUR"}`, "/amount", ""},
		{`{"amount":3,"currency":"EUR","note":"toolong"}`, "/note", ""},
	}
	for _, c := range cases {
		got := problems(t, r.ValidateArgs("pay", json.RawMessage(c.args)))
		if m, ok := got[c.path]; !ok || !strings.Contains(m, c.msg) {
			t.Errorf("%s: want problem at %s containing %q, got %v", c.args, c.path, c.msg, got)
		}
	}
}

func TestValidateOutput(t *testing.T) {
	t.Parallel()
	obj := json.RawMessage(`{"type":"object"}`)
	r := mustRegistry(t, payTool(), fakeTool{Spec{Name: "free", Class: ReadOnly, InputSchema: obj}})
	if err := r.ValidateOutput("pay", json.RawMessage(`{"id":"p1"}`)); err != nil {
		t.Fatal(err)
	}
	if got := problems(t, r.ValidateOutput("pay", json.RawMessage(`{"x":1}`))); got["/id"] == "" {
		t.Errorf("missing id not reported: %v", got)
	}
	if err := r.ValidateOutput("free", json.RawMessage(`[1,"two"]`)); err != nil {
		t.Errorf("no output schema: any JSON is fine, got %v", err)
	}
	if got := problems(t, r.ValidateOutput("free", json.RawMessage(`{nope`))); got[""] == "" {
		t.Errorf("invalid JSON output accepted: %v", got)
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	mk := func(mod func(*Spec)) string {
		s := Spec{Name: "pay", Class: Keyed, InputSchema: json.RawMessage(paySchema), Timeout: 30 * time.Second,
			Approval: Approval{Above: map[string]json.Number{"amount": "100"}}}
		mod(&s)
		other := fakeTool{Spec{Name: "other", Class: ReadOnly, InputSchema: json.RawMessage(`{"type":"object"}`)}}
		return mustRegistry(t, fakeTool{s}, other).Hash()
	}
	base := mk(func(*Spec) {})
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("Hash = %q", base)
	}
	same := map[string]func(*Spec){
		"whitespace and key order": func(s *Spec) {
			var m map[string]any
			if err := json.Unmarshal([]byte(paySchema), &m); err != nil {
				t.Fatal(err)
			}
			s.InputSchema, _ = json.MarshalIndent(m, " ", "\t") // keys sorted, other spacing
		},
		"description": func(s *Spec) { s.Description = "changed" },
		"limit 1e2":   func(s *Spec) { s.Approval.Above["amount"] = "1e2" },
		// When and how often an attempt is retried, not whether it may be.
		"retry": func(s *Spec) { s.Retry = Retry{Attempts: 8, MaxBackoff: time.Minute, Budget: time.Hour} },
	}
	for name, mod := range same {
		if h := mk(mod); h != base {
			t.Errorf("%s changed the hash", name)
		}
	}
	differ := map[string]func(*Spec){
		"class":    func(s *Spec) { s.Class = Idempotent },
		"schema":   func(s *Spec) { s.InputSchema = json.RawMessage(`{"type":"object"}`) },
		"output":   func(s *Spec) { s.OutputSchema = json.RawMessage(`{"type":"object"}`) },
		"timeout":  func(s *Spec) { s.Timeout = time.Minute },
		"key_ttl":  func(s *Spec) { s.KeyTTL = time.Hour },
		"lag":      func(s *Spec) { s.VisibilityLag = time.Second },
		"always":   func(s *Spec) { s.Approval.Always = true },
		"limit":    func(s *Spec) { s.Approval.Above["amount"] = "101" },
		"comp":     func(s *Spec) { s.Compensate = &Compensation{Tool: "other", Args: json.RawMessage(`{}`)} },
		"new name": func(s *Spec) { s.Name = "pay2" },
		"binding":  func(s *Spec) { s.Binding = json.RawMessage(`{"kind":"http","request":{"url":"x"}}`) },
	}
	for name, mod := range differ {
		if h := mk(mod); h == base {
			t.Errorf("changing %s kept the hash", name)
		}
	}
	// The legacy hash is the one earlier versions recorded: bindings left out,
	// and equal to Hash for tools without one.
	reg := func(b string) *Registry {
		s := Spec{Name: "pay", Class: Keyed, InputSchema: json.RawMessage(paySchema), Binding: json.RawMessage(b)}
		return mustRegistry(t, fakeTool{s})
	}
	if a, b := reg(""), reg(`{"url":"a"}`); a.Hash() != a.LegacyHash() || b.LegacyHash() != a.Hash() || b.Hash() == a.Hash() {
		t.Errorf("legacy hash: %s %s %s %s", a.Hash(), a.LegacyHash(), b.Hash(), b.LegacyHash())
	}
	if a, b := reg(`{"a":1,"b":[2]}`), reg("{\n \"b\": [2], \"a\": 1.0}"); a.Hash() != b.Hash() {
		t.Errorf("a binding is hashed in canonical form: %s != %s", a.Hash(), b.Hash())
	}
}
