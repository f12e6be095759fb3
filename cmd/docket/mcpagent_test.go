package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	openai "github.com/sashabaranov/go-openai"
)

// scriptedModel is an OpenAI-compatible chat-completions endpoint with a
// script: the first turn calls send_email (as a model calls a tool the
// agent offers it), the next turn answers with what the tool returned.
func scriptedModel(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name       string          `json:"name"`
					Parameters json.RawMessage `json:"parameters"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		offered := false
		for _, tl := range req.Tools {
			offered = offered || tl.Function.Name == "send_email" && strings.Contains(string(tl.Function.Parameters), `"subject"`)
		}
		var toolResult string
		for _, m := range req.Messages {
			if m.Role == "tool" {
				toolResult = m.Content
			}
		}
		msg := map[string]any{"role": "assistant"}
		finish := "stop"
		switch {
		case !offered:
			msg["content"] = "I was not offered send_email"
		case toolResult == "":
			msg["content"] = nil
			msg["tool_calls"] = []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "send_email", "arguments": `{"to":"ceo@example.com","subject":"Q3 numbers"}`}}}
			finish = "tool_calls"
		default:
			msg["content"] = "Done. The tool said: " + toolResult
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// An agent loop end to end: a scripted OpenAI-compatible model, an agent
// that offers it the tools docket serve --mcp lists and performs its tool
// calls over MCP, and a person who approves the waiting email through the
// service's API while the agent's call stays open. The model's final answer
// carries the email's real output; one email was sent.
func TestAgentLoopThroughDocketMCP(t *testing.T) {
	w, s := serveMCP(t)
	model := scriptedModel(t)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waiting := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent-loop", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.base + "/mcp", HTTPClient: &http.Client{Transport: bearer{s.token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// The person: once a call waits, finds the waiting run through the
	// API (as the page lists it) and approves it.
	approved := make(chan error, 1)
	go func() {
		select {
		case <-waiting:
		case <-ctx.Done():
			approved <- ctx.Err()
			return
		}
		var list struct {
			Runs []struct {
				RunID string `json:"run_id"`
			} `json:"runs"`
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/runs?status=awaiting_approval", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			approved <- err
			return
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || len(list.Runs) != 1 {
			approved <- fmt.Errorf("waiting runs: %+v (%v)", list, err)
			return
		}
		if code := s.post(t, "/v1/runs/"+list.Runs[0].RunID+"/approve", map[string]any{"all": true}, nil); code != http.StatusOK {
			approved <- fmt.Errorf("approve: %d", code)
			return
		}
		approved <- nil
	}()

	// The agent loop.
	listed, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var offer []openai.Tool
	for _, tl := range listed.Tools {
		offer = append(offer, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: tl.Name, Description: tl.Description, Parameters: tl.InputSchema}})
	}
	ccfg := openai.DefaultConfig("none")
	ccfg.BaseURL = model.URL + "/v1"
	llm := openai.NewClientWithConfig(ccfg)
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Email the CEO the Q3 numbers."}}
	var final string
	for turn := 0; turn < 4 && final == ""; turn++ {
		resp, err := llm.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "scripted", Messages: msgs, Tools: offer})
		if err != nil {
			t.Fatal(err)
		}
		m := resp.Choices[0].Message
		msgs = append(msgs, m)
		if len(m.ToolCalls) == 0 {
			final = m.Content
			break
		}
		for _, tc := range m.ToolCalls {
			p := &mcp.CallToolParams{Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)}
			p.SetProgressToken(tc.ID)
			r, err := cs.CallTool(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: resultText(r)})
		}
	}
	if err := <-approved; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(final, `"sent_to":"ceo@example.com"`) {
		t.Errorf("final answer %q: want the email's output", final)
	}
	if e := w.Effects(); e.EmailRequests != 1 || e.Emails["ceo@example.com"] != 1 {
		t.Errorf("effects %+v: want one email", e)
	}
}
