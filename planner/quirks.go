package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Quirks of OpenAI-compatible servers the planner copes with (the package
// doc's "Servers"). Each is said once per Planner as a warning (logged at
// Warn, and in Result.Warnings and the exchange's notes of the planning that
// met it).

// Warning kinds, one per quirk.
const (
	warnArgsObject   = "args_object"
	warnStrictRefuse = "strict_refused"
	warnTextCalls    = "text_tool_calls"
	warnStreamRefuse = "stream_refused"
	warnPreamble     = "preamble"
	warnNamePrefix   = "name_prefix"
	warnArgsTwice    = "args_twice"
	warnSSEUnasked   = "sse_unasked"
	warnStreamOnly   = "stream_only"
)

// warn notes a quirk in the session (its exchange and result) and logs it
// once per Planner.
func (s *session) warn(kind, msg string) {
	for _, n := range s.ex.Notes {
		if n == msg {
			return
		}
	}
	s.ex.Notes = append(s.ex.Notes, msg)
	if _, said := s.p.said.LoadOrStore(kind, true); !said {
		s.p.log.Warn(msg, "quirk", kind)
	}
}

// formText describes a textForm in a warning.
func formText(f textForm) string {
	switch f {
	case formMistral:
		return "Mistral [TOOL_CALLS]"
	case formJSON:
		return "JSON (fenced JSON or a bare object)"
	}
	return string(f)
}

// parserHint says how to make the server return tool calls as tool_calls.
func parserHint(f textForm) string {
	switch f {
	case formHermes:
		return "enable the server's tool call parser (vLLM: --enable-auto-tool-choice --tool-call-parser hermes)"
	case formMistral:
		return "enable the server's tool call parser (vLLM: --enable-auto-tool-choice --tool-call-parser mistral)"
	}
	return "enable the server's tool call parser for this model (vLLM: --enable-auto-tool-choice --tool-call-parser NAME; Ollama: a model whose template supports tools)"
}

// unwrapArgs decodes tool call arguments encoded twice (some gateways and
// fine-tuned models): arguments whose text is a JSON string holding the
// object's JSON text, instead of that JSON text; at most three levels.
func unwrapArgs(text string) (string, bool) {
	t := strings.TrimSpace(text)
	for range 3 {
		if !strings.HasPrefix(t, `"`) {
			break
		}
		var inner string
		if json.Unmarshal([]byte(t), &inner) != nil {
			return text, false
		}
		t = strings.TrimSpace(inner)
		if strings.HasPrefix(t, "{") {
			return t, true
		}
	}
	return text, false
}

// fixArguments rewrites a chat-completion body whose tool call arguments
// are JSON objects (or arrays) instead of the JSON text the API specifies
// (some llama.cpp builds), re-encoding them as strings. It returns body
// itself when there is nothing to fix or the body is not such a reply.
func fixArguments(body []byte) ([]byte, bool) {
	if !bytes.Contains(body, []byte(`"arguments"`)) {
		return body, false
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return body, false
	}
	var choices []map[string]json.RawMessage
	if json.Unmarshal(doc["choices"], &choices) != nil {
		return body, false
	}
	changed := false
	for _, ch := range choices {
		for _, field := range []string{"message", "delta"} {
			if fixed, ok := fixMessageArgs(ch[field]); ok {
				ch[field] = fixed
				changed = true
			}
		}
	}
	if !changed {
		return body, false
	}
	doc["choices"], _ = json.Marshal(choices)
	out, err := json.Marshal(doc)
	if err != nil {
		return body, false
	}
	return out, true
}

func fixMessageArgs(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return raw, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw, false
	}
	changed := false
	if fc, ok := fixFunction(m["function_call"]); ok {
		m["function_call"] = fc
		changed = true
	}
	var calls []map[string]json.RawMessage
	if json.Unmarshal(m["tool_calls"], &calls) == nil {
		callsChanged := false
		for _, c := range calls {
			if fn, ok := fixFunction(c["function"]); ok {
				c["function"] = fn
				callsChanged = true
			}
		}
		if callsChanged {
			m["tool_calls"], _ = json.Marshal(calls)
			changed = true
		}
	}
	if !changed {
		return raw, false
	}
	out, _ := json.Marshal(m)
	return out, true
}

func fixFunction(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return raw, false
	}
	var fn map[string]json.RawMessage
	if json.Unmarshal(raw, &fn) != nil {
		return raw, false
	}
	a := bytes.TrimSpace(fn["arguments"])
	if len(a) == 0 || (a[0] != '{' && a[0] != '[') {
		return raw, false
	}
	s, _ := json.Marshal(string(compactBytes(a)))
	fn["arguments"] = s
	out, _ := json.Marshal(fn)
	return out, true
}

