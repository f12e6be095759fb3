package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// The replay diff: what a revision of a run's plan keeps and changes against
// the revision before it. Keys decide: an action whose resolved arguments (and
// tool) are the same has the same key, so its recorded output is reused; a
// new key runs. GET /v1/runs/{id}/diff?revision=N compares a recorded
// revision N with N-1; POST /v1/runs/{id}/diff {"plan"} compares a proposed
// next revision with the current one, before anything is recorded.

// Changes an action can show in a diff.
const (
	changeKept    = "kept"    // same key: the recorded output is reused
	changeChanged = "changed" // new key: it runs
	changeAdded   = "added"   // only in the new revision
	changeRemoved = "removed" // only in the old revision
	// changeFollows: the arguments are the same as written but refer to the
	// output of an action that runs again; it runs again only if that
	// output differs (known once it ran).
	changeFollows = "follows"
)

// argChange is one argument that differs, by JSON path ("" is the whole
// arguments object); Before or After is absent when the argument is new or
// gone.
type argChange struct {
	Path   string          `json:"path"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

type diffEntry struct {
	ActionID string      `json:"action_id"`
	Tool     string      `json:"tool"`
	Change   string      `json:"change"`
	Why      string      `json:"why"`
	OldKey   string      `json:"old_key,omitempty"`
	NewKey   string      `json:"new_key,omitempty"`
	OldTool  string      `json:"old_tool,omitempty"` // set when the tool changed
	Args     []argChange `json:"args"`
}

// planDiff is the answer of GET and POST /v1/runs/{id}/diff.
type planDiff struct {
	RunID string `json:"run_id"`
	From  int    `json:"from"` // the old revision
	// To is the new revision; 0 for a proposed plan not recorded yet.
	To      int            `json:"to"`
	Actions []diffEntry    `json:"actions"` // new revision's order, then removed ones
	Counts  map[string]int `json:"counts"`
}

// diffSide is one revision as the diff sees it.
type diffSide struct {
	order []string
	acts  map[string]plan.Action
	keys  map[string]string // "" or absent: not known (a reference cannot be resolved yet)
}

func (s *Server) getDiff(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	ctx := r.Context()
	run, err := s.led.GetRun(ctx, runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	rev := run.Revision
	if v := r.URL.Query().Get("revision"); v != "" {
		if rev, err = strconv.Atoi(v); err != nil || rev < 1 {
			writeError(w, http.StatusBadRequest, "bad_request", "revision must be a positive integer", nil)
			return
		}
	}
	if rev < 2 || rev > run.Revision {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("run %s has revisions 1 to %d: a diff compares revision 2 or later with the one before", runID, run.Revision), nil)
		return
	}
	oldPlan, err := s.led.Plan(ctx, runID, rev-1)
	if err != nil {
		s.fail(w, err)
		return
	}
	old, err := s.sideOfPlan(ctx, runID, oldPlan, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	var cur *diffSide
	if rev == run.Revision {
		cur, err = s.sideOfRun(ctx, runID)
	} else {
		var p *plan.Plan
		if p, err = s.led.Plan(ctx, runID, rev); err == nil {
			cur, err = s.sideOfPlan(ctx, runID, p, nil)
		}
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, diffSides(runID, rev-1, rev, old, cur))
}

func (s *Server) postDiff(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	body, ok := s.readSubmitted(w, r)
	if !ok {
		return
	}
	var req struct {
		Plan json.RawMessage `json:"plan"`
	}
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	if len(req.Plan) == 0 || string(req.Plan) == "null" {
		writeError(w, http.StatusBadRequest, "bad_request", "give the proposed plan: {\"plan\": {...}}", nil)
		return
	}
	p, err := plan.Decode(req.Plan)
	if err == nil {
		err = p.Validate(s.reg)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	ctx := r.Context()
	run, err := s.led.GetRun(ctx, runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	old, err := s.sideOfRun(ctx, runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	next, err := s.sideOfPlan(ctx, runID, p, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, diffSides(runID, run.Revision, 0, old, next))
}

// sideOfRun is the current revision from its rows: the keys they were
// claimed with and, for the argument diff, their arguments as written (a
// claimed row holds them resolved: those come from the recorded plan).
func (s *Server) sideOfRun(ctx context.Context, runID string) (*diffSide, error) {
	doc, err := s.led.Doc(ctx, runID)
	if err != nil {
		return nil, err
	}
	cur, err := s.led.Plan(ctx, runID, doc.Run.Revision)
	if err != nil {
		return nil, err
	}
	written := map[string]json.RawMessage{}
	for _, a := range cur.Actions {
		written[a.ID] = a.Args
	}
	p := &plan.Plan{}
	known := map[string]ledger.Action{}
	for _, a := range doc.Actions {
		if a.Undo {
			continue
		}
		args := a.Args
		if w, ok := written[a.ID]; ok && a.Key != "" {
			args = w
		}
		p.Actions = append(p.Actions, plan.Action{ID: a.ID, Tool: a.Tool, Args: args, DependsOn: a.DependsOn})
		known[a.ID] = a
	}
	return s.sideOfPlan(ctx, runID, p, known)
}

// sideOfPlan derives the key of every action of p whose references resolve,
// in dependency order, with the outputs recorded under the keys before it.
// rows, when given, are the recorded rows: their keys and outputs win.
func (s *Server) sideOfPlan(ctx context.Context, runID string, p *plan.Plan, rows map[string]ledger.Action) (*diffSide, error) {
	d := &diffSide{acts: map[string]plan.Action{}, keys: map[string]string{}}
	for _, a := range p.Actions {
		d.order = append(d.order, a.ID)
		d.acts[a.ID] = a
	}
	outputs := map[string]json.RawMessage{}
	for _, id := range dependencyOrder(p.Actions) {
		a := d.acts[id]
		if row, ok := rows[id]; ok && row.Key != "" {
			d.keys[id] = row.Key
			if row.Status == ledger.StatusSucceeded && len(row.Output) > 0 {
				outputs[id] = row.Output
			}
			continue
		}
		resolved, err := plan.Resolve(a.Args, outputs)
		if err != nil {
			continue // refers to an output not recorded (yet)
		}
		key, err := plan.Key(runID, a.ID, a.Tool, resolved)
		if err != nil {
			continue
		}
		d.keys[id] = key
		rec, err := s.led.Key(ctx, key)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			return nil, err
		case rec.State == ledger.StatusSucceeded && len(rec.Output) > 0:
			outputs[id] = rec.Output
		}
	}
	return d, nil
}

// dependencyOrder lists action ids so that each comes after what it depends
// on, in plan order otherwise (a valid plan has no cycles).
func dependencyOrder(acts []plan.Action) []string {
	byID := make(map[string]plan.Action, len(acts))
	for _, a := range acts {
		byID[a.ID] = a
	}
	seen := make(map[string]bool, len(acts))
	out := make([]string, 0, len(acts))
	var visit func(id string)
	visit = func(id string) {
		a, ok := byID[id]
		if !ok || seen[id] {
			return
		}
		seen[id] = true
		for _, d := range a.DependsOn {
			visit(d)
		}
		out = append(out, id)
	}
	for _, a := range acts {
		visit(a.ID)
	}
	return out
}

// diffSides compares two revisions action by action.
func diffSides(runID string, from, to int, old, cur *diffSide) planDiff {
	out := planDiff{RunID: runID, From: from, To: to, Actions: []diffEntry{}, Counts: map[string]int{}}
	change := map[string]string{}
	// Dependency order, so an action knows whether what it refers to runs again.
	acts := make([]plan.Action, 0, len(cur.order))
	for _, id := range cur.order {
		acts = append(acts, cur.acts[id])
	}
	entries := map[string]diffEntry{}
	for _, id := range dependencyOrder(acts) {
		a := cur.acts[id]
		e := diffEntry{ActionID: id, Tool: a.Tool, NewKey: cur.keys[id], Args: []argChange{}}
		o, had := old.acts[id]
		if !had {
			e.Change, e.Why = changeAdded, "new in this revision: it will run"
			change[id] = e.Change
			entries[id] = e
			continue
		}
		e.OldKey = old.keys[id]
		e.Args = jsonDiff("", o.Args, a.Args)
		if o.Tool != a.Tool {
			e.OldTool = o.Tool
		}
		var rerun []string // what it refers to that runs again
		if refs, err := plan.Refs(a.Args); err == nil {
			for _, ref := range refs {
				if c := change[ref.Action]; c != "" && c != changeKept && !slices.Contains(rerun, ref.Action) {
					rerun = append(rerun, ref.Action)
				}
			}
		}
		switch {
		case e.NewKey != "" && e.OldKey != "" && e.NewKey == e.OldKey:
			e.Change, e.Why = changeKept, "same resolved arguments, same key: its recorded output is reused"
		case e.NewKey != "" && e.OldKey != "":
			e.Change = changeChanged
			switch {
			case e.OldTool != "":
				e.Why = "another tool (" + e.OldTool + " → " + a.Tool + "): new key, it will run"
			case len(e.Args) > 0:
				e.Why = "arguments changed: new key, it will run"
			default:
				e.Why = "its resolved arguments changed (an output it refers to differs): new key, it will run"
			}
		case e.OldTool != "" || len(e.Args) > 0:
			e.Change, e.Why = changeChanged, "arguments changed: new key, it will run"
			if e.OldTool != "" {
				e.Why = "another tool (" + e.OldTool + " → " + a.Tool + "): new key, it will run"
			}
		case len(rerun) > 0:
			e.Change = changeFollows
			e.Why = "refers to the output of " + strings.Join(rerun, ", ") + ", which runs again: it runs again only if that output differs"
		default:
			e.Change, e.Why = changeKept, "unchanged (it has no recorded outcome yet)"
		}
		change[id] = e.Change
		entries[id] = e
	}
	for _, id := range cur.order {
		out.Actions = append(out.Actions, entries[id])
	}
	for _, id := range old.order {
		if _, ok := cur.acts[id]; ok {
			continue
		}
		o := old.acts[id]
		out.Actions = append(out.Actions, diffEntry{ActionID: id, Tool: o.Tool, Change: changeRemoved, OldKey: old.keys[id],
			Why: "not in this revision: it will not run again (what it did stays done)", Args: []argChange{}})
	}
	for _, e := range out.Actions {
		out.Counts[e.Change]++
	}
	return out
}

// jsonDiff lists the differences between two JSON values by path: objects
// key by key, arrays of the same length element by element, anything else
// whole.
func jsonDiff(path string, a, b json.RawMessage) []argChange {
	var av, bv any
	errA := decodeNumbers(a, &av)
	errB := decodeNumbers(b, &bv)
	if errA != nil || errB != nil {
		if bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) {
			return nil
		}
		return []argChange{{Path: path, Before: a, After: b}}
	}
	var out []argChange
	diffValues(path, av, bv, &out)
	if out == nil {
		out = []argChange{}
	}
	return out
}

func decodeNumbers(b json.RawMessage, v *any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		*v = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func diffValues(path string, a, b any, out *[]argChange) {
	am, aObj := a.(map[string]any)
	bm, bObj := b.(map[string]any)
	if aObj && bObj {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			av, inA := am[k]
			bv, inB := bm[k]
			switch {
			case !inA:
				*out = append(*out, argChange{Path: p, After: rawOf(bv)})
			case !inB:
				*out = append(*out, argChange{Path: p, Before: rawOf(av)})
			default:
				diffValues(p, av, bv, out)
			}
		}
		return
	}
	al, aArr := a.([]any)
	bl, bArr := b.([]any)
	if aArr && bArr && len(al) == len(bl) {
		for i := range al {
			diffValues(path+"["+strconv.Itoa(i)+"]", al[i], bl[i], out)
		}
		return
	}
	ra, rb := rawOf(a), rawOf(b)
	if !bytes.Equal(ra, rb) {
		*out = append(*out, argChange{Path: path, Before: ra, After: rb})
	}
}

func rawOf(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
