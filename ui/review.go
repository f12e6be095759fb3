package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
)

// A review request is one review or control decision. Over HTTP its op (and,
// under /actions/{action}/, its action) come from the path and the body holds
// the rest; on a WebSocket one message holds all of it, plus "id" (echoed in
// the answer) and "run" (required on the all-runs stream). decodeReview reads
// both, so both accept exactly the same shapes:
//
//	approve   exactly one of action (one id), actions (a non-empty list), all: true
//	reject    exactly one of action, all: true; reason optional
//	edit      action, args (a JSON object)
//	resolve   action, exactly one of done (the output, JSON), retry: true, skip: true
//	run_now   action
//	pause, resume, cancel   nothing else
//
// A field the op does not take is refused, never ignored: a message is never
// read as something its sender did not write. Approving (or rejecting) the
// whole plan is always all: true, never the meaning of a missing or empty
// list. openapi.json describes the same table (ReviewMessage and the request
// bodies); review_shape_test.go checks that the two agree.

// reviewOps are the ops, in the order error messages list them.
var reviewOps = []string{"approve", "reject", "edit", "resolve", "run_now", "pause", "resume", "cancel"}

// reviewFields lists, per op, the fields a request may carry besides the
// envelope (id, op, run).
var reviewFields = map[string][]string{
	"approve": {"action", "actions", "all"},
	"reject":  {"action", "all", "reason"},
	"edit":    {"action", "args"},
	"resolve": {"action", "done", "retry", "skip"},
	"run_now": {"action"},
	"pause":   nil,
	"resume":  nil,
	"cancel":  nil,
}

// reviewTakes says in words what each op takes, for error messages.
var reviewTakes = map[string]string{
	"approve": "approve takes exactly one of action (one id), actions (a non-empty list) or all: true (every waiting action)",
	"reject":  "reject takes exactly one of action (one id) or all: true (every action not started), and an optional reason",
	"edit":    "edit takes action and args (a JSON object)",
	"resolve": "resolve takes action and exactly one of done (the output, JSON), retry: true or skip: true",
	"run_now": "run_now takes action (the id of an action that waits for its time)",
	"pause":   "pause takes no other field",
	"resume":  "resume takes no other field",
	"cancel":  "cancel takes no other field",
}

// reviewOp is one decoded, checked review or control operation.
type reviewOp struct {
	ID      string // WebSocket: echoed in the answer
	Op      string // one of reviewOps
	Run     string // WebSocket: the run the message names, if any
	Actions []string
	All     bool // approve/reject: every waiting action, said explicitly
	Action  string
	Reason  string
	Args    json.RawMessage
	Done    json.RawMessage
	Retry   bool
	Skip    bool
}

// reviewWire is a review request as JSON.
type reviewWire struct {
	ID      string          `json:"id"`
	Op      string          `json:"op"`
	Run     string          `json:"run"`
	Action  string          `json:"action"`
	Actions []string        `json:"actions"`
	All     bool            `json:"all"`
	Reason  string          `json:"reason"`
	Args    json.RawMessage `json:"args"`
	Done    json.RawMessage `json:"done"`
	Retry   bool            `json:"retry"`
	Skip    bool            `json:"skip"`
}

// reviewFrom says where a review request comes from.
type reviewFrom struct {
	// op is the op the HTTP path names; empty for a WebSocket message, which
	// names its own.
	op string
	// action is the action the HTTP path names (/actions/{action}/…).
	action string
}

func (f reviewFrom) socket() bool { return f.op == "" }

