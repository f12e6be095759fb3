package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Operations a person issues while a run is in flight (through `docket
// serve`'s API, the only place cancel and edit exist).
const (
	OpPause  = "pause"  // pause, hold a while, resume
	OpCancel = "cancel" // cancel for good
	OpEdit   = "edit"   // edit a not-yet-claimed action (then approve it again)
	OpReplay = "replay" // replay with an edited argument of a not-yet-run action
)

// control is what a person does to one run while it is in flight. It is
// drawn from its own random stream (newRand(seed, "control", n)), so the
// plans and the kill schedule of a seed stay those of earlier harness
// versions.
type control struct {
	Op    string        // "" for none
	Delay time.Duration // from submitting the run to issuing the operation
	Hold  time.Duration // how long a pause holds before the resume
	Pick  float64       // which not-yet-run action an edit or a replay changes
}

// controlFor draws run n's control: about one run in three gets one.
func controlFor(seed uint64, n int) control {
	rng := newRand(seed, "control", n)
	x := rng.Float64()
	c := control{
		Delay: 20*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond))),
		Hold:  50*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))),
		Pick:  rng.Float64(),
	}
	switch {
	case x < 0.06:
		c.Op = OpCancel
	case x < 0.15:
		c.Op = OpReplay
	case x < 0.24:
		c.Op = OpEdit
	case x < 0.34:
		c.Op = OpPause
	}
	return c
}

// ControlStats counts what a person did to a run while it was in flight, and
// how the service answered.
type ControlStats struct {
	Op             string `json:"op,omitempty"`
	Pauses         int    `json:"pauses"`          // pauses acknowledged
	Resumes        int    `json:"resumes"`         // resumes acknowledged
	Cancels        int    `json:"cancels"`         // cancels acknowledged
	Edits          int    `json:"edits"`           // edits accepted (and honoured: the audit checks)
	EditsRefused   int    `json:"edits_refused"`   // edits answered 409 (the run was being driven, or the action had started)
	Replays        int    `json:"replays"`         // replays accepted
	ReplaysRefused int    `json:"replays_refused"` // replays answered 409 (driven, or an outcome still open)
	Superseded     int    `json:"superseded"`      // effects of an earlier revision a replay changed after they ran (a new effect, on purpose)
	Late           int    `json:"late"`            // operations that found the run already finished (409), nothing to check
	NothingLeft    int    `json:"nothing_left"`    // edits/replays that found no action left that had not started
}

// edited is one argument a person changed: the action, the field (a path in
// its arguments) and the values before and after.
type edited struct {
	Action string
	Path   []string
	Old    any
	New    any
}

// ctlState is a control's progress through a run, across restarts of the
// service: each phase can be done again after the service was killed.
type ctlState struct {
	c           control
	phases      []string
	accepted    []edited // edits and replays the service accepted
	refused     []edited // edits the service refused (the old value must stay)
	pauseAck    *runDoc  // the run as the pause was acknowledged
	cancel      *runDoc  // the run as the cancel was acknowledged
	before      *runDoc  // the run read right before a replay
	replayed    bool
	target      *edited  // the edit or replay in progress
	leftPending []string // cancelled run: started actions left pending
	calm        bool     // no more kills: the service children start unarmed
	restart     bool     // the service was stopped on purpose (not a kill)
	// superseded are actions of earlier revisions that succeeded under a
	// key the last revision no longer has (a replay changed them after
	// they ran): their effects are explained, on purpose.
	superseded []docAction
	findings   []string
	stats      ControlStats
}

func newCtlState(c control) *ctlState {
	s := &ctlState{c: c, stats: ControlStats{Op: c.Op}}
	switch c.Op {
	case OpPause:
		s.phases = []string{"delay", "pause", "settle", "hold", "resume"}
	case OpCancel:
		// With Config.CalmBeforeCancel the service is restarted gracefully
		// with no kill armed first (calm); by default kills go on, and the
		// audit checks that a killed child's open actions are concluded.
		s.phases = []string{"delay", "calm", "hold", "cancel"}
	case OpEdit:
		s.phases = []string{"delay", "edit"}
	case OpReplay:
		s.phases = []string{"delay", "replay"}
	}
	return s
}

