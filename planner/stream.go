package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// streaming reports whether this planning's requests are streamed:
// Config.Stream "on", or "auto" with a progress function, unless the server
// refused streaming.
func (s *session) streaming() bool {
	p := s.p
	if p.noStream.Load() {
		return false
	}
	switch p.cfg.Stream {
	case StreamOn:
		return true
	case StreamOff:
		return false
	}
	return s.progress != nil
}

// errBadChunk is wrapped by a streamed reply that is not the chat
// completion chunk format: not retried (the server will answer the same).
var errBadChunk = errors.New("a streamed chunk is not a chat completion chunk")

// streamChunk is one "data:" event of a streamed reply, decoded leniently:
// arguments may come as JSON text (the API) or as a JSON object (some
// llama.cpp builds).
type streamChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             string `json:"role"`
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			Refusal          string `json:"refusal"`
			ToolCalls        []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

// assembler puts a streamed reply back together as the one chat completion
// the server would have answered without streaming, reporting text pieces
// and each tool call as soon as it is complete.
type assembler struct {
	s         *session
	resp      openai.ChatCompletionResponse
	msg       openai.ChatCompletionMessage
	finish    openai.FinishReason
	chunks    int
	reported  int  // tool calls reported as complete
	fixedArgs bool // arguments came as objects
}

func (a *assembler) add(raw []byte) error {
	var c streamChunk
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%w: %v: %s", errBadChunk, err, clip(string(raw), 200))
	}
	a.chunks++
	a.resp.ID, a.resp.Object, a.resp.Created = c.ID, "chat.completion", c.Created
	if c.Model != "" {
		a.resp.Model = c.Model
	}
	if c.Usage != nil {
		a.resp.Usage = *c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		if d.Content != "" {
			a.msg.Content += d.Content
			a.s.emit(Progress{Kind: ProgressText, Text: d.Content})
		}
		if r := d.ReasoningContent + d.Reasoning; r != "" {
			a.msg.ReasoningContent += r
			a.s.emit(Progress{Kind: ProgressReasoning, Text: r})
		}
		a.msg.Refusal += d.Refusal
		for _, tc := range d.ToolCalls {
			i := len(a.msg.ToolCalls) - 1
			switch {
			case tc.Index != nil:
				i = *tc.Index
			case i < 0 || (tc.ID != "" && tc.ID != a.msg.ToolCalls[i].ID):
				i = len(a.msg.ToolCalls)
			}
			if i < 0 || i > len(a.msg.ToolCalls)+64 {
				return fmt.Errorf("%w: tool call index %d", errBadChunk, i)
			}
			for len(a.msg.ToolCalls) <= i {
				a.msg.ToolCalls = append(a.msg.ToolCalls, openai.ToolCall{Type: openai.ToolTypeFunction})
			}
			if i > 0 {
				a.report(i) // a new call began: those before it are complete
			}
			call := &a.msg.ToolCalls[i]
			if tc.ID != "" {
				call.ID = tc.ID
			}
			if tc.Type != "" {
				call.Type = openai.ToolType(tc.Type)
			}
			call.Function.Name += tc.Function.Name
			args := bytes.TrimSpace(tc.Function.Arguments)
			switch {
			case len(args) == 0 || string(args) == "null":
			case args[0] == '"':
				var s string
				if err := json.Unmarshal(args, &s); err != nil {
					return fmt.Errorf("%w: arguments: %v", errBadChunk, err)
				}
				call.Function.Arguments += s
			default: // a JSON object (or array) instead of text
				call.Function.Arguments += string(compactBytes(args))
				a.fixedArgs = true
			}
		}
		if ch.FinishReason != "" {
			a.finish = openai.FinishReason(ch.FinishReason)
		}
	}
	return nil
}

// report says that calls [reported, upto) are complete.
func (a *assembler) report(upto int) {
	for ; a.reported < upto && a.reported < len(a.msg.ToolCalls); a.reported++ {
		c := a.msg.ToolCalls[a.reported]
		name := c.Function.Name
		if n, ok := a.s.p.names.registryName(name); ok {
			name = n
		}
		pr := Progress{Kind: ProgressCall, Tool: name}
		if json.Valid([]byte(c.Function.Arguments)) {
			pr.Args = json.RawMessage(compactBytes([]byte(c.Function.Arguments)))
		}
		a.s.emit(pr)
	}
}

func (a *assembler) response() openai.ChatCompletionResponse {
	a.report(len(a.msg.ToolCalls))
	a.msg.Role = openai.ChatMessageRoleAssistant
	r := a.resp
	r.Choices = []openai.ChatCompletionChoice{{Index: 0, Message: a.msg, FinishReason: a.finish}}
	return r
}

// stream makes one streamed request and assembles its reply. A server that
// answers a stream request with one JSON reply (it does not stream) is read
// as that reply.
func (s *session) stream(ctx context.Context, req openai.ChatCompletionRequest, at *attempt) (openai.ChatCompletionResponse, error) {
	st, err := s.p.client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return openai.ChatCompletionResponse{}, err
	}
	defer st.Close()
	a := &assembler{s: s}
	for {
		raw, err := st.RecvRaw()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return openai.ChatCompletionResponse{}, err
		}
		if err := a.add(raw); err != nil {
			return openai.ChatCompletionResponse{}, err
		}
	}
	if a.chunks == 0 {
		body, fixed := fixArguments(bytes.TrimSpace(at.body))
		at.fixedArgs = at.fixedArgs || fixed
		var resp openai.ChatCompletionResponse
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) == 0 {
			if msg, bad := errorInBody(body); bad {
				return resp, &ModelError{Status: at.Status, Attempts: at.Attempt, Msg: "the server answered with an error: " + msg}
			}
			return resp, fmt.Errorf("%w: the streamed reply held no chunk: %s", errBadChunk, clip(strings.TrimSpace(string(body)), 200))
		}
		return resp, nil
	}
	at.fixedArgs = at.fixedArgs || a.fixedArgs
	resp := a.response()
	at.assembled, _ = json.Marshal(resp)
	at.Streamed = true
	return resp, nil
}
