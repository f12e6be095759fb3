package planner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// FuzzTextCalls feeds arbitrary reply content through the readers of tool
// calls written as text and the planning of such a reply: never a panic, a
// call always has a name, and a reply whose content is not a call, not an
// error and not read as one is answered as text (there is no fourth way).
func FuzzTextCalls(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "quirks", "*", "reply*.json"))
	for _, name := range seeds {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		var resp openai.ChatCompletionResponse
		if json.Unmarshal(b, &resp) == nil && len(resp.Choices) > 0 {
			f.Add(resp.Choices[0].Message.Content)
		}
	}
	for _, s := range []string{
		"[TOOL_CALLS]", "[TOOL_CALLS]x[CALL_ID]1[ARGS]{}", "[TOOL_CALLS] [] tail", "<function=mail_send>{\"to\":1}</function>",
		"```json\n[{\"name\":\"a\",\"arguments\":\"\\\"{}\\\"\"}]\n```", "```\n{\"name\": \"a\", \"arguments\"\n", "{\"tool_calls\":[{\"function\":{\"name\":\"x\"}}]}",
		"<|python_tag|>{\"name\": \"crm_search\", \"parameters\": {\"query\": \"a\"}}<|eom_id|>", "{{{{", "```json\n```",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		calls, _, form, err := contentToolCalls(content)
		if err == nil && (form == "") != (len(calls) == 0) {
			t.Fatalf("form %q with %d calls", form, len(calls))
		}
		for _, c := range calls {
			if strings.TrimSpace(c.Function.Name) == "" {
				t.Fatalf("a call without a name from %q", content)
			}
		}
		ps, err := fuzzPlanners()
		if err != nil {
			t.Fatal(err)
		}
		p := ps[ModeTools]
		s, err := p.newSession(Request{Goal: "fuzz"})
		if err != nil {
			t.Fatal(err)
		}
		s.rounds = 1
		resp := openai.ChatCompletionResponse{Choices: []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: content}, FinishReason: "stop"}}}
		done, err := s.absorb(context.Background(), resp)
		checkSession(t, p, s)
		if done && err == nil && len(s.actions) == 0 && p.names.callSyntax(content) {
			t.Fatalf("an empty plan from a reply with call syntax: %q", content)
		}
	})
}

// FuzzReadEvents feeds arbitrary bodies through the reading of a stream
// answered to a request that did not ask for one: never a panic, and a
// stream read is one assistant message.
func FuzzReadEvents(f *testing.F) {
	for _, name := range []string{"sse_unasked/reply1.sse", "sse_unasked/reply2.sse"} {
		b, err := os.ReadFile(filepath.Join("testdata", "quirks", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("data: {\"error\":{\"message\":\"overloaded\"}}\n\n"))
	f.Add([]byte(": keep-alive\r\nevent: message\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata: [DONE]\r\n\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		ps, err := fuzzPlanners()
		if err != nil {
			t.Fatal(err)
		}
		s, err := ps[ModeTools].newSession(Request{Goal: "fuzz"})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.readEvents(body, &attempt{Status: 200, Attempt: 1})
		if err != nil {
			return
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Role != openai.ChatMessageRoleAssistant {
			t.Fatalf("read %q as %+v", body, resp)
		}
	})
}
