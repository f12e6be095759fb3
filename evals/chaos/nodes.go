package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// NodesConfig sets up the shared-ledger experiment (RunNodes): several
// `docket serve` nodes on one PostgreSQL database, runs submitted to random
// nodes, random nodes SIGKILLed (and started again), the database restarted
// once in the middle. Zero fields take the defaults documented on them.
type NodesConfig struct {
	// Seed makes the plans, the world's faults and the kill schedule (which
	// node, when) reproducible; timing still decides what a kill cuts.
	Seed uint64
	// Actions is the size of the workload in actions (default 300).
	Actions int
	// Docket starts docket children (required).
	Docket Docket
	// Ledger is the database the nodes share (postgres://…, required). It
	// reaches the nodes through DOCKET_LEDGER, never on a command line.
	Ledger string
	// Nodes is the number of `docket serve` nodes (default 3).
	Nodes int
	// Workers is the number of runs in flight at once (default 6).
	Workers int
	// Timeout is every tool's call timeout (default 1s); Lag bounds the
	// leads service's visibility lag (default 1s, declared as is).
	Timeout time.Duration
	Lag     time.Duration
	// Lease is each node's --lease (default 2s): how long a killed node's
	// runs wait before another node adopts them.
	Lease time.Duration
	// KillEvery is the mean time between two SIGKILLs of a node (default
	// 2s); a killed node starts again after 0.2 to 1.5s.
	KillEvery time.Duration
	// MinKills, when positive, keeps submitting the seed's next plans past
	// Actions until that many nodes were killed, up to ten times the runs
	// (how many kills land in a run depends on how fast the nodes are).
	MinKills int
	// RestartDB, when set, restarts the database once, when half of the
	// runs have ended (`pg_ctl restart -m immediate`).
	RestartDB func(ctx context.Context) error
	// Faults are the world's fault rates (zero = DefaultFaults).
	Faults Faults
	// Control, when set, adds a person who acts on about half of the runs
	// through a node other than the one each was submitted to (its home,
	// which drives it until a kill moves it): pauses it, holds, resumes;
	// edits an action that has not started and approves the new arguments;
	// rejects one; or submits the run with approve "none" and approves its
	// actions a few at a time (editing one it approved, and approving it
	// again). The end checks the ledger's events and the
	// world's log of requests against what the person did (CrossControl).
	Control bool
	// Dir keeps the tools file and the nodes' last words ("" = a
	// temporary directory, removed at the end).
	Dir string
	// Progress, when set, receives a line now and then.
	Progress io.Writer
}

// NodesReport is what a shared-ledger experiment measured.
type NodesReport struct {
	Seed           uint64 `json:"seed"`
	Nodes          int    `json:"nodes"`
	Workers        int    `json:"workers"`
	Lease          string `json:"lease"`
	Runs           int    `json:"runs"`
	Completed      int    `json:"completed"`
	Failed         int    `json:"failed"`    // a declined charge, as planned
	Cancelled      int    `json:"cancelled"` // a person cancelled it in flight (the cancel was acknowledged)
	Unplanned      int    `json:"unplanned_endings"`
	Actions        int    `json:"actions"`
	NodeKills      int    `json:"node_kills"`
	NodeRestarts   int    `json:"node_restarts"`
	NodeSelfExits  int    `json:"node_self_exits"` // nodes that exited without being killed
	DBRestarts     int    `json:"database_restarts"`
	CallsResent    int    `json:"calls_resent"` // API calls sent again to another node (no answer, 503)
	Duplicates     Duplicates
	Lost           int            `json:"lost"`
	LostMissing    int            `json:"lost_missing"`
	LostUnexplain  int            `json:"lost_unexplained"`
	AtMostOnce     int            `json:"at_most_once_automatic_reexecutions"`
	PersonResolved int            `json:"person_resolved"`
	ResolvedBy     map[string]int `json:"person_resolved_by_class"`
	RepeatWrites   int            `json:"retries_visible_to_customers"`
	LookupHits     int            `json:"lookups_found_prior_effect"`
	RunMeanSeconds float64        `json:"run_seconds_mean"`
	RunP99Seconds  float64        `json:"run_seconds_p99"`
	ElapsedSeconds float64        `json:"elapsed_seconds"`
	// Control is what the cross-node person did and what the checks found
	// (NodesConfig.Control; nil without it).
	Control  *CrossControl `json:"control,omitempty"`
	Errors   []string      `json:"errors,omitempty"`
	Findings []string      `json:"findings,omitempty"`
}

