package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// The reviewer's views across runs: the inbox (GET /v1/inbox, every action
// waiting for a person) and the run search (GET /v1/search/runs, the run list
// filtered by status, tool and text, paged with after).

// inboxItem is one action waiting for a person.
type inboxItem struct {
	RunID     string `json:"run_id"`
	RunGoal   string `json:"run_goal"`
	RunStatus string `json:"run_status"`
	ActionID  string `json:"action_id"`
	Tool      string `json:"tool"`
	Class     string `json:"class"`
	Status    string `json:"status"`
	// Kind is what the person is asked: "approval" (approve, reject or edit
	// before the first attempt) or "needs_review" (the outcome is unknown:
	// say what happened).
	Kind      string   `json:"kind"`
	Attempts  int      `json:"attempts"`
	DependsOn []string `json:"depends_on"`
	// Args are the arguments with every reference to an earlier output that
	// can be resolved already filled in; Resolved says whether all were.
	Args     json.RawMessage `json:"args"`
	Resolved bool            `json:"resolved"`
	Key      string          `json:"key,omitempty"`
	Error    string          `json:"error,omitempty"`
	// Since is when the action started to wait: the time of its last event,
	// or of the revision that planned it.
	Since time.Time `json:"since"`
	// Approval says, for an action a policy rule decided, who approved its
	// arguments as shown and how many more people are needed.
	Approval *approvalView `json:"approval,omitempty"`
	// Destination is where the call would go with these arguments (an
	// HTTP tool, every reference resolved): method, scheme://host:port and
	// path, resolved and checked as the call will be, so a person sees the
	// host, not the template. DestinationError says why the call would be
	// refused (an argument that would change the host, a dot segment).
	Destination      *httptool.Destination `json:"destination,omitempty"`
	DestinationError string                `json:"destination_error,omitempty"`
}

// destinationTool is a tool that can say where a call would go
// (tools/httptool).
type destinationTool interface {
	Destination(tools.Call) (httptool.Destination, error)
}

// destination fills in it.Destination for an approval whose arguments are
// all resolved.
func (s *Server) destination(it *inboxItem) {
	if it.Kind != "approval" || !it.Resolved || s.reg == nil {
		return
	}
	t, ok := s.reg.Get(it.Tool)
	if !ok {
		return
	}
	dt, ok := t.(destinationTool)
	if !ok {
		return
	}
	key, err := plan.Key(it.RunID, it.ActionID, it.Tool, it.Args)
	if err != nil {
		return
	}
	d, err := dt.Destination(tools.Call{Key: key, RunID: it.RunID, Action: it.ActionID, Args: it.Args})
	if err != nil {
		it.DestinationError = err.Error()
		return
	}
	it.Destination = &d
}

// approvalView is an action's policy gate as the reviewer sees it.
type approvalView struct {
	Rule    string `json:"rule,omitempty"`
	Outcome string `json:"outcome"`
	Message string `json:"message,omitempty"`
	Why     string `json:"why,omitempty"`
	// Need approvals in all; ApprovedBy gave theirs (for these exact
	// arguments, not expired); StillNeeded more are needed.
	Need        int               `json:"need"`
	ApprovedBy  []ledger.Approval `json:"approved_by"`
	StillNeeded int               `json:"still_needed"`
	// Names and members of Groups may approve (both empty: anyone with
	// the review scope); ExcludeCreator: not Creator, who created the run.
	Names          []string `json:"names,omitempty"`
	Groups         []string `json:"groups,omitempty"`
	ExcludeCreator bool     `json:"exclude_creator,omitempty"`
	Creator        string   `json:"creator,omitempty"`
}

