package chaos

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what an experiment measured: one ModeReport per workload.
type Report struct {
	Seed           uint64       `json:"seed"`
	Actions        int          `json:"actions_per_workload"` // the workload size asked for
	Timeout        string       `json:"tool_timeout"`
	Lag            string       `json:"leads_lag_max"`
	LagDeclared    string       `json:"leads_visibility_lag_declared"`
	Workers        int          `json:"workers"`
	Only           []int        `json:"only_plans,omitempty"`
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	Modes          []ModeReport `json:"workloads"`
}

// ModeReport sums one workload's runs.
type ModeReport struct {
	Mode      string `json:"mode"` // protected or unprotected
	Runs      int    `json:"runs"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"` // ended failed (a declined charge), as planned
	Actions   int    `json:"actions"`
	Kills     int    `json:"kills"`
	Restarts  int    `json:"restarts"`
	Commands  int    `json:"commands"`
	// Duplicates by service, and their total.
	Duplicates Duplicates `json:"duplicates"`
	// Lost = LostMissing + LostUnexplained (RunAudit).
	Lost             int `json:"lost"`
	LostMissing      int `json:"lost_missing"`
	LostUnexplained  int `json:"lost_unexplained"`
	AtMostOnceReexec int `json:"at_most_once_automatic_reexecutions"`
	// Control sums what people did to runs in flight (through docket
	// serve); ControlRuns counts those runs; ControlViolations the broken
	// expectations of acknowledged operations.
	ControlRuns       int          `json:"control_runs"`
	Control           ControlStats `json:"control"`
	ControlViolations int          `json:"control_violations"`
	CancelLeftPending int          `json:"cancel_left_pending"`
	// BudgetRuns counts runs whose budget usage was compared with the
	// world's charges; BudgetMismatches those where they differ.
	BudgetRuns       int `json:"budget_runs"`
	BudgetMismatches int `json:"budget_mismatches"`
	// PersonResolved counts pauses a person resolved, also by the class of
	// the action.
	PersonResolved        int            `json:"person_resolved"`
	PersonResolvedByClass map[string]int `json:"person_resolved_by_class"`
	RepeatWrites          int            `json:"retries_visible_to_customers"`
	LookupHits            int            `json:"lookups_found_prior_effect"`
	// OpenFailures counts docket commands that could not open the data
	// directory (after a kill) and were run again; OpenErrors samples them.
	OpenFailures   int      `json:"open_failures"`
	OpenErrors     []string `json:"open_errors,omitempty"`
	RunMeanSeconds float64  `json:"run_seconds_mean"`
	RunP99Seconds  float64  `json:"run_seconds_p99"`
	// Errors lists runs the harness could not finish (not counted above).
	Errors []string `json:"errors,omitempty"`
	// Findings describe duplicates and losses (at most 100).
	Findings []string `json:"findings,omitempty"`
}

// Duplicates counts duplicate effects by service.
type Duplicates struct {
	Payments int `json:"payments"`
	CRM      int `json:"crm"`
	Leads    int `json:"leads"`
	Settings int `json:"settings"`
	Email    int `json:"email"`
	Total    int `json:"total"`
}

func (d *Duplicates) add(m map[string]int) {
	d.Payments += m["payments"]
	d.CRM += m["crm"]
	d.Leads += m["leads"]
	d.Settings += m["settings"]
	d.Email += m["email"]
	d.Total = d.Payments + d.CRM + d.Leads + d.Settings + d.Email
}

// OK says whether the protected workload kept the promise: every run
// finished, no duplicate, nothing lost, no automatic re-execution of an
// at-most-once action.
func (r *Report) OK() bool {
	for _, m := range r.Modes {
		if m.Mode != Protected {
			continue
		}
		if len(m.Errors) > 0 || m.Duplicates.Total > 0 || m.Lost > 0 || m.AtMostOnceReexec > 0 || m.ControlViolations > 0 || m.BudgetMismatches > 0 {
			return false
		}
	}
	return true
}

// Mode returns the report of one workload (nil if it did not run).
func (r *Report) Mode(name string) *ModeReport {
	for i := range r.Modes {
		if r.Modes[i].Mode == name {
			return &r.Modes[i]
		}
	}
	return nil
}

func (h *harness) report(elapsed time.Duration) *Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &Report{
		Seed:           h.st.Seed,
		Actions:        h.st.Actions,
		Timeout:        h.st.Timeout.String(),
		Lag:            h.st.Lag.String(),
		LagDeclared:    h.st.LagDeclared.String(),
		Workers:        h.cfg.Workers,
		Only:           h.st.Only,
		ElapsedSeconds: elapsed.Seconds(),
		Modes:          summarize(h.results),
	}
}