// OK reports whether the promise held: every run ended as planned, no
// duplicate, no loss, no automatic at-most-once re-execution, no node that
// died by itself, nothing the harness could not finish.
func (r *NodesReport) OK() bool {
	return r.Runs > 0 && len(r.Errors) == 0 && r.Unplanned == 0 && r.Duplicates.Total == 0 &&
		r.Lost == 0 && r.AtMostOnce == 0 && r.NodeSelfExits == 0 && (r.Control == nil || r.Control.Violations == 0)
}

// WriteTable prints the report for people.
func (r *NodesReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("seed", r.Seed)
	row("nodes (docket serve, one database)", r.Nodes)
	row("runs in flight at once", r.Workers)
	row("lease", r.Lease)
	row("runs (completed / failed as planned / cancelled in flight)", fmt.Sprintf("%d (%d / %d / %d)", r.Runs, r.Completed, r.Failed, r.Cancelled))
	row("runs that ended otherwise than planned", r.Unplanned)
	row("actions", r.Actions)
	row("nodes SIGKILLed (started again)", fmt.Sprintf("%d (%d)", r.NodeKills, r.NodeRestarts))
	row("database restarts (immediate)", r.DBRestarts)
	row("nodes that exited by themselves", r.NodeSelfExits)
	row("API calls sent again to another node", r.CallsResent)
	row("duplicates", fmt.Sprintf("%d (payments %d, crm %d, leads %d, settings %d, email %d)", r.Duplicates.Total,
		r.Duplicates.Payments, r.Duplicates.CRM, r.Duplicates.Leads, r.Duplicates.Settings, r.Duplicates.Email))
	row("lost (missing / unexplained)", fmt.Sprintf("%d (%d / %d)", r.Lost, r.LostMissing, r.LostUnexplain))
	row("at-most-once automatic re-executions", r.AtMostOnce)
	classes := make([]string, 0, len(r.ResolvedBy))
	for c := range r.ResolvedBy {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var by []string
	for _, c := range classes {
		by = append(by, fmt.Sprintf("%s %d", c, r.ResolvedBy[c]))
	}
	row("pauses a person resolved", fmt.Sprintf("%d (%s)", r.PersonResolved, strings.Join(by, ", ")))
	row("retries visible to customers", r.RepeatWrites)
	row("lookups that found a prior effect", r.LookupHits)
	row("run seconds (mean / p99)", fmt.Sprintf("%.1f / %.1f", r.RunMeanSeconds, r.RunP99Seconds))
	if c := r.Control; c != nil {
		row("runs a person acted on through another node", c.Runs)
		row("pauses (resumes)", fmt.Sprintf("%d (%d)", c.Pauses, c.Resumes))
		row("edits (refused: started)", fmt.Sprintf("%d (%d)", c.Edits, c.EditsRefused))
		row("rejects (refused: started)", fmt.Sprintf("%d (%d)", c.Rejects, c.RejectsRefused))
		row("approvals", c.Approvals)
		row("operations too late (run ended, nothing left)", c.Late)
		row("runs checked (world requests compared)", fmt.Sprintf("%d (%d)", c.RunsChecked, c.RequestsChecked))
		row("violations (pause / edit / reject / approval)", fmt.Sprintf("%d (%d / %d / %d / %d)",
			c.Violations-c.BudgetMismatches, c.PauseViolations, c.EditViolations, c.RejectViolations, c.ApprovalViolations))
		row("budget usage unlike the world's (runs checked)", fmt.Sprintf("%d (%d)", c.BudgetMismatches, c.BudgetChecked))
	}
	row("elapsed", (time.Duration(r.ElapsedSeconds * float64(time.Second))).Round(time.Second))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "finding: %s\n", f)
	}
	return nil
}

