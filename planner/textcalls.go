package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Tool calls a server leaves in the reply's content, as text, instead of in
// tool_calls: its tool call parser is off, or the model's template writes a
// form the server does not parse.

// textForm names the written form of tool calls found in the content.
type textForm string

const (
	formHermes   textForm = "<tool_call>"     // <tool_call>{"name", "arguments"}</tool_call>
	formMistral  textForm = "[TOOL_CALLS]"    // [TOOL_CALLS] [{...}] or [TOOL_CALLS]name[ARGS]{...}
	formFunction textForm = "<function=name>" // <function=name>{...}</function> (Llama 3.1)
	formJSON     textForm = "fenced JSON"     // a call as a JSON object, fenced or bare
)

// contentToolCalls finds the tool calls written as text in content, in the
// first of the forms above whose marker it holds (a JSON call needs no
// marker: an object with "name" and "arguments" or "parameters", a list of
// them, or {"tool_calls": [...]}). It returns the calls, the content
// without them, and the form; form is "" when the content holds no call.
// An error says what in the content is not a call although its form says
// it is one.
func contentToolCalls(content string) (calls []openai.ToolCall, rest string, form textForm, err error) {
	switch {
	case strings.Contains(content, "<tool_call>"):
		calls, rest, _, err = textToolCalls(content)
		return calls, rest, formHermes, err
	case strings.Contains(content, "[TOOL_CALLS]"):
		calls, rest, err = mistralCalls(content)
		return calls, rest, formMistral, err
	case strings.Contains(content, "<function="):
		calls, rest, err = functionTagCalls(content)
		return calls, rest, formFunction, err
	}
	calls, rest, err = jsonCalls(content)
	if len(calls) == 0 && err == nil {
		return nil, content, "", nil
	}
	return calls, rest, formJSON, err
}

// callShaped decodes v as written tool calls: one call object ({"name",
// "arguments"|"parameters"}, or OpenAI's {"function": {"name",
// "arguments"}}), a non-empty list of them, or {"tool_calls": [...]}. ok is
// false when v is not shaped like calls.
func callShaped(v json.RawMessage) (calls []openai.ToolCall, ok bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return nil, false
	}
	if v[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(v, &list) != nil || len(list) == 0 {
			return nil, false
		}
		for _, item := range list {
			c, ok := oneCall(item)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		}
		return calls, true
	}
	var wrap struct {
		ToolCalls    json.RawMessage `json:"tool_calls"`
		FunctionCall json.RawMessage `json:"function_call"`
	}
	if json.Unmarshal(v, &wrap) != nil {
		return nil, false
	}
	if len(wrap.ToolCalls) > 0 && wrap.ToolCalls[0] == '[' {
		return callShaped(wrap.ToolCalls)
	}
	if len(wrap.FunctionCall) > 0 && wrap.FunctionCall[0] == '{' {
		return callShaped(wrap.FunctionCall)
	}
	c, ok := oneCall(v)
	if !ok {
		return nil, false
	}
	return []openai.ToolCall{c}, true
}

func oneCall(v json.RawMessage) (openai.ToolCall, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return openai.ToolCall{}, false
	}
	var id string
	json.Unmarshal(m["id"], &id)
	if fn, ok := m["function"]; ok && len(fn) > 0 && fn[0] == '{' {
		if json.Unmarshal(fn, &m) != nil {
			return openai.ToolCall{}, false
		}
	}
	var name string
	for _, k := range []string{"name", "function", "tool_name"} {
		if json.Unmarshal(m[k], &name) == nil && strings.TrimSpace(name) != "" {
			break
		}
		name = ""
	}
	if name == "" {
		return openai.ToolCall{}, false
	}
	var args json.RawMessage
	ok := false
	for _, k := range []string{"arguments", "parameters", "args"} {
		if args, ok = m[k]; ok {
			break
		}
	}
	if !ok {
		return openai.ToolCall{}, false
	}
	return openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: strings.TrimSpace(name), Arguments: argsText(args)}}, true
}

// argsText is the arguments' JSON text: a JSON string is taken as the text
// (the API's form), anything else is the text itself.
func argsText(args json.RawMessage) string {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || string(args) == "null" {
		return "{}"
	}
	var s string
	if json.Unmarshal(args, &s) == nil {
		return s
	}
	return string(compactBytes(args))
}

// looksLikeCall reports whether text that is not valid JSON was meant as
// a call object.
func looksLikeCall(text string) bool {
	return strings.Contains(text, `"tool_calls"`) ||
		(strings.Contains(text, `"name"`) || strings.Contains(text, `"function"`)) && (strings.Contains(text, `"arguments"`) || strings.Contains(text, `"parameters"`))
}

