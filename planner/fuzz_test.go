package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

var fuzzPlanners = sync.OnceValues(func() (map[Mode]*Planner, error) {
	reg, err := tools.NewRegistry(
		&tooltest.Tool{SpecValue: tools.Spec{Name: "crm.search", Class: tools.ReadOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer"}},"required":["query"]}`)}},
		&tooltest.Tool{SpecValue: tools.Spec{Name: "crm.create_contact", Class: tools.Keyed,
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"},"note":{"type":"string"},"tags":{"type":"array","items":{"type":"object","properties":{"label":{"type":"string"}}}}},"required":["name","email"]}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)}},
		&tooltest.Tool{SpecValue: tools.Spec{Name: "mail/send", Class: tools.AtMostOnce,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"body":{"type":"string"}},"required":["to","body"]}`)}},
		&tooltest.Tool{SpecValue: tools.Spec{Name: "pay.charge", Class: tools.Idempotent,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"},"meta":{"type":"object"}},"required":["amount"]}`)}},
	)
	if err != nil {
		return nil, err
	}
	out := map[Mode]*Planner{}
	for _, m := range []Mode{ModeTools, ModeJSONSchema} {
		p, err := New(Config{Model: "fuzz", BaseURL: "http://127.0.0.1:1/v1", Tools: reg, Mode: m})
		if err != nil {
			return nil, err
		}
		out[m] = p
	}
	return out, nil
})

// FuzzDecodeReply feeds arbitrary chat-completion bodies through the code that
// turns a model reply into plan actions (both modes), checking that it never
// panics, that every tool call is answered exactly once, and that whatever
// becomes a plan is valid.
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := fuzzPlanners()
		if err != nil {
			t.Fatal(err)
		}
		var resp openai.ChatCompletionResponse
		if json.Unmarshal(data, &resp) != nil {
			return // go-openai would fail to decode it: a retried, unreadable reply
		}
		for _, mode := range []Mode{ModeTools, ModeJSONSchema} {
			p := ps[mode]
			req := Request{Goal: "fuzz"}
			s, err := p.newSession(req)
			if err != nil {
				t.Fatal(err)
			}
			s.rounds = 1
			done, err := s.absorb(context.Background(), resp)
			checkSession(t, p, s)
			if err != nil || !done {
				continue
			}
			res, err := s.result(req)
			if err != nil {
				continue
			}
			if err := res.Plan.Validate(p.cfg.Tools); err != nil {
				t.Fatalf("%s: returned an invalid plan: %v", mode, err)
			}
			if !json.Valid(res.Exchange) {
				t.Fatalf("%s: exchange is not JSON", mode)
			}
		}
	})
}

func checkSession(t *testing.T, p *Planner, s *session) {
	t.Helper()
	ids := map[string]bool{}
	for i, a := range s.actions {
		if a.ID == "" || ids[a.ID] {
			t.Fatalf("action %d: id %q empty or repeated", i, a.ID)
		}
		if _, err := plan.Canonical(a.Args); err != nil || len(a.Args) == 0 || a.Args[0] != '{' {
			t.Fatalf("action %s: args %q not a canonicalizable object: %v", a.ID, a.Args, err)
		}
		for _, d := range a.DependsOn {
			if !ids[d] {
				t.Fatalf("action %s depends on %s, not an earlier action", a.ID, d)
			}
		}
		ids[a.ID] = true
		if p.cfg.Mode == ModeTools {
			if err := p.cfg.Tools.ValidateArgs(a.Tool, a.Args); err != nil {
				t.Fatalf("action %s queued with invalid args: %v", a.ID, err)
			}
		}
	}
	// Every tool call of the conversation is answered exactly once, ids unique.
	calls := map[string]int{}
	for _, m := range s.msgs {
		for _, c := range m.ToolCalls {
			if c.ID == "" {
				t.Fatalf("tool call without id sent back")
			}
			calls[c.ID]++
		}
	}
	for _, m := range s.msgs {
		if m.Role == openai.ChatMessageRoleTool {
			calls[m.ToolCallID] += 10
		}
	}
	for id, n := range calls {
		if n != 11 {
			t.Fatalf("tool call %q: %d calls and %d results", id, n%10, n/10)
		}
	}
}

// FuzzNormalizeArgs checks the byte-level null dropping against a simple
// oracle (decode, delete the optional nulls from maps, encode): the same
// JSON value, and compact valid JSON.
func FuzzNormalizeArgs(f *testing.F) {
	schema := `{"type":"object","properties":{"a":{"type":"string"},"n":{"type":["string","null"]},"o":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"string"}},"required":["x"]},"l":{"type":"array","items":{"type":"object","properties":{"z":{"type":"string"}}}}},"required":["n","o"]}`
	_, sh, ok, err := strictSchema(json.RawMessage(schema))
	if err != nil || !ok {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"a":null,"n":null,"o":{"x":1,"y":null},"l":[{"z":null},{"z":"k"}]}`,
		"{ \"a\" : null , \"\\u0061\":\"x\\\"y\", \"o\": {\"y\": null}}",
		`{"l":[[null],{"z":null,"z2":null}],"o":{"x":1e5}}`, `{}`, `[]`, `{"a":"${a1.output}"}`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, _, err := normalizeArgs(text, sh)
		if err != nil {
			return
		}
		if !json.Valid(got) {
			t.Fatalf("not JSON: %q → %q", text, got)
		}
		var buf bytes.Buffer
		if json.Compact(&buf, got) != nil || buf.String() != string(got) {
			t.Fatalf("not compact: %q", got)
		}
		src := strings.TrimSpace(text)
		if src == "" {
			src = "{}"
		}
		want := oracleDrop(t, []byte(src), sh)
		if have := reencode(t, got); have != want {
			t.Fatalf("normalizeArgs(%q)\n got %s\nwant %s", text, have, want)
		}
	})
}

func reencode(t *testing.T, raw []byte) string {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func oracleDrop(t *testing.T, raw []byte, sh *shape) string {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("oracle decode %q: %v", raw, err)
	}
	var drop func(v any, sh *shape)
	drop = func(v any, sh *shape) {
		if sh == nil {
			return
		}
		switch v := v.(type) {
		case map[string]any:
			for k, val := range v {
				if val == nil && sh.optional[k] {
					delete(v, k)
				} else if c := sh.props[k]; c != nil {
					drop(val, c)
				}
			}
		case []any:
			for _, e := range v {
				drop(e, sh.items)
			}
		}
	}
	drop(v, sh)
	b, _ := json.Marshal(v)
	return string(b)
}
