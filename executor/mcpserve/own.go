package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/runs"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// ownPrefix names docket's own tools; no tool of the tools file may be seen
// under a name that starts with it.
const ownPrefix = "docket_"

// The names of docket's own tools.
const (
	ToolProposePlan = ownPrefix + "propose_plan"
	ToolRunStatus   = ownPrefix + "run_status"
	ToolWaiting     = ownPrefix + "waiting"
)

const proposeSchema = `{
  "type": "object",
  "properties": {
    "goal": {"type": "string", "description": "what the plan is for, shown to the reviewer"},
    "run_id": {"type": "string", "description": "the run's id (default: derived from the plan, so the same proposal is the same run)"},
    "actions": {
      "type": "array", "minItems": 1,
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "string"},
          "tool": {"type": "string", "description": "a tool of this server, as listed (not docket's own)"},
          "args": {"type": "object", "description": "arguments; a string that is exactly ${ID.output} or ${ID.output.PATH} is an earlier action's output"},
          "depends_on": {"type": "array", "items": {"type": "string"}},
          "why": {"type": "string"}
        },
        "required": ["id", "tool", "args"]
      }
    }
  },
  "required": ["actions"]
}`

// OwnTools lists the names of docket's own tools, as clients call them.
func OwnTools() []string { return []string{ToolProposePlan, ToolRunStatus, ToolWaiting} }

// IsOwnTool says whether name is in the namespace of docket's own tools
// (no tool of the tools file may be seen under such a name).
func IsOwnTool(name string) bool { return strings.HasPrefix(name, ownPrefix) }

const runIDSchema = `{"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}`