// errDied means the service gave no answer: it was killed (or died).
var errDied = errors.New("the docket service gave no answer")

// api is a client of one `docket serve` child.
type api struct {
	srv   *serveProc
	armed bool // a kill is drawn for this child
	token string
	http  *http.Client
}

// call sends one request; it returns the status and the body. errDied: no
// answer, and the service has exited.
func (a *api) call(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.srv.url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err == nil {
		defer resp.Body.Close()
		var b []byte
		if b, err = io.ReadAll(resp.Body); err == nil {
			return resp.StatusCode, b, nil
		}
	}
	if ctx.Err() != nil {
		return 0, nil, ctx.Err()
	}
	// No answer: the service was killed. Wait for it to be gone.
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-a.srv.done:
		return 0, nil, errDied
	case <-t.C:
		return 0, nil, fmt.Errorf("%s %s: no answer from a live docket serve: %w", method, path, err)
	}
}

// doc sends a request whose answer is the Run JSON; a status other than 200
// or 201 is returned with a nil doc and the body as the error text.
func (a *api) doc(ctx context.Context, method, path string, body any) (int, *runDoc, string, error) {
	code, b, err := a.call(ctx, method, path, body)
	if err != nil {
		return 0, nil, "", err
	}
	if code != http.StatusOK && code != http.StatusCreated {
		return code, nil, strings.TrimSpace(string(b)), nil
	}
	var d runDoc
	if err := json.Unmarshal(b, &d); err != nil || d.RunID == "" {
		return code, nil, "", fmt.Errorf("%s %s answered %d without a Run JSON: %s", method, path, code, b)
	}
	return code, &d, "", nil
}

