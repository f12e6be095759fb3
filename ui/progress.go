package ui

import (
	"encoding/json"

	"github.com/docketrun/docket/planner"
)

// Planning progress on the all-runs stream (GET /v1/ws).
//
// While the model plans a run created with a goal or messages (POST
// /v1/runs), the run does not exist in the ledger yet (a crash while the
// model thinks records nothing), so it has no events and no stream of its
// own. Each step of the planning goes to the all-runs stream as a message of
// its own type, "planning", which is NOT an event: it has no seq, is never
// stored, is never replayed on reconnect, and may be dropped for a client
// whose queue is full (the durable events are never dropped; a slow client
// is disconnected instead, as before). The gap-free contract covers the
// "event" messages only and is unchanged: once the plan is recorded the run's
// events start at seq 1 ("run.created", "plan.recorded", ...) on both
// streams. A page shows the planning messages as a preview and replaces it
// with the recorded plan when "plan.recorded" arrives.
//
//	{"type": "planning", "run_id": "r1", "progress": {"kind": "text", "round": 1, "text": "I will "}}
//	{"type": "planning", "run_id": "r1", "progress": {"kind": "call", "round": 1, "tool": "crm.create_contact", "args": {...}}}
//	{"type": "planning", "run_id": "r1", "progress": {"kind": "action", "round": 1, "tool": "crm.create_contact", "action": {"id": "a1", "tool": "crm.create_contact", "args": {...}, "depends_on": [...]}}}
//	{"type": "planning", "run_id": "r1", "done": true}                 (the plan follows as events)
//	{"type": "planning", "run_id": "r1", "done": true, "error": "..."}  (planning failed: nothing recorded)
//
// progress kinds: planner.ProgressKind ("round", "text", "reasoning",
// "call", "read", "action", "rejected", "warning").
type planningMessage struct {
	Type     string            `json:"type"` // "planning"
	RunID    string            `json:"run_id"`
	Progress *planner.Progress `json:"progress,omitempty"`
	Done     bool              `json:"done,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// planningProgress returns the progress function of runID's planning: it
// offers each step to every all-runs client without ever waiting for one.
func (s *Server) planningProgress(runID string) func(planner.Progress) {
	return func(pr planner.Progress) {
		s.offerPlanning(planningMessage{Type: "planning", RunID: runID, Progress: &pr})
	}
}

// planningDone says that runID's planning ended (err: it failed, nothing
// was recorded).
func (s *Server) planningDone(runID string, err error) {
	m := planningMessage{Type: "planning", RunID: runID, Done: true}
	if err != nil {
		m.Error = err.Error()
	}
	s.offerPlanning(m)
}

func (s *Server) offerPlanning(m planningMessage) {
	if !s.anyAllRuns() {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	for _, c := range s.allRunsClients(&outMsg{b: b}) {
		select {
		case c.out <- outMsg{b: b}: // seq 0: not an event
		default: // full: a preview piece is dropped, never waited for
		}
	}
}
