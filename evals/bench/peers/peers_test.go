package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/testextra"
)

// The test binary is also the child: Run re-executes it with childEnv set.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// TestSmoke runs the whole benchmark small: one round of each workload, all
// three sides (docket on Badger, docket on PostgreSQL, DBOS), on a real
// throwaway cluster, so that the program cannot rot. Without PostgreSQL's
// server binaries it skips, or fails where extras are required (CI=true,
// DOCKET_REQUIRE_EXTRAS=1).
func TestSmoke(t *testing.T) {
	if _, err := findPostgres(""); errors.Is(err, ErrNoPostgres) {
		testextra.Missing(t, "PostgreSQL's server binaries (initdb and pg_ctl on PATH or in /usr/lib/postgresql/*/bin), needed by the docket vs DBOS smoke run",
			"apt-get install -y postgresql (Debian's package; `make test` installs it when it runs as root or with passwordless sudo)")
	}
	var log bytes.Buffer
	cfg := Config{Rounds: 1, Steps: 3, SeqRuns: 4, Concurrency: 4, ConcRuns: 2, Warmup: 1,
		Workloads: []string{"noop", "http"}, Sides: []string{"docket", "docket-pg", "dbos"}, Log: &log,
		DocketMemoryLimit: 200 << 20}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if rep.Postgres.Fsync != "on" || rep.Postgres.SynchronousCommit != "on" {
		t.Errorf("cluster not durable: %+v", rep.Postgres)
	}
	if rep.DBOSVersion == "" {
		t.Error("the report does not name the DBOS version")
	}
	if len(rep.Results) != 6 {
		t.Fatalf("got %d results, want 6 (2 workloads × 3 sides)", len(rep.Results))
	}
	// Measured steps: the sequential runs, the concurrent warm-up (one run
	// per worker) and the concurrent runs.
	wantSteps := (cfg.SeqRuns + cfg.Concurrency + cfg.Concurrency*cfg.ConcRuns) * cfg.Steps
	for _, r := range rep.Results {
		where := r.Workload + "/" + r.Side
		for name, v := range map[string]float64{
			"gap p50": r.GapP50US, "gap p99": r.GapP99US, "gap mean": r.GapMeanUS, "run overhead": r.RunOverheadP50US,
			"sequential rate": r.SeqStepsPerSec, "concurrent rate": r.ConcStepsPerSec,
			"child peak": float64(r.ChildPeakKiB), "child CPU": r.ChildCPUMS,
		} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s: %s = %v, want a positive figure", where, name, v)
			}
		}
		if r.GapP99US < r.GapP50US {
			t.Errorf("%s: p99 %v below p50 %v", where, r.GapP99US, r.GapP50US)
		}
		if r.StepsTotal != wantSteps {
			t.Errorf("%s: %d steps measured, want %d", where, r.StepsTotal, wantSteps)
		}
		if r.StepsRun != wantSteps+cfg.Warmup*cfg.Steps {
			t.Errorf("%s: %d steps run, want %d", where, r.StepsRun, wantSteps+cfg.Warmup*cfg.Steps)
		}
		if (r.Side == "dbos" || r.Side == "docket-pg") && (r.PostgresPeakKiB <= 0 || r.PostgresCPUMS <= 0) {
			t.Errorf("%s: PostgreSQL's memory %d KiB, CPU %v ms: the cluster was not measured", where, r.PostgresPeakKiB, r.PostgresCPUMS)
		}
		if r.Side == "docket" && (r.PostgresPeakKiB != 0 || r.PostgresCPUMS != 0) {
			t.Errorf("%s: PostgreSQL's figures charged to docket", where)
		}
		// The docket child runs under -docket-memory-limit, the others under
		// the runtime's default (GOMEMLIMIT, when set, for every child).
		wantLimit := int64(math.MaxInt64)
		if env := os.Getenv("GOMEMLIMIT"); env != "" {
			wantLimit = r.GoMemLimit // the runtime's parse of it; checked for being the same for every side below
		} else if r.Side == "docket" {
			wantLimit = cfg.DocketMemoryLimit
		}
		if r.GoMemLimit != wantLimit || r.GoMemLimit != rep.Results[0].GoMemLimit && os.Getenv("GOMEMLIMIT") != "" {
			t.Errorf("%s: ran with soft memory limit %d, want %d", where, r.GoMemLimit, wantLimit)
		}
	}
	if len(rep.Rows) != 2*len(metrics(cfg)) {
		t.Fatalf("got %d rows, want %d", len(rep.Rows), 2*len(metrics(cfg)))
	}
	if len(rep.PGRows) != 2*len(metrics(cfg)) {
		t.Fatalf("got %d docket-pg rows, want %d", len(rep.PGRows), 2*len(metrics(cfg)))
	}
	for _, r := range rep.PGRows {
		if !(r.Docket > 0) || !(r.DBOS > 0) || r.RoundsCmp != 1 {
			t.Errorf("docket-pg row %+v: want both medians and one round compared", r)
		}
	}
	var out bytes.Buffer
	rep.Markdown(&out)
	for _, want := range []string{"| workload | figure | docket | DBOS |", "| noop | added latency per step, median |",
		"| http | steps/s, 4 runs in flight |", "fsync=on, synchronous_commit=on",
		"| workload | figure | docket-pg | DBOS |", "| noop | CPU per step (+ PostgreSQL, both sides) |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if os.Getenv("GOMEMLIMIT") == "" && !strings.Contains(out.String(), "soft memory limit (Go runtime): docket child 200 MiB, DBOS child none") {
		t.Errorf("report does not say which soft memory limit each child ran with:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}

// TestDocketMemoryLimit: which children get -docket-memory-limit, and how
// the flag reads.
func TestDocketMemoryLimit(t *testing.T) {
	none := func(string) string { return "" }
	set := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1GiB"
		}
		return ""
	}
	for _, c := range []struct {
		side   string
		limit  int64
		getenv func(string) string
		want   int64
	}{
		{"docket", 128 << 20, none, 128 << 20},
		{"docket", 128 << 20, set, 0}, // GOMEMLIMIT wins: the runtime already applied it
		{"docket", math.MaxInt64, none, 0},
		{"docket", 0, none, 0},
		{"dbos", 128 << 20, none, 0},
		{"docket-pg", 128 << 20, none, 0},
	} {
		if got := docketMemoryLimit(c.side, c.limit, c.getenv); got != c.want {
			t.Errorf("docketMemoryLimit(%s, %d, GOMEMLIMIT=%q) = %d, want %d", c.side, c.limit, c.getenv("GOMEMLIMIT"), got, c.want)
		}
	}
	for in, want := range map[string]int64{"128MiB": 128 << 20, "1GiB": 1 << 30, "64 MiB": 64 << 20, "1048576": 1 << 20, "off": math.MaxInt64} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5MiB", "lots", "12TB", "9999999999GiB"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
	var stderr bytes.Buffer
	if code := parentMain([]string{"-docket-memory-limit", "lots"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "docket-memory-limit") {
		t.Errorf("-docket-memory-limit lots: exit %d, stderr %q; want 2 and a message naming the flag", code, stderr.String())
	}
}

func TestSummarize(t *testing.T) {
	res := func(round int, side string, gap, rate float64, peak, pg int64) Result {
		return Result{Round: round, Side: side, Workload: "noop", GapP50US: gap, SeqStepsPerSec: rate,
			ChildPeakKiB: peak, PostgresPeakKiB: pg}
	}
	rep := &Report{Config: Config{Rounds: 3, Workloads: []string{"noop"}}, Results: []Result{
		res(1, "docket", 100, 2000, 1024, 0), res(1, "dbos", 200, 1000, 1024, 1024),
		res(2, "dbos", 100, 1000, 1024, 1024), res(2, "docket", 300, 500, 4096, 0),
		res(3, "docket", 50, 4000, 1024, 0), res(3, "dbos", 100, 1000, 1024, 1024),
	}}
	rep.summarize()
	row := func(prefix string) Row {
		for _, r := range rep.Rows {
			if strings.HasPrefix(r.Metric, prefix) {
				return r
			}
		}
		t.Fatalf("no row %q", prefix)
		return Row{}
	}
	gap := row("added latency per step, median")
	if gap.RatioMin != 0.5 || gap.RatioMed != 0.5 || gap.RatioMax != 3 || gap.AheadIn != 2 || gap.RoundsCmp != 3 {
		t.Errorf("gap row %+v: want ratios 0.5–0.5–3, ahead in 2 of 3", gap)
	}
	if gap.Docket != 100 || gap.DBOS != 100 {
		t.Errorf("gap medians %v, %v: want 100, 100", gap.Docket, gap.DBOS)
	}
	rate := row("sequential")
	if rate.RatioMin != 0.5 || rate.RatioMed != 2 || rate.RatioMax != 4 || rate.AheadIn != 2 || rate.Lower {
		t.Errorf("rate row %+v: want 0.5–2–4, higher is better, ahead in 2", rate)
	}
	peak := row("peak RSS (DBOS")
	if peak.RatioMed != 0.5 || peak.DBOS != 2 || peak.AheadIn != 2 {
		t.Errorf("peak row %+v: DBOS's peak must include PostgreSQL's (2 MiB), ratio 0.5", peak)
	}
	alone := row("peak RSS of the process alone")
	if alone.RatioMed != 1 || alone.AheadIn != 0 {
		t.Errorf("process-alone row %+v: want ratio 1, never ahead", alone)
	}
}

func TestConfigErrors(t *testing.T) {
	cfg := defaultConfig()
	cfg.Rounds, cfg.Steps, cfg.Workloads = 0, -1, []string{"noop", "grpc"}
	err := cfg.validate()
	for _, want := range []string{"-rounds 0", "-steps -1", `unknown workload "grpc"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want it to mention %s", err, want)
		}
	}
	if _, err := findPostgres(t.TempDir()); !errors.Is(err, ErrNoPostgres) {
		t.Errorf("findPostgres(empty dir) = %v, want ErrNoPostgres", err)
	}
	var stderr bytes.Buffer
	if code := parentMain([]string{"-pg-bin", t.TempDir(), "-rounds", "1"}, &bytes.Buffer{}, &stderr); code != 3 {
		t.Errorf("exit code %d without PostgreSQL, want 3; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "install Debian's postgresql package") {
		t.Errorf("stderr does not say what to do: %s", stderr.String())
	}
}

// TestReportJSON checks that -json writes the rows and every child's result.
func TestReportJSON(t *testing.T) {
	rep := &Report{Config: Config{Rounds: 1, Workloads: []string{"http"}}, Results: []Result{
		{Round: 1, Side: "docket", Workload: "http", GapP50US: 1}, {Round: 1, Side: "dbos", Workload: "http", GapP50US: 2},
	}}
	rep.summarize()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 2 || len(back.Rows) != len(metrics(rep.Config)) || back.Rows[0].RatioMed != 0.5 {
		t.Errorf("round trip lost data: %s", b)
	}
}

// TestSummarizePostgresSide checks the second table: docket-pg against DBOS,
// with PostgreSQL's memory counted on both sides, and no docket-pg rows
// without that side.
func TestSummarizePostgresSide(t *testing.T) {
	res := func(round int, side string, gap float64, peak, pg int64, cpu, pgCPU float64) Result {
		return Result{Round: round, Side: side, Workload: "noop", GapP50US: gap,
			ChildPeakKiB: peak, PostgresPeakKiB: pg, ChildCPUMS: cpu, PostgresCPUMS: pgCPU, StepsTotal: 1000}
	}
	rep := &Report{Config: Config{Rounds: 2, Workloads: []string{"noop"}, Sides: allSides}, Results: []Result{
		res(1, "docket", 100, 4096, 0, 100, 0), res(1, "docket-pg", 300, 1024, 2048, 200, 400), res(1, "dbos", 200, 1024, 1024, 100, 300),
		res(2, "dbos", 200, 1024, 1024, 100, 300), res(2, "docket-pg", 100, 1024, 1024, 100, 100), res(2, "docket", 100, 4096, 0, 100, 0),
	}}
	rep.summarize()
	if len(rep.Rows) != len(metrics(rep.Config)) || len(rep.PGRows) != len(metrics(rep.Config)) {
		t.Fatalf("%d rows and %d docket-pg rows, want %d each", len(rep.Rows), len(rep.PGRows), len(metrics(rep.Config)))
	}
	row := func(prefix string) Row {
		for _, r := range rep.PGRows {
			if strings.HasPrefix(r.Metric, prefix) {
				return r
			}
		}
		t.Fatalf("no docket-pg row %q", prefix)
		return Row{}
	}
	gap := row("added latency per step, median")
	if gap.RatioMin != 0.5 || gap.RatioMax != 1.5 || gap.AheadIn != 1 || gap.RoundsCmp != 2 || gap.Docket != 200 {
		t.Errorf("gap row %+v: want docket-pg's figures (median 200) against DBOS's, ratios 0.5–1.5, ahead in 1 of 2", gap)
	}
	peak := row("peak RSS (process + PostgreSQL, both sides)")
	if peak.RatioMin != 1 || peak.RatioMax != 1.5 || peak.AheadIn != 0 {
		t.Errorf("peak row %+v: docket-pg's peak must include PostgreSQL's (3 and 2 MiB against 2)", peak)
	}
	cpu := row("CPU per step (+ PostgreSQL, both sides)")
	if cpu.RatioMin != 0.5 || cpu.RatioMax != 1.5 {
		t.Errorf("CPU row %+v: want 200/400 and 600/400 µs per step", cpu)
	}
	var out bytes.Buffer
	rep.Markdown(&out)
	if !strings.Contains(out.String(), "| workload | figure | docket-pg | DBOS | docket-pg ÷ DBOS") {
		t.Errorf("no docket-pg table:\n%s", out.String())
	}

	rep.Config.Sides = []string{"docket", "dbos"}
	rep.summarize()
	if len(rep.PGRows) != 0 {
		t.Errorf("%d docket-pg rows without the docket-pg side", len(rep.PGRows))
	}
}
