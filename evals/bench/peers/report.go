package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strconv"
)

// Report is a whole benchmark run.
type Report struct {
	Date        string     `json:"date"`
	Machine     Machine    `json:"machine"`
	Postgres    PGSettings `json:"postgres"`
	DBOSVersion string     `json:"dbos_version"`
	Config      Config     `json:"config"`
	Results     []Result   `json:"results"` // one per child, in the order they ran
	Rows        []Row      `json:"rows"`    // docket (Badger) against DBOS
	// PGRows compare docket on PostgreSQL against DBOS (their Docket
	// fields are docket-pg's); empty without the docket-pg side.
	PGRows []Row `json:"pg_rows,omitempty"`
}

// Row compares one figure across rounds.
type Row struct {
	Workload  string  `json:"workload"`
	Metric    string  `json:"metric"`
	Unit      string  `json:"unit"`
	Lower     bool    `json:"lower_is_better"`
	Docket    float64 `json:"docket_median"`
	DBOS      float64 `json:"dbos_median"`
	RatioMin  float64 `json:"ratio_min"` // docket ÷ DBOS, per round
	RatioMed  float64 `json:"ratio_median"`
	RatioMax  float64 `json:"ratio_max"`
	AheadIn   int     `json:"docket_ahead_in_rounds"`
	RoundsCmp int     `json:"rounds"`
}

type metric struct {
	name, unit string
	lower      bool
	get        func(Result) float64
	// pgName names the figure when both sides are on PostgreSQL; "" is name.
	pgName string
}

// metrics are the compared figures; cfg names the concurrency in its row.
func metrics(cfg Config) []metric {
	return []metric{
		{"added latency per step, median", "µs", true, func(r Result) float64 { return r.GapP50US }, ""},
		{"added latency per step, p99", "µs", true, func(r Result) float64 { return r.GapP99US }, ""},
		{"sequential steps/s (one run at a time)", "steps/s", false, func(r Result) float64 { return r.SeqStepsPerSec }, ""},
		{fmt.Sprintf("steps/s, %d runs in flight", cfg.Concurrency), "steps/s", false, func(r Result) float64 { return r.ConcStepsPerSec }, ""},
		{"peak RSS (DBOS: its process + PostgreSQL)", "MiB", true, func(r Result) float64 { return r.PeakMiB() },
			"peak RSS (process + PostgreSQL, both sides)"},
		{"peak RSS of the process alone (DBOS: without PostgreSQL)", "MiB", true, func(r Result) float64 { return float64(r.ChildPeakKiB) / 1024 },
			"peak RSS of the process alone (without PostgreSQL)"},
		{"start + finish of a run (once per run)", "µs", true, func(r Result) float64 { return r.RunOverheadP50US }, ""},
		{"CPU per step (DBOS: + PostgreSQL)", "µs", true, func(r Result) float64 { return r.CPUPerStepUS() },
			"CPU per step (+ PostgreSQL, both sides)"},
	}
}

func (rep *Report) summarize() {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/dbos-inc/dbos-transact-golang" {
				rep.DBOSVersion = d.Version
			}
		}
	}
	rep.Rows = rep.compare("docket", false)
	rep.PGRows = nil
	if slices.Contains(rep.Config.Sides, "docket-pg") {
		rep.PGRows = rep.compare("docket-pg", true)
	}
}