// nodesNS is the world namespace every run of the experiment shares: the
// nodes serve one tools file. Effects stay apart by their identities (each
// names its run), and the audit compares the world with all runs at once.
const nodesNS = "nodes"

// nodesExp is one shared-ledger experiment.
type nodesExp struct {
	cfg   NodesConfig
	dk    Docket // cfg.Docket with DOCKET_LEDGER set
	args  []string
	world *worldProc
	http  *http.Client
	tag   string // run ids of this experiment: n<N>-<tag>

	mu         sync.Mutex
	nodes      []*serveProc // by slot; nil or dead while a node is down
	killed     []bool       // the slot's current process was killed by us
	down       []bool       // the slot's node was killed and is not up again yet
	restarting sync.WaitGroup
	rep        NodesReport
	finals     []runDoc
	retries    map[string]int      // person --retry decisions, by run/action
	decisions  map[string][]string // what the person decided and why, by run (for findings)
	numbers    map[string]int      // plan number by run id
	crossed    map[string]*crossRecord
	seconds    []float64
	ended      int
	half       chan struct{} // closed when half of the planned runs ended
	halfOnce   sync.Once
	planned    int
}

// RunNodes runs the shared-ledger experiment and returns its report. A
// report that shows duplicates or losses is not an error; err means the
// experiment could not be carried out.
func RunNodes(ctx context.Context, cfg NodesConfig) (*NodesReport, error) {
	if cfg.Docket.Exe == "" {
		return nil, errors.New("chaos: NodesConfig.Docket.Exe is required")
	}
	if !strings.HasPrefix(cfg.Ledger, "postgres://") && !strings.HasPrefix(cfg.Ledger, "postgresql://") {
		return nil, errors.New("chaos: NodesConfig.Ledger must be a postgres:// URL")
	}
	cfg.Actions = cmpOrInt(cfg.Actions, 300)
	cfg.Nodes = cmpOrInt(cfg.Nodes, 3)
	cfg.Workers = cmpOrInt(cfg.Workers, 6)
	cfg.Timeout = cmpOrDur(cfg.Timeout, time.Second)
	cfg.Lag = cmpOrDur(cfg.Lag, time.Second)
	cfg.Lease = cmpOrDur(cfg.Lease, 2*time.Second)
	cfg.KillEvery = cmpOrDur(cfg.KillEvery, 2*time.Second)
	if cfg.Control && cfg.Nodes < 2 {
		return nil, errors.New("chaos: NodesConfig.Control needs at least 2 nodes (the person acts through another node)")
	}
	if cfg.Faults == (Faults{}) {
		cfg.Faults = DefaultFaults
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "docket-chaos-nodes-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	started := time.Now()
	x := &nodesExp{
		cfg:       cfg,
		http:      &http.Client{Timeout: time.Minute},
		tag:       strconv.FormatInt(started.UnixNano()%1e9, 36),
		retries:   map[string]int{},
		decisions: map[string][]string{},
		numbers:   map[string]int{},
		crossed:   map[string]*crossRecord{},
		half:      make(chan struct{}),
		nodes:     make([]*serveProc, cfg.Nodes),
		killed:    make([]bool, cfg.Nodes),
		down:      make([]bool, cfg.Nodes),
	}
	x.dk = cfg.Docket
	x.dk.Env = append(append([]string{}, cfg.Docket.Env...), "DOCKET_LEDGER="+cfg.Ledger)
	x.rep = NodesReport{Seed: cfg.Seed, Nodes: cfg.Nodes, Workers: cfg.Workers, Lease: cfg.Lease.String(), ResolvedBy: map[string]int{}}
	if cfg.Control {
		x.rep.Control = &CrossControl{}
	}

	w, err := cfg.Docket.startWorld(ctx, WorldConfig{Seed: cfg.Seed, Timeout: cfg.Timeout, LagMax: cfg.Lag, Faults: cfg.Faults})
	if err != nil {
		return nil, err
	}
	x.world = w
	defer w.stop()
	toolsPath := filepath.Join(dir, "tools.json")
	tools := ToolsFile(ToolsOptions{Base: w.url + "/" + nodesNS, Protected: true, Timeout: cfg.Timeout, LagDeclared: cfg.Lag})
	if err := os.WriteFile(toolsPath, tools, 0o644); err != nil {
		return nil, err
	}
	token := "chaos-nodes-" + x.tag + "-token-0123456789"
	x.args = []string{"serve", "--tools", toolsPath, "--addr", "127.0.0.1:0", "--token", token,
		"--lease", cfg.Lease.String(), "--grace", "20s", "--rate", "0", "--max-sockets", "0"}
	for i := range cfg.Nodes {
		if err := x.start(ctx, i); err != nil {
			x.stopAll()
			return nil, err
		}
	}

	// The plans: the seed's first ones up to Actions (more for MinKills).
	var sizes []int
	total := 0
	for n := 1; total < cfg.Actions; n++ {
		_, size := GeneratePlan(cfg.Seed, n)
		sizes = append(sizes, size)
		total += size
	}
	x.planned = len(sizes)

	stopKills := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		x.killLoop(ctx, stopKills)
	}()
	if cfg.RestartDB != nil {
		bg.Add(1)
		go func() {
			defer bg.Done()
			select {
			case <-x.half:
			case <-stopKills:
				return
			}
			x.note("restarting the database")
			if err := cfg.RestartDB(ctx); err != nil {
				x.addError(fmt.Sprintf("restarting the database: %v", err))
				return
			}
			x.mu.Lock()
			x.rep.DBRestarts++
			x.mu.Unlock()
		}()
	}

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range jobs {
				x.runOne(ctx, token, n)
			}
		}()
	}
	for n := 1; ; n++ {
		if n > len(sizes) {
			x.mu.Lock()
			enough := cfg.MinKills <= 0 || x.rep.NodeKills >= cfg.MinKills || n > 10*len(sizes)
			x.mu.Unlock()
			if enough {
				break
			}
		}
		select {
		case jobs <- n:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(jobs)
	wg.Wait()
	close(stopKills)
	bg.Wait()
	x.restarting.Wait()

	// Every run ended: audit the world against all of them at once.
	all := runDoc{RunID: "all runs", Status: "completed"}
	x.mu.Lock()
	for _, d := range x.finals {
		for _, a := range d.Actions {
			a.ID = d.RunID + "/" + a.ID
			all.Actions = append(all.Actions, a)
		}
	}
	x.mu.Unlock()
	audit, err := x.audit(ctx)
	var violations []string
	if err == nil && cfg.Control {
		violations, err = x.crossAudit(ctx, token, audit)
	}
	var ra RunAudit
	if err == nil {
		ra = auditRun(&all, audit, x.retries)
		ra.Findings = append(ra.Findings, x.trails(ctx, token, ra.Findings)...)
	}
	x.stopAll()
	if err != nil {
		return nil, err
	}
	r := &x.rep
	r.Duplicates.add(ra.Duplicates)
	r.LostMissing, r.LostUnexplain = ra.LostMissing, ra.LostUnexplained
	r.Lost = r.LostMissing + r.LostUnexplain
	r.AtMostOnce = ra.AtMostOnceReexec
	r.RepeatWrites, r.LookupHits = ra.RepeatWrites, ra.LookupHits
	r.Findings = append(r.Findings, ra.Findings...)
	r.Findings = append(r.Findings, violations...)
	if len(r.Findings) > 100 {
		r.Findings = r.Findings[:100]
	}
	if n := len(x.seconds); n > 0 {
		sort.Float64s(x.seconds)
		sum := 0.0
		for _, s := range x.seconds {
			sum += s
		}
		r.RunMeanSeconds = sum / float64(n)
		r.RunP99Seconds = x.seconds[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]
	}
	r.ElapsedSeconds = time.Since(started).Seconds()
	if ctx.Err() != nil {
		return r, fmt.Errorf("chaos: interrupted: %w", ctx.Err())
	}
	return r, nil
}

func cmpOrInt(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func cmpOrDur(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

func (x *nodesExp) note(format string, a ...any) {
	if x.cfg.Progress != nil {
		fmt.Fprintf(x.cfg.Progress, "docket chaos --nodes: "+format+"\n", a...)
	}
}

func (x *nodesExp) addError(e string) {
	x.mu.Lock()
	x.rep.Errors = append(x.rep.Errors, e)
	x.mu.Unlock()
}

// start starts the node of slot i, again until it listens (it may not
// while the database restarts).
func (x *nodesExp) start(ctx context.Context, i int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := x.dk.startServe(ctx, x.args, kill{})
		if err != nil {
			return err
		}
		if p.url != "" {
			x.mu.Lock()
			x.nodes[i], x.killed[i] = p, false
			x.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("node %d did not start: %s", i, lastLine(p.out.stderr))
		}
		x.note("node %d did not start (%s); again", i, lastLine(p.out.stderr))
		time.Sleep(500 * time.Millisecond)
	}
}

// killLoop SIGKILLs a random node now and then (never the last one up) and
// starts it again after a while, until stop is closed. It also notices
// nodes that exited by themselves (and starts them again).
func (x *nodesExp) killLoop(ctx context.Context, stop chan struct{}) {
	rng := newRand(x.cfg.Seed, "nodes-kill")
	for {
		wait := x.cfg.KillEvery/2 + time.Duration(rng.Int64N(int64(x.cfg.KillEvery)))
		back := 200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond)))
		i := rng.IntN(x.cfg.Nodes)
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		x.mu.Lock()
		up := 0
		for k := range x.nodes {
			if !x.down[k] {
				up++
			}
		}
		p, skip := x.nodes[i], x.down[i] || up <= 1
		if !skip {
			x.down[i] = true
		}
		x.mu.Unlock()
		if skip {
			continue
		}
		if p.dead() {
			x.mu.Lock()
			x.rep.NodeSelfExits++
			x.rep.Errors = append(x.rep.Errors, fmt.Sprintf("node %d exited by itself (%d): %s", i, p.out.code, lastLine(p.out.stderr)))
			x.mu.Unlock()
		} else {
			x.mu.Lock()
			x.killed[i] = true
			x.mu.Unlock()
			p.kill()
			x.mu.Lock()
			x.rep.NodeKills++
			x.mu.Unlock()
		}
		x.restarting.Add(1)
		go func() {
			defer x.restarting.Done()
			select {
			case <-stop:
			case <-time.After(back):
			}
			if err := x.start(ctx, i); err != nil {
				x.addError(err.Error())
				return
			}
			x.mu.Lock()
			x.down[i] = false
			x.rep.NodeRestarts++
			x.mu.Unlock()
		}()
	}
}

