package planner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
)

// RunResult is what PlanRun did: the plan (planned now or read back) and the
// run as the executor left it.
type RunResult struct {
	*Result
	Doc ledger.RunDoc
}

// PlanRun plans run runID once and hands the plan to the executor.
//
// The run's identity is req under o's policy (Request.Identity; an empty
// o.Policy names none), by the rule every entry point shares
// (executor.SameRequest). When the ledger already holds runID (an earlier
// PlanRun recorded it, perhaps in a process that crashed afterwards, or
// another entry point created it), the recorded plan is used and the model is
// not called (Result.FromLedger) if the request is the same; a different one
// is refused with an error wrapping executor.ErrRequestMismatch (and so
// executor.ErrPlanMismatch). Otherwise Plan runs; nothing is written while
// the model thinks, so a crash then leaves nothing recorded and the next
// attempt plans again. The plan, stamped with the request's identity, then
// goes to eng.Run, which records it durably (revision 1, with Meta and
// Transcript) before it claims any action, and drives the run under o (its
// policy is stored when the run is created: PolicyNone makes every action
// wait for a person, as docket chat does). eng must have been built over l
// and the planner's registry.
//
// It returns the RunResult whenever a plan exists (Doc is the run as far as
// it got; the zero RunDoc if recording failed) together with eng.Run's error,
// and a nil RunResult with planning errors (see Plan).
func (p *Planner) PlanRun(ctx context.Context, eng *executor.Engine, l ledger.Store, runID string, req Request, o *executor.RunOptions) (*RunResult, error) {
	if eng == nil || l == nil {
		return nil, fmt.Errorf("%w: PlanRun needs an executor engine and its ledger", ErrConfig)
	}
	var policy executor.Policy
	if o != nil {
		policy = o.Policy
	}
	ident, err := req.Identity(policy)
	if err != nil {
		return nil, err
	}
	res, err := Recorded(ctx, l, runID)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return nil, err
	}
	if res != nil {
		if _, err := executor.SameRequest(ctx, l, runID, ident); err != nil {
			return nil, fmt.Errorf("planner: %w", err)
		}
	} else {
		if res, err = p.Plan(ctx, req); err != nil {
			return nil, err
		}
		res.Plan.RunID = runID
		if err := ident.Stamp(res.Plan); err != nil {
			return nil, err
		}
	}
	doc, err := eng.Run(ctx, runID, res.Plan, o)
	return &RunResult{Result: res, Doc: doc}, err
}

// Identity is req as a run request under policy ("" names none): the goal
// and the conversation (its messages as JSON) the run is planned from. It is
// what PlanRun records with a run and checks when the run exists; POST
// /v1/runs and docket step build their goal requests' identities with it, so
// a run any of them created is recognised by the others.
func (req Request) Identity(policy executor.Policy) (executor.Request, error) {
	id := executor.Request{Goal: req.Goal, Policy: policy}
	if len(req.Messages) > 0 {
		b, err := json.Marshal(req.Messages)
		if err != nil {
			return executor.Request{}, fmt.Errorf("%w: encoding the messages: %v", ErrBadRequest, err)
		}
		id.Messages = b
	}
	if _, err := id.Hash(); err != nil {
		return executor.Request{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return id, nil
}

// Recorded returns the plan recorded for runID as a Result with FromLedger
// set (Usage, Rounds, Repairs and Exchange read back from its Meta and
// Transcript), or an error wrapping ledger.ErrNotFound when the run has no
// plan yet. It needs no Planner: a rerun can go on without any model
// configured.
func Recorded(ctx context.Context, l ledger.Store, runID string) (*Result, error) {
	if strings.TrimSpace(runID) == "" {
		return nil, fmt.Errorf("%w: empty run id", ErrBadRequest)
	}
	// Revision 1 is the plan the run was created with, the one whose hash is
	// the run's identity (later revisions are replays).
	pl, err := l.Plan(ctx, runID, 1)
	if err != nil {
		return nil, fmt.Errorf("planner: reading the plan of run %s: %w", runID, err)
	}
	prov, err := ReadProvenance(pl.Meta)
	if err != nil {
		return nil, fmt.Errorf("planner: the plan of run %s: %w", runID, err)
	}
	res := &Result{Plan: pl, Exchange: pl.Transcript, FromLedger: true, Usage: prov.Usage, Rounds: prov.Rounds, Repairs: prov.Repairs}
	var ex exchange
	if len(pl.Transcript) > 0 && json.Unmarshal(pl.Transcript, &ex) == nil && len(ex.Messages) > 0 {
		res.Messages = fromOpenAI(ex.Messages[1:])
		for i := len(ex.Messages) - 1; i > 0; i-- {
			if m := ex.Messages[i]; m.Role == openai.ChatMessageRoleAssistant && len(m.ToolCalls) == 0 {
				res.Reply = m.Content
				break
			}
		}
	}
	return res, nil
}

// GoalRunID derives the run id of a goal planned without an explicit id, so
// that rerunning the same goal with the same tools resumes the same run
// (cmd/docket/README.md, run: "derived from ... the goal and the tools file's hash"):
// "run_" + the first 16 hex digits of sha256 over both.
func GoalRunID(req Request, toolsHash string) string {
	h := sha256.New()
	fmt.Fprintf(h, "docket-goal-run/1\x00%d:%s\x00%d:%s", len(req.Goal), req.Goal, len(toolsHash), toolsHash)
	for _, m := range req.Messages {
		b, _ := json.Marshal(m)
		fmt.Fprintf(h, "\x00%d:%s", len(b), b)
	}
	return "run_" + hex.EncodeToString(h.Sum(nil))[:16]
}

// maxResultBytes bounds one action's output in ResultsMessage.
const maxResultBytes = 8 << 10

// ResultsMessage reports executed actions back into a conversation (as a user
// message, which every chat template accepts mid-conversation), so the next
// turn can build on their outputs.
func ResultsMessage(runID string, actions []ledger.Action) Message {
	var b strings.Builder
	fmt.Fprintf(&b, "[docket] Results of run %s (the plan you made was reviewed and performed):", runID)
	if len(actions) == 0 {
		b.WriteString(" no actions.")
	}
	for _, a := range actions {
		fmt.Fprintf(&b, "\n- %s (%s): %s", a.ID, a.Tool, a.Status)
		if len(a.Output) > 0 {
			fmt.Fprintf(&b, ", output: %s", clip(string(a.Output), maxResultBytes))
		}
		if a.Error != "" {
			fmt.Fprintf(&b, ", error: %s", clip(a.Error, 1000))
		}
	}
	b.WriteString("\nAction ids and references of that plan do not carry over: in this turn, use these values directly.")
	return Message{Role: RoleUser, Content: b.String()}
}