// mistralCalls reads Mistral's [TOOL_CALLS] forms: a JSON list of calls
// after the marker (v3 tokenizers), or name[ARGS]{...} (v11 and later, with
// an optional [CALL_ID]id before [ARGS]), the marker repeated per call.
func mistralCalls(content string) ([]openai.ToolCall, string, error) {
	const marker, argsMark, idMark = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
	i := strings.Index(content, marker)
	var rest strings.Builder
	rest.WriteString(content[:i])
	s := content[i+len(marker):]
	var calls []openai.ToolCall
	fail := func(why string) ([]openai.ToolCall, string, error) {
		return nil, content, fmt.Errorf("the %s text is not a list of calls: %s", marker, why)
	}
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if s == "" {
			break
		}
		if s[0] == '[' || s[0] == '{' {
			d := json.NewDecoder(strings.NewReader(s))
			var v json.RawMessage
			if err := d.Decode(&v); err != nil {
				return fail(fmt.Sprintf("%v in %s", err, clip(s, 200)))
			}
			cs, ok := callShaped(v)
			if !ok {
				return fail(fmt.Sprintf("want [{\"name\", \"arguments\"}], got %s", clip(string(v), 200)))
			}
			calls = append(calls, cs...)
			s = s[d.InputOffset():]
		} else {
			j := strings.Index(s, argsMark)
			if j < 0 {
				return fail(fmt.Sprintf("no %s after the tool name in %s", argsMark, clip(s, 200)))
			}
			name, id := s[:j], ""
			if k := strings.Index(name, idMark); k >= 0 {
				name, id = name[:k], strings.TrimSpace(name[k+len(idMark):])
			}
			name = strings.TrimSpace(name)
			if name == "" || strings.ContainsAny(name, "{}[]\"\n") {
				return fail(fmt.Sprintf("%q is not a tool name", clip(name, 80)))
			}
			s = strings.TrimLeft(s[j+len(argsMark):], " \t\r\n")
			d := json.NewDecoder(strings.NewReader(s))
			var v json.RawMessage
			if err := d.Decode(&v); err != nil {
				return fail(fmt.Sprintf("the arguments of %s: %v in %s", name, err, clip(s, 200)))
			}
			calls = append(calls, openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: name, Arguments: argsText(v)}})
			s = s[d.InputOffset():]
		}
		s = strings.TrimLeft(s, " \t\r\n")
		s = strings.TrimPrefix(s, "</s>")
		if strings.HasPrefix(s, marker) {
			s = s[len(marker):]
			continue
		}
		rest.WriteString(s) // text after the calls
		break
	}
	if len(calls) == 0 {
		return fail("nothing after the marker")
	}
	return calls, strings.TrimSpace(rest.String()), nil
}

// functionTagCalls reads <function=name>{...}</function> (Llama 3.1's
// custom tool format).
func functionTagCalls(content string) ([]openai.ToolCall, string, error) {
	const open, closing = "<function=", "</function>"
	var calls []openai.ToolCall
	var rest strings.Builder
	s := content
	for {
		i := strings.Index(s, open)
		if i < 0 {
			rest.WriteString(s)
			break
		}
		rest.WriteString(s[:i])
		s = s[i+len(open):]
		gt := strings.IndexByte(s, '>')
		end := strings.Index(s, closing)
		if gt < 0 || end < gt {
			return nil, content, fmt.Errorf("the %s text is not a call: %s", formFunction, clip(open+s, 200))
		}
		name, body := strings.TrimSpace(s[:gt]), strings.TrimSpace(s[gt+1:end])
		s = s[end+len(closing):]
		if body == "" {
			body = "{}"
		}
		if name == "" || !json.Valid([]byte(body)) {
			return nil, content, fmt.Errorf("the %s text is not a call with JSON arguments: %s", formFunction, clip(open+name+">"+body, 200))
		}
		calls = append(calls, openai.ToolCall{Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: name, Arguments: argsText(json.RawMessage(body))}})
	}
	return calls, strings.TrimSpace(rest.String()), nil
}