func (s *Server) addOwnTools() {
	f := false
	s.mcp.AddTool(&mcp.Tool{
		Name: ToolProposePlan,
		Description: "Propose a whole plan (several tool calls, with dependencies) for a person to review. Nothing runs until a person " +
			"approves it; then docket performs every action exactly once. Returns the run id: read it with " + ToolRunStatus + ".",
		InputSchema: json.RawMessage(proposeSchema),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &f, OpenWorldHint: &f},
	}, s.proposePlan)
	s.mcp.AddTool(&mcp.Tool{
		Name:        ToolRunStatus,
		Description: "A docket run's status and its actions (Run JSON): what ran, what waits for a person, each action's output or error.",
		InputSchema: json.RawMessage(runIDSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f, OpenWorldHint: &f},
	}, s.runStatus)
	s.mcp.AddTool(&mcp.Tool{
		Name:        ToolWaiting,
		Description: "The docket runs that wait for a person (approval, or an outcome to check), with what each waits for.",
		InputSchema: json.RawMessage(`{"type": "object", "properties": {}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f, OpenWorldHint: &f},
	}, s.waiting)
}

func (s *Server) proposePlan(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		RunID string `json:"run_id"`
	}
	raw := req.Params.Arguments
	if err := json.Unmarshal(raw, &in); err != nil {
		return errorResult("docket refused the plan: %v", err), nil
	}
	// The plan's own strict decoder, without run_id (a plan field it knows
	// but that the run id given here decides).
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return errorResult("docket refused the plan: %v", err), nil
	}
	delete(fields, "run_id")
	body, _ := json.Marshal(fields)
	p, err := plan.Decode(body)
	if err != nil {
		return errorResult("docket refused the plan, nothing was recorded: %v", err), nil
	}
	for i, a := range p.Actions {
		if strings.HasPrefix(a.Tool, ownPrefix) {
			return errorResult("docket refused the plan: action %s calls %s: docket's own tools cannot be planned", a.ID, a.Tool), nil
		}
		if name, ok := s.fromWire[a.Tool]; ok { // the name the client sees → the registry's
			p.Actions[i].Tool = name
		}
	}
	runID := in.RunID
	if runID == "" {
		if runID, err = executor.DeriveRunID(p); err != nil {
			return errorResult("docket refused the plan: %v", err), nil
		}
	} else if !validSession.MatchString(runID) {
		return errorResult("docket refused the plan: run_id %q: want 1-128 letters, digits or _.:-", runID), nil
	}
	if p.Meta == nil {
		p.Meta = map[string]string{}
	}
	p.Meta["source"] = "mcp"
	// Every action waits for a person: that is what proposing means.
	if _, err := runs.Create(ctx, s.eng, s.led, runs.Request{RunID: runID, Plan: p, Options: &executor.RunOptions{Policy: executor.PolicyNone}}); err != nil {
		if errors.Is(err, executor.ErrPlanMismatch) {
			return errorResult("docket refused the plan: run %s already holds a different plan; give another run_id", runID), nil
		}
		return errorResult("docket refused the plan, nothing was recorded: %v", err), nil
	}
	s.drive(runID)
	doc, err := s.led.Doc(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("docket: reading run %s: %w", runID, err)
	}
	text := fmt.Sprintf("Plan recorded as run %s (%d actions); it waits for a person to review it %s. Nothing has run yet. "+
		"Read its progress with %s {\"run_id\": %q}.", runID, len(p.Actions), s.cfg.ReviewHint, ToolRunStatus, runID)
	return docResult(text, doc), nil
}

func (s *Server) runStatus(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.RunID == "" {
		return errorResult("docket: give {\"run_id\": ID}"), nil
	}
	doc, err := s.led.Doc(ctx, in.RunID)
	if errors.Is(err, ledger.ErrNotFound) {
		return errorResult("docket has no run %q", in.RunID), nil
	}
	if err != nil {
		return nil, fmt.Errorf("docket: reading run %s: %w", in.RunID, err)
	}
	return docResult(fmt.Sprintf("Run %s is %s.", doc.Run.ID, doc.Run.Status), doc), nil
}

// waitingRun is one entry of docket_waiting.
type waitingRun struct {
	RunID   string          `json:"run_id"`
	Status  string          `json:"status"`
	Goal    string          `json:"goal"`
	Waiting []waitingAction `json:"waiting"`
}

type waitingAction struct {
	ActionID string          `json:"action_id"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	For      string          `json:"for"` // "approval" | "review"
	Error    string          `json:"error,omitempty"`
}

func (s *Server) waiting(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out := []waitingRun{}
	for _, st := range []ledger.RunStatus{ledger.RunAwaitingApproval, ledger.RunPaused} {
		after := ""
		for {
			page, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: st, After: after, Limit: 200})
			if err != nil {
				return nil, fmt.Errorf("docket: listing runs: %w", err)
			}
			for _, r := range page {
				doc, err := s.led.Doc(ctx, r.ID)
				if err != nil {
					return nil, fmt.Errorf("docket: reading run %s: %w", r.ID, err)
				}
				w := waitingRun{RunID: r.ID, Status: string(r.Status), Goal: r.Goal}
				for _, a := range doc.Actions {
					switch a.Status {
					case ledger.StatusPending:
						w.Waiting = append(w.Waiting, waitingAction{ActionID: a.ID, Tool: a.Tool, Args: a.Args, For: "approval"})
					case ledger.StatusNeedsReview:
						w.Waiting = append(w.Waiting, waitingAction{ActionID: a.ID, Tool: a.Tool, Args: a.Args, For: "review", Error: a.Error})
					}
				}
				out = append(out, w)
			}
			if next == "" || len(out) >= 500 {
				break
			}
			after = next
		}
	}
	b, err := json.Marshal(map[string]any{"runs": out})
	if err != nil {
		return nil, fmt.Errorf("docket: encoding: %w", err)
	}
	text := fmt.Sprintf("%d run(s) wait for a person.\n%s", len(out), b)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(b)}, nil
}

// docResult is a text line and the Run JSON.
func docResult(text string, doc ledger.RunDoc) *mcp.CallToolResult {
	b, err := json.Marshal(doc)
	if err != nil {
		return errorResult("docket: encoding run %s: %v", doc.Run.ID, err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: text + "\n" + string(b)}},
		StructuredContent: json.RawMessage(b),
		Meta:              mcp.Meta{"io.docket/run_id": doc.Run.ID},
	}
}
