package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config sets up a chaos experiment. Zero fields take the defaults
// documented on them.
type Config struct {
	// Seed makes the experiment reproducible: the same seed gives the same
	// plans, the same kill schedule and the same faults in the world.
	Seed uint64
	// Actions is the size of the workload, in actions (default 2000). Each
	// workload (protected, unprotected) runs that many.
	Actions int
	// Docket starts docket children (required).
	Docket Docket
	// RunsDir keeps the data directories, plans and results ("" = a
	// temporary directory, removed at the end). With Resume, an interrupted
	// experiment in RunsDir continues where it stopped.
	RunsDir string
	Resume  bool
	// Workers is the number of runs driven at once (default 4), each in its
	// own data directory.
	Workers int
	// Timeout is every tool's call timeout (default 1s).
	Timeout time.Duration
	// Lag bounds the leads service's real visibility lag (default 1s);
	// LagDeclared is the visibility_lag the tools file declares for it
	// (nil = Lag).
	Lag         time.Duration
	LagDeclared *time.Duration
	// ProtectedOnly skips the unprotected workload.
	ProtectedOnly bool
	// MinKills, when positive, keeps the experiment going past Actions with
	// further plans (the seed's next ones) until every workload has seen at
	// least that many SIGKILLs, up to twice the runs Actions asked for. How
	// many kills land depends on timing (a timed kill misses a command that
	// ended first), so a slow machine needs a few more runs for the same
	// number of kills.
	MinKills int
	// MinAnswered, when positive, keeps the experiment going the same way
	// until the person acting on protected runs in flight had at least that
	// many operations answered (acknowledged, or refused with 409): an
	// operation can also come too late for a run that ended first, more
	// often the faster the runs.
	MinAnswered int
	// NoControl runs every plan through `docket run`, with no person
	// pausing, cancelling, editing or replaying it in flight: for
	// experiments that isolate one race (TestChaosVisibilityLag).
	NoControl bool
	// Only, when set, runs just these plans of the workload (by number, as
	// RunResult.N and the run ids name them): a regression test replays the
	// runs where a seed found a problem. Actions is then ignored.
	Only []int
	// Faults are the world's fault rates (zero = DefaultFaults).
	Faults Faults
	// Progress, when set, receives a line now and then.
	Progress io.Writer
	// CalmBeforeCancel restarts a run's service child with no kill armed
	// before a cancel. Off by default: kills go on after a cancel, and a
	// later drive of the cancelled run concludes what a killed child left
	// open (needs_review or skipped), which the audit then checks.
	CalmBeforeCancel bool
	// OnResult, when set, is called after each run's result is recorded
	// (tests use it to interrupt an experiment at a known point).
	OnResult func(RunResult)
}

// state is what RunsDir keeps about an experiment (chaos.json), so that it
// can be resumed with the same settings.
type state struct {
	Seed          uint64        `json:"seed"`
	Actions       int           `json:"actions"`
	Timeout       time.Duration `json:"timeout"`
	Lag           time.Duration `json:"lag"`
	LagDeclared   time.Duration `json:"lag_declared"`
	ProtectedOnly bool          `json:"protected_only"`
	MinKills      int           `json:"min_kills,omitempty"`
	MinAnswered   int           `json:"min_answered,omitempty"`
	Faults        Faults        `json:"faults"`
	Only          []int         `json:"only,omitempty"`
	Epoch         int           `json:"epoch"`          // sessions started (run ids of an interrupted session are not reused)
	ElapsedBefore time.Duration `json:"elapsed_before"` // wall time of earlier sessions
}

// Modes of the workload.
const (
	Protected   = "protected"
	Unprotected = "unprotected"
)

// job is one run of one workload.
type job struct {
	mode string
	n    int
}

// harness is one session of an experiment.
type harness struct {
	cfg     Config
	st      state
	dir     string
	world   *worldProc
	http    *http.Client
	started time.Time

	mu       sync.Mutex
	results  []RunResult
	out      *os.File // results.jsonl
	lastNote time.Time
	jobs     int
}

