package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	if p.mustStream.Load() {
		return true
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

// streamOnly handles an answer to a request without streaming that says
// the server only streams (an HTTP 400 asking for stream: true): unless
// streaming is off by configuration, requests are streamed from now on and
// it reports true (send again). Said once per Planner.
func (s *session) streamOnly(status int, msg string, at *attempt) bool {
	p := s.p
	if !streamRequired(status, msg) || p.cfg.Stream == StreamOff || p.mustStream.Load() {
		return false
	}
	p.mustStream.Store(true)
	if p.noStream.Swap(false) {
		// streaming was refused earlier: for its stream_options, then
		p.noStreamOpt.Store(true)
	}
	at.Error += " (sent again with streaming)"
	s.warn(warnStreamOnly, "the server only streams (it refused a request without stream: true); docket asks for streamed replies from now on (--stream on skips the refused request)")
	return true
}

// streamRequired reports whether an HTTP 400 (or 422) to a request without
// streaming asks for streaming.
func streamRequired(status int, msg string) bool {
	return (status == 400 || status == 422) && mentionsStream(msg)
}

// mentionsStream reports whether msg names streaming ("stream",
// "streaming", "stream_options"; not "upstream").
func mentionsStream(msg string) bool {
	m := strings.ToLower(msg)
	for off := 0; ; {
		i := strings.Index(m[off:], "stream")
		if i < 0 {
			return false
		}
		i += off
		if i == 0 || m[i-1] < 'a' || m[i-1] > 'z' {
			return true
		}
		off = i + 1
	}
}

// streamHint is added to the error of a request refused because the server
// only streams while streaming is off.
func streamHint(streamed bool, status int, msg string) string {
	if streamed || !streamRequired(status, msg) {
		return ""
	}
	return "; the server only answers streamed requests: set --stream auto or on (DOCKET_STREAM)"
}

// isEventStream reports whether an answer is server-sent events: by its
// Content-Type, or by its body when a server labels its stream as JSON.
func isEventStream(h http.Header, body []byte) bool {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream") {
		return true
	}
	return bytes.HasPrefix(bytes.TrimSpace(body), []byte("data:"))
}

// readEvents assembles a whole body of server-sent events (the answer of a
// server that streamed although not asked) into the chat completion it
// streams, as stream does for a streamed request: "data:" fields, an event
// per blank line, comments and other fields skipped, up to "data: [DONE]".
func (s *session) readEvents(body []byte, at *attempt) (openai.ChatCompletionResponse, error) {
	a := &assembler{s: s}
	var data []byte
	done := false
	dispatch := func() error {
		if data == nil || done {
			data = nil
			return nil
		}
		ev := bytes.TrimSpace(data)
		data = nil
		if string(ev) == "[DONE]" {
			done = true
			return nil
		}
		if msg, bad := errorInBody(ev); bad {
			return &ModelError{Status: at.Status, Attempts: at.Attempt, Msg: "the server answered with an error in its stream: " + s.p.redact(msg)}
		}
		return a.add(ev)
	}
	for _, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			if err := dispatch(); err != nil {
				return openai.ChatCompletionResponse{}, err
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // a comment (":"), event:, id:, retry:
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if data != nil {
			data = append(data, '\n')
		}
		data = append(append([]byte{}, data...), value...)
	}
	if err := dispatch(); err != nil {
		return openai.ChatCompletionResponse{}, err
	}
	if a.chunks == 0 {
		return openai.ChatCompletionResponse{}, fmt.Errorf("%w: the stream held no chunk: %s", errBadChunk, clip(strings.TrimSpace(string(body)), 200))
	}
	at.fixedArgs = at.fixedArgs || a.fixedArgs
	resp := a.response()
	at.assembled, _ = json.Marshal(resp)
	at.Streamed = true
	return resp, nil
}