func compactBytes(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// strictRefused reports whether an HTTP 400 says the server does not take
// "strict" in tool definitions or the response format (DeepSeek, several
// gateways).
func strictRefused(status int, msg string) bool {
	return status == 400 && strings.Contains(strings.ToLower(msg), "strict")
}

// streamRefused reports whether an HTTP 400 refuses streaming or its options.
func streamRefused(status int, msg string) bool {
	return status == 400 && (mentionsStream(msg) || strings.Contains(strings.ToLower(msg), "include_usage"))
}

// textToolCalls finds tool calls a server left in the content as Hermes
// blocks (<tool_call>{"name": ..., "arguments": {...}}</tool_call>: vLLM or
// SGLang without a tool parser, some Ollama templates). It returns the calls,
// the content without the blocks, and whether there were any blocks; an
// error names the block that is not a call.
func textToolCalls(content string) ([]openai.ToolCall, string, bool, error) {
	const open, closing = "<tool_call>", "</tool_call>"
	if !strings.Contains(content, open) {
		return nil, content, false, nil
	}
	var calls []openai.ToolCall
	var rest strings.Builder
	s := content
	for n := 1; ; n++ {
		i := strings.Index(s, open)
		if i < 0 {
			rest.WriteString(s)
			break
		}
		rest.WriteString(s[:i])
		s = s[i+len(open):]
		j := strings.Index(s, closing)
		body := s
		if j >= 0 {
			body, s = s[:j], s[j+len(closing):]
		} else {
			s = ""
		}
		var c struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Params    json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &c); err != nil || c.Name == "" {
			why := "it has no \"name\""
			if err != nil {
				why = err.Error()
			}
			return nil, content, true, fmt.Errorf("tool call %d written as text is not {\"name\", \"arguments\"}: %s: %s", n, why, clip(strings.TrimSpace(body), 200))
		}
		args := c.Arguments
		if len(args) == 0 {
			args = c.Params
		}
		text := "{}"
		if len(bytes.TrimSpace(args)) > 0 {
			text = string(compactBytes(args))
			var str string
			if json.Unmarshal(args, &str) == nil { // arguments given as JSON text
				text = str
			}
		}
		calls = append(calls, openai.ToolCall{Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: c.Name, Arguments: text}})
	}
	return calls, strings.TrimSpace(rest.String()), true, nil
}

// findPlanObject finds the plan object in a json_schema reply that may
// carry a <think>…</think> block, prose ("Here is the plan:") or a Markdown
// fence around it: the reply itself when it is one JSON value; else the
// first fenced block that is; else the first JSON object in the text that
// has an "actions" member. preamble reports whether anything was skipped.
func findPlanObject(content string) (text string, preamble bool) {
	s := strings.TrimSpace(stripThink(content))
	skipped := s != strings.TrimSpace(content)
	if t := stripFences(s); json.Valid([]byte(t)) {
		return t, skipped
	}
	// a fence after prose
	for rest := s; ; {
		i := strings.Index(rest, "```")
		if i < 0 {
			break
		}
		rest = rest[i+3:]
		nl := strings.IndexByte(rest, '\n')
		end := strings.Index(rest, "```")
		if nl < 0 || end < 0 {
			break
		}
		if end > nl {
			if t := strings.TrimSpace(rest[nl+1 : end]); json.Valid([]byte(t)) {
				return t, true
			}
		}
		rest = rest[end+3:]
	}
	// an object with "actions" anywhere (bounded: the first 64 candidates)
	for i, tries := 0, 0; i < len(s) && tries < 64; i++ {
		if s[i] != '{' {
			continue
		}
		tries++
		d := json.NewDecoder(strings.NewReader(s[i:]))
		var v map[string]json.RawMessage
		if d.Decode(&v) != nil {
			continue
		}
		if _, ok := v["actions"]; ok {
			return strings.TrimSpace(s[i : i+int(d.InputOffset())]), true
		}
	}
	return stripFences(s), skipped
}

// stripThink removes <think>…</think> blocks (reasoning models served
// without a reasoning parser put their thinking in the content).
func stripThink(s string) string {
	for {
		i := strings.Index(s, "<think>")
		if i < 0 {
			// a closing tag alone: the opening one was in the prompt template
			if j := strings.Index(s, "</think>"); j >= 0 && !strings.Contains(s[:j], "{") {
				return s[j+len("</think>"):]
			}
			return s
		}
		j := strings.Index(s[i:], "</think>")
		if j < 0 {
			return s[:i]
		}
		s = s[:i] + s[i+j+len("</think>"):]
	}
}
