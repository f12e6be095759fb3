package evals

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/docketrun/docket/planner"
)

// goldModel is an OpenAI-compatible server that answers every leaderboard
// case with its own ground truth (GroundTruthCalls), the way a perfect
// model would: "together" makes every call in its first message (a model
// with parallel tool calls), "one by one" one call per message (a model
// that calls one tool at a time), then it replies with text.
type goldModel struct {
	byGoal   map[string]*Case
	together bool
}

func (m *goldModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req chatReq
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	var c *Case
	made := 0
	for _, msg := range req.Messages {
		if s, ok := msg.Content.(string); ok && msg.Role == "user" && m.byGoal[s] != nil {
			c = m.byGoal[s]
		}
		made += len(msg.ToolCalls)
	}
	if c == nil {
		http.Error(w, `{"error":{"message":"gold model: unknown goal"}}`, http.StatusBadRequest)
		return
	}
	gold := GroundTruthCalls(c, 0)
	var calls []toolCall
	for i, g := range gold {
		if i < made {
			continue
		}
		var tc toolCall
		tc.ID, tc.Type = fmt.Sprintf("call_%d", i), "function"
		tc.Function.Name, tc.Function.Arguments = ModelToolName(g.Tool), string(g.Args)
		calls = append(calls, tc)
		if !m.together {
			break
		}
	}
	msg := map[string]any{"role": "assistant", "content": "Done."}
	finish := "stop"
	if len(calls) > 0 {
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": calls}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-gold", "object": "chat.completion", "created": 1764460800, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// TestOrderBFCL measures what the planner's Order does to the leaderboard's
// parallel and multiple categories, planned through the real planner from a
// model that answers each case with its ground truth: the pass rate, and how
// many plans gained an ordering (an action with depends_on). Calls made
// together must stay independent under every Order; a model that calls one
// tool per message is ordered by OrderTurns (it saw each placeholder before
// the next call), which costs parallelism but no verdict.
//
//	go test ./evals -run TestOrderBFCL -v
func TestOrderBFCL(t *testing.T) {
	if testing.Short() {
		t.Skip("plans every parallel and multiple leaderboard case eight times")
	}
	sets := importDir(t, bfclDirs(t)[0])
	cats := []string{"parallel", "multiple", "live_parallel", "live_multiple"}
	type row struct {
		cat, style string
		order      planner.Order
		cases      int
		pass       int
		ordered    int
	}
	var mu sync.Mutex
	var rows []row
	for _, cat := range cats {
		d, ok := sets[cat]
		if !ok {
			t.Fatalf("no category %s", cat)
		}
		for _, together := range []bool{true, false} {
			for _, order := range []planner.Order{planner.OrderReferences, planner.OrderTurns} {
				style := "one by one"
				if together {
					style = "together"
				}
				t.Run(fmt.Sprintf("%s/%s/%s", cat, strings.ReplaceAll(style, " ", "_"), order), func(t *testing.T) {
					m := &goldModel{byGoal: map[string]*Case{}, together: together}
					for _, c := range d.Cases {
						m.byGoal[lastUser(c)] = c
					}
					srv := httptest.NewServer(m)
					defer srv.Close()
					cfg := plannerConfig(srv.URL+"/v1", srv.Client().Transport)
					cfg.Order = order
					plans := map[string]PlanLine{}
					var pmu sync.Mutex
					rep, err := Run(context.Background(), d, RunOptions{Plan: PlannerFunc(cfg), Concurrency: 8,
						Done: func(c *Case, _ int, pl PlanLine) error {
							pmu.Lock()
							plans[c.ID] = pl
							pmu.Unlock()
							return nil
						}})
					if err != nil {
						t.Fatal(err)
					}
					r := row{cat: cat, style: style, order: order, cases: len(rep.Cases)}
					if len(rep.Cases) > 0 && !rep.Cases[0].Pass {
						t.Logf("%s: %v", rep.Cases[0].ID, rep.Cases[0].Reasons)
					}
					for _, res := range rep.Cases {
						if res.Pass {
							r.pass++
						}
						c, _ := d.Case(res.ID)
						if ordered(plans[res.ID]) {
							r.ordered++
							if together && len(GroundTruthCalls(c, 0)) > 0 {
								t.Errorf("%s: calls made together were ordered: %+v", res.ID, plans[res.ID].Calls)
							}
						}
					}
					mu.Lock()
					rows = append(rows, r)
					mu.Unlock()
				})
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.cat != b.cat {
			return a.cat < b.cat
		}
		if a.style != b.style {
			return a.style > b.style
		}
		return a.order > b.order
	})
	// the verdict never depends on the order
	for i := 0; i+1 < len(rows); i += 2 {
		if rows[i].pass != rows[i+1].pass {
			t.Errorf("%s %s: %d pass under %s, %d under %s", rows[i].cat, rows[i].style, rows[i].pass, rows[i].order, rows[i+1].pass, rows[i+1].order)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| category | model calls | order | cases | pass | plans with an ordering |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d (%.1f%%) | %d |\n", r.cat, r.style, r.order, r.cases, r.pass, 100*float64(r.pass)/float64(max(r.cases, 1)), r.ordered)
	}
	t.Log(b.String())
}

// lastUser is the case's goal, or its last user message.
func lastUser(c *Case) string {
	goal := c.Goal
	for _, m := range c.Messages {
		if m.Role == "user" {
			goal = m.Content
		}
	}
	return goal
}

func ordered(pl PlanLine) bool {
	for _, c := range pl.Calls {
		if len(c.DependsOn) > 0 {
			return true
		}
	}
	return false
}