// Run runs the experiment and returns its report. A report that shows
// duplicates or losses is not an error; err means the experiment could not be
// carried out (and Report.Errors lists runs the harness could not finish).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Docket.Exe == "" {
		return nil, errors.New("chaos: Config.Docket.Exe is required")
	}
	if cfg.Actions <= 0 {
		cfg.Actions = 2000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Lag <= 0 {
		cfg.Lag = time.Second
	}
	h := &harness{cfg: cfg, http: &http.Client{Timeout: 3 * time.Minute}, started: time.Now()}
	if err := h.open(); err != nil {
		return nil, err
	}
	if cfg.RunsDir == "" {
		defer os.RemoveAll(h.dir)
	}
	defer h.out.Close()

	w, err := cfg.Docket.startWorld(ctx, WorldConfig{
		Seed: h.st.Seed, Timeout: h.st.Timeout, LagMax: h.st.Lag, Faults: h.st.Faults,
	})
	if err != nil {
		return nil, err
	}
	h.world = w
	defer w.stop()

	todo := h.pending()
	h.jobs = len(todo)
	h.note(true)
	ch := make(chan job)
	var wg sync.WaitGroup
	for i := 0; i < cfg.Workers; i++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			for j := range ch {
				r := h.runJob(ctx, worker, j)
				if ctx.Err() != nil {
					return // an interrupted run is not a result: it is redone on resume
				}
				if err := h.record(r); err != nil {
					r.Error = err.Error()
				}
				if cfg.OnResult != nil {
					cfg.OnResult(r)
				}
			}
		}(i)
	}
	send := func(j job) bool {
		select {
		case ch <- j:
			return true
		case <-ctx.Done():
			return false
		}
	}
	ok := true
	for _, j := range todo {
		if ok = send(j); !ok {
			break
		}
	}
	if ok {
		h.feedForMinimums(send)
	}
	close(ch)
	wg.Wait()
	h.note(true)
	elapsed := time.Since(h.started)
	h.st.ElapsedBefore += elapsed
	if err := h.saveState(); err != nil {
		return nil, err
	}
	rep := h.report(h.st.ElapsedBefore)
	if ctx.Err() != nil {
		return rep, fmt.Errorf("chaos: interrupted (%w); continue with --runs-dir %s --resume", ctx.Err(), h.dir)
	}
	return rep, nil
}

