package executor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// RequestMeta is the key, in the Meta of a run's first plan revision, of the
// identity of the request that created the run (Request.Hash). Request.Stamp
// writes it; SameRequest reads it. Meta is not part of plan.Hash, so the
// stamp never changes a run's plan identity or its keys.
const RequestMeta = "docket.request"

// ErrRequestMismatch: the run id is held by a run that a different request
// created. It wraps ErrPlanMismatch, so callers that test for that keep
// working.
var ErrRequestMismatch = fmt.Errorf("executor: the run was created by a different request: %w", ErrPlanMismatch)

// Request is what a caller asks for when it creates a run, or sends again to
// continue it: the one rule for "same request, same run", which
// executor/runs applies for POST /v1/runs, docket step and docket run. Two
// requests are the same when they ask for the same work: the same plan
// (plan.Hash: goal and actions, canonically), or the same goal and
// conversation to plan from; and
// when the second names an approval policy, the run must have been created
// with that policy. A request that names no policy matches any (the policy
// is stored when the run is created and no later request changes it).
type Request struct {
	// Plan is the plan the request gives; nil when the run is planned from
	// Goal and Messages.
	Plan *plan.Plan
	// Goal and Messages are what the run is planned from when Plan is nil.
	// Messages is the conversation as JSON (an array), canonicalized before
	// hashing; nil when there is none.
	Goal     string
	Messages json.RawMessage
	// Policy is the approval policy the request names; "" when it names none.
	Policy Policy
}

// requestDoc is what Hash covers, as canonical JSON (plan.Canonical).
type requestDoc struct {
	V        int             `json:"v"`
	Plan     string          `json:"plan,omitempty"`
	Goal     string          `json:"goal,omitempty"`
	Messages json.RawMessage `json:"messages,omitempty"`
}

// Hash is the identity of the work r asks for: "sha256:" + lowercase hex of
// sha256 over the canonical JSON (plan.Canonical, numbers never through
// float64; an integer beyond ±2^53 is refused) of {"v": 1, "plan":
// plan.Hash(Plan)} or {"v": 1, "goal": Goal, "messages": Messages}. The
// policy is not part of it (it is recorded with the run: ledger.Run.Policy).
func (r Request) Hash() (string, error) {
	msgs := bytes.TrimSpace(r.Messages)
	if bytes.Equal(msgs, []byte("null")) {
		msgs = nil
	}
	d := requestDoc{V: 1}
	switch {
	case r.Plan != nil && (r.Goal != "" || len(msgs) > 0):
		return "", fmt.Errorf("%w: a request gives either a plan or a goal and messages, not both", ErrInvalidPlan)
	case r.Plan != nil:
		h, err := plan.Hash(r.Plan)
		if err != nil {
			return "", fmt.Errorf("%w: request identity: %v", ErrInvalidPlan, err)
		}
		d.Plan = h
	case r.Goal == "" && len(msgs) == 0:
		return "", fmt.Errorf("%w: a request gives a plan, a goal or messages", ErrInvalidPlan)
	default:
		if !utf8.ValidString(r.Goal) {
			return "", fmt.Errorf("%w: request identity: the goal is not valid UTF-8", ErrInvalidPlan)
		}
		if len(msgs) > 0 {
			c, err := plan.Canonical(msgs)
			if err != nil {
				return "", fmt.Errorf("%w: request identity: messages: %v", ErrInvalidPlan, err)
			}
			d.Messages = c
		}
		d.Goal = r.Goal
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("request identity: %w", err)
	}
	canon, err := plan.Canonical(raw)
	if err != nil {
		return "", fmt.Errorf("request identity: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Stamp records r's identity in p.Meta[RequestMeta] (p is changed), so that
// Record or Run stores it with the run's first revision. Call it on the plan
// that creates the run: the given plan, or the one planned for the goal.
func (r Request) Stamp(p *plan.Plan) error {
	h, err := r.Hash()
	if err != nil {
		return err
	}
	if p.Meta == nil {
		p.Meta = map[string]string{}
	}
	p.Meta[RequestMeta] = h
	return nil
}

// RunReader is what SameRequest reads of the ledger (ledger.Store has it).
type RunReader interface {
	GetRun(ctx context.Context, runID string) (ledger.Run, error)
	Plan(ctx context.Context, runID string, rev int) (*plan.Plan, error)
}

// SameRequest checks r against the run recorded as runID. It returns the run
// and nil when r is the same request as the one that created it (continue
// that run), an error wrapping ErrRequestMismatch when a different request
// created it, one wrapping ledger.ErrNotFound when there is no such run, and
// one wrapping ErrInvalidPlan when r cannot be hashed.
//
// A run recorded before identities were recorded (its first revision has no
// RequestMeta; docket before issue 14) is judged by what the ledger always
// kept: a plan request matches when its plan.Hash is the run's PlanHash, a
// goal request when the goal is the recorded plan's goal; a request with a
// conversation cannot be matched against such a run and is refused with a
// message that says so. The policy rule is the same for every run.
func SameRequest(ctx context.Context, l RunReader, runID string, r Request) (ledger.Run, error) {
	want, err := r.Hash()
	if err != nil {
		return ledger.Run{}, err
	}
	run, err := l.GetRun(ctx, runID)
	if err != nil {
		return ledger.Run{}, fmt.Errorf("executor: run %s: %w", runID, err)
	}
	first, err := l.Plan(ctx, runID, 1)
	if err != nil {
		return run, fmt.Errorf("executor: run %s: reading its first plan: %w", runID, err)
	}
	mismatch := func(format string, a ...any) (ledger.Run, error) {
		return run, fmt.Errorf("run %s exists and %s: use another run id (%w)", runID, fmt.Sprintf(format, a...), ErrRequestMismatch)
	}
	hasMsgs := len(bytes.TrimSpace(r.Messages)) > 0 && !bytes.Equal(bytes.TrimSpace(r.Messages), []byte("null"))
	have := first.Meta[RequestMeta]
	if have != want {
		// Say what differs, as far as the ledger tells.
		switch {
		case r.Plan != nil:
			if h, _ := plan.Hash(r.Plan); h != run.PlanHash { // hashed once already by r.Hash
				return mismatch("was recorded with a different plan")
			}
			if have != "" {
				return mismatch("was created from a goal or a conversation, not from this plan")
			}
		case first.Goal != r.Goal && (!hasMsgs || r.Goal != ""):
			return mismatch("was planned for another goal (%q)", clipText(first.Goal, 200))
		case have == "" && hasMsgs:
			return mismatch("was recorded by an older docket that kept no request identity: a conversation cannot be matched against it")
		case have != "":
			return mismatch("was created by a different request (a plan, or another conversation)")
		}
		// Recorded before identities were (have == ""): the same plan, or
		// the same goal, is the same request.
	}
	if have := cmp.Or(run.Policy, string(PolicySafe)); r.Policy != "" && string(r.Policy) != have {
		return mismatch("was created with the approval policy %q, not %q (the policy is set when a run is created)", have, r.Policy)
	}
	return run, nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
