package planner

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

const toolsPromptHead = `You are the planner of docket, which performs tool calls for the user exactly once, after a review.

How your tool calls are handled:
- Tools whose description starts with [read-only] run immediately and you see their results. Use them to look things up before you decide.
- Every other tool call is NOT performed now. It is queued as a plan action and you receive a placeholder naming its action id (a1, a2, ...). The whole plan is reviewed and then performed.
- A queued action's output does not exist yet. To pass it to a later call, use the string "${a1.output}" or "${a1.output.FIELD}" (for example "${a1.output.id}") as the whole value of an argument, never inside other text. The later call then runs after a1.
`

const toolsPromptTail = `- Queue each intended side effect once. Do not repeat a call to check it: it has not run yet.
- If a call is rejected, read the problem, and make a corrected call.
- When the plan is complete, reply with a short summary for the user and make no more tool calls. If nothing needs doing, say so without calling tools.`

// orderTurns and orderReferences are the prompt's ordering rule, by Order.
const (
	orderTurns = `- Calls made together in one message are independent and may run in any order, at the same time: never reference an action queued in the same message.
- A call you make in a later message runs after the actions you queued in earlier messages. When one action must come after another (for example "email the customer after the refund"), even without using its output, make it in a later message. Make calls that can run in any order together in one message.
`
	orderReferences = `- Calls made together in one message are independent: never reference an action queued in the same message. Make the dependent call in a later message.
`
)

// toolsPrompt is ModeTools' system prompt under order o.
func toolsPrompt(o Order) string {
	if o == OrderReferences {
		return toolsPromptHead + orderReferences + toolsPromptTail
	}
	return toolsPromptHead + orderTurns + toolsPromptTail
}

const jsonPrompt = `You are the planner of docket, which performs tool calls for the user exactly once, after a review.

Reply with one JSON object and nothing else: {"actions": [...]}. Each action is {"id", "tool", "args", "depends_on", "why"}:
- "id": a1, a2, ... in order; "tool": one of the tools listed below; "args": the tool's arguments, matching its schema.
- To use an earlier action's output, write the string "${a1.output}" or "${a1.output.FIELD}" as the whole value of an argument (never inside other text), and list a1 in "depends_on".
- "why": a short reason. Queue each intended side effect once. If nothing needs doing, reply {"actions": []}.

Tools:
`

// toolDescription is what the model reads about a tool: its effect class
// first, then its description, then what the policy says of its calls
// (which need people, which are denied; global rules apply to every tool),
// then the budgets that count its calls.
func toolDescription(s tools.Spec, global []policy.Rule, budgets []policy.Budget) string {
	var tag string
	if s.Class == tools.ReadOnly {
		tag = "[read-only] Runs now; you see the result."
	} else {
		tag = fmt.Sprintf("[%s] Not run now: queued as a plan action, performed after review.", s.Class)
	}
	if d := strings.TrimSpace(s.Description); d != "" {
		tag += " " + d
	}
	if s.Class == tools.ReadOnly {
		return tag
	}
	return tag + policyNote(s, global) + budgetNote(s, budgets)
}

