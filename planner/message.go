package planner

import (
	"fmt"
	"strconv"

	openai "github.com/sashabaranov/go-openai"
)

// Message is one message of a conversation, docket's own type: Request and
// Result carry it, and so do docket's HTTP API and CLI chat. Its JSON is the
// OpenAI chat format's (the shape the API has always accepted), and the
// planner converts it to and from go-openai's type only when it talks to the
// model, so that a go-openai upgrade changes neither docket's HTTP API nor
// its library API.
type Message struct {
	Role    string `json:"role"` // RoleSystem, RoleUser, RoleAssistant or RoleTool
	Content string `json:"content,omitempty"`
	Refusal string `json:"refusal,omitempty"`
	Name    string `json:"name,omitempty"`
	// ReasoningContent is a reasoning model's thinking, kept as it came.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// FunctionCall is the legacy single function call of an assistant message.
	FunctionCall *FunctionCall `json:"function_call,omitempty"`
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID names the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall is a called tool's name and its arguments (JSON text).
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// Usage counts the model's tokens for one planning.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Provenance is how a plan was made, as the planner records it in the
// plan's Meta (next to the model, mode and hashes) and reads it back.
type Provenance struct {
	Usage   Usage
	Rounds  int // model turns
	Repairs int // replies with problems the model fixed
}

// provenanceKeys are the Meta keys of a Provenance, in one place.
const (
	metaPromptTokens     = "prompt_tokens"
	metaCompletionTokens = "completion_tokens"
	metaTotalTokens      = "total_tokens"
	metaRounds           = "rounds"
	metaRepairs          = "repairs"
)

// addTo writes p into a plan's Meta.
func (p Provenance) addTo(meta map[string]string) {
	meta[metaPromptTokens] = strconv.Itoa(p.Usage.PromptTokens)
	meta[metaCompletionTokens] = strconv.Itoa(p.Usage.CompletionTokens)
	meta[metaTotalTokens] = strconv.Itoa(p.Usage.TotalTokens)
	meta[metaRounds] = strconv.Itoa(p.Rounds)
	meta[metaRepairs] = strconv.Itoa(p.Repairs)
}

// ReadProvenance reads a Provenance back from a plan's Meta. A key that is
// absent (a plan recorded by another program) counts as 0; one that is not
// a non-negative integer is an error naming it.
func ReadProvenance(meta map[string]string) (Provenance, error) {
	var p Provenance
	for _, f := range []struct {
		key string
		to  *int
	}{
		{metaPromptTokens, &p.Usage.PromptTokens}, {metaCompletionTokens, &p.Usage.CompletionTokens},
		{metaTotalTokens, &p.Usage.TotalTokens}, {metaRounds, &p.Rounds}, {metaRepairs, &p.Repairs},
	} {
		s, ok := meta[f.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Provenance{}, fmt.Errorf("planner: plan meta %s = %q: not a count", f.key, s)
		}
		*f.to = n
	}
	return p, nil
}

// toOpenAI converts messages for the model.
func toOpenAI(msgs []Message) []openai.ChatCompletionMessage {
	if msgs == nil {
		return nil
	}
	out := make([]openai.ChatCompletionMessage, len(msgs))
	for i, m := range msgs {
		o := openai.ChatCompletionMessage{Role: m.Role, Content: m.Content, Refusal: m.Refusal, Name: m.Name,
			ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID}
		if m.FunctionCall != nil {
			o.FunctionCall = &openai.FunctionCall{Name: m.FunctionCall.Name, Arguments: m.FunctionCall.Arguments}
		}
		for _, c := range m.ToolCalls {
			o.ToolCalls = append(o.ToolCalls, openai.ToolCall{ID: c.ID, Type: openai.ToolType(c.Type),
				Function: openai.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		out[i] = o
	}
	return out
}

// fromOpenAI converts the model's messages to docket's.
func fromOpenAI(msgs []openai.ChatCompletionMessage) []Message {
	if msgs == nil {
		return nil
	}
	out := make([]Message, len(msgs))
	for i, o := range msgs {
		m := Message{Role: o.Role, Content: o.Content, Refusal: o.Refusal, Name: o.Name,
			ReasoningContent: o.ReasoningContent, ToolCallID: o.ToolCallID}
		if m.Content == "" {
			for _, part := range o.MultiContent {
				m.Content += part.Text
			}
		}
		if o.FunctionCall != nil {
			m.FunctionCall = &FunctionCall{Name: o.FunctionCall.Name, Arguments: o.FunctionCall.Arguments}
		}
		for _, c := range o.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: c.ID, Type: string(c.Type),
				Function: FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		out[i] = m
	}
	return out
}

func usageOf(u openai.Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}
