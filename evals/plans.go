package evals

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// PlanLine is one line of a plans file (cmd/docket/README.md, eval score):
// the calls planned for one case. Runs also write Error (the planner failed)
// and Usage; Try numbers repeated runs of the same case (1-based).
type PlanLine struct {
	ID    string `json:"id"`
	Calls []Call `json:"calls"`
	Error string `json:"error,omitempty"`
	Usage *Usage `json:"usage,omitempty"`
	Try   int    `json:"try,omitempty"`
}

// Plans are the plan lines of a file, by case id, each case's tries in order.
type Plans struct {
	Path  string
	ByID  map[string][]PlanLine
	Order []string
}

// ReadPlans reads a plans file (JSON Lines, ".gz" allowed). Unknown fields,
// a line without an id, calls that are not objects, and an id given twice
// for the same try are problems, all reported at once with their line.
func ReadPlans(path string) (*Plans, error) {
	r, err := openMaybeGzip(path)
	if err != nil {
		return nil, fmt.Errorf("reading plans: %w", err)
	}
	defer r.Close()
	return ParsePlans(r, path)
}

// ParsePlans reads plan lines from r; name is used in messages.
func ParsePlans(r io.Reader, name string) (*Plans, error) {
	ps := &Plans{Path: name, ByID: map[string][]PlanLine{}}
	var probs []Problem
	firstLine := map[string]int{}
	err := eachLine(r, func(line int, data []byte) bool {
		var pl PlanLine
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&pl); err != nil {
			probs = append(probs, Problem{File: name, Line: line, Field: jsonErrField(err), Msg: jsonErrMsg(err) + ` (want {"id": "...", "calls": [{"tool": "...", "args": {...}}]})`})
			return len(probs) < 50
		}
		if pl.ID == "" {
			probs = append(probs, Problem{File: name, Line: line, Field: "id", Msg: "missing"})
			return len(probs) < 50
		}
		for i, c := range pl.Calls {
			if c.Tool == "" {
				probs = append(probs, Problem{File: name, Line: line, Case: pl.ID, Field: fmt.Sprintf("calls[%d].tool", i), Msg: "missing"})
			}
			if len(bytes.TrimSpace(c.Args)) == 0 {
				pl.Calls[i].Args = json.RawMessage("{}")
			}
		}
		if pl.Try == 0 {
			pl.Try = len(ps.ByID[pl.ID]) + 1
		}
		for _, prev := range ps.ByID[pl.ID] {
			if prev.Try == pl.Try {
				probs = append(probs, Problem{File: name, Line: line, Case: pl.ID, Field: "id", Msg: fmt.Sprintf("a plan for this case (try %d) was already given on line %d", pl.Try, firstLine[pl.ID])})
				return len(probs) < 50
			}
		}
		if _, ok := ps.ByID[pl.ID]; !ok {
			ps.Order = append(ps.Order, pl.ID)
			firstLine[pl.ID] = line
		}
		ps.ByID[pl.ID] = append(ps.ByID[pl.ID], pl)
		return len(probs) < 50
	})
	if err != nil {
		return nil, fmt.Errorf("reading plans %s: %w", name, err)
	}
	if len(probs) > 0 {
		return nil, &FileError{Problems: probs}
	}
	return ps, nil
}

// WritePlanLine writes one plan line.
func WritePlanLine(w io.Writer, pl PlanLine) error {
	if pl.Calls == nil {
		pl.Calls = []Call{}
	}
	b, err := json.Marshal(pl)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ScorePlans scores every case of the dataset against the plans (and runs
// execution-level cases with opts.Executor). A case without a plan fails
// with a reason; a plan for a case the dataset does not hold is a problem
// (the files do not belong together).
func ScorePlans(d *Dataset, ps *Plans, opts *ScoreOptions) (*Report, error) {
	var probs []Problem
	for _, id := range ps.Order {
		if _, ok := d.Case(id); !ok {
			probs = append(probs, Problem{File: ps.Path, Case: id, Field: "id", Msg: "the dataset " + d.Path + " has no case with this id"})
		}
	}
	if len(probs) > 0 {
		for i := range probs {
			probs[i].Line = 0
		}
		return nil, &FileError{Problems: probs}
	}
	rep := &Report{Dataset: d.Path, Plans: ps.Path}
	for _, c := range d.Cases {
		lines := ps.ByID[c.ID]
		if len(lines) == 0 {
			rep.Cases = append(rep.Cases, ScoreMissing(c, "no plan for this case in "+ps.Path))
			continue
		}
		rep.Cases = append(rep.Cases, scoreTries(c, lines, opts.check()))
	}
	rep.Finish()
	return rep, nil
}

// scoreTries scores every try of a case; the result is the first failing
// try's (or the first try's when all pass), with Tries and Passes counted.
func scoreTries(c *Case, lines []PlanLine, check func(c *Case, calls []Call, r *Result)) Result {
	var first, firstFail *Result
	passes := 0
	var usage *Usage
	for _, pl := range lines {
		var r Result
		if pl.Error != "" {
			r = Result{ID: c.ID, Category: c.Category}
			r.fail(CodePlannerError, "the planner failed: %s", pl.Error)
		} else {
			r = Score(c, pl.Calls)
			if check != nil {
				check(c, pl.Calls, &r)
			}
		}
		if pl.Usage != nil {
			if usage == nil {
				usage = &Usage{}
			}
			usage.Add(*pl.Usage)
		}
		if r.Pass {
			passes++
		}
		if first == nil {
			rr := r
			first = &rr
		}
		if !r.Pass && firstFail == nil {
			rr := r
			firstFail = &rr
		}
	}
	out := *first
	if firstFail != nil {
		out = *firstFail
		out.Pass = false
	}
	out.Tries, out.Passes = len(lines), passes
	out.Usage = usage
	if out.Reasons == nil {
		out.Reasons = []string{}
	}
	if len(lines) > 1 && firstFail != nil {
		out.Reasons = append([]string{fmt.Sprintf("%d of %d tries passed; the reasons below are from the first failing try", passes, len(lines))}, out.Reasons...)
		out.Codes = append([]string{"flaky"}, out.Codes...)
		if passes == 0 {
			out.Reasons[0] = fmt.Sprintf("none of %d tries passed; the reasons below are from the first", len(lines))
			out.Codes[0] = "all_tries_failed"
		}
	}
	return out
}