// policyNote tells the model which calls of s need people or are denied,
// by the policy rules (the tools file's approval and approve_above are not
// repeated here: descriptions of tools files without rules stay as they were).
// The executor decides, whatever the model is told or tells.
func policyNote(s tools.Spec, global []policy.Rule) string {
	var parts []string
	for _, r := range append(append([]policy.Rule(nil), s.Policy...), global...) {
		if r.Func != nil {
			continue
		}
		switch r.Outcome {
		case policy.Deny:
			p := fmt.Sprintf("a call where %s is denied", r.When)
			if r.Message != "" {
				p += " (" + r.Message + ")"
			}
			parts = append(parts, p)
		case policy.Approve:
			parts = append(parts, fmt.Sprintf("a call where %s waits for %d %s to approve it", r.When, r.Approvers, pluralWord(r.Approvers, "person", "people")))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return " Policy (checked before it runs, not by you): " + strings.Join(parts, "; ") + "."
}

// budgetNote tells the model the budgets that count s's calls: the limit,
// over what (a summed argument or the number of calls), per what scope,
// window and group, and what happens to a call past it. It says what is
// declared, not the usage (that changes; the executor checks it before
// each claim, whatever the model is told).
func budgetNote(s tools.Spec, budgets []policy.Budget) string {
	var parts []string
	for i := range budgets {
		b := &budgets[i]
		if !b.Applies(s.Name) {
			continue
		}
		p := b.Name + ": at most "
		if b.Sum != "" {
			p += b.Limit + " of " + b.Sum + " summed"
		} else {
			p += b.Limit + " " + pluralWord(countOf(b.Limit), "call", "calls")
		}
		if len(b.Tools) > 1 {
			p += " over the calls of " + strings.Join(b.Tools, ", ")
		}
		switch b.Per {
		case policy.PerRun:
			p += " per run"
		case policy.PerAll:
			p += " across all runs"
		default:
			p += " per requester (whoever created the run)"
		}
		if b.GroupBy != "" {
			p += " and per value of " + b.GroupBy
		}
		if b.Window > 0 {
			p += " per " + shortDuration(b.Window) + " (UTC)"
		}
		if b.Outcome == policy.Deny {
			p += "; past it a call is denied"
		} else {
			p += fmt.Sprintf("; past it a call waits for %d %s to approve it", b.Approvers, pluralWord(b.Approvers, "person", "people"))
		}
		if b.Message != "" {
			p += " (" + b.Message + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return " Budgets (checked before it runs, not by you): " + strings.Join(parts, "; ") + "."
}

// countOf is a count budget's limit as a number (for plural words).
func countOf(limit string) int {
	if limit == "1" {
		return 1
	}
	return 2
}

// shortDuration writes d without trailing zero units: 24h, 1h30m, 90s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// jsonToolList lists the tools for the structured-output prompt.
func jsonToolList(specs []tools.Spec, names nameMap, global []policy.Rule, budgets []policy.Budget) string {
	var b strings.Builder
	for _, s := range specs {
		fmt.Fprintf(&b, "- %s: %s\n  input schema: %s\n", names.toWire[s.Name], toolDescription(s, global, budgets), compactJSON(s.InputSchema))
	}
	return b.String()
}

func compactJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := marshalNoEscape(v)
	return string(b)
}

// placeholder is the tool result the model receives for a queued action:
// the references it can use, one per top-level output field when the tool
// declares an output schema.
func placeholder(id string, fields []string) string {
	var b strings.Builder
	b.Grow(300 + 40*len(fields))
	b.WriteString(`{"queued":true,"action_id":"`)
	b.WriteString(id)
	b.WriteString(`","output":"${`)
	b.WriteString(id)
	b.WriteString(`.output}"`)
	if len(fields) > 0 {
		b.WriteString(`,"fields":{`)
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			q := jsonString(f)
			b.WriteString(q)
			b.WriteString(`:"${`)
			b.WriteString(id)
			b.WriteString(`.output.`)
			b.WriteString(q[1 : len(q)-1])
			b.WriteString(`}"`)
		}
		b.WriteByte('}')
	}
	fmt.Fprintf(&b, `,"note":"Not performed yet: queued as plan action %s, performed after review. Pass \"${%s.output}\" or \"${%s.output.FIELD}\" as the whole value of an argument of a later call to use its result."}`, id, id, id)
	return b.String()
}

func jsonString(s string) string {
	b, _ := marshalNoEscape(s)
	return string(b)
}

// outputFields lists the top-level properties of an output schema that a
// reference can address (no '.', '{' or '}'), sorted.
func outputFields(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	var out []string
	for k := range s.Properties {
		if k != "" && !strings.ContainsAny(k, ".{}$") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