// open prepares RunsDir: a new experiment, or the one to resume.
func (h *harness) open() error {
	c := h.cfg
	h.dir = c.RunsDir
	if h.dir == "" {
		d, err := os.MkdirTemp("", "docket-chaos-")
		if err != nil {
			return fmt.Errorf("chaos: making a temporary directory: %w", err)
		}
		h.dir = d
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	statePath := filepath.Join(h.dir, "chaos.json")
	resultsPath := filepath.Join(h.dir, "results.jsonl")
	if c.Resume {
		b, err := os.ReadFile(statePath)
		if err != nil {
			return fmt.Errorf("chaos: nothing to resume in %s: %w", h.dir, err)
		}
		if err := json.Unmarshal(b, &h.st); err != nil {
			return fmt.Errorf("chaos: %s: %w", statePath, err)
		}
		h.st.Epoch++
		if err := h.loadResults(resultsPath); err != nil {
			return err
		}
	} else {
		if _, err := os.Stat(statePath); err == nil {
			return fmt.Errorf("chaos: %s already holds an experiment: pass --resume to continue it, or another directory", h.dir)
		}
		lag := c.Lag
		if c.LagDeclared != nil {
			lag = *c.LagDeclared
		}
		h.st = state{Seed: c.Seed, Actions: c.Actions, Timeout: c.Timeout, Lag: c.Lag, LagDeclared: lag,
			ProtectedOnly: c.ProtectedOnly, MinKills: c.MinKills, MinAnswered: c.MinAnswered, Faults: c.Faults, Only: c.Only}
	}
	if err := h.saveState(); err != nil {
		return err
	}
	f, err := os.OpenFile(resultsPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	h.out = f
	return nil
}

func (h *harness) saveState() error {
	b, err := json.MarshalIndent(h.st, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(h.dir, "chaos.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("chaos: saving state: %w", err)
	}
	return os.Rename(tmp, path)
}

func (h *harness) loadResults(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r RunResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A line cut short by an interruption: that run is redone.
			continue
		}
		h.results = append(h.results, r)
	}
	return sc.Err()
}

// pending lists the jobs not yet recorded, protected and unprotected runs
// of the same plan next to each other.
func (h *harness) pending() []job {
	done := map[job]bool{}
	for _, r := range h.results {
		done[job{r.Mode, r.N}] = true
	}
	modes := []string{Protected, Unprotected}
	if h.st.ProtectedOnly {
		modes = modes[:1]
	}
	var todo []job
	add := func(n int) {
		for _, m := range modes {
			if j := (job{m, n}); !done[j] {
				todo = append(todo, j)
			}
		}
	}
	if len(h.st.Only) > 0 {
		for _, n := range h.st.Only {
			add(n)
		}
		return todo
	}
	total := 0
	for n := 0; total < h.st.Actions; n++ {
		_, size := GeneratePlan(h.st.Seed, n)
		total += size
		add(n)
	}
	return todo
}

// feedForMinimums sends the seed's next plans, one run per workload each, while
// a workload has fewer than MinKills kills, or the protected one fewer than
// MinAnswered operations answered in flight, among the results recorded so
// far (the runs in flight may bring the rest: a few more than needed can
// run), up to as many extra runs as the plain workload has.
func (h *harness) feedForMinimums(send func(job) bool) {
	if (h.st.MinKills <= 0 && h.st.MinAnswered <= 0) || len(h.st.Only) > 0 {
		return
	}
	modes := []string{Protected, Unprotected}
	if h.st.ProtectedOnly {
		modes = modes[:1]
	}
	next, total := 0, 0
	for ; total < h.st.Actions; next++ {
		_, size := GeneratePlan(h.st.Seed, next)
		total += size
	}
	done := map[job]bool{}
	h.mu.Lock()
	for _, r := range h.results {
		done[job{r.Mode, r.N}] = true
	}
	h.mu.Unlock()
	for extra := 0; extra < next; extra++ {
		h.mu.Lock()
		short := false
		for _, m := range modes {
			kills := 0
			for _, r := range h.results {
				if r.Mode == m {
					kills += r.Kills
				}
			}
			short = short || kills < h.st.MinKills
		}
		if h.st.MinAnswered > 0 && !h.cfg.NoControl {
			answered := 0
			for _, r := range h.results {
				if c := r.Control; r.Mode == Protected && c != nil {
					answered += c.Pauses + c.Cancels + c.Edits + c.EditsRefused + c.Replays + c.ReplaysRefused
				}
			}
			short = short || answered < h.st.MinAnswered
		}
		if short {
			h.jobs += len(modes)
		}
		h.mu.Unlock()
		if !short {
			return
		}
		for _, m := range modes {
			if j := (job{m, next + extra}); !done[j] && !send(j) {
				return
			}
		}
	}
}

// record keeps a run's result, durably.
func (h *harness) record(r RunResult) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.results = append(h.results, r)
	if _, err := h.out.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("chaos: recording a result: %w", err)
	}
	if err := h.out.Sync(); err != nil {
		return fmt.Errorf("chaos: recording a result: %w", err)
	}
	h.noteLocked(false)
	return nil
}

func (h *harness) note(force bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noteLocked(force)
}

// noteLocked prints a progress line at most every 10 seconds.
func (h *harness) noteLocked(force bool) {
	if h.cfg.Progress == nil || (!force && time.Since(h.lastNote) < 10*time.Second) {
		return
	}
	h.lastNote = time.Now()
	rep := summarize(h.results)
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: seed %d, %s", h.st.Seed, time.Since(h.started).Round(time.Second))
	for _, m := range rep {
		fmt.Fprintf(&b, "; %s: %d runs, %d actions, %d kills, %d operations in flight, %d duplicates, %d lost", m.Mode, m.Runs, m.Actions, m.Kills,
			m.Control.Pauses+m.Control.Cancels+m.Control.Edits+m.Control.EditsRefused+m.Control.Replays+m.Control.ReplaysRefused, m.Duplicates.Total, m.Lost)
	}
	if h.jobs > 0 {
		fmt.Fprintf(&b, " (this session: %d runs to do)", h.jobs)
	}
	fmt.Fprintln(h.cfg.Progress, b.String())
}

// runDoc is the part of the Run JSON (ledger/README.md, Run JSON) the harness reads.
type runDoc struct {
	RunID    string      `json:"run_id"`
	Status   string      `json:"status"`
	Revision int         `json:"revision"`
	Error    string      `json:"error"`
	Actions  []docAction `json:"actions"`
}