// compare makes the rows of side against DBOS, round by round.
func (rep *Report) compare(side string, onPG bool) []Row {
	var rows []Row
	for _, w := range rep.Config.Workloads {
		for _, m := range metrics(rep.Config) {
			name := m.name
			if onPG && m.pgName != "" {
				name = m.pgName
			}
			row := Row{Workload: w, Metric: name, Unit: m.unit, Lower: m.lower}
			var dk, db, ratios []float64
			for round := 1; round <= rep.Config.Rounds; round++ {
				a, okA := rep.find(round, w, side)
				b, okB := rep.find(round, w, "dbos")
				if okA {
					dk = append(dk, m.get(a))
				}
				if okB {
					db = append(db, m.get(b))
				}
				if !okA || !okB {
					continue
				}
				x, y := m.get(a), m.get(b)
				if y > 0 {
					ratios = append(ratios, x/y)
					if (m.lower && x < y) || (!m.lower && x > y) {
						row.AheadIn++
					}
				}
			}
			row.RoundsCmp = len(ratios)
			row.Docket, row.DBOS = median(dk), median(db)
			if len(ratios) > 0 {
				row.RatioMin, row.RatioMed, row.RatioMax = slices.Min(ratios), median(ratios), slices.Max(ratios)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func (rep *Report) find(round int, workload, side string) (Result, bool) {
	for _, r := range rep.Results {
		if r.Round == round && r.Workload == workload && r.Side == side {
			return r, true
		}
	}
	return Result{}, false
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func parseFloat(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

// Markdown writes the comparison table.
func (rep *Report) Markdown(w io.Writer) {
	m, pg, c := rep.Machine, rep.Postgres, rep.Config
	fmt.Fprintf(w, "docket vs DBOS Transact %s, %s: %d CPUs (%s), %.1f GiB, %s, Linux %s, %s; load average %.2f at start\n",
		rep.DBOSVersion, rep.Date, m.CPUs, m.CPUModel, m.MemGiB, m.Disk, m.Kernel, m.Go, m.Load1)
	fmt.Fprintf(w, "raw 4 KiB append + fdatasync: p50 %.0f µs, p99 %.0f µs. PostgreSQL %s: fsync=%s, synchronous_commit=%s, wal_sync_method=%s, full_page_writes=%s, shared_buffers=%s; DBOS pool: %s\n",
		m.FsyncUS, m.FsyncP99US, pg.Version, pg.Fsync, pg.SynchronousCommit, pg.WalSyncMethod, pg.FullPageWrites, pg.SharedBuffers, poolDesc(c.DBOSPool))
	fmt.Fprintf(w, "%d rounds (the sides rotating which goes first), runs of %d chained steps: %d runs one at a time, then %d runs in flight × %d each\n",
		c.Rounds, c.Steps, c.SeqRuns, c.Concurrency, c.ConcRuns)
	fmt.Fprintf(w, "soft memory limit (Go runtime): docket child %s, DBOS child %s (-docket-memory-limit; GOMEMLIMIT, when set, applies to every child)\n\n",
		limitLabel(rep.childLimit("docket")), limitLabel(rep.childLimit("dbos")))
	table(w, "docket", rep.Rows)
	if len(rep.PGRows) > 0 {
		fmt.Fprintf(w, "\ndocket on PostgreSQL (ledger/postgres, its default pool of 16 connections) vs DBOS, on the same cluster; memory and CPU include PostgreSQL's on both sides\n\n")
		table(w, "docket-pg", rep.PGRows)
	}
}

// table writes rows of side against DBOS.
func table(w io.Writer, side string, rows []Row) {
	fmt.Fprintf(w, "| workload | figure | %s | DBOS | %s ÷ DBOS (min–median–max) | better | %s ahead |\n", side, side, side)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		better := "higher"
		if r.Lower {
			better = "lower"
		}
		val := func(x float64) string {
			if x == 0 {
				return "—"
			}
			return num(x) + " " + r.Unit
		}
		ratio, ahead := "—", "—"
		if r.RoundsCmp > 0 {
			ratio = fmt.Sprintf("%.2f–**%.2f**–%.2f", r.RatioMin, r.RatioMed, r.RatioMax)
			ahead = fmt.Sprintf("%d of %d rounds", r.AheadIn, r.RoundsCmp)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n",
			r.Workload, r.Metric, val(r.Docket), val(r.DBOS), ratio, better, ahead)
	}
}

func num(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func poolDesc(n int) string {
	if n == 0 {
		return "DBOS's default (20 connections)"
	}
	return fmt.Sprintf("%d connections", n)
}

// childLimit is the soft memory limit the children of side ran with (the
// first one's; they all get the same), or 0 when none of side ran.
func (rep *Report) childLimit(side string) int64 {
	for _, r := range rep.Results {
		if r.Side == side {
			return r.GoMemLimit
		}
	}
	return 0
}
