// Command peers measures docket's executor side by side with DBOS Transact
// (Go, on PostgreSQL) on the same machine, in one run, so that the machine's
// noise falls on every side alike. docket runs twice: on its Badger ledger
// (side "docket") and on the shared ledger in the same PostgreSQL cluster as
// DBOS (side "docket-pg", ledger/postgres).
//
// It starts a throwaway PostgreSQL cluster (initdb into a temporary directory,
// pg_ctl start on a free loopback port, durability settings left at their
// defaults), a loopback HTTP endpoint, and then, round after round, alternates
// a docket child process, a docket-pg child process and a DBOS child process
// (the order rotating round by round) over the same workloads:
//
//   - noop: each durable step calls an in-process function that returns at once
//     (docket: a keyed tool; DBOS: a step);
//   - http: each durable step POSTs to the same loopback endpoint (docket: a
//     keyed HTTP tool from a tools file, sending its Idempotency-Key; DBOS: a
//     step that does the same POST with the same header).
//
// Every child runs a sequential phase (one run at a time, each a chain of
// -steps steps) and a concurrent phase (-concurrency runs in flight), and
// reports the added latency per durable step, the step rates and its peak
// RSS. The memory and CPU of the sides on PostgreSQL (DBOS, docket-pg) are
// their process's plus PostgreSQL's (proportional set size of the postmaster
// and its children; their CPU over the same window). The report gives ratios
// docket ÷ DBOS and docket-pg ÷ DBOS per round, as min–median–max.
//
//	cd evals/bench/peers && go run . -rounds 5
//
// Each side runs in its own process so that its peak RSS is its own. The
// docket child runs under the soft memory limit ledger/badgerdb tells
// embedders to set (-docket-memory-limit, 96MiB; off for none); the others
// under the Go runtime's default (GOMEMLIMIT, when set, applies to all).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// childEnv carries a child's spec (JSON); its presence makes the program a child.
const childEnv = "DOCKET_PEERS_CHILD"

// Config is one benchmark invocation.
type Config struct {
	Rounds      int       // A/B rounds
	Steps       int       // durable steps per run (a chain)
	SeqRuns     int       // runs in the sequential phase
	Concurrency int       // runs in flight in the concurrent phase
	ConcRuns    int       // runs per concurrent worker
	Warmup      int       // unmeasured runs before each phase
	Workloads   []string  // "noop", "http"
	Sides       []string  // "docket", "docket-pg", "dbos" (all by default; without dbos there are no ratios)
	DBOSPool    int       // DBOS's pgx pool size (pool_max_conns); 0 leaves DBOS's default (20)
	PGBin       string    // directory of initdb/pg_ctl; "" finds them
	Dir         string    // work directory; "" makes a temporary one
	Keep        bool      `json:"-"` // keep the work directory
	JSONOut     string    // also write the raw results as JSON here
	ProfileDir  string    // write each child's CPU and heap profiles here
	Exe         string    `json:"-"` // program to run as a child; "" is this executable
	Log         io.Writer `json:"-"`

	// DocketMemoryLimit is the docket child's soft memory limit in bytes
	// when GOMEMLIMIT is unset (default 96 MiB, what ledger/badgerdb tells
	// embedders to set; 0 or math.MaxInt64: none).
	DocketMemoryLimit int64
}

// allSides are the sides, in the order of the first round.
var allSides = []string{"docket", "docket-pg", "dbos"}

func defaultConfig() Config {
	return Config{
		Rounds: 5, Steps: 10, SeqRuns: 200, Concurrency: 64, ConcRuns: 30, Warmup: 5,
		Workloads: []string{"noop", "http"}, Sides: []string{"docket", "docket-pg", "dbos"}, Log: os.Stderr,
		DocketMemoryLimit: defaultDocketMemoryLimit,
	}
}

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec, os.Stdin, os.Stdout))
	}
	os.Exit(parentMain(os.Args[1:], os.Stdout, os.Stderr))
}