// decodeReview reads and checks one review request: a WebSocket message
// (from.op empty) or the body of an HTTP review endpoint. Its errors wrap
// errBadOp. On error the returned op still carries the message's id and op
// when they could be read, for the error answer.
func decodeReview(data []byte, from reviewFrom) (reviewOp, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := decodeStrict(data, &fields); err != nil || fields == nil {
		if err == nil {
			err = errors.New("null")
		}
		what := "the request body"
		if from.socket() {
			what = "a message"
		}
		return reviewOp{}, fmt.Errorf("%w: %s must be a JSON object: %v", errBadOp, what, err)
	}
	var op reviewOp
	// The envelope first, so that even a refused message is answered with
	// its id and op.
	if from.socket() {
		json.Unmarshal(fields["id"], &op.ID)
		json.Unmarshal(fields["op"], &op.Op)
		if _, ok := fields["op"]; !ok || op.Op == "" {
			return op, fmt.Errorf("%w: a message needs an op: %s", errBadOp, strings.Join(reviewOps, ", "))
		}
	} else {
		op.Op = from.op
	}
	allowed, known := reviewFields[op.Op]
	if !known {
		return op, fmt.Errorf("%w: unknown op %q (want %s)", errBadOp, op.Op, strings.Join(reviewOps, ", "))
	}
	var extra []string
	for name := range fields {
		switch {
		case from.socket() && (name == "id" || name == "op" || name == "run"):
		case !from.socket() && (name == "id" || name == "op" || name == "run"):
			return op, fmt.Errorf("%w: %s is not a field of the request body: over HTTP the path names the run and the op (id, op and run belong to WebSocket messages)", errBadOp, name)
		case from.action != "" && (name == "action" || name == "actions" || name == "all"):
			return op, fmt.Errorf("%w: the path names the action (%s): leave %s out of the body", errBadOp, from.action, name)
		case !slices.Contains(allowed, name):
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return op, fmt.Errorf("%w: %s does not take %s: %s", errBadOp, op.Op, strings.Join(extra, ", "), reviewTakes[op.Op])
	}
	var w reviewWire
	if err := decodeStrict(data, &w); err != nil {
		return op, fmt.Errorf("%w: %s: %v", errBadOp, op.Op, err)
	}
	op.Run, op.Reason, op.Args, op.Retry, op.Skip = w.Run, w.Reason, w.Args, w.Retry, w.Skip
	if from.socket() {
		op.ID = w.ID
	}
	_, hasAction := fields["action"]
	_, hasActions := fields["actions"]
	_, hasAll := fields["all"]
	op.Action = w.Action
	if from.action != "" {
		op.Action, hasAction = from.action, true
	}
	if hasAction && op.Action == "" {
		return op, fmt.Errorf("%w: action must name an action: %s", errBadOp, reviewTakes[op.Op])
	}
	if hasAll && !w.All {
		return op, fmt.Errorf("%w: all must be true when it is given (name the actions instead): %s", errBadOp, reviewTakes[op.Op])
	}
	switch op.Op {
	case "approve", "reject":
		n := 0
		for _, given := range []bool{hasAction, hasActions, hasAll} {
			if given {
				n++
			}
		}
		if n != 1 {
			return op, fmt.Errorf("%w: %s", errBadOp, reviewTakes[op.Op])
		}
		op.All = w.All
		if hasActions {
			if len(w.Actions) == 0 {
				return op, fmt.Errorf("%w: actions is empty: name at least one action, or send all: true to approve every waiting action", errBadOp)
			}
			seen := map[string]bool{}
			for _, id := range w.Actions {
				if id == "" {
					return op, fmt.Errorf("%w: actions holds an empty id", errBadOp)
				}
				if seen[id] {
					return op, fmt.Errorf("%w: actions names %s twice", errBadOp, id)
				}
				seen[id] = true
			}
			op.Actions = w.Actions
		}
		if op.Op == "approve" && hasAction {
			op.Actions, op.Action = []string{op.Action}, ""
		}
	case "edit":
		if !hasAction {
			return op, fmt.Errorf("%w: %s", errBadOp, reviewTakes[op.Op])
		}
		if a := bytes.TrimSpace(w.Args); len(a) == 0 || a[0] != '{' {
			return op, fmt.Errorf("%w: edit needs args, a JSON object", errBadOp)
		}
	case "run_now":
		if !hasAction {
			return op, fmt.Errorf("%w: %s", errBadOp, reviewTakes[op.Op])
		}
	case "resolve":
		if !hasAction {
			return op, fmt.Errorf("%w: %s", errBadOp, reviewTakes[op.Op])
		}
		if isNull(w.Done) {
			op.Done = nil
		} else {
			op.Done = w.Done
		}
		n := 0
		for _, set := range []bool{op.Done != nil, op.Retry, op.Skip} {
			if set {
				n++
			}
		}
		if n != 1 {
			return op, fmt.Errorf("%w: %s", errBadOp, reviewTakes[op.Op])
		}
	}
	return op, nil
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// --- HTTP ---

// reviewHTTP decodes the body of a review endpoint as op, applies it for the
// caller and answers the run (400 for a body the op does not take).
func (s *Server) reviewHTTP(w http.ResponseWriter, r *http.Request, op string) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	rop, err := decodeReview(body, reviewFrom{op: op, action: r.PathValue("action")})
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	runID := r.PathValue("id")
	if err := s.review(r.Context(), runID, rop, approver(r)); err != nil {
		s.fail(w, err)
		return
	}
	s.answer(w, r, runID, http.StatusOK)
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) { s.reviewHTTP(w, r, "approve") }
func (s *Server) approveAction(w http.ResponseWriter, r *http.Request) {
	s.reviewHTTP(w, r, "approve")
}
func (s *Server) rejectPlan(w http.ResponseWriter, r *http.Request) { s.reviewHTTP(w, r, "reject") }
func (s *Server) rejectAction(w http.ResponseWriter, r *http.Request) {
	s.reviewHTTP(w, r, "reject")
}
func (s *Server) editAction(w http.ResponseWriter, r *http.Request) { s.reviewHTTP(w, r, "edit") }
func (s *Server) resolveAction(w http.ResponseWriter, r *http.Request) {
	s.reviewHTTP(w, r, "resolve")
}
func (s *Server) runNowAction(w http.ResponseWriter, r *http.Request) {
	s.reviewHTTP(w, r, "run_now")
}
func (s *Server) pause(w http.ResponseWriter, r *http.Request)     { s.reviewHTTP(w, r, "pause") }
func (s *Server) resume(w http.ResponseWriter, r *http.Request)    { s.reviewHTTP(w, r, "resume") }
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) { s.reviewHTTP(w, r, "cancel") }