// approvalOf is a's approval view for args at now (nil without a gate).
func approvalOf(a ledger.Action, args json.RawMessage, creator string, now time.Time) *approvalView {
	g := a.Gate
	if g == nil {
		return nil
	}
	v := &approvalView{Rule: g.Rule, Outcome: g.Outcome, Message: g.Message, Why: g.Why, Need: g.Need,
		ApprovedBy: []ledger.Approval{}, Names: g.Names, Groups: g.Groups,
		ExcludeCreator: g.ExcludeCreator, Creator: creator}
	counted := a.Approvers(args, now)
	for _, ap := range a.Approvals {
		if slices.Contains(counted, ap.By) && ap.Used == "" && !slices.ContainsFunc(v.ApprovedBy, func(x ledger.Approval) bool { return x.By == ap.By }) {
			v.ApprovedBy = append(v.ApprovedBy, ap)
		}
	}
	v.StillNeeded = max(0, g.Need-len(v.ApprovedBy))
	return v
}

// inboxList is the answer of GET /v1/inbox.
type inboxList struct {
	Items []inboxItem `json:"items"`
	Count int         `json:"count"` // every waiting action (Items may be capped by limit)
	Runs  int         `json:"runs"`  // runs examined
}

// inboxStatuses are the run statuses under which an action can wait for a
// person.
var inboxStatuses = []ledger.RunStatus{ledger.RunAwaitingApproval, ledger.RunPaused, ledger.RunRunning}

// inbox is GET /v1/inbox[?run=ID][&limit=N]: every action waiting for a
// person across runs, oldest first.
func (s *Server) inbox(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 1000
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, "bad_request", "limit must be between 1 and 10000", nil)
			return
		}
		limit = n
	}
	ctx := r.Context()
	var runs []ledger.Run
	if id := q.Get("run"); id != "" {
		run, err := s.led.GetRun(ctx, id)
		if err != nil {
			s.fail(w, err)
			return
		}
		runs = append(runs, run)
	} else {
		for _, st := range inboxStatuses {
			after := ""
			for {
				page, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: st, After: after, Limit: 1000})
				if err != nil {
					s.fail(w, err)
					return
				}
				runs = append(runs, page...)
				if next == "" {
					break
				}
				after = next
			}
		}
	}
	items := []inboxItem{}
	for _, run := range runs {
		its, err := s.waitingIn(ctx, run)
		if err != nil {
			s.fail(w, err)
			return
		}
		items = append(items, its...)
	}
	slices.SortStableFunc(items, func(a, b inboxItem) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.RunID, b.RunID))
	})
	out := inboxList{Count: len(items), Runs: len(runs)}
	out.Items = items[:min(limit, len(items))]
	writeJSON(w, http.StatusOK, out)
}

