package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/plan"
)

// actionBranch is the schema of one plan action calling the tool named wire.
func actionBranch(wire string, args json.RawMessage) map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"id":         map[string]any{"type": "string"},
			"tool":       map[string]any{"type": "string", "enum": []any{wire}},
			"args":       args,
			"depends_on": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"why":        map[string]any{"type": "string"},
		},
		"required":             []any{"args", "depends_on", "id", "tool", "why"},
		"additionalProperties": false,
	}
}

// planFormat is the response_format of ModeJSONSchema: {"actions": [...]},
// each action one of the tool branches.
func planFormat(branches []any, strict bool) *openai.ChatCompletionResponseFormat {
	items := map[string]any{"anyOf": branches}
	if len(branches) == 0 {
		items = map[string]any{"type": "object", "properties": map[string]any{}, "required": []any{}, "additionalProperties": false}
	}
	schema := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"actions": map[string]any{"type": "array", "items": items}},
		"required":             []any{"actions"},
		"additionalProperties": false,
	}
	raw, _ := marshalNoEscape(schema)
	return &openai.ChatCompletionResponseFormat{
		Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
		JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "docket_plan", Schema: raw, Strict: strict},
	}
}

// structuredAction is one action as the model writes it in ModeJSONSchema.
type structuredAction struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args"`
	DependsOn []string        `json:"depends_on"`
	Why       string          `json:"why"`
}

// structured decodes a ModeJSONSchema reply into s.actions, or returns the
// problems (and appends the reply and the problems to the conversation).
func (s *session) structured(msg openai.ChatCompletionMessage) []Problem {
	actions, problems := s.p.decodeStructured(msg.Content)
	s.msgs = append(s.msgs, assistantText(msg))
	if len(problems) == 0 {
		if _, pre := findPlanObject(msg.Content); pre {
			s.warn(warnPreamble, "the model wrote text (prose, a <think> block or a fence) around the plan object; docket read the object")
		}
		s.actions = actions
		for i := range actions {
			a := actions[i]
			s.emit(Progress{Kind: ProgressAction, Tool: a.Tool, Action: &a})
		}
		return nil
	}
	for i := range problems {
		problems[i].Round = s.rounds
	}
	var b strings.Builder
	b.WriteString("[docket] The plan was not accepted. Problems:\n")
	for _, pr := range problems {
		b.WriteString("- ")
		b.WriteString(pr.String())
		b.WriteString("\n")
	}
	b.WriteString(`Reply with the corrected complete plan as one JSON object {"actions": [...]}.`)
	s.msgs = append(s.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: b.String()})
	return problems
}

// decodeStructured turns the text of a structured reply into validated
// actions. It never panics on any input (fuzzed).
func (p *Planner) decodeStructured(content string) ([]plan.Action, []Problem) {
	text, _ := findPlanObject(content)
	if text == "" {
		return nil, []Problem{{Msg: "the reply was empty"}}
	}
	if _, err := plan.Canonical([]byte(text)); err != nil {
		return nil, []Problem{{Msg: "the reply is not one valid JSON object: " + err.Error()}}
	}
	var doc struct {
		Actions []json.RawMessage `json:"actions"`
	}
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, []Problem{{Msg: "the reply is not {\"actions\": [...]}: " + err.Error()}}
	}
	if len(doc.Actions) > plan.MaxActions {
		return nil, []Problem{{Msg: fmt.Sprintf("%d actions, more than %d", len(doc.Actions), plan.MaxActions)}}
	}
	var problems []Problem
	actions := make([]plan.Action, 0, len(doc.Actions))
	for i, raw := range doc.Actions {
		var sa structuredAction
		d := json.NewDecoder(bytes.NewReader(raw))
		if err := d.Decode(&sa); err != nil {
			problems = append(problems, Problem{Field: fmt.Sprintf("actions[%d]", i), Msg: "not an action object: " + err.Error()})
			continue
		}
		if sa.ID == "" {
			sa.ID = fmt.Sprintf("a%d", i+1)
		}
		name, ok := p.names.registryName(sa.Tool)
		if !ok {
			problems = append(problems, Problem{Action: sa.ID, Tool: sa.Tool, Field: "tool", Msg: fmt.Sprintf("unknown tool %q; the tools are: %s", sa.Tool, strings.Join(p.wireNames(), ", "))})
			continue
		}
		args, refs, err := normalizeArgs(string(sa.Args), p.shapes[name])
		if err != nil {
			problems = append(problems, Problem{Action: sa.ID, Tool: sa.Tool, Field: "args", Msg: err.Error()})
			continue
		}
		deps := append([]string(nil), sa.DependsOn...)
		for _, r := range refs {
			if !contains(deps, r.Action) {
				deps = append(deps, r.Action)
			}
		}
		actions = append(actions, plan.Action{ID: sa.ID, Tool: name, Args: args, DependsOn: deps, Why: clip(strings.TrimSpace(sa.Why), 500)})
	}
	if len(problems) > 0 {
		return nil, problems
	}
	candidate := &plan.Plan{Actions: actions}
	if err := candidate.Validate(p.cfg.Tools); err != nil {
		return nil, planProblems(err)
	}
	return actions, nil
}

// stripFences removes a Markdown code fence some servers wrap JSON in.
func stripFences(s string) string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "```") {
		return s
	}
	s = strings.TrimPrefix(s, "```")
	if nl := strings.IndexByte(s, '\n'); nl >= 0 {
		s = s[nl+1:]
	} else {
		return ""
	}
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, "```")
	return strings.TrimSpace(s)
}