func parentMain(args []string, stdout, stderr io.Writer) int {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds (the sides rotate which goes first)")
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "durable steps per run (each depends on the previous one)")
	fs.IntVar(&cfg.SeqRuns, "seq-runs", cfg.SeqRuns, "runs in the sequential phase")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "runs in flight in the concurrent phase")
	fs.IntVar(&cfg.ConcRuns, "conc-runs", cfg.ConcRuns, "runs per worker in the concurrent phase")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured runs before each phase")
	workloads := fs.String("workloads", strings.Join(cfg.Workloads, ","), "comma-separated: noop, http")
	sides := fs.String("sides", strings.Join(cfg.Sides, ","), "comma-separated: docket (Badger ledger), docket-pg (ledger on PostgreSQL), dbos (one side alone is for profiling it: no ratios)")
	fs.IntVar(&cfg.DBOSPool, "dbos-pool", cfg.DBOSPool, "DBOS's connection pool size (0: DBOS's default, 20 connections, which served it better than 64 here)")
	memLimit := fs.String("docket-memory-limit", fmt.Sprintf("%dMiB", cfg.DocketMemoryLimit>>20), "soft memory limit of the docket child when GOMEMLIMIT is unset (96MiB, 1GiB, off; the DBOS and docket-pg children keep the Go runtime's default)")
	fs.StringVar(&cfg.PGBin, "pg-bin", "", "directory holding initdb and pg_ctl (default: PATH, then /usr/lib/postgresql/*/bin)")
	fs.StringVar(&cfg.Dir, "dir", "", "work directory (default: a new temporary directory, removed at the end)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory")
	fs.StringVar(&cfg.JSONOut, "json", "", "also write every round's raw figures to this file")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "write each child's CPU and heap profile (pprof) of the measured window to this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "peers: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Workloads = strings.Split(*workloads, ",")
	cfg.Sides = strings.Split(*sides, ",")
	limit, err := parseMemoryLimit(*memLimit)
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 2
	}
	cfg.DocketMemoryLimit = limit
	cfg.Log = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		if errors.Is(err, ErrNoPostgres) {
			return 3
		}
		return 1
	}
	rep.Markdown(stdout)
	if cfg.JSONOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.JSONOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "peers: %v\n", err)
			return 1
		}
	}
	return 0
}

func (cfg Config) validate() error {
	var errs []error
	for name, v := range map[string]int{"rounds": cfg.Rounds, "steps": cfg.Steps, "seq-runs": cfg.SeqRuns,
		"concurrency": cfg.Concurrency, "conc-runs": cfg.ConcRuns} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("-%s %d: must be at least 1", name, v))
		}
	}
	if cfg.DBOSPool < 0 {
		errs = append(errs, fmt.Errorf("-dbos-pool %d: must not be negative", cfg.DBOSPool))
	}
	if cfg.Warmup < 0 {
		errs = append(errs, fmt.Errorf("-warmup %d: must not be negative", cfg.Warmup))
	}
	for _, s := range cfg.Sides {
		if !slices.Contains(allSides, s) {
			errs = append(errs, fmt.Errorf("-sides: unknown side %q (want docket, docket-pg or dbos)", s))
		}
	}
	if len(cfg.Sides) == 0 {
		errs = append(errs, errors.New("-sides: none given"))
	}
	if len(cfg.Workloads) == 0 {
		errs = append(errs, errors.New("-workloads: none given"))
	}
	for _, w := range cfg.Workloads {
		if w != "noop" && w != "http" {
			errs = append(errs, fmt.Errorf("-workloads: unknown workload %q (want noop or http)", w))
		}
	}
	return errors.Join(errs...)
}

