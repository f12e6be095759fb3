package planner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/ledger"
)

// Conversation is req's messages as JSON (nil when there are none): with
// the goal, the identity of a run planned from req (executor.Request's Goal
// and Messages, checked and recorded by executor/runs). POST /v1/runs,
// docket run --goal and docket step build their goal requests' identities
// from it, so a run any of them created is recognised by the others.
func (req Request) Conversation() (json.RawMessage, error) {
	if len(req.Messages) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(req.Messages)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the messages: %v", ErrBadRequest, err)
	}
	return b, nil
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