// runServe drives run j through a `docket serve` child (restarted after every
// kill) while the person issues the run's control operation through the
// service's API, then audits it like runJob.
func (h *harness) runServe(ctx context.Context, worker int, j job, c control) RunResult {
	p, res, rf, err := h.prepare(worker, j)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	fail := func(err error) RunResult {
		res.Error = err.Error()
		return res
	}
	st := newCtlState(c)
	token := "chaos-" + rf.runID + "-token-0123456789"
	args := []string{"serve", "--data", rf.data, "--tools", rf.toolsPath, "--addr", "127.0.0.1:0", "--token", token, "--grace", "20s"}
	planRaw, _ := GeneratePlan(h.st.Seed, j.n)
	retries := map[string]int{}
	start := time.Now()
	var (
		a         *api
		final     *runDoc
		submitted bool
		afterKill bool
	)
	defer func() {
		if a != nil && !a.srv.dead() {
			a.srv.kill()
		}
	}()
	for step := 0; final == nil; {
		if a == nil || a.srv.dead() {
			switch {
			case a == nil:
			case st.restart:
				st.restart = false // stopped on purpose
			case !a.srv.out.killed:
				return fail(fmt.Errorf("run %s: docket serve exited by itself: %s", rf.runID, a.srv.out))
			default:
				res.Kills++
				afterKill = true
			}
			if step >= maxSteps {
				return fail(fmt.Errorf("run %s did not end in %d starts of docket serve", rf.runID, maxSteps))
			}
			k := killFor(h.st.Seed, j.n, step, rf.ids)
			if st.calm {
				k = kill{}
			}
			srv, err := h.cfg.Docket.startServe(ctx, args, k)
			step++
			res.Commands++
			if err != nil {
				return fail(err)
			}
			if afterKill {
				res.Restarts++
				afterKill = false
			}
			a = &api{srv: srv, armed: k != kill{}, token: token, http: &http.Client{Timeout: 7 * time.Minute}}
			if srv.url == "" {
				continue // killed (or died) before it listened
			}
		}
		if !submitted {
			code, _, msg, err := a.doc(ctx, "POST", "/v1/runs", map[string]any{"run_id": rf.runID, "plan": json.RawMessage(planRaw), "approve": "all"})
			if errors.Is(err, errDied) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			if code != http.StatusOK && code != http.StatusCreated {
				return fail(fmt.Errorf("run %s: POST /v1/runs answered %d: %s", rf.runID, code, msg))
			}
			submitted = true
		}
		if len(st.phases) > 0 {
			err := h.phase(ctx, a, rf, p, st)
			if errors.Is(err, errDied) {
				continue
			}
			if err != nil {
				return fail(fmt.Errorf("run %s: %s: %w", rf.runID, c.Op, err))
			}
			st.phases = st.phases[1:]
			continue
		}
		// Every operation done: wait for the run to stop, settle what waits
		// for a person, until it ends.
		_, d, msg, err := a.doc(ctx, "GET", "/v1/runs/"+url.PathEscape(rf.runID)+"?wait=5m", nil)
		if errors.Is(err, errDied) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		if d == nil {
			return fail(fmt.Errorf("run %s: GET answered: %s", rf.runID, msg))
		}
		var review *docAction
		for i := range d.Actions {
			if d.Actions[i].Status == "needs_review" {
				review = &d.Actions[i]
				break
			}
		}
		switch {
		case review != nil && (d.Status == "paused" || d.Status == "cancelled" || d.Status == "failed"):
			decision, err := h.person(ctx, rf.runID, d, review)
			if err != nil {
				return fail(err)
			}
			res.Resolved[review.Class]++
			body := map[string]any{"done": decision}
			switch {
			case decision != nil:
			case d.Status == "cancelled":
				// Nothing happened, and the run will not try again: say so.
				body = map[string]any{"skip": true}
			default:
				retries[review.ID]++
				body = map[string]any{"retry": true}
			}
			code, _, msg, err := a.doc(ctx, "POST", "/v1/runs/"+url.PathEscape(rf.runID)+"/actions/"+url.PathEscape(review.ID)+"/resolve", body)
			if errors.Is(err, errDied) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			if code != http.StatusOK {
				return fail(fmt.Errorf("run %s: resolving %s (%v) answered %d: %s", rf.runID, review.ID, body, code, msg))
			}
		case d.Status == "completed" || d.Status == "failed" || d.Status == "cancelled":
			final = d
		default:
			return fail(fmt.Errorf("run %s: with no drive going on the run is %s and nothing waits for a person (control %s, %+v): a run must end completed, failed, cancelled or wait for a person: %s",
				rf.runID, d.Status, c.Op, st.stats, compactJSON(mustMarshal(d))))
		}
	}
	for st.replayed {
		err := h.superseded(ctx, a, rf.runID, final, st)
		if !errors.Is(err, errDied) {
			if err != nil {
				return fail(err)
			}
			break
		}
		// Killed at the very end (a timed kill): the run has ended; read
		// its events from a service with no kill armed.
		if a.srv.out.killed {
			res.Kills++
		}
		st.superseded, st.stats.Superseded = nil, 0
		srv, err := h.cfg.Docket.startServe(ctx, args, kill{})
		res.Commands++
		if err != nil {
			return fail(err)
		}
		if srv.url == "" {
			return fail(fmt.Errorf("run %s: docket serve did not start: %s", rf.runID, srv.out))
		}
		a = &api{srv: srv, token: token, http: a.http}
	}
	a.srv.stop()
	if !a.srv.out.killed && a.srv.out.code != 0 {
		return fail(fmt.Errorf("run %s: docket serve exited %d on SIGTERM: %s", rf.runID, a.srv.out.code, a.srv.out))
	}
	res.Status = final.Status
	res.Seconds = time.Since(start).Seconds()
	res.Control = &st.stats
	return h.finish(ctx, res, rf, retries, st)
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// phase performs the first of st's phases against the service.
func (h *harness) phase(ctx context.Context, a *api, rf runFiles, p genPlan, st *ctlState) error {
	runPath := "/v1/runs/" + url.PathEscape(rf.runID)
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-a.srv.done:
			return errDied
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	late := func() {
		// The run ended before the operation reached it: nothing left to do.
		st.stats.Late++
		st.phases = st.phases[:1]
	}
	// then replaces the phases after the current one.
	then := func(next ...string) { st.phases = append(st.phases[:1], next...) }
	switch st.phases[0] {
	case "delay":
		return wait(st.c.Delay)
	case "hold":
		return wait(st.c.Hold)
	case "pause":
		code, d, msg, err := a.doc(ctx, "POST", runPath+"/pause", map[string]any{})
		if err != nil {
			return err
		}
		if code == http.StatusConflict {
			late()
			return nil
		}
		if d == nil {
			return fmt.Errorf("pause answered %d: %s", code, msg)
		}
		if st.pauseAck == nil {
			st.stats.Pauses++
			st.pauseAck = d
		}
		return nil
	case "settle":
		// The pause holds: once no drive is going on, the run is paused and
		// nothing that had not started when the pause was acknowledged has
		// started (also across a restart of the service).
		_, d, msg, err := a.doc(ctx, "GET", runPath+"?wait=5m", nil)
		if err != nil {
			return err
		}
		if d == nil {
			return fmt.Errorf("GET answered: %s", msg)
		}
		if d.Status != "paused" {
			st.find("paused (acknowledged) but the run is %s once no drive goes on", d.Status)
		}
		for _, x := range d.Actions {
			if b := actionOf(st.pauseAck, x.ID); b != nil && b.Attempts == 0 && x.Attempts > 0 {
				st.find("action %s had not started when the pause was acknowledged, and started while paused (%s, %d attempts)", x.ID, x.Status, x.Attempts)
			}
		}
		return nil
	case "resume":
		code, _, msg, err := a.doc(ctx, "POST", runPath+"/resume", map[string]any{})
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("resume answered %d: %s", code, msg)
		}
		st.stats.Resumes++
		return nil
	case "calm":
		if !a.armed || !h.cfg.CalmBeforeCancel {
			return nil
		}
		st.calm, st.restart = true, true
		a.srv.stop()
		return errDied
	case "cancel":
		code, d, msg, err := a.doc(ctx, "POST", runPath+"/cancel", map[string]any{})
		if errors.Is(err, errDied) {
			// The answer was lost: after the restart, the run says whether
			// the cancel took; the next attempt is refused if it did.
			return err
		}
		if err != nil {
			return err
		}
		if code == http.StatusConflict {
			if cur, err := h.current(ctx, a, runPath); err != nil {
				return err
			} else if cur.Status == "cancelled" && st.cancel == nil {
				st.stats.Cancels++ // acknowledged before a kill: judged from now
				st.cancel = cur
				return nil
			}
			late()
			return nil
		}
		if d == nil {
			return fmt.Errorf("cancel answered %d: %s", code, msg)
		}
		st.stats.Cancels++
		st.cancel = d
		return nil
	case "edit", "edit-paused":
		if st.target != nil {
			// The last edit's answer was lost (the service was killed): the
			// run says whether it took.
			cur, err := h.current(ctx, a, runPath)
			if err != nil {
				return err
			}
			if x := actionOf(cur, st.target.Action); x != nil && reflect.DeepEqual(fieldOf(x.Args, st.target.Path), st.target.New) {
				st.accepted = append(st.accepted, *st.target)
				st.stats.Edits++
				st.target = nil
				if st.phases[0] == "edit" {
					then("approve")
				} else {
					then("approve", "resume")
				}
				return nil
			}
			st.target = nil
		}
		cur, err := h.current(ctx, a, runPath)
		if err != nil {
			return err
		}
		e, args := pickEdit(p, cur, st.c.Pick)
		if e == nil {
			st.stats.NothingLeft++
			if st.phases[0] == "edit-paused" {
				then("resume")
			} else {
				st.phases = st.phases[:1]
			}
			return nil
		}
		st.target = e
		code, _, _, err := a.doc(ctx, "POST", runPath+"/actions/"+url.PathEscape(e.Action)+"/edit", map[string]any{"args": args})
		if err != nil {
			return err
		}
		st.target = nil
		switch {
		case code == http.StatusOK:
			st.accepted = append(st.accepted, *e)
			st.stats.Edits++
			if st.phases[0] == "edit" {
				then("approve")
			} else {
				then("approve", "resume")
			}
		case code == http.StatusConflict:
			st.refused = append(st.refused, *e)
			st.stats.EditsRefused++
			if st.phases[0] == "edit" {
				// Refused while driven: pause, then edit.
				then("pause", "settle", "edit-paused")
			} else {
				then("resume")
			}
		default:
			return fmt.Errorf("edit %s answered %d", e.Action, code)
		}
		return nil
	case "approve":
		e := st.accepted[len(st.accepted)-1]
		code, _, msg, err := a.doc(ctx, "POST", runPath+"/actions/"+url.PathEscape(e.Action)+"/approve", map[string]any{})
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			cur, err := h.current(ctx, a, runPath)
			if err != nil {
				return err
			}
			if x := actionOf(cur, e.Action); x == nil || x.Status == "pending" {
				return fmt.Errorf("approving edited action %s answered %d: %s", e.Action, code, msg)
			}
		}
		return nil
	case "replay", "replay-paused":
		cur, err := h.current(ctx, a, runPath)
		if err != nil {
			return err
		}
		if st.target != nil {
			// The last replay's answer was lost: the run's revision says
			// whether it took.
			if curRevision(cur) > curRevision(st.before) {
				st.accepted = append(st.accepted, *st.target)
				st.stats.Replays++
				st.replayed = true
				st.target = nil
				if st.phases[0] == "replay-paused" {
					then("resume")
				}
				return nil
			}
			st.target = nil
		}
		e, args := pickEdit(p, cur, st.c.Pick)
		if e == nil {
			st.stats.NothingLeft++
			if st.phases[0] == "replay-paused" {
				then("resume")
			} else {
				st.phases = st.phases[:1]
			}
			return nil
		}
		np := p
		np.Actions = slices.Clone(p.Actions)
		for i := range np.Actions {
			if np.Actions[i].ID == e.Action {
				np.Actions[i].Args = args
			}
		}
		st.before, st.target = cur, e
		code, _, _, err := a.doc(ctx, "POST", runPath+"/replay", map[string]any{"plan": np})
		if err != nil {
			return err
		}
		st.target = nil
		switch {
		case code == http.StatusOK || code == http.StatusCreated:
			st.accepted = append(st.accepted, *e)
			st.stats.Replays++
			st.replayed = true
			if st.phases[0] == "replay-paused" {
				then("resume")
			}
		case code == http.StatusConflict:
			st.stats.ReplaysRefused++
			if st.phases[0] == "replay" {
				then("pause", "settle", "replay-paused")
			} else {
				then("resume") // an outcome is still open: the run goes on as it was
			}
		default:
			return fmt.Errorf("replay (editing %s) answered %d", e.Action, code)
		}
		return nil
	}
	return fmt.Errorf("unknown phase %q", st.phases[0])
}