// summarize sums results by workload, protected first.
func summarize(results []RunResult) []ModeReport {
	byMode := map[string]*ModeReport{}
	secs := map[string][]float64{}
	for _, r := range results {
		m := byMode[r.Mode]
		if m == nil {
			m = &ModeReport{Mode: r.Mode, PersonResolvedByClass: map[string]int{}}
			byMode[r.Mode] = m
		}
		if r.Error != "" {
			if len(m.Errors) < 100 {
				m.Errors = append(m.Errors, r.Error)
			}
			continue
		}
		m.Runs++
		switch r.Status {
		case "completed":
			m.Completed++
		case "failed":
			m.Failed++
		}
		m.Actions += r.Actions
		m.Kills += r.Kills
		m.Restarts += r.Restarts
		m.Commands += r.Commands
		m.Duplicates.add(r.Audit.Duplicates)
		m.LostMissing += r.Audit.LostMissing
		m.LostUnexplained += r.Audit.LostUnexplained
		m.Lost = m.LostMissing + m.LostUnexplained
		m.AtMostOnceReexec += r.Audit.AtMostOnceReexec
		m.ControlViolations += r.Audit.ControlViolations
		m.CancelLeftPending += r.Audit.CancelLeftPending
		if r.Audit.BudgetChecked {
			m.BudgetRuns++
		}
		m.BudgetMismatches += r.Audit.BudgetMismatches
		if c := r.Control; c != nil {
			m.ControlRuns++
			m.Control.Pauses += c.Pauses
			m.Control.Resumes += c.Resumes
			m.Control.Cancels += c.Cancels
			m.Control.Edits += c.Edits
			m.Control.EditsRefused += c.EditsRefused
			m.Control.Replays += c.Replays
			m.Control.ReplaysRefused += c.ReplaysRefused
			m.Control.Superseded += c.Superseded
			m.Control.Late += c.Late
			m.Control.NothingLeft += c.NothingLeft
		}
		for c, n := range r.Resolved {
			m.PersonResolved += n
			m.PersonResolvedByClass[c] += n
		}
		m.RepeatWrites += r.Audit.RepeatWrites
		m.OpenFailures += r.OpenFailures
		if r.OpenError != "" && len(m.OpenErrors) < 10 {
			m.OpenErrors = append(m.OpenErrors, r.RunID+": "+r.OpenError)
		}
		m.LookupHits += r.Audit.LookupHits
		for _, f := range r.Audit.Findings {
			if len(m.Findings) < 100 {
				m.Findings = append(m.Findings, f)
			}
		}
		secs[r.Mode] = append(secs[r.Mode], r.Seconds)
	}
	var out []ModeReport
	for _, name := range []string{Protected, Unprotected} {
		m := byMode[name]
		if m == nil {
			continue
		}
		s := secs[name]
		if len(s) > 0 {
			sort.Float64s(s)
			sum := 0.0
			for _, x := range s {
				sum += x
			}
			m.RunMeanSeconds = sum / float64(len(s))
			m.RunP99Seconds = s[int(math.Ceil(0.99*float64(len(s))))-1]
		}
		out = append(out, *m)
	}
	return out
}