type docAction struct {
	ID       string          `json:"id"`
	Tool     string          `json:"tool"`
	Class    string          `json:"class"`
	Key      string          `json:"key"`
	Status   string          `json:"status"`
	Attempts int             `json:"attempts"`
	Args     json.RawMessage `json:"args"`
	Output   json.RawMessage `json:"output"`
	Error    string          `json:"error"`
}

// maxSteps bounds the commands one run may take before the harness gives up
// on it; killSteps is how many of them may be killed.
const (
	maxSteps  = 60
	killSteps = 6
)

// killProb is the chance that the k-th command of a run is killed.
var killProb = []float64{1, 0.75, 0.5, 0.3, 0.2, 0.1}

// killFor draws the kill of a run's step-th command: none, a timed kill, or
// a kill at a crash point of one of the plan's actions. It depends only on
// the seed, the run and the step.
func killFor(seed uint64, n, step int, actions []string) kill {
	rng := newRand(seed, "kill", n, step)
	if step >= killSteps || rng.Float64() >= killProb[step] {
		return kill{}
	}
	if rng.IntN(2) == 0 {
		return kill{After: 30*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))}
	}
	return kill{Point: CrashPoints[rng.IntN(len(CrashPoints))], Action: actions[rng.IntN(len(actions))]}
}

// runJob drives one run to its end (completed or failed) through kills and
// person resolutions, then audits the world against the ledger.
func (h *harness) runJob(ctx context.Context, worker int, j job) RunResult {
	if c := controlFor(h.st.Seed, j.n); c.Op != "" && !h.cfg.NoControl {
		return h.runServe(ctx, worker, j, c)
	}
	_, res, rf, err := h.prepare(worker, j)
	fail := func(err error) RunResult {
		res.Error = err.Error()
		return res
	}
	if err != nil {
		return fail(err)
	}
	runID, data, planPath, toolsPath, ns, ids := rf.runID, rf.data, rf.planPath, rf.toolsPath, rf.ns, rf.ids
	runArgs := []string{"run", "--data", data, "--tools", toolsPath, "--plan", planPath, "--run-id", runID, "--approve", "all"}
	retries := map[string]int{} // person --retry decisions per action
	start := time.Now()
	var doc *runDoc
	afterKill := false
	for step := 0; ; step++ {
		if step >= maxSteps {
			return fail(fmt.Errorf("run %s did not end in %d commands", runID, maxSteps))
		}
		args := runArgs
		if doc != nil && doc.Status == "paused" {
			var a *docAction
			for i := range doc.Actions {
				if doc.Actions[i].Status == "needs_review" {
					a = &doc.Actions[i]
					break
				}
			}
			if a == nil {
				return fail(fmt.Errorf("run %s is paused with no action in needs_review: %s", runID, doc.Error))
			}
			decision, err := h.person(ctx, ns, doc, a)
			if err != nil {
				return fail(err)
			}
			res.Resolved[a.Class]++
			if decision == nil {
				retries[a.ID]++
				args = []string{"resolve", "--data", data, "--tools", toolsPath, runID, a.ID, "--retry"}
			} else {
				args = []string{"resolve", "--data", data, "--tools", toolsPath, runID, a.ID, "--done", string(decision)}
			}
		} else if afterKill {
			res.Restarts++
		}
		k := killFor(h.st.Seed, j.n, step, ids)
		o, err := h.cfg.Docket.spawn(ctx, args, k)
		res.Commands++
		if err != nil {
			return fail(err)
		}
		if o.killed {
			res.Kills++
			afterKill = true
			doc = nil
			continue
		}
		afterKill = false
		// docket prints a Run JSON only when it could read the run.
		if len(bytes.TrimSpace(o.stdout)) == 0 && o.code == 1 && strings.Contains(o.stderr, "opening data directory") {
			// The ledger would not open after a kill. Counted and reported;
			// the same command again is what a person would do.
			res.OpenFailures++
			if res.OpenError == "" {
				res.OpenError = lastLine(o.stderr)
			}
			doc = nil
			continue
		}
		if len(bytes.TrimSpace(o.stdout)) == 0 && o.code == 4 {
			// Busy: another process held the data directory. Run it again.
			doc = nil
			continue
		}
		var d runDoc
		if err := json.Unmarshal(o.stdout, &d); err != nil || d.RunID == "" {
			return fail(fmt.Errorf("run %s: no Run JSON on stdout (%v): %s", runID, err, o))
		}
		doc = &d
		switch {
		case o.code == 2:
			return fail(fmt.Errorf("run %s: bad input: %s", runID, o))
		case len(d.Actions) == 0 && o.code == 1 && strings.Contains(o.stderr, "opening data directory"):
			// The ledger would not open after a kill. Counted and reported;
			// the same command again is what a person would do.
			res.OpenFailures++
			if res.OpenError == "" {
				res.OpenError = lastLine(o.stderr)
			}
			doc = nil
			continue
		case len(d.Actions) == 0:
			// A refusal (the run's record was not read): say why.
			return fail(fmt.Errorf("run %s: docket printed no actions (%s, exit %d): %s", runID, d.Status, o.code, o))
		case d.Status == "completed" || d.Status == "failed":
		case d.Status == "paused":
			continue
		case o.code == 4:
			// Busy (another process held the data directory): run it again.
			continue
		default:
			// A run ends completed, failed or paused; a clean exit that
			// leaves it anything else (a join never started, "stopped while
			// running") is a bug in docket, never something to retry past.
			return fail(fmt.Errorf("run %s: docket exited %d leaving the run %s (not killed, not busy): a run must end completed, failed or paused: %s",
				runID, o.code, d.Status, o))
		}
		break
	}
	res.Status = doc.Status
	res.Seconds = time.Since(start).Seconds()
	return h.finish(ctx, res, rf, retries, nil)
}

