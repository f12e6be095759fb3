package toolsfile

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/docketrun/docket/tools/policy"
)

// ruleFields are the fields of one policy rule.
var ruleFields = []string{"name", "when", "outcome", "approvers", "approver_names", "approver_groups", "exclude_creator", "ttl", "message"}

// rules parses and compiles a "policy" array (a tool's, or the file's):
// every rule that is not well formed or whose "when" does not compile is a
// problem naming the tool and the field (policy[2].when), with CEL's line and
// column inside the expression.
func (p *parser) rules(raw json.RawMessage, where, label string) []policy.Rule {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		p.add(where, "must be an array of rules")
		return nil
	}
	var out []policy.Rule
	for i, r := range list {
		at := fmt.Sprintf("%s[%d]", where, i)
		m := p.object(r, at, ruleFields, []string{"when", "outcome"})
		if m == nil {
			continue
		}
		rule := policy.Rule{Where: label + at}
		rule.Name = p.str(m, at, "name")
		rule.When = p.str(m, at, "when")
		rule.Outcome = policy.Outcome(p.str(m, at, "outcome"))
		rule.Message = p.str(m, at, "message")
		if v, ok := m["approvers"]; ok {
			if err := json.Unmarshal(v, &rule.Approvers); err != nil || rule.Approvers < 1 {
				p.add(at+".approvers", "must be a whole number of at least 1")
				rule.Approvers = 0
			}
		}
		if v, ok := m["approver_names"]; ok {
			if err := json.Unmarshal(v, &rule.ApproverNames); err != nil {
				p.add(at+".approver_names", "must be an array of identities (\"token:NAME\", \"cli:USER\")")
			}
		}
		if v, ok := m["approver_groups"]; ok {
			if err := json.Unmarshal(v, &rule.ApproverGroups); err != nil {
				p.add(at+".approver_groups", "must be an array of group names (the groups of tokens in docket serve's tokens file)")
			}
		}
		if v, ok := m["exclude_creator"]; ok {
			if err := json.Unmarshal(v, &rule.ExcludeCreator); err != nil {
				p.add(at+".exclude_creator", "must be true or false")
			}
		}
		rule.TTL = p.duration(m, at, "ttl")
		out = append(out, rule)
	}
	if err := policy.Compile(out); err != nil {
		if pe, ok := err.(*policy.Error); ok {
			for _, pr := range pe.Problems {
				p.add(pr.Where[len(label):], "%s", pr.Msg)
			}
		} else {
			p.add(where, "%v", err)
		}
		return nil
	}
	return out
}

// PolicyFile is a separate policy file (docket --policy FILE):
// {"version": 1, "policy"?: [RULE...], "budgets"?: [BUDGET...]}, rules and
// budgets as in the tools file.
type PolicyFile struct {
	Rules []policy.Rule
	// Budgets are the file's budgets (their tools are checked when the
	// tools file is known: CheckBudgetTools).
	Budgets []policy.Budget
}

// LoadPolicy reads and compiles a policy file. A file that cannot be read
// is an error naming it; a wrong one a *LoadError listing every problem.
func LoadPolicy(path string) (*PolicyFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading policy file %s: %w", path, err)
	}
	p := &parser{}
	top := p.object(data, "", []string{"version", "policy", "budgets", "$schema"}, []string{"version"})
	f := &PolicyFile{}
	if top == nil && !json.Valid(data) {
		p.problems = []Problem{{Msg: "not valid JSON: " + jsonErr(data)}}
	}
	if top != nil {
		var v int
		if err := json.Unmarshal(top["version"], &v); err != nil || v != 1 {
			p.add("version", "unsupported version %s (want 1)", top["version"])
		}
		if raw, ok := top["policy"]; ok {
			f.Rules = p.rules(raw, "policy", path+" ")
		}
		if raw, ok := top["budgets"]; ok {
			f.Budgets = p.budgets(raw, path+" ", nil)
		}
	}
	if len(p.problems) > 0 {
		return nil, &LoadError{Source: path, Problems: p.problems}
	}
	return f, nil
}
