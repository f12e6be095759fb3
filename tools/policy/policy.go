// Package policy is docket's policy as code: rules written in CEL (the
// expression language of Kubernetes admission) that decide, for one action
// with its resolved arguments, whether it may run (allow), needs N distinct
// people (approve) or must not run (deny). The tools file holds them (per
// tool and for all tools, package tools/toolsfile parses them) and a
// separate file may add more (docket --policy FILE); the executor evaluates
// them after references resolve and before the claim. The model never does.
//
// A rule's "when" sees three variables:
//
//	action  {id, tool, class, key, args}          args: the resolved arguments
//	run     {id, goal, creator, revision, totals} totals[tool] = {count, sum: {arg: decimal}}
//	now     timestamp
//
// Numbers keep their exact value (see decimal.go): 1200.10 is never another
// amount. Every matching rule counts and the strictest wins: deny over
// approve, approve with more approvers over fewer, approve over allow; among
// equals the first in order (tool rules, then global ones). A rule that
// fails at run time denies (fail closed) and says why.
//
// Imports: the standard library and github.com/google/cel-go only (no
// docket package), so that tools, toolsfile and executor may all import it.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Outcome is what a rule decides.
type Outcome string

const (
	Allow   Outcome = "allow"
	Approve Outcome = "approve"
	Deny    Outcome = "deny"
)

// Valid reports whether o is one of the three outcomes.
func (o Outcome) Valid() bool { return o == Allow || o == Approve || o == Deny }

// Rule is one rule. Build it from a file (toolsfile) or in Go, then Compile.
type Rule struct {
	// Name names the rule in decisions, events and the audit ("" : Where).
	Name string
	// Where is the rule's place in its file, for errors and decisions:
	// `tool "pay" policy[0]`, `policy[2]`, `--policy policy.json policy[0]`.
	Where string
	// When is the CEL condition (a bool). Empty with Func set.
	When string
	// Func is a built-in condition instead of When (the tools file's
	// approval/approve_above sugar): whether the rule applies, and why.
	Func func(args json.RawMessage) (bool, string)
	// Outcome is allow, approve or deny.
	Outcome Outcome
	// Approvers is how many distinct people must approve (approve; default 1).
	Approvers int
	// ApproverNames, if set, are the only identities whose approval counts
	// ("token:alice", "cli:bob"; a trailing '*' matches any suffix).
	ApproverNames []string
	// ApproverGroups, if set, are groups whose members may approve (the
	// groups of a token in docket serve's tokens file, recorded with each
	// approval). With ApproverNames too, an identity may approve when it
	// matches a name or belongs to a group.
	ApproverGroups []string
	// ExcludeCreator: the identity that created the run cannot approve.
	ExcludeCreator bool
	// TTL: an approval expires this long after it was given (0: never).
	TTL time.Duration
	// Message is shown to the person and, for deny, answered to the model.
	Message string

	prg cel.Program
}

// Label is the rule's name, else its place.
func (r *Rule) Label() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Where
}

// Problem is one rule that does not compile or is not well formed.
type Problem struct {
	Where string // the rule's place (Rule.Where) and field: `policy[0].when`
	Msg   string // CEL's message, with the line and column inside the expression
}

func (p Problem) String() string { return p.Where + ": " + p.Msg }

// Error lists problems.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid policy:")
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

var (
	envOnce sync.Once
	envCEL  *cel.Env
	envErr  error
)