// Run runs the whole benchmark: cluster, rounds, report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Sides == nil {
		cfg.Sides = defaultConfig().Sides
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Exe = exe
	}
	bins, err := findPostgres(cfg.PGBin)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "docket-peers-"); err != nil {
			return nil, err
		}
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if cfg.ProfileDir != "" {
		if cfg.ProfileDir, err = filepath.Abs(cfg.ProfileDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	// The cluster may run as another user (initdb refuses root): let it in.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}

	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, "peers: "+format+"\n", a...) }
	rep := &Report{Date: time.Now().UTC().Format("2006-01-02"), Config: cfg, Machine: describeMachine(dir)}

	logf("raw fsync reference in %s", dir)
	if rep.Machine.FsyncUS, rep.Machine.FsyncP99US, err = rawFsync(dir, 1000); err != nil {
		return nil, err
	}
	logf("starting PostgreSQL from %s", bins)
	pg, err := startPostgres(ctx, bins, filepath.Join(dir, "pg"), cfg.Log)
	if err != nil {
		return nil, err
	}
	defer pg.Stop()
	if rep.Postgres, err = pg.Settings(ctx); err != nil {
		return nil, err
	}
	logf("PostgreSQL %s on 127.0.0.1:%d (fsync=%s, synchronous_commit=%s, wal_sync_method=%s)",
		rep.Postgres.Version, pg.Port, rep.Postgres.Fsync, rep.Postgres.SynchronousCommit, rep.Postgres.WalSyncMethod)

	srv, err := startEndpoint()
	if err != nil {
		return nil, err
	}
	defer srv.Close()

	for r := range cfg.Rounds {
		for wi, w := range cfg.Workloads {
			// The sides take turns going first (with two, they alternate).
			var order []string
			for _, s := range allSides {
				if slices.Contains(cfg.Sides, s) {
					order = append(order, s)
				}
			}
			k := (r + wi) % len(order)
			order = append(order[k:], order[:k]...)
			for _, side := range order {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				spec := childSpec{
					Side: side, Workload: w, Steps: cfg.Steps, SeqRuns: cfg.SeqRuns,
					Concurrency: cfg.Concurrency, ConcRuns: cfg.ConcRuns, Warmup: cfg.Warmup,
					HTTPURL: srv.URL + "/step",
					// Only the docket side: what an embedder following
					// ledger/badgerdb's documentation sets.
					MemoryLimit: docketMemoryLimit(side, cfg.DocketMemoryLimit, os.Getenv),
				}
				if cfg.ProfileDir != "" {
					base := filepath.Join(cfg.ProfileDir, fmt.Sprintf("r%d-%s-%s", r+1, w, side))
					spec.CPUProfile, spec.MemProfile = base+".cpu.pprof", base+".heap.pprof"
				}
				switch side {
				case "docket":
					spec.Dir = filepath.Join(dir, fmt.Sprintf("ledger-r%d-%s", r, w))
				case "dbos":
					spec.DSN = pg.DSN(fmt.Sprintf("dbos_r%d_%s", r, w), cfg.DBOSPool)
				case "docket-pg":
					// A fresh database, as DBOS gets; the ledger's pool keeps
					// its default size (16 connections, ledger/postgres.DefaultMaxConns).
					db := fmt.Sprintf("docket_r%d_%s", r, w)
					if err := pg.CreateDB(ctx, db); err != nil {
						return nil, err
					}
					spec.DSN = pg.DSN(db, 0)
				}
				posts0, keys0 := srv.posts.Load(), srv.keys.Load()
				res, err := runChild(ctx, cfg.Exe, spec, pg, cfg.Log)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s, %s: %w", r+1, w, side, err)
				}
				// Both sides must have done the same work: one request per step, with its key.
				if w == "http" {
					posts, keys := srv.posts.Load()-posts0, srv.keys.Load()-keys0
					if posts != int64(res.StepsRun) || keys != posts {
						return nil, fmt.Errorf("round %d, %s: the endpoint saw %d requests (%d with an Idempotency-Key) for %d steps",
							r+1, side, posts, keys, res.StepsRun)
					}
				}
				res.Round = r + 1
				rep.Results = append(rep.Results, res)
				logf("round %d %-4s %-9s gap p50 %6.0f µs p99 %6.0f µs mean %6.0f µs, seq %6.0f steps/s, %d in flight %6.0f steps/s, peak %5.1f MiB, cpu %5.0f µs/step",
					r+1, w, side, res.GapP50US, res.GapP99US, res.GapMeanUS, res.SeqStepsPerSec, cfg.Concurrency, res.ConcStepsPerSec,
					res.PeakMiB(), res.CPUPerStepUS())
				if side == "docket" {
					os.RemoveAll(spec.Dir)
				}
			}
		}
	}
	rep.summarize()
	return rep, nil
}