// stopAll stops every node (SIGTERM) and counts those that did not stop
// cleanly.
func (x *nodesExp) stopAll() {
	x.mu.Lock()
	nodes := append([]*serveProc{}, x.nodes...)
	x.mu.Unlock()
	for i, p := range nodes {
		if p == nil {
			continue
		}
		if p.dead() {
			x.mu.Lock()
			if !x.killed[i] {
				x.rep.NodeSelfExits++
				x.rep.Errors = append(x.rep.Errors, fmt.Sprintf("node %d exited by itself (%d): %s", i, p.out.code, lastLine(p.out.stderr)))
			}
			x.mu.Unlock()
			continue
		}
		p.stop()
		if !p.out.killed && p.out.code != 0 {
			x.addError(fmt.Sprintf("node %d exited %d on SIGTERM: %s", i, p.out.code, lastLine(p.out.stderr)))
		}
	}
}

// call sends one API request to a live node, and again to another one while
// none answers (a killed node, a database restarting: 503). resent says
// that an earlier copy may have been acted on.
func (x *nodesExp) call(ctx context.Context, token, method, path string, body any) (code int, b []byte, resent bool, err error) {
	return x.callVia(ctx, token, method, path, body, -1, -1)
}

// callVia is call sent first to the node of slot want (if not negative and
// up) and never to the node of slot avoid (if not negative).
func (x *nodesExp) callVia(ctx context.Context, token, method, path string, body any, want, avoid int) (code int, b []byte, resent bool, err error) {
	var raw []byte
	if body != nil {
		if raw, err = json.Marshal(body); err != nil {
			return 0, nil, false, err
		}
	}
	rng := newRand(uint64(time.Now().UnixNano()), "pick")
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			resent = true
			x.mu.Lock()
			x.rep.CallsResent++
			x.mu.Unlock()
			if time.Now().After(deadline) {
				return 0, nil, resent, fmt.Errorf("%s %s: no node answered for 3 minutes (last: %s)", method, path, last)
			}
			select {
			case <-ctx.Done():
				return 0, nil, resent, ctx.Err()
			case <-time.After(150 * time.Millisecond):
			}
		}
		slot := rng.IntN(len(x.nodes))
		for avoid >= 0 && slot == avoid && len(x.nodes) > 1 {
			slot = rng.IntN(len(x.nodes))
		}
		if want >= 0 && attempt == 0 {
			slot = want
		}
		x.mu.Lock()
		p := x.nodes[slot]
		x.mu.Unlock()
		if p == nil || p.dead() {
			last = "node down"
			continue
		}
		req, err := http.NewRequestWithContext(ctx, method, p.url+path, bytes.NewReader(raw))
		if err != nil {
			return 0, nil, resent, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := x.http.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err.Error()
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway {
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
			continue
		}
		return resp.StatusCode, b, resent, nil
	}
}

