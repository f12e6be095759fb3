package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Budget limits what the actions of some tools may spend: the sum of a
// numeric argument (Sum) or their number (no Sum), per scope (a run, a
// tenant: the identity that created the run, or all runs), per window (a
// fixed window of Window, aligned to UTC: "24h" is a UTC day) and per
// group (the value of the GroupBy argument). The executor measures each
// action before its claim; the ledger reserves the amount with the claim.
// Exceeding the limit makes the action's outcome the budget's: approve
// (with approvers as a rule's) or deny.
type Budget struct {
	// Name names the budget in usage, decisions and events.
	Name string
	// Where is its place in its file: `budgets[0]`.
	Where string
	// Tools are the tools it counts (registry names; "server.tool" for MCP).
	Tools []string
	// Per is "run", "tenant" (default) or "all".
	Per string
	// Window is the window's length (0: no window, for ever).
	Window time.Duration
	// Sum is the argument summed (a dot path: "amount", "payment.amount");
	// "": each action counts 1.
	Sum string
	// GroupBy is the argument whose value keeps its own usage ("currency").
	GroupBy string
	// Limit is the most the bucket may hold, a decimal.
	Limit string
	// Outcome when an action would exceed the limit: approve or deny.
	Outcome       Outcome
	Approvers     int
	ApproverNames []string
	// ApproverGroups: groups whose members may approve, as a rule's. Left
	// out of the tools hash when empty (the registry hashes budgets as
	// JSON), so files without groups keep their hash.
	ApproverGroups []string `json:",omitempty"`
	ExcludeCreator bool
	TTL            time.Duration
	Message        string
}

// Scopes of a budget.
const (
	PerRun    = "run"
	PerTenant = "tenant"
	PerAll    = "all"
)

// Applies reports whether the budget counts tool's actions.
func (b *Budget) Applies(tool string) bool { return slices.Contains(b.Tools, tool) }

// Measure is what one action takes from a budget.
type Measure struct {
	Scope  string    // "run:ID", "tenant:IDENTITY" ("tenant:-" when not known), "all"
	Window time.Time // start of the window (zero: no window)
	Group  string    // the group's value ("": no group)
	Amount string    // exact decimal, at least 0
}

// Measure computes what an action with these resolved arguments, in run
// runID created by creator, takes at now. An argument that is missing or
// not a number (Sum), negative, or not a scalar (GroupBy) is an error: the
// executor denies the action (fail closed).
func (b *Budget) Measure(args json.RawMessage, runID, creator string, now time.Time) (Measure, error) {
	m := Measure{Amount: "1"}
	switch b.Per {
	case PerRun:
		m.Scope = "run:" + runID
	case PerAll:
		m.Scope = "all"
	default:
		m.Scope = "tenant:" + cmpOr(creator, "-")
	}
	if b.Window > 0 {
		m.Window = now.UTC().Truncate(b.Window)
	}
	if b.Sum == "" && b.GroupBy == "" {
		return m, nil
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return m, fmt.Errorf("budget %s: arguments are not JSON: %v", b.Name, err)
	}
	if b.Sum != "" {
		x, ok := at(v, b.Sum)
		if !ok {
			return m, fmt.Errorf("budget %s: argument %s is missing", b.Name, b.Sum)
		}
		var s string
		switch n := x.(type) {
		case json.Number:
			s = string(n)
		case string:
			s = n
		default:
			return m, fmt.Errorf("budget %s: argument %s is not a number", b.Name, b.Sum)
		}
		dec, err := ParseDecimal(s)
		if err != nil {
			return m, fmt.Errorf("budget %s: argument %s: %v", b.Name, b.Sum, err)
		}
		if dec.rat().Sign() < 0 {
			return m, fmt.Errorf("budget %s: argument %s is negative (%s): a budget never gives back", b.Name, b.Sum, s)
		}
		m.Amount = dec.String()
	}
	if b.GroupBy != "" {
		x, ok := at(v, b.GroupBy)
		if !ok {
			return m, fmt.Errorf("budget %s: argument %s (group_by) is missing", b.Name, b.GroupBy)
		}
		switch g := x.(type) {
		case string:
			m.Group = g
		case json.Number:
			m.Group = string(g)
		case bool:
			m.Group = fmt.Sprint(g)
		default:
			return m, fmt.Errorf("budget %s: argument %s (group_by) is not a string, number or boolean", b.Name, b.GroupBy)
		}
	}
	return m, nil
}

// at follows a dot path through JSON objects.
func at(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = o[k]; !ok {
			return nil, false
		}
	}
	return v, v != nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// CheckBudgets checks budgets in place (normalising Limit and Approvers),
// reporting every problem at once (*Error) with the budget's place and
// field. known reports whether a tool name exists (nil: not checked).
func CheckBudgets(bs []Budget, known func(tool string) bool) error {
	var probs []Problem
	add := func(b *Budget, field, format string, a ...any) {
		probs = append(probs, Problem{Where: join(b.Where, field), Msg: fmt.Sprintf(format, a...)})
	}
	names := map[string]bool{}
	for i := range bs {
		b := &bs[i]
		switch {
		case strings.TrimSpace(b.Name) == "":
			add(b, "name", "missing (budgets are named in usage and events)")
		case names[b.Name]:
			add(b, "name", "duplicate budget name %q", b.Name)
		}
		names[b.Name] = true
		if len(b.Tools) == 0 {
			add(b, "tools", "must name at least one tool")
		}
		for _, t := range b.Tools {
			if known != nil && !known(t) {
				add(b, "tools", "unknown tool %q", t)
			}
		}
		switch b.Per {
		case "":
			b.Per = PerTenant
		case PerRun, PerTenant, PerAll:
		default:
			add(b, "per", `must be "run", "tenant" or "all", got %q`, b.Per)
		}
		if b.Window < 0 {
			add(b, "window", "must not be negative")
		}
		for _, p := range []struct{ field, path string }{{"sum", b.Sum}, {"group_by", b.GroupBy}} {
			if p.path != "" && slices.Contains(strings.Split(p.path, "."), "") {
				add(b, p.field, "%q is not an argument path (names separated by dots)", p.path)
			}
		}
		if lim, err := ParseDecimal(b.Limit); err != nil {
			add(b, "limit", "must be a decimal number: %v", err)
		} else if lim.rat().Sign() < 0 {
			add(b, "limit", "must not be negative")
		} else {
			b.Limit = lim.String()
			if b.Sum == "" && !lim.rat().IsInt() {
				add(b, "limit", "a count budget's limit is a whole number")
			}
		}
		if b.Outcome != Approve && b.Outcome != Deny {
			add(b, "outcome", `must be "approve" or "deny" (what exceeding the budget means), got %q`, b.Outcome)
		}
		if b.Approvers < 0 {
			add(b, "approvers", "must be at least 1")
		}
		if b.Outcome == Deny && (b.Approvers > 0 || len(b.ApproverNames) > 0 || b.ExcludeCreator || b.TTL > 0) {
			add(b, "outcome", "approvers, approver_names, exclude_creator and ttl belong to an approve budget")
		}
		if b.Outcome == Deny && len(b.ApproverGroups) > 0 {
			add(b, "approver_groups", "belongs to an approve budget")
		}
		if msg := CheckGroups(b.ApproverGroups); msg != "" {
			add(b, "approver_groups", "%s", msg)
		}
		if b.Outcome == Approve && b.Approvers == 0 {
			b.Approvers = 1
		}
		if b.TTL < 0 {
			add(b, "ttl", "must not be negative")
		}
	}
	if len(probs) > 0 {
		return &Error{Problems: probs}
	}
	return nil
}