// answer replies with the run as it is now.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, runID string, status int) {
	doc, err := s.led.Doc(r.Context(), runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, status, doc)
}

// --- applying ---

var errBadOp = errors.New("bad operation")

// review applies op (from decodeReview) to runID as `as` (an approval
// records its groups too) and drives the run on when the operation lets it
// move.
func (s *Server) review(ctx context.Context, runID string, op reviewOp, as ledger.Approver) error {
	by := as.By
	if _, err := s.led.GetRun(ctx, runID); err != nil {
		return err
	}
	s.watch(runID, false)
	var err error
	drive := true
	switch op.Op {
	case "approve":
		// The executor reads an empty list as "every waiting action": that
		// meaning is reached only through an explicit all.
		switch {
		case op.All:
			err = s.eng.ApproveAllAs(ctx, runID, as)
		case len(op.Actions) > 0:
			err = s.eng.ApproveAs(ctx, runID, op.Actions, as)
		default:
			return fmt.Errorf("%w: %s", errBadOp, reviewTakes["approve"])
		}
		if err == nil {
			s.metrics.reviews.add("approve")
		}
	case "reject":
		switch {
		case op.All:
			err = s.rejectAll(ctx, runID, op.Reason, by)
		case op.Action != "":
			err = s.eng.Reject(ctx, runID, op.Action, op.Reason, by)
			s.metrics.reviews.add("reject")
		default:
			return fmt.Errorf("%w: %s", errBadOp, reviewTakes["reject"])
		}
	case "edit":
		if op.Action == "" || len(op.Args) == 0 || !json.Valid(op.Args) {
			return fmt.Errorf("%w: %s", errBadOp, reviewTakes["edit"])
		}
		err = s.eng.Edit(ctx, runID, op.Action, op.Args, by)
		s.metrics.reviews.add("edit")
		drive = false // an edit clears the approval: nothing new can start
	case "resolve":
		if op.Action == "" {
			return fmt.Errorf("%w: %s", errBadOp, reviewTakes["resolve"])
		}
		res := ledger.Resolution{Retry: op.Retry, Skip: op.Skip, By: by}
		if !isNull(op.Done) {
			res.Done = op.Done
		}
		err = s.eng.Resolve(ctx, runID, op.Action, res)
		s.metrics.reviews.add("resolve")
	case "run_now":
		// The action is due at once: the drive started here claims it.
		err = s.eng.RunNow(ctx, runID, op.Action, by)
	case "pause":
		err = s.eng.Pause(ctx, runID, by)
		drive = false
	case "resume":
		// Only an explicit resume lifts a person's pause; approving or
		// resolving drives the run on, which leaves a pause in place.
		err = s.eng.Unpause(ctx, runID, by)
	case "cancel":
		err = s.eng.Cancel(ctx, runID, by)
		drive = false
	default:
		return fmt.Errorf("%w: unknown op %q (want %s)", errBadOp, op.Op, strings.Join(reviewOps, ", "))
	}
	if err != nil {
		return err
	}
	if drive {
		s.kick(runID)
	}
	return nil
}

// rejectAll rejects every action of the run that was never claimed.
func (s *Server) rejectAll(ctx context.Context, runID, reason, by string) error {
	acts, err := s.led.Actions(ctx, runID)
	if err != nil {
		return err
	}
	n := 0
	for _, a := range acts {
		if a.Attempts != 0 || (a.Status != ledger.StatusPending && a.Status != ledger.StatusApproved) {
			continue
		}
		if err := s.eng.Reject(ctx, runID, a.ID, reason, by); err != nil {
			return err
		}
		s.metrics.reviews.add("reject")
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: run %s has no action left to reject", executor.ErrNotReviewable, runID)
	}
	return nil
}