// runOne submits plan n to a random node and follows it to its end through
// random nodes, resolving what waits for a person as runServe does.
func (x *nodesExp) runOne(ctx context.Context, token string, n int) {
	planRaw, size := GeneratePlan(x.cfg.Seed, n)
	runID := fmt.Sprintf("n%d-%s", n, x.tag)
	start := time.Now()
	fail := func(err error) {
		x.addError(fmt.Sprintf("run %s: %v", runID, err))
		x.ended1()
	}
	ps := x.newPerson(n, runID, planRaw)
	home, approve := -1, "all"
	if ps != nil {
		home = ps.c.Home
		if ps.c.Op == OpApprove {
			approve = "none"
		}
	}
	x.mu.Lock()
	x.numbers[runID] = n
	x.mu.Unlock()
	body := map[string]any{"run_id": runID, "plan": json.RawMessage(planRaw), "approve": approve}
	for {
		code, b, _, err := x.callVia(ctx, token, "POST", "/v1/runs", body, home, -1)
		if err != nil {
			fail(err)
			return
		}
		if code == http.StatusOK || code == http.StatusCreated {
			break
		}
		if code != http.StatusConflict {
			fail(fmt.Errorf("POST /v1/runs answered %d: %s", code, bytes.TrimSpace(b)))
			return
		}
		time.Sleep(time.Second) // 409 in_progress: another copy is being accepted
	}
	runPath := "/v1/runs/" + url.PathEscape(runID)
	deadline := time.Now().Add(10 * time.Minute)
	// About one run in twelve is cancelled by a person in flight, on a
	// random node (its own random stream: plans and kills stay the seed's).
	crng := newRand(x.cfg.Seed, "nodes-cancel", n)
	cancelAt := time.Time{}
	if crng.Float64() < 0.08 {
		cancelAt = time.Now().Add(20*time.Millisecond + time.Duration(crng.Int64N(int64(900*time.Millisecond))))
	}
	cancelled := false // acknowledged (or sent again after no answer: either way is as planned)
	cancelSent := false
	var final runDoc
	for {
		if time.Now().After(deadline) {
			fail(errors.New("did not end within 10 minutes"))
			return
		}
		if !cancelAt.IsZero() && !cancelSent && time.Now().After(cancelAt) {
			cancelSent = true
			code, b, resent, err := x.call(ctx, token, "POST", runPath+"/cancel", map[string]any{})
			if err != nil {
				fail(err)
				return
			}
			switch {
			case code == http.StatusOK || code == http.StatusAccepted:
				cancelled = true
			case code == http.StatusConflict:
				cancelled = resent // refused: the run had ended (or an earlier copy took)
			default:
				fail(fmt.Errorf("cancel answered %d: %s", code, bytes.TrimSpace(b)))
				return
			}
		}
		d, err := x.getRun(ctx, token, runPath)
		if err != nil {
			fail(err)
			return
		}
		if ps != nil {
			if err := x.step(ctx, token, ps, &d); err != nil {
				fail(fmt.Errorf("the person (%s through another node than %d): %w", ps.c.Op, ps.c.Home, err))
				return
			}
		}
		var review *docAction
		for i := range d.Actions {
			if d.Actions[i].Status == "needs_review" {
				review = &d.Actions[i]
				break
			}
		}
		if review != nil && waitsForPerson(&d) {
			fresh, decision, err := x.person(ctx, token, runPath, review.ID)
			if err != nil {
				fail(err)
				return
			}
			if fresh == nil {
				continue // the run moved on while the person looked: look again
			}
			d = *fresh
			rb := map[string]any{"done": decision}
			switch {
			case decision != nil:
			case d.Status == "cancelled":
				rb = map[string]any{"skip": true} // nothing happened, and the run will not try again
			default:
				rb = map[string]any{"retry": true}
			}
			code, b, resent, err := x.call(ctx, token, "POST", runPath+"/actions/"+url.PathEscape(review.ID)+"/resolve", rb)
			if err != nil {
				fail(err)
				return
			}
			if code != http.StatusOK && !(resent && code == http.StatusConflict) {
				fail(fmt.Errorf("resolving %s (%v) answered %d: %s", review.ID, rb, code, bytes.TrimSpace(b)))
				return
			}
			x.mu.Lock()
			if decision == nil && d.Status != "cancelled" {
				x.retries[runID+"/"+review.ID]++
			}
			x.rep.PersonResolved++
			x.rep.ResolvedBy[review.Class]++
			x.mu.Unlock()
			continue
		}
		if d.Status == "completed" || d.Status == "failed" || (d.Status == "cancelled" && settled(&d)) {
			final = d
			break
		}
		time.Sleep(150 * time.Millisecond)
	}
	declined := bytes.Contains(planRaw, []byte(`"amount": 9500`))
	for _, a := range final.Actions {
		declined = declined || a.Status == "rejected" // a person declined it
	}
	x.mu.Lock()
	if ps != nil {
		x.crossed[runID] = &crossRecord{op: ps.c.Op, pauseAck: ps.pauseAck, resumeAt: ps.resumeAt}
	}
	x.rep.Runs++
	x.rep.Actions += size
	switch final.Status {
	case "completed":
		x.rep.Completed++
	case "failed":
		x.rep.Failed++
	case "cancelled":
		x.rep.Cancelled++
	}
	switch {
	case final.Status == "cancelled" && !cancelled:
		x.rep.Unplanned++
		x.rep.Findings = append(x.rep.Findings, fmt.Sprintf("%s ended cancelled, but no cancel was acknowledged", runID))
	case final.Status == "cancelled":
	case declined != (final.Status == "failed"):
		x.rep.Unplanned++
		x.rep.Findings = append(x.rep.Findings, fmt.Sprintf("%s ended %s (a declined charge planned or an action rejected: %v): %s", runID, final.Status, declined, final.Error))
	}
	x.finals = append(x.finals, final)
	x.seconds = append(x.seconds, time.Since(start).Seconds())
	x.mu.Unlock()
	x.ended1()
}

