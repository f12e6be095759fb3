package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/docketrun/docket/plan"
)

// Gates and approvals: what the policy (package tools/policy, evaluated by
// the executor) decided for an action, and the people's approvals of it,
// stored on the action's row (RowRecord.Gate, RowRecord.Approvals) so that
// every backend keeps them with the row and the rules below (Approve,
// Decide, Claim) enforce them in the same commit as the change they guard.

// Gate is the policy's decision for an action, as recorded.
type Gate struct {
	// Rule is the deciding rule ("" : no rule matched, the run's approval
	// policy decided).
	Rule string `json:"rule,omitempty"`
	// Outcome is allow, approve or deny.
	Outcome string `json:"outcome"`
	// Need is how many distinct people must approve (0: none).
	Need int `json:"need,omitempty"`
	// Names, if set, are the only identities whose approval counts (a
	// trailing '*' matches any suffix).
	Names []string `json:"names,omitempty"`
	// Groups, if set, are groups whose members may approve (with Names
	// too: a matching name or a group admits). An approval records its
	// approver's groups (Approval.Groups), so the check needs nothing else.
	Groups []string `json:"groups,omitempty"`
	// ExcludeCreator: the run's creator (Run.CreatedBy) cannot approve.
	ExcludeCreator bool `json:"exclude_creator,omitempty"`
	// TTL: an approval counts for this long (0: until the action runs).
	TTL time.Duration `json:"ttl,omitempty"`
	// Message is the rule's message; Why why it applied.
	Message string `json:"message,omitempty"`
	Why     string `json:"why,omitempty"`
	// Budget names the budget whose limit the action would pass (the gate
	// is that budget's outcome). Then only people's approvals count: the
	// approval a run's policy gave the row when it was recorded was not
	// given for going past a budget.
	Budget string `json:"budget,omitempty"`
}

// Approval is one person's approval of an action's exact arguments.
type Approval struct {
	By string `json:"by"`
	// Groups are the approver's groups when it approved (a token's groups
	// in docket serve's tokens file; none for a CLI identity).
	Groups []string  `json:"groups,omitempty"`
	At     time.Time `json:"at"`
	// Args is ArgsHash of the arguments approved: an approval counts only
	// for exactly those.
	Args string `json:"args"`
	// Expires is when it stops counting (zero: never).
	Expires time.Time `json:"expires,omitzero"`
	// Used is the key of the claim that used it (an approval is used by
	// one claim only).
	Used string `json:"used,omitempty"`
}

// ArgsHash is the hash approvals bind to: "sha256:" + hex of the tool name
// and the canonical JSON (RFC 8785) of the arguments.
func ArgsHash(tool string, args json.RawMessage) string {
	c, err := plan.Canonical(args)
	if err != nil {
		c = args // not canonicalisable: the bytes themselves
	}
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(c)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Approvers lists the distinct identities whose approvals count for args of
// a's tool at now: bound to exactly these args, not expired, not used. A
// row approved before approvals were recorded (ApprovedArgs set, no
// Approvals) counts as one approval by "" for the args it was approved for.
func (a Action) Approvers(args json.RawMessage, now time.Time) []string {
	var out []string
	for _, ap := range a.Counting(args, now) {
		out = append(out, ap.By)
	}
	return out
}

// Counting is Approvers with each identity's groups: one Approval per
// distinct identity (in the order they first approved) whose Groups are
// the union of the groups its counting approvals recorded.
func (a Action) Counting(args json.RawMessage, now time.Time) []Approval {
	if len(a.Approvals) == 0 {
		if a.ApprovedArgs != nil && jsonEqual(a.ApprovedArgs, args) {
			return []Approval{{}}
		}
		return nil
	}
	h := ArgsHash(a.Tool, args)
	var out []Approval
	for _, ap := range a.Approvals {
		if ap.Args != h || ap.Used != "" || (!ap.Expires.IsZero() && !now.Before(ap.Expires)) {
			continue
		}
		i := slices.IndexFunc(out, func(x Approval) bool { return x.By == ap.By })
		if i < 0 {
			ap.Groups = slices.Clone(ap.Groups)
			out = append(out, ap)
			continue
		}
		for _, g := range ap.Groups {
			if !slices.Contains(out[i].Groups, g) {
				out[i].Groups = append(out[i].Groups, g)
			}
		}
	}
	return out
}

// Needed is how many approvals a's gate asks for (1 without a gate).
func (a Action) Needed() int {
	if a.Gate == nil {
		return 1
	}
	return a.Gate.Need
}

// MayApprove reports whether identity by, a member of groups, may approve
// under g, for a run created by creator, and if not why.
func (g *Gate) MayApprove(by string, groups []string, creator string) (bool, string) {
	if g == nil {
		return true, ""
	}
	rule := cmpOr(g.Rule, "the run's approval policy")
	if g.ExcludeCreator && creator != "" && by == creator {
		return false, fmt.Sprintf("%s created the run, and rule %s does not let the creator approve", by, rule)
	}
	if len(g.Names) == 0 && len(g.Groups) == 0 {
		return true, ""
	}
	if slices.ContainsFunc(g.Names, func(n string) bool { return nameMatches(n, by) }) ||
		slices.ContainsFunc(g.Groups, func(x string) bool { return slices.Contains(groups, x) }) {
		return true, ""
	}
	var who []string
	if len(g.Names) > 0 {
		who = append(who, strings.Join(g.Names, ", "))
	}
	if len(g.Groups) == 1 {
		who = append(who, "members of group "+g.Groups[0])
	} else if len(g.Groups) > 1 {
		who = append(who, "members of groups "+strings.Join(g.Groups, ", "))
	}
	self := by + " (no groups)"
	if len(groups) > 0 {
		self = by + " (groups: " + strings.Join(groups, ", ") + ")"
	}
	return false, fmt.Sprintf("rule %s lets only %s approve, not %s", rule, strings.Join(who, " or "), self)
}

func nameMatches(pattern, identity string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(identity, p)
	}
	return pattern == identity
}

