package toolsfile

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/docketrun/docket/tools/policy"
)

// budgetFields are the fields of one budget.
var budgetFields = []string{"name", "tools", "per", "window", "sum", "group_by", "limit", "outcome",
	"approvers", "approver_names", "approver_groups", "exclude_creator", "ttl", "message"}

// budgets parses and checks a "budgets" array: every field that is not well
// formed is a problem naming the budget's place and field
// (budgets[1].limit). known reports whether a tool exists (nil: not
// checked, as in a separate policy file).
func (p *parser) budgets(raw json.RawMessage, label string, known func(string) bool) []policy.Budget {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		p.add("budgets", "must be an array of budgets")
		return nil
	}
	var out []policy.Budget
	bad := false
	for i, r := range list {
		at := fmt.Sprintf("budgets[%d]", i)
		m := p.object(r, at, budgetFields, []string{"name", "tools", "limit", "outcome"})
		if m == nil {
			bad = true
			continue
		}
		b := policy.Budget{Where: label + at}
		b.Name = p.str(m, at, "name")
		if err := json.Unmarshal(m["tools"], &b.Tools); err != nil {
			p.add(at+".tools", "must be an array of tool names")
			bad = true
		}
		b.Per = p.str(m, at, "per")
		b.Window = p.duration(m, at, "window")
		b.Sum = p.str(m, at, "sum")
		b.GroupBy = p.str(m, at, "group_by")
		var lim json.Number
		if err := json.Unmarshal(m["limit"], &lim); err != nil {
			var s string
			if json.Unmarshal(m["limit"], &s) != nil {
				p.add(at+".limit", "must be a number (or a decimal in a string)")
				bad = true
			}
			lim = json.Number(s)
		}
		b.Limit = string(lim)
		b.Outcome = policy.Outcome(p.str(m, at, "outcome"))
		b.Message = p.str(m, at, "message")
		if v, ok := m["approvers"]; ok {
			if err := json.Unmarshal(v, &b.Approvers); err != nil || b.Approvers < 1 {
				p.add(at+".approvers", "must be a whole number of at least 1")
				b.Approvers = 0
			}
		}
		if v, ok := m["approver_names"]; ok {
			if err := json.Unmarshal(v, &b.ApproverNames); err != nil {
				p.add(at+".approver_names", "must be an array of identities (\"token:NAME\", \"cli:USER\")")
			}
		}
		if v, ok := m["approver_groups"]; ok {
			if err := json.Unmarshal(v, &b.ApproverGroups); err != nil {
				p.add(at+".approver_groups", "must be an array of group names (the groups of tokens in docket serve's tokens file)")
			}
		}
		if v, ok := m["exclude_creator"]; ok {
			if err := json.Unmarshal(v, &b.ExcludeCreator); err != nil {
				p.add(at+".exclude_creator", "must be true or false")
			}
		}
		b.TTL = p.duration(m, at, "ttl")
		out = append(out, b)
	}
	if err := policy.CheckBudgets(out, known); err != nil {
		if pe, ok := err.(*policy.Error); ok {
			for _, pr := range pe.Problems {
				field := pr.Where[len(label):]
				if slices.ContainsFunc(p.problems, func(q Problem) bool { return q.Tool == "" && q.Field == field }) {
					continue // said already (a required field that is missing)
				}
				p.add(field, "%s", pr.Msg)
			}
		} else {
			p.add("budgets", "%v", err)
		}
		return nil
	}
	if bad {
		return nil
	}
	return out
}
