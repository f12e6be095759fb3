package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

var (
	planFields   = []string{"id", "run_id", "goal", "actions", "meta", "created_at", "transcript"}
	actionFields = []string{"id", "tool", "args", "depends_on", "why", "not_before", "after"}
)

// Decode strictly parses a plan document and runs Check on it.
//
// The document must be one JSON object of at most MaxDocumentSize bytes
// (larger input is refused before parsing), nesting at most MaxDepth, valid
// UTF-8, without duplicate keys or trailing data. When it is not, Decode
// returns a nil plan and Errors with one Problem saying what and where.
// Otherwise it decodes every field strictly (unknown fields and wrong types,
// null included, are problems) and runs Check, and returns the plan together
// with Errors listing every problem found, or a nil error. Numbers inside
// args are kept as written (json.RawMessage), never decoded through float64.
func Decode(data []byte) (*Plan, error) {
	if len(data) > MaxDocumentSize {
		return nil, Errors{{Msg: fmt.Sprintf("%s: the plan is %d bytes, the limit is %d bytes (16 MiB)", ErrTooLarge, len(data), MaxDocumentSize)}}
	}
	s := &scanner{data: data}
	if err := s.run(); err != nil {
		var je *jsonError
		if errors.As(err, &je) {
			return nil, Errors{{Field: strings.TrimPrefix(je.path, "."), Msg: je.problemMsg()}}
		}
		return nil, Errors{{Msg: err.Error()}}
	}
	if k := kindOf(data); k != "object" {
		return nil, Errors{{Msg: fmt.Sprintf("a plan must be a JSON object, got %s", withArticle(k))}}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, Errors{{Msg: fmt.Sprintf("%s: %v", ErrInvalidJSON, err)}}
	}

	p := &Plan{}
	var planProblems []Problem
	bad := func(field, msg string) { planProblems = append(planProblems, Problem{Field: field, Msg: msg}) }
	for _, k := range unknownFields(top, planFields) {
		bad(k, fmt.Sprintf("unknown field: a plan has only %s", strings.Join(planFields, ", ")))
	}
	if msg := decodeString(top, "id", &p.ID); msg != "" {
		bad("id", msg)
	}
	if msg := decodeString(top, "run_id", &p.RunID); msg != "" {
		bad("run_id", msg)
	}
	if msg := decodeString(top, "goal", &p.Goal); msg != "" {
		bad("goal", msg)
	}
	if raw, ok := top["meta"]; ok {
		if k := kindOf(raw); k != "object" {
			bad("meta", "must be an object of strings, got "+k)
		} else {
			var m map[string]json.RawMessage
			_ = json.Unmarshal(raw, &m) // well-formed: scanned above
			p.Meta = make(map[string]string, len(m))
			for _, k := range sortedKeys(m) {
				var v string
				if msg := decodeString(m, k, &v); msg != "" {
					bad("meta."+k, msg)
					continue
				}
				p.Meta[k] = v
			}
		}
	}
	if _, ok := top["created_at"]; ok {
		var v string
		if msg := decodeString(top, "created_at", &v); msg != "" {
			bad("created_at", msg)
		} else if t, err := time.Parse(time.RFC3339Nano, v); err != nil {
			bad("created_at", fmt.Sprintf("must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %s", quoteShort(v)))
		} else {
			p.CreatedAt = t
		}
	}
	if raw, ok := top["transcript"]; ok && kindOf(raw) != "null" {
		p.Transcript = raw
	}

	var actionRaws []json.RawMessage
	switch raw, ok := top["actions"]; {
	case !ok:
		bad("actions", "required: an array of actions")
	case kindOf(raw) != "array":
		bad("actions", "must be an array of actions, got "+kindOf(raw))
	default:
		_ = json.Unmarshal(raw, &actionRaws) // well-formed: scanned above
		if len(actionRaws) > MaxActions {
			bad("actions", fmt.Sprintf("%d actions, the limit is %d", len(actionRaws), MaxActions))
			actionRaws = nil
		}
		p.Actions = make([]Action, len(actionRaws))
	}

	c := newChecker(p)
	c.plan = planProblems
	for i, raw := range actionRaws {
		decodeAction(c, i, raw)
	}
	c.run()
	if err := c.err(); err != nil {
		return p, err
	}
	return p, nil
}

// decodeAction decodes actions[i] into c.p.Actions[i], recording problems
// and marking the fields it reported so that Check does not repeat them.
func decodeAction(c *checker, i int, raw json.RawMessage) {
	a := &c.p.Actions[i]
	if k := kindOf(raw); k != "object" {
		c.add(i, "", "an action must be a JSON object, got "+withArticle(k))
		c.skip[fieldAt{i, "*"}] = true
		return
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m) // well-formed: scanned by Decode
	fail := func(field, msg string) {
		c.add(i, field, msg)
		c.skip[fieldAt{i, field}] = true
	}
	// The id first, so that later problems can name the action by it.
	if msg := decodeString(m, "id", &a.ID); msg != "" {
		fail("id", msg)
	}
	for _, k := range unknownFields(m, actionFields) {
		c.add(i, k, fmt.Sprintf("unknown field: an action has only %s", strings.Join(actionFields, ", ")))
	}
	if msg := decodeString(m, "tool", &a.Tool); msg != "" {
		fail("tool", msg)
	}
	if raw, ok := m["args"]; ok {
		a.Args = raw
	}
	if msg := decodeString(m, "why", &a.Why); msg != "" {
		fail("why", msg)
	}
	if msg := decodeString(m, "not_before", &a.NotBefore); msg != "" {
		fail("not_before", msg)
	}
	if msg := decodeString(m, "after", &a.After); msg != "" {
		fail("after", msg)
	}
	if raw, ok := m["depends_on"]; ok {
		if k := kindOf(raw); k != "array" {
			fail("depends_on", "must be an array of action ids, got "+k)
		} else {
			var items []json.RawMessage
			_ = json.Unmarshal(raw, &items)
			a.DependsOn = make([]string, 0, len(items))
			for j, item := range items {
				if k := kindOf(item); k != "string" {
					c.add(i, fmt.Sprintf("depends_on[%d]", j), "must be an action id (a string), got "+k)
					continue
				}
				var d string
				_ = json.Unmarshal(item, &d)
				a.DependsOn = append(a.DependsOn, d)
			}
		}
	}
}

// decodeString decodes m[key] into dst when present; it returns a problem
// message when the value is not a string.
func decodeString(m map[string]json.RawMessage, key string, dst *string) string {
	raw, ok := m[key]
	if !ok {
		return ""
	}
	if k := kindOf(raw); k != "string" {
		return "must be a string, got " + k
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Sprintf("%s: %v", ErrInvalidJSON, err)
	}
	return ""
}

// unknownFields lists the keys of m not in known, sorted.
func unknownFields(m map[string]json.RawMessage, known []string) []string {
	var out []string
	for k := range m {
		if !slices.Contains(known, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