// waitingIn lists the actions of run that wait for a person, in plan order.
func (s *Server) waitingIn(ctx context.Context, run ledger.Run) ([]inboxItem, error) {
	if run.Status == ledger.RunCompleted || run.Status == ledger.RunFailed || run.Status == ledger.RunCancelled {
		return nil, nil
	}
	doc, err := s.led.Doc(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	outputs := map[string]json.RawMessage{}
	var waiting []ledger.Action
	for _, a := range doc.Actions {
		if a.Status == ledger.StatusSucceeded && len(a.Output) > 0 {
			outputs[a.ID] = a.Output
		}
		if kindOf(a) != "" {
			waiting = append(waiting, a)
		}
	}
	if len(waiting) == 0 {
		return nil, nil
	}
	since, err := s.waitingSince(ctx, run)
	if err != nil {
		return nil, err
	}
	items := make([]inboxItem, 0, len(waiting))
	for _, a := range waiting {
		it := inboxItem{
			RunID: run.ID, RunGoal: doc.Run.Goal, RunStatus: string(doc.Run.Status),
			ActionID: a.ID, Tool: a.Tool, Class: a.Class, Status: string(a.Status), Kind: kindOf(a),
			Attempts: a.Attempts, DependsOn: a.DependsOn, Args: a.Args, Key: a.Key, Error: a.Error,
			Since: since.of(a.ID),
		}
		if it.DependsOn == nil {
			it.DependsOn = []string{}
		}
		if len(it.Args) == 0 {
			it.Args = json.RawMessage("null")
		}
		if res, err := plan.Resolve(a.Args, outputs); err == nil {
			it.Args, it.Resolved = res, true
		}
		it.Approval = approvalOf(a, a.Args, doc.Run.CreatedBy, time.Now())
		s.destination(&it)
		items = append(items, it)
	}
	return items, nil
}

// kindOf says what a person is asked about a, or "" when a waits for no one.
func kindOf(a ledger.Action) string {
	switch {
	case a.Status == ledger.StatusNeedsReview:
		return "needs_review"
	case a.Status == ledger.StatusPending && a.Attempts == 0:
		return "approval"
	}
	return ""
}

// sinceTimes tells when each action of a run started to wait.
type sinceTimes struct {
	revision time.Time            // the current revision was recorded
	last     map[string]time.Time // action id → its last event
}

func (t sinceTimes) of(actionID string) time.Time {
	if at, ok := t.last[actionID]; ok && at.After(t.revision) {
		return at.UTC()
	}
	return t.revision.UTC()
}

// waitingSince reads a run's events once: when its current revision was
// recorded and the last event of each action.
func (s *Server) waitingSince(ctx context.Context, run ledger.Run) (sinceTimes, error) {
	evs, err := s.led.Events(ctx, run.ID, 0, 0)
	if err != nil {
		return sinceTimes{}, err
	}
	t := sinceTimes{revision: run.CreatedAt, last: map[string]time.Time{}}
	for _, ev := range evs {
		switch {
		case ev.Type == "plan.recorded" || ev.Type == "run.replayed":
			t.revision = ev.At
		case ev.ActionID != "":
			t.last[ev.ActionID] = ev.At
		}
	}
	return t, nil
}

// searchScanMax caps the runs one search request examines; past it the
// answer carries the cursor to go on from.
const searchScanMax = 5000

// runSearch is the answer of GET /v1/search/runs.
type runSearch struct {
	Runs    []ledger.Run `json:"runs"`
	Next    string       `json:"next"`    // cursor for after ("" = no more runs)
	Scanned int          `json:"scanned"` // runs examined by this request
}

// searchRuns is GET /v1/search/runs?status=&tool=&q=&after=&limit=: the runs,
// newest first, whose status is status, that have an action of tool tool in
// their current revision, and whose id or goal contains q (any case). At most
// limit runs (default 50, at most 1000) and searchScanMax examined per
// request; next continues after the last run examined.
func (s *Server) searchRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "bad_request", "limit must be between 1 and 1000", nil)
			return
		}
		limit = n
	}
	status := ledger.RunStatus(q.Get("status"))
	tool := q.Get("tool")
	text := strings.ToLower(strings.TrimSpace(q.Get("q")))
	if len(text) > 200 {
		writeError(w, http.StatusBadRequest, "bad_request", "q is at most 200 characters", nil)
		return
	}
	ctx := r.Context()
	out := runSearch{Runs: []ledger.Run{}}
	after := q.Get("after")
	for {
		// Pages never hold more runs than are still wanted, so a page is
		// always examined whole and its cursor is where to go on from.
		page, next, err := s.led.ListRuns(ctx, ledger.ListOptions{Status: status, After: after, Limit: min(limit-len(out.Runs), searchScanMax-out.Scanned)})
		if err != nil {
			if errors.Is(err, ledger.ErrInvalid) {
				writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
				return
			}
			s.fail(w, err)
			return
		}
		out.Scanned += len(page)
		for _, run := range page {
			ok, err := s.runMatches(ctx, run, tool, text)
			if err != nil {
				s.fail(w, err)
				return
			}
			if ok {
				out.Runs = append(out.Runs, run)
			}
		}
		out.Next, after = next, next
		if next == "" || len(out.Runs) == limit || out.Scanned >= searchScanMax {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) runMatches(ctx context.Context, run ledger.Run, tool, text string) (bool, error) {
	if text != "" && !strings.Contains(strings.ToLower(run.ID), text) && !strings.Contains(strings.ToLower(run.Goal), text) {
		return false, nil
	}
	if tool == "" {
		return true, nil
	}
	acts, err := s.led.Actions(ctx, run.ID)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(acts, func(a ledger.Action) bool { return a.Tool == tool }), nil
}