// settled reports whether a cancelled run has nothing left in flight: no
// claim (a node still calling, or one that died and whose claim another
// node must conclude), nothing for a person, no keyed action waiting for an
// attempt it will never get.
func settled(d *runDoc) bool {
	for _, a := range d.Actions {
		switch {
		case a.Status == "claimed", a.Status == "needs_review":
			return false
		case (a.Status == "pending" || a.Status == "approved") && a.Attempts > 0:
			return false
		}
	}
	return true
}

// ended1 counts a run that ended (or failed to) and says so now and then.
func (x *nodesExp) ended1() {
	x.mu.Lock()
	x.ended++
	e, kills := x.ended, x.rep.NodeKills
	x.mu.Unlock()
	if e*2 >= x.planned {
		x.halfOnce.Do(func() { close(x.half) })
	}
	if e%20 == 0 {
		x.note("%d runs ended, %d node kills", e, kills)
	}
}

// audit reads the shared namespace once no request is being processed.
func (x *nodesExp) audit(ctx context.Context) (*Audit, error) {
	return worldAudit(ctx, x.http, x.world.url, nodesNS, 2*time.Minute, x.cfg.Control)
}

// trails returns, for each run a finding names, what the person decided in
// it and the ledger's events of the actions named, so that a finding can be
// explained after the experiment's database is gone.
func (x *nodesExp) trails(ctx context.Context, token string, findings []string) []string {
	var out []string
	for _, d := range x.finals {
		named := map[string]bool{}
		for _, f := range findings {
			for _, a := range d.Actions {
				if strings.Contains(f, d.RunID+"/"+a.ID+" ") || strings.Contains(f, d.RunID+"/"+a.ID+"]") {
					named[a.ID] = true
				}
			}
		}
		if len(named) == 0 {
			continue
		}
		x.mu.Lock()
		for _, s := range x.decisions[d.RunID] {
			out = append(out, fmt.Sprintf("%s: the person decided %s", d.RunID, s))
		}
		x.mu.Unlock()
		evs, err := x.events(ctx, token, d.RunID)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: its events: %v", d.RunID, err))
			continue
		}
		var line []string
		for _, e := range evs {
			if e.ActionID == "" || named[e.ActionID] {
				line = append(line, fmt.Sprintf("%d %s %s %s", e.Seq, e.At.Format("15:04:05.000"), e.Type, e.ActionID))
			}
		}
		out = append(out, fmt.Sprintf("%s: events of %v: %s", d.RunID, slices.Sorted(maps.Keys(named)), strings.Join(line, "; ")))
	}
	return out
}