// env is the CEL environment every rule compiles in.
func env() (*cel.Env, error) {
	envOnce.Do(func() {
		cmp := func(op string) cel.EnvOption {
			// Declarations only: the standard library's comparison (through
			// Decimal.Compare) does the work, so a decimal is compared on the
			// left (action.args.amount > 1000); a number on the left of a
			// decimal fails, and the rule denies.
			return cel.Function(op,
				cel.Overload(op+"_docket_decimal", []*cel.Type{decimalCEL, decimalCEL}, cel.BoolType),
				cel.Overload(op+"_docket_decimal_int", []*cel.Type{decimalCEL, cel.IntType}, cel.BoolType),
				cel.Overload(op+"_docket_decimal_double", []*cel.Type{decimalCEL, cel.DoubleType}, cel.BoolType))
		}
		envCEL, envErr = cel.NewEnv(
			cel.Variable("action", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("run", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("now", cel.TimestampType),
			cel.Function("decimal",
				cel.Overload("decimal_dyn", []*cel.Type{cel.DynType}, decimalCEL, cel.UnaryBinding(toDecimal))),
			cmp(operators.Less), cmp(operators.LessEquals), cmp(operators.Greater), cmp(operators.GreaterEquals),
			cel.Function(operators.Add,
				cel.Overload("add_docket_decimal", []*cel.Type{decimalCEL, decimalCEL}, decimalCEL),
				cel.Overload("add_docket_decimal_int", []*cel.Type{decimalCEL, cel.IntType}, decimalCEL)),
		)
	})
	return envCEL, envErr
}

// Compile checks and compiles rules in place (each rule's When, or its
// Func), reporting every problem at once (*Error).
func Compile(rules []Rule) error {
	e, err := env()
	if err != nil {
		return fmt.Errorf("policy: CEL environment: %w", err)
	}
	var probs []Problem
	add := func(r *Rule, field, format string, a ...any) {
		probs = append(probs, Problem{Where: join(r.Where, field), Msg: fmt.Sprintf(format, a...)})
	}
	for i := range rules {
		r := &rules[i]
		if !r.Outcome.Valid() {
			add(r, "outcome", `must be "allow", "approve" or "deny", got %q`, r.Outcome)
		}
		if r.Approvers < 0 {
			add(r, "approvers", "must be at least 1")
		}
		if r.Outcome != Approve && (r.Approvers > 0 || len(r.ApproverNames) > 0 || r.ExcludeCreator || r.TTL > 0) {
			add(r, "outcome", "approvers, approver_names, exclude_creator and ttl belong to an approve rule")
		}
		if r.Outcome != Approve && len(r.ApproverGroups) > 0 {
			add(r, "approver_groups", "belongs to an approve rule")
		}
		if r.Outcome == Approve && r.Approvers == 0 {
			r.Approvers = 1
		}
		if r.Outcome == Approve && len(r.ApproverNames) > 0 && len(r.ApproverGroups) == 0 && len(r.ApproverNames) < r.Approvers &&
			!slices.ContainsFunc(r.ApproverNames, func(n string) bool { return strings.HasSuffix(n, "*") }) {
			add(r, "approver_names", "%d names cannot give %d distinct approvals", len(r.ApproverNames), r.Approvers)
		}
		if msg := CheckGroups(r.ApproverGroups); msg != "" {
			add(r, "approver_groups", "%s", msg)
		}
		if r.TTL < 0 {
			add(r, "ttl", "must not be negative")
		}
		if r.Func != nil {
			continue
		}
		if strings.TrimSpace(r.When) == "" {
			add(r, "when", "missing (a CEL expression; write \"true\" for every call)")
			continue
		}
		ast, iss := e.Compile(r.When)
		if iss.Err() != nil {
			add(r, "when", "%s", strings.ReplaceAll(iss.Err().Error(), "\n", "\n    "))
			continue
		}
		if !ast.OutputType().IsExactType(cel.BoolType) && !ast.OutputType().IsExactType(cel.DynType) {
			add(r, "when", "must be a bool expression, not %s", ast.OutputType())
			continue
		}
		prg, err := e.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(100000), cel.InterruptCheckFrequency(100))
		if err != nil {
			add(r, "when", "%v", err)
			continue
		}
		r.prg = prg
	}
	if len(probs) > 0 {
		return &Error{Problems: probs}
	}
	return nil
}

func join(where, field string) string {
	if where == "" {
		return field
	}
	return where + "." + field
}

// Input is what rules see of one action.
type Input struct {
	ActionID, Tool, Class, Key string
	Args                       json.RawMessage // resolved arguments (a JSON object)
	Run                        Run
	Now                        time.Time
}

// Run is what rules see of the run.
type Run struct {
	ID, Goal, Creator string
	Revision          int
	// Totals per tool of the run's actions that were claimed (started) so
	// far, before this one.
	Totals map[string]Total
}

// Total is one tool's usage in a run.
type Total struct {
	Count int
	// Sums of the numeric top-level arguments, by argument name (exact
	// decimal strings).
	Sums map[string]string
}

// Decision is what the rules decided for one action.
type Decision struct {
	// Matched: some rule applied. Otherwise Outcome is "" and the caller's
	// default holds (the run's --approve policy).
	Matched bool
	Outcome Outcome
	// Rule is the deciding rule's label; Why says why it applied (a
	// built-in rule's reason, or its condition).
	Rule, Why string
	Message   string
	// Approve: how many, who may, whether the creator may not, for how long.
	Approvers      int
	ApproverNames  []string
	ApproverGroups []string
	ExcludeCreator bool
	TTL            time.Duration
	// Err: a rule failed at run time (the decision is then deny).
	Err string
}

// strictness orders decisions: deny > approve (more approvers first) > allow.
func (d Decision) strictness() int {
	switch d.Outcome {
	case Deny:
		return 1 << 30
	case Approve:
		return 1 + d.Approvers
	}
	return 0
}

// Eval evaluates rules (in order: pass tool rules before global ones) for in.
func Eval(rules []Rule, in Input) Decision {
	var best Decision
	var vars map[string]any
	for i := range rules {
		r := &rules[i]
		var ok bool
		var why string
		if r.Func != nil {
			ok, why = r.Func(in.Args)
		} else {
			if r.prg == nil {
				return failed(r, errors.New("not compiled"))
			}
			if vars == nil {
				var err error
				if vars, err = activation(in); err != nil {
					return failed(r, err)
				}
			}
			out, _, err := r.prg.Eval(vars)
			if err != nil {
				return failed(r, err)
			}
			b, isBool := out.(types.Bool)
			if !isBool {
				return failed(r, fmt.Errorf("the condition gave %s, not a bool", out.Type().TypeName()))
			}
			ok, why = bool(b), r.When
		}
		if !ok {
			continue
		}
		d := Decision{Matched: true, Outcome: r.Outcome, Rule: r.Label(), Why: why, Message: r.Message,
			Approvers: r.Approvers, ApproverNames: r.ApproverNames, ApproverGroups: r.ApproverGroups,
			ExcludeCreator: r.ExcludeCreator, TTL: r.TTL}
		if !best.Matched || d.strictness() > best.strictness() {
			best = d
		}
	}
	return best
}

// failed is the decision of a rule that failed at run time: deny.
func failed(r *Rule, err error) Decision {
	msg := err.Error()
	if strings.Contains(msg, "no such overload") {
		msg += " (compare a decimal with the argument on the left, e.g. action.args.amount > 1000, or use decimal())"
	}
	return Decision{Matched: true, Outcome: Deny, Rule: r.Label(), Why: r.When,
		Message: fmt.Sprintf("rule %s failed at run time, so the call is denied (fail closed): %s", r.Label(), msg), Err: msg}
}

// activation builds the variables of in.
func activation(in Input) (map[string]any, error) {
	args, err := jsonValue(in.Args)
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	if args == nil {
		args = map[string]any{}
	}
	totals := map[string]any{}
	for tool, t := range in.Run.Totals {
		sums := map[string]any{}
		for name, s := range t.Sums {
			// Always a decimal (never an int), so that a sum is on the left
			// of any arithmetic: run.totals.pay.sum.amount + action.args.amount.
			d, err := ParseDecimal(s)
			if err != nil {
				sums[name] = types.NewErr("policy: total %s: %v", name, err)
				continue
			}
			sums[name] = d
		}
		totals[tool] = map[string]any{"count": int64(t.Count), "sum": sums}
	}
	return map[string]any{
		"action": map[string]any{"id": in.ActionID, "tool": in.Tool, "class": in.Class, "key": in.Key, "args": args},
		"run": map[string]any{"id": in.Run.ID, "goal": in.Run.Goal, "creator": in.Run.Creator,
			"revision": int64(in.Run.Revision), "totals": totals},
		"now": types.Timestamp{Time: in.Now.UTC()},
	}, nil
}

// jsonValue decodes JSON into CEL-ready values: numbers as int or Decimal,
// never through float64.
func jsonValue(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return convert(v), nil
}

func convert(v any) any {
	switch x := v.(type) {
	case json.Number:
		return numberValue(string(x))
	case map[string]any:
		for k, e := range x {
			x[k] = convert(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = convert(e)
		}
		return x
	case nil:
		return types.NullValue
	}
	return v
}

// MayApprove reports whether identity by, a member of groups, may approve
// under d, given the run's creator, and why not.
func (d Decision) MayApprove(by string, groups []string, creator string) (bool, string) {
	if d.ExcludeCreator && creator != "" && by == creator {
		return false, fmt.Sprintf("%s created the run and rule %s excludes the creator from approving", by, d.Rule)
	}
	if ok, who := admits(d.ApproverNames, d.ApproverGroups, by, groups); !ok {
		return false, fmt.Sprintf("rule %s lets only %s approve, not %s", d.Rule, who, describe(by, groups))
	}
	return true, ""
}

// admits reports whether identity by, a member of groups, is among the
// approvers that names and allowed (groups) describe: anyone when both are
// empty, else a name that matches or a group it belongs to. When it is
// not, who says who may ("token:alice or members of group finance").
func admits(names, allowed []string, by string, groups []string) (ok bool, who string) {
	if len(names) == 0 && len(allowed) == 0 {
		return true, ""
	}
	if slices.ContainsFunc(names, func(n string) bool { return NameMatches(n, by) }) ||
		slices.ContainsFunc(allowed, func(g string) bool { return slices.Contains(groups, g) }) {
		return true, ""
	}
	var parts []string
	if len(names) > 0 {
		parts = append(parts, strings.Join(names, ", "))
	}
	if len(allowed) > 0 {
		parts = append(parts, "members of "+plural(len(allowed), "group ", "groups ")+strings.Join(allowed, ", "))
	}
	return false, strings.Join(parts, " or ")
}

// describe names an approver with its groups, for messages:
// "token:bob (groups: sales)", "cli:carol (no groups)".
func describe(by string, groups []string) string {
	if len(groups) == 0 {
		return by + " (no groups)"
	}
	return by + " (groups: " + strings.Join(groups, ", ") + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// groupRE is what a group's name may be: what a token's name may be in the
// tokens file (a letter, then up to 63 letters, digits, _ . -).
var groupRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// ValidGroup reports whether g is a well-formed group name.
func ValidGroup(g string) bool { return groupRE.MatchString(g) }

// CheckGroups checks a list of group names ("" : fine): each well formed,
// none twice.
func CheckGroups(groups []string) string {
	for i, g := range groups {
		if !ValidGroup(g) {
			return fmt.Sprintf("group %q: a letter, then up to 63 letters, digits, _ . -", g)
		}
		if slices.Contains(groups[:i], g) {
			return fmt.Sprintf("group %q is listed twice", g)
		}
	}
	return ""
}

// NameMatches reports whether identity matches pattern (exact, or a prefix
// when pattern ends in '*').
func NameMatches(pattern, identity string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(identity, p)
	}
	return pattern == identity
}

var _ ref.Val = Decimal{}