// finish audits a run that ended: the ledger's view (runs show --json)
// against the world's, and what a person did to it while it was in flight
// (st, nil when nothing).
func (h *harness) finish(ctx context.Context, res RunResult, rf runFiles, retries map[string]int, st *ctlState) RunResult {
	fail := func(err error) RunResult {
		res.Error = err.Error()
		return res
	}
	show, err := h.cfg.Docket.spawn(ctx, []string{"runs", "show", "--json", "--data", rf.data, rf.runID}, kill{})
	if err != nil {
		return fail(err)
	}
	var final runDoc
	if err := json.Unmarshal(show.stdout, &final); err != nil || show.code != 0 {
		return fail(fmt.Errorf("runs show %s: %v: %s", rf.runID, err, show))
	}
	world, err := h.audit(ctx, rf.ns)
	if err != nil {
		return fail(err)
	}
	audited := final
	if st != nil && len(st.superseded) > 0 {
		audited.Actions = append(slices.Clone(final.Actions), st.superseded...)
	}
	res.Audit = auditRun(&audited, world, retries)
	if res.Mode == Protected {
		found, err := h.auditBudget(ctx, rf.data, &final, world)
		if err != nil {
			return fail(err)
		}
		res.Audit.BudgetChecked = true
		res.Audit.BudgetMismatches = len(found)
		res.Audit.Findings = append(res.Audit.Findings, found...)
	}
	if st != nil {
		for _, f := range auditControl(&final, st) {
			res.Audit.ControlViolations++
			res.Audit.Findings = append(res.Audit.Findings, rf.runID+": "+f)
		}
		res.Audit.CancelLeftPending = len(st.leftPending)
	}
	if len(res.Audit.Findings) == 0 {
		os.Remove(rf.planPath)
		os.Remove(rf.toolsPath)
	}
	if err := h.drop(ctx, rf.ns); err != nil {
		return fail(err)
	}
	return res
}

// audit reads a namespace's state from the world once no request of it is
// still being processed (late commits have landed).
func (h *harness) audit(ctx context.Context, ns string) (*Audit, error) {
	return worldAudit(ctx, h.http, h.world.url, ns, time.Minute, false)
}