// current reads the run as it is now.
func (h *harness) current(ctx context.Context, a *api, runPath string) (*runDoc, error) {
	_, d, msg, err := a.doc(ctx, "GET", runPath, nil)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("GET %s: %s", runPath, msg)
	}
	return d, nil
}

func curRevision(d *runDoc) int {
	if d == nil {
		return 0
	}
	return d.Revision
}

func (st *ctlState) find(format string, a ...any) {
	st.findings = append(st.findings, st.c.Op+": "+fmt.Sprintf(format, a...))
}

func actionOf(d *runDoc, id string) *docAction {
	if d == nil {
		return nil
	}
	for i := range d.Actions {
		if d.Actions[i].ID == id {
			return &d.Actions[i]
		}
	}
	return nil
}

// editField is the argument an edit changes, per tool: the field the world
// files the effect under (payments by reference, contacts and leads by email,
// emails by template), so an effect sent with the old arguments is one no
// action explains; settings by their value.
var editField = map[string][]string{
	ToolCharge:   {"reference"},
	ToolContact:  {"email"},
	ToolLead:     {"email"},
	ToolEmail:    {"template"},
	ToolSettings: {"settings", "plan"},
}

// pickEdit chooses an action of the run that has not started (never
// claimed, no undo) and returns the change and the action's edited
// arguments (the plan's, references kept). nil when none is left.
func pickEdit(p genPlan, cur *runDoc, pick float64) (*edited, map[string]any) {
	var cands []genAction
	for _, g := range p.Actions {
		x := actionOf(cur, g.ID)
		if x == nil || editField[g.Tool] == nil || x.Attempts != 0 || (x.Status != "pending" && x.Status != "approved") {
			continue
		}
		cands = append(cands, g)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	g := cands[min(int(pick*float64(len(cands))), len(cands)-1)]
	path := editField[g.Tool]
	args := deepCopy(g.Args)
	old := fieldOf(mustMarshal(args), path)
	s, _ := old.(string)
	var nv string
	switch g.Tool {
	case ToolContact, ToolLead:
		nv = "edited." + s
	default:
		nv = s + "-edited"
	}
	m := args
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	m[path[len(path)-1]] = nv
	return &edited{Action: g.ID, Path: path, Old: old, New: nv}, args
}

func deepCopy(m map[string]any) map[string]any {
	var out map[string]any
	json.Unmarshal(mustMarshal(m), &out)
	return out
}

// fieldOf reads a field of JSON arguments (nil when absent).
func fieldOf(raw json.RawMessage, path []string) any {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// auditControl checks the run's end against what the person did and the
// service acknowledged:
//   - pause: checked when the drive stopped (settle): the run was paused
//     and nothing that had not started at the acknowledgement started;
//   - cancel: the run ended cancelled; every action that had not started
//     when the cancel was acknowledged is skipped, never attempted; nothing
//     is left pending, approved, claimed or in needs_review (in-flight
//     unknowns went to needs_review and the person settled them from the
//     world); every effect in the world is explained by an action that
//     succeeded (auditRun);
//   - edit or replay accepted: the action ran with the new value (the
//     ledger's arguments carry it, and auditRun finds the world's effect
//     under it, none under the old one); an edit refused: the old value;
//   - replay accepted: a new revision, and every action that had succeeded
//     before it kept its key and output (new keys only for what changed, so
//     each key has its one effect in the world).
func auditControl(final *runDoc, st *ctlState) []string {
	out := slices.Clone(st.findings)
	find := func(format string, a ...any) { out = append(out, st.c.Op+": "+fmt.Sprintf(format, a...)) }
	if st.cancel != nil {
		if final.Status != "cancelled" {
			find("cancel acknowledged, the run ended %s", final.Status)
		}
		for _, x := range final.Actions {
			if b := actionOf(st.cancel, x.ID); b != nil && b.Attempts == 0 && b.Status != "succeeded" && (x.Status != "skipped" || x.Attempts != 0) {
				find("action %s had not started when the cancel was acknowledged, and ended %s after %d attempts (want skipped, never attempted)", x.ID, x.Status, x.Attempts)
			}
			switch {
			case x.Status == "claimed" || x.Status == "needs_review":
				find("action %s is left %s in the cancelled run", x.ID, x.Status)
			case (x.Status == "pending" || x.Status == "approved") && x.Attempts > 0:
				// Started, then waiting for its next attempt when the cancel
				// came: docket skips it (nothing it sent took effect) or asks
				// a person (an attempt's outcome is unknown), never leaves it
				// pending where nothing can conclude it.
				find("action %s is left pending after %d attempts in the cancelled run (want skipped or needs_review, then resolved)", x.ID, x.Attempts)
				st.leftPending = append(st.leftPending, x.ID)
			}
		}
	}
	accepted := map[string]bool{}
	for _, e := range st.accepted {
		accepted[e.Action] = true
		x := actionOf(final, e.Action)
		if x == nil {
			find("edited action %s is not in the run", e.Action)
			continue
		}
		if got := fieldOf(x.Args, e.Path); x.Attempts > 0 && !reflect.DeepEqual(got, e.New) {
			find("action %s: %s was changed to %v (acknowledged), the action ran with %v", e.Action, strings.Join(e.Path, "."), e.New, got)
		}
	}
	for _, e := range st.refused {
		if accepted[e.Action] {
			continue
		}
		if x := actionOf(final, e.Action); x != nil && x.Attempts > 0 && !reflect.DeepEqual(fieldOf(x.Args, e.Path), e.Old) {
			find("action %s: an edit to %v was refused, the action ran with %v", e.Action, e.New, fieldOf(x.Args, e.Path))
		}
	}
	if st.replayed && st.before != nil {
		if final.Revision <= st.before.Revision {
			find("replay acknowledged, the run is still at revision %d", final.Revision)
		}
		for _, b := range st.before.Actions {
			if b.Status != "succeeded" {
				continue
			}
			x := actionOf(final, b.ID)
			switch {
			case x == nil:
				find("action %s succeeded before the replay, and is not in the run after it", b.ID)
			case x.Status != "succeeded" || x.Key != b.Key || compactJSON(x.Output) != compactJSON(b.Output):
				find("action %s succeeded before the replay (key %s, output %s); after it: %s, key %s, output %s",
					b.ID, b.Key, compactJSON(b.Output), x.Status, x.Key, compactJSON(x.Output))
			}
		}
	}
	return out
}

// runFiles are one run's id, files and data directory.
type runFiles struct {
	runID, data, planPath, toolsPath, ns string
	ids                                  []string
}

// prepare writes a run's plan and tools file.
func (h *harness) prepare(worker int, j job) (genPlan, RunResult, runFiles, error) {
	planJSON, size := GeneratePlan(h.st.Seed, j.n)
	var p genPlan
	json.Unmarshal(planJSON, &p)
	var rf runFiles
	for _, a := range p.Actions {
		rf.ids = append(rf.ids, a.ID)
	}
	short := map[string]string{Protected: "p", Unprotected: "u"}[j.mode]
	rf.runID = fmt.Sprintf("%s%d-e%d", short, j.n, h.st.Epoch)
	rf.ns = rf.runID
	res := RunResult{Mode: j.mode, N: j.n, RunID: rf.runID, Actions: size, Resolved: map[string]int{}}
	wdir := filepath.Join(h.dir, fmt.Sprintf("w%d", worker))
	files := filepath.Join(wdir, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		return p, res, rf, err
	}
	rf.data = filepath.Join(wdir, "data")
	rf.planPath = filepath.Join(files, rf.runID+".plan.json")
	rf.toolsPath = filepath.Join(files, rf.runID+".tools.json")
	tools := ToolsFile(ToolsOptions{Base: h.world.url + "/" + rf.ns, Protected: j.mode == Protected,
		Timeout: h.st.Timeout, LagDeclared: h.st.LagDeclared})
	if err := os.WriteFile(rf.planPath, planJSON, 0o644); err != nil {
		return p, res, rf, err
	}
	if err := os.WriteFile(rf.toolsPath, tools, 0o644); err != nil {
		return p, res, rf, err
	}
	return p, res, rf, nil
}

// superseded reads the run's events and keeps, in st, the actions of
// earlier revisions that succeeded under a key the final revision does not
// hold: a replay changed them after they had run, so they ran again under a
// new key, on purpose. Their outputs name their effects (reference, email,
// recipient and template, account and settings), which the audit then
// counts as explained.
func (h *harness) superseded(ctx context.Context, a *api, runID string, final *runDoc, st *ctlState) error {
	code, b, err := a.call(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"/events?limit=10000", nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("run %s: events answered %d: %s", runID, code, b)
	}
	var evs struct {
		Events []struct {
			Type     string          `json:"type"`
			ActionID string          `json:"action_id"`
			Data     json.RawMessage `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &evs); err != nil {
		return fmt.Errorf("run %s: reading its events: %w", runID, err)
	}
	keys := map[string]string{} // action -> key of its last claim
	for _, e := range evs.Events {
		var d struct {
			Key    string          `json:"key"`
			Output json.RawMessage `json:"output"`
		}
		json.Unmarshal(e.Data, &d)
		switch e.Type {
		case "action.claimed":
			keys[e.ActionID] = d.Key
		case "action.succeeded":
			x := actionOf(final, e.ActionID)
			if x == nil || keys[e.ActionID] == "" || x.Key == keys[e.ActionID] {
				continue
			}
			st.superseded = append(st.superseded, docAction{ID: e.ActionID + "@superseded", Tool: x.Tool, Class: x.Class,
				Key: keys[e.ActionID], Status: "succeeded", Attempts: 1, Args: d.Output, Output: d.Output})
			st.stats.Superseded++
		}
	}
	return nil
}