// getRun reads a run's document through any node.
func (x *nodesExp) getRun(ctx context.Context, token, runPath string) (runDoc, error) {
	var d runDoc
	code, b, _, err := x.call(ctx, token, "GET", runPath, nil)
	if err != nil {
		return d, err
	}
	if code != http.StatusOK || json.Unmarshal(b, &d) != nil || d.RunID == "" {
		return d, fmt.Errorf("GET answered %d: %s", code, bytes.TrimSpace(b))
	}
	return d, nil
}

// waitsForPerson reports whether a person settles d's action in
// needs_review now: nothing more happens in the run until then.
func waitsForPerson(d *runDoc) bool {
	return d.Status == "paused" || d.Status == "failed" || d.Status == "cancelled"
}

// person decides action id in needs_review as a careful person would (see
// decide): first the shared namespace, at a moment when no request of any
// run is being processed (so every late commit has landed), then the run,
// read again. In that order: a drive may go on meanwhile on another node,
// and a sibling it claims and sends after an earlier read of the run would
// be counted by neither, its email taken for this action's. It returns the
// run as read (nil when the action no longer waits for a person: look
// again) and the decision.
func (x *nodesExp) person(ctx context.Context, token, runPath, id string) (*runDoc, json.RawMessage, error) {
	w, err := x.audit(ctx)
	if err != nil {
		return nil, nil, err
	}
	d, err := x.getRun(ctx, token, runPath)
	if err != nil || !waitsForPerson(&d) {
		return nil, nil, err
	}
	for i := range d.Actions {
		if a := &d.Actions[i]; a.ID == id && a.Status == "needs_review" {
			out, why := decide(w, &d, a)
			verdict := "retry"
			if out != nil {
				verdict = "done " + compactJSON(out)
			}
			x.mu.Lock()
			x.decisions[d.RunID] = append(x.decisions[d.RunID], fmt.Sprintf("%s (run %s): %s: %s", id, d.Status, verdict, why))
			x.mu.Unlock()
			return &d, out, nil
		}
	}
	return nil, nil, nil
}