// jsonCalls finds calls written as JSON: the whole content (after a
// <|python_tag|>), fenced blocks, or objects within the text. A fenced
// block or a whole content that is not valid JSON but was meant as a call
// is an error.
func jsonCalls(content string) ([]openai.ToolCall, string, error) {
	s := strings.TrimSpace(stripThink(content))
	s = strings.TrimSpace(strings.TrimPrefix(s, "<|python_tag|>"))
	for _, end := range []string{"<|eom_id|>", "<|eot_id|>"} {
		s = strings.TrimSpace(strings.TrimSuffix(s, end))
	}
	if s == "" {
		return nil, content, nil
	}
	if s[0] == '{' || s[0] == '[' {
		if json.Valid([]byte(s)) {
			if calls, ok := callShaped(json.RawMessage(s)); ok {
				return calls, "", nil
			}
		} else if looksLikeCall(s) && !strings.Contains(s, "```") {
			return nil, content, fmt.Errorf("the reply is JSON meant as a tool call but not valid JSON: %s", clip(s, 300))
		}
	}
	var calls []openai.ToolCall
	var rest strings.Builder
	// fenced blocks
	found := false
	for t := s; ; {
		i := strings.Index(t, "```")
		if i < 0 {
			rest.WriteString(t)
			break
		}
		after := t[i+3:]
		nl := strings.IndexByte(after, '\n')
		if nl < 0 {
			rest.WriteString(t)
			break
		}
		lang := strings.TrimSpace(after[:nl])
		body := after[nl+1:]
		end := strings.Index(body, "```")
		next := ""
		if end >= 0 {
			body, next = body[:end], body[end+3:]
		}
		body = strings.TrimSpace(body)
		block := t[i : len(t)-len(next)]
		if lang != "" && lang != "json" && lang != "tool_call" && lang != "tool_calls" {
			rest.WriteString(t[:i] + block)
			t = next
			continue
		}
		if json.Valid([]byte(body)) {
			if cs, ok := callShaped(json.RawMessage(body)); ok {
				calls = append(calls, cs...)
				found = true
				rest.WriteString(t[:i])
				t = next
				continue
			}
		} else if looksLikeCall(body) {
			return nil, content, fmt.Errorf("a fenced block meant as a tool call is not valid JSON: %s", clip(body, 300))
		}
		rest.WriteString(t[:i] + block)
		t = next
	}
	if found {
		return calls, strings.TrimSpace(rest.String()), nil
	}
	// call objects within the text (bounded: the first 64 candidates)
	rest.Reset()
	last := 0
	for i, tries := 0, 0; i < len(s) && tries < 64; i++ {
		if s[i] != '{' {
			continue
		}
		tries++
		d := json.NewDecoder(strings.NewReader(s[i:]))
		var v json.RawMessage
		if d.Decode(&v) != nil {
			continue
		}
		n := int(d.InputOffset())
		if cs, ok := callShaped(v); ok {
			calls = append(calls, cs...)
			rest.WriteString(s[last:i])
			last = i + n
		}
		i += n - 1 // past this object, call or not
	}
	if len(calls) == 0 {
		return nil, content, nil
	}
	rest.WriteString(s[last:])
	return calls, strings.TrimSpace(rest.String()), nil
}

// errCallSyntax is the reason of a reply that looks like tool calls
// written in a form docket does not read.
var errCallSyntax = errors.New("it looks like tool calls written as text in a form docket does not read")

// callSyntax reports whether a reply without tool calls writes calls in a
// form none of the readers understood: a tool's name followed by "(", a
// JSON "name" (or "function", "tool", "tool_name") member naming a tool,
// or a known tool-call marker.
func (m nameMap) callSyntax(content string) bool {
	for _, mark := range []string{"<tool_call", "<|tool_call", "[TOOL_CALLS]", "<function=", "<|python_tag|>", "functools[", "<tool▁call", "<|tool_calls_section_begin|>"} {
		if strings.Contains(content, mark) {
			return true
		}
	}
	if !strings.Contains(content, "(") && !strings.Contains(content, `"`) {
		return false
	}
	for wire, name := range m.fromWire {
		for _, n := range []string{wire, name} {
			if calledAt(content, n+"(") {
				return true
			}
			if strings.Contains(content, n+`"`) && nameMember(n).MatchString(content) {
				return true
			}
		}
	}
	return false
}

// calledAt reports whether content holds call (a tool name and "(") not
// preceded by a letter, digit or underscore (so "resend(" is not "send(").
func calledAt(content, call string) bool {
	for off := 0; ; {
		i := strings.Index(content[off:], call)
		if i < 0 {
			return false
		}
		i += off
		if i == 0 || !isNameByte(content[i-1]) {
			return true
		}
		off = i + 1
	}
}

func isNameByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func nameMember(n string) *regexp.Regexp {
	return regexp.MustCompile(`"(?:name|function|tool|tool_name)"\s*:\s*"(?:[A-Za-z_]+[.:])?` + regexp.QuoteMeta(n) + `"`)
}