// WriteTable prints the report for people: the workloads side by side.
func (r *Report) WriteTable(w io.Writer) error {
	size := fmt.Sprintf("%d actions per workload", r.Actions)
	if len(r.Only) > 0 {
		size = fmt.Sprintf("plans %v", r.Only)
	}
	fmt.Fprintf(w, "docket chaos: seed %d, %s, tool timeout %s, leads lag up to %s (declared %s), %d workers, %s\n\n",
		r.Seed, size, r.Timeout, r.Lag, r.LagDeclared, r.Workers, (time.Duration(r.ElapsedSeconds * float64(time.Second))).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "\t"
	for _, m := range r.Modes {
		head += m.Mode + "\t"
	}
	fmt.Fprintln(tw, head)
	row := func(label string, f func(m *ModeReport) string) {
		line := label + "\t"
		for i := range r.Modes {
			line += f(&r.Modes[i]) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	num := func(f func(m *ModeReport) int) func(m *ModeReport) string {
		return func(m *ModeReport) string { return group(f(m)) }
	}
	row("runs (completed / failed as planned)", func(m *ModeReport) string {
		return fmt.Sprintf("%s (%s / %s)", group(m.Runs), group(m.Completed), group(m.Failed))
	})
	row("actions", num(func(m *ModeReport) int { return m.Actions }))
	row("kills (SIGKILL)", num(func(m *ModeReport) int { return m.Kills }))
	row("restarts after a kill", num(func(m *ModeReport) int { return m.Restarts }))
	row("duplicates: payments (keyed)", num(func(m *ModeReport) int { return m.Duplicates.Payments }))
	row("duplicates: crm (lookup)", num(func(m *ModeReport) int { return m.Duplicates.CRM }))
	row("duplicates: leads (lookup, eventually consistent)", num(func(m *ModeReport) int { return m.Duplicates.Leads }))
	row("duplicates: settings (idempotent)", num(func(m *ModeReport) int { return m.Duplicates.Settings }))
	row("duplicates: email (at_most_once)", num(func(m *ModeReport) int { return m.Duplicates.Email }))
	row("lost effects (missing + unexplained)", func(m *ModeReport) string {
		return fmt.Sprintf("%s (%s + %s)", group(m.Lost), group(m.LostMissing), group(m.LostUnexplained))
	})
	row("at-most-once automatic re-executions", num(func(m *ModeReport) int { return m.AtMostOnceReexec }))
	row("budget usage unlike the world's charges (runs checked)", func(m *ModeReport) string {
		if m.BudgetRuns == 0 {
			return "-"
		}
		return fmt.Sprintf("%s (%s)", group(m.BudgetMismatches), group(m.BudgetRuns))
	})
	row("runs a person acted on in flight (docket serve)", num(func(m *ModeReport) int { return m.ControlRuns }))
	row("  pauses / resumes acknowledged", func(m *ModeReport) string {
		return fmt.Sprintf("%s / %s", group(m.Control.Pauses), group(m.Control.Resumes))
	})
	row("  cancels acknowledged", num(func(m *ModeReport) int { return m.Control.Cancels }))
	row("  edits accepted / refused (409)", func(m *ModeReport) string {
		return fmt.Sprintf("%s / %s", group(m.Control.Edits), group(m.Control.EditsRefused))
	})
	row("  replays accepted / refused (409)", func(m *ModeReport) string {
		return fmt.Sprintf("%s / %s", group(m.Control.Replays), group(m.Control.ReplaysRefused))
	})
	row("  effects of a revision a replay changed after they ran", num(func(m *ModeReport) int { return m.Control.Superseded }))
	row("  too late (run ended) / nothing left to change", func(m *ModeReport) string {
		return fmt.Sprintf("%s / %s", group(m.Control.Late), group(m.Control.NothingLeft))
	})
	row("  cancelled runs: started actions left pending (no effect)", num(func(m *ModeReport) int { return m.CancelLeftPending }))
	row("  broken expectations of acknowledged operations", num(func(m *ModeReport) int { return m.ControlViolations }))
	row("pauses resolved by a person", func(m *ModeReport) string {
		var parts []string
		classes := make([]string, 0, len(m.PersonResolvedByClass))
		for c := range m.PersonResolvedByClass {
			classes = append(classes, c)
		}
		sort.Strings(classes)
		for _, c := range classes {
			parts = append(parts, fmt.Sprintf("%s %d", c, m.PersonResolvedByClass[c]))
		}
		if len(parts) == 0 {
			return group(m.PersonResolved)
		}
		return fmt.Sprintf("%s (%s)", group(m.PersonResolved), strings.Join(parts, ", "))
	})
	row("retries visible to customers", num(func(m *ModeReport) int { return m.RepeatWrites }))
	row("lookups that found a prior effect", num(func(m *ModeReport) int { return m.LookupHits }))
	row("time to complete a run: mean / p99", func(m *ModeReport) string {
		return fmt.Sprintf("%.2fs / %.2fs", m.RunMeanSeconds, m.RunP99Seconds)
	})
	row("commands that could not open the ledger, rerun", num(func(m *ModeReport) int { return m.OpenFailures }))
	row("runs the harness could not finish", num(func(m *ModeReport) int { return len(m.Errors) }))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.Modes {
		if m.Mode == Protected && (len(m.Findings) > 0 || len(m.Errors) > 0) {
			fmt.Fprintf(w, "\nprotected workload findings:\n")
			for _, f := range m.Findings {
				fmt.Fprintf(w, "  %s\n", f)
			}
			for _, e := range m.Errors {
				fmt.Fprintf(w, "  harness: %s\n", firstLine(e))
			}
		}
	}
	for _, m := range r.Modes {
		if len(m.OpenErrors) > 0 {
			fmt.Fprintf(w, "\n%s workload: the ledger would not open after a kill (first cases):\n", m.Mode)
			for _, e := range m.OpenErrors {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// group writes n with thousands separators.
func group(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + group(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