// ErrApproverRefused: the identity may not approve the action (its gate
// excludes the run's creator, or names who may: identities or groups).
var ErrApproverRefused = fmt.Errorf("ledger: approver refused")

// Decide records the policy's decision g for a not-yet-claimed row (pending
// or approved, no key) whose args are args (nil: the row's): the row's gate
// becomes g and its status follows it: approved when g needs no one, or
// when enough people approved exactly these args (Action.Approvers), else
// pending. Event action.policy {"rule","outcome","need","message","why",
// "approvals"} when the gate changes; an identical repeat writes nothing.
// A deny is recorded with Reject, after Decide.
func Decide(runID, actionID string, g Gate) Op {
	gc := g
	gc.Names, gc.Groups = slices.Clone(g.Names), slices.Clone(g.Groups)
	return Op{body: &decideOp{at: at{runID, actionID}, gate: &gc}}
}

type decideOp struct {
	at
	gate *Gate
}

func (o *decideOp) kind() opKind { return opDecide }

func gateEqual(a, b *Gate) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Rule == b.Rule && a.Outcome == b.Outcome && a.Need == b.Need && slices.Equal(a.Names, b.Names) && slices.Equal(a.Groups, b.Groups) &&
		a.ExcludeCreator == b.ExcludeCreator && a.TTL == b.TTL && a.Message == b.Message && a.Why == b.Why && a.Budget == b.Budget
}

func (o *decideOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	run, row, err := b.runRow(o.at)
	if err != nil {
		return opFailure(err)
	}
	if !(row.Key == "" && (row.Status == StatusPending || row.Status == StatusApproved)) {
		return b.conflict(opDecide, o.runID, o.actionID, row.Key, KeyRecord{}, &row, "action is %s", row.Status), nil
	}
	args, err := b.blob(o.runID, row.Args)
	if err != nil {
		return Result{}, err
	}
	var status Status
	a := row.action(o.runID)
	a.Gate = o.gate
	if a.ApprovedArgs, err = b.blob(o.runID, row.ApprovedArgs); err != nil {
		return Result{}, err
	}
	approvers := a.Approvers(args, b.now())
	if o.gate.Budget != "" {
		approvers = slices.DeleteFunc(approvers, func(by string) bool { return by == "" })
	}
	have := len(approvers)
	switch {
	case o.gate.Need == 0:
		status = StatusApproved
	case have >= o.gate.Need:
		status = StatusApproved
	default:
		status = StatusPending
	}
	if gateEqual(row.Gate, o.gate) && status == row.Status {
		return Result{Action: b.rowAction(o.runID, row, KeyRecord{})}, nil
	}
	changed := !gateEqual(row.Gate, o.gate)
	row.Gate, row.Status = o.gate, status
	if status == StatusApproved && row.ApprovedArgs == nil {
		row.ApprovedArgs = row.Args
	}
	if status == StatusPending {
		row.ApprovedArgs = nil
	}
	if err := b.putRow(o.runID, run.Revision, row); err != nil {
		return Result{}, err
	}
	if changed {
		if err := b.event(o.runID, EventActionPolicy, o.actionID, gateData(o.gate, have)); err != nil {
			return Result{}, err
		}
	}
	return Result{Action: b.rowAction(o.runID, row, KeyRecord{})}, nil
}

func gateData(g *Gate, have int) json.RawMessage {
	kv := []any{"rule", g.Rule, "outcome", g.Outcome, "need", g.Need, "approvals", have}
	if g.Message != "" {
		kv = append(kv, "message", g.Message)
	}
	if g.Why != "" {
		kv = append(kv, "why", g.Why)
	}
	if len(g.Names) > 0 {
		kv = append(kv, "names", g.Names)
	}
	if len(g.Groups) > 0 {
		kv = append(kv, "groups", g.Groups)
	}
	if g.ExcludeCreator {
		kv = append(kv, "exclude_creator", true)
	}
	if g.TTL > 0 {
		kv = append(kv, "ttl", g.TTL.String())
	}
	if g.Budget != "" {
		kv = append(kv, "budget", g.Budget)
	}
	return obj(kv...)
}