// worldAudit asks the world at url for namespace ns's audit, waiting up to
// quiet for the requests still being processed (late commits) to land;
// withLog asks for the log of write requests too (Audit.Log).
func worldAudit(ctx context.Context, client *http.Client, url, ns string, quiet time.Duration, withLog bool) (*Audit, error) {
	q := "?quiet=" + quiet.String()
	if withLog {
		q += "&log=1"
	}
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/"+ns+"/_audit"+q, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking the world's audit endpoint: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the world's audit endpoint answered %s", resp.Status)
	}
	var a Audit
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("reading the world's audit: %w", err)
	}
	if a.Processing > 0 {
		return nil, fmt.Errorf("the world is still processing %d requests of %s after %s", a.Processing, ns, quiet)
	}
	return &a, nil
}

func (h *harness) drop(ctx context.Context, ns string) error {
	req, err := http.NewRequestWithContext(ctx, "DELETE", h.world.url+"/"+ns+"/_audit", nil)
	if err != nil {
		return err
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return fmt.Errorf("dropping %s in the world: %w", ns, err)
	}
	resp.Body.Close()
	return nil
}

// person decides an action in needs_review the way a careful person would:
// look at the external system (the world's audit, once nothing is in
// flight), and say "done, here is what happened" (the returned output) or
// "retry" (nil). doc must not be older than the audit where a drive may go
// on meanwhile (the nodes experiment reads the run again: nodesExp.person);
// here nothing drives the run while the person looks.
func (h *harness) person(ctx context.Context, ns string, doc *runDoc, a *docAction) (json.RawMessage, error) {
	w, err := h.audit(ctx, ns)
	if err != nil {
		return nil, err
	}
	out, _ := decide(w, doc, a)
	return out, nil
}

// decide is the person's decision on action a of doc from the world's audit
// w, and why (for the record of what the person did). What can be found: a
// charge by its Idempotency-Key, a contact or lead by the key in its note,
// an email by recipient and template (one that no other action of the run
// already accounts for). Anything else is retried: its class says a repeat
// is safe.
func decide(w *Audit, doc *runDoc, a *docAction) (json.RawMessage, string) {
	var args map[string]any
	json.Unmarshal(a.Args, &args)
	s := func(k string) string { v, _ := args[k].(string); return v }
	found := func(v any) (json.RawMessage, string) {
		b, _ := json.Marshal(v)
		return b, "found in the world"
	}
	switch {
	case a.Tool == ToolCharge && a.Key != "":
		for _, c := range w.Charges {
			if c.Key == a.Key {
				c.Key = ""
				return found(c)
			}
		}
	case (a.Tool == ToolContact || a.Tool == ToolLead) && a.Class == "lookup":
		list := w.Contacts
		if a.Tool == ToolLead {
			list = w.Leads
		}
		for _, c := range list {
			if c.Note == a.Key {
				return found(c)
			}
		}
	case a.Tool == ToolSettings:
		// Only a cancelled run asks about settings (idempotent: otherwise
		// simply sent again): set if the world holds the action's value.
		acct := s("account")
		if st, ok := w.Settings[acct]; ok && string(st.Value) == canonicalJSON(args["settings"]) {
			return found(map[string]any{"account": acct, "settings": st.Value})
		}
	case a.Tool == ToolEmail && a.Class == "at_most_once":
		// An email is this action's only when the world holds more unclaimed
		// ones of its kind than its identical siblings whose own outcome is
		// not recorded yet (claimed, or in review) may have sent: a twin's
		// email in flight is not this action's effect.
		used := map[string]bool{}
		unsettled := 0
		for _, o := range doc.Actions {
			if o.Tool != ToolEmail {
				continue
			}
			switch o.Status {
			case "succeeded":
				var e Email
				json.Unmarshal(o.Output, &e)
				used[e.MessageID] = true
			case "claimed", "needs_review":
				var oa map[string]any
				json.Unmarshal(o.Args, &oa)
				if o.ID != a.ID && oa["to"] == s("to") && oa["template"] == s("template") {
					unsettled++
				}
			}
		}
		var unclaimed []Email
		for _, e := range w.Emails {
			if e.To == s("to") && e.Template == s("template") && !used[e.MessageID] {
				unclaimed = append(unclaimed, e)
			}
		}
		why := fmt.Sprintf("%d unclaimed in the world, %d identical siblings unsettled", len(unclaimed), unsettled)
		if len(unclaimed) > unsettled {
			b, _ := json.Marshal(unclaimed[0])
			return b, why
		}
		return nil, why
	}
	return nil, "not found in the world"
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// compactJSON is used for findings.
func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
