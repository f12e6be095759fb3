package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childSpec is what a child process runs (passed as JSON in childEnv).
type childSpec struct {
	Side        string `json:"side"`     // "docket", "docket-pg" or "dbos"
	Workload    string `json:"workload"` // "noop" or "http"
	Steps       int    `json:"steps"`
	SeqRuns     int    `json:"seq_runs"`
	Concurrency int    `json:"concurrency"`
	ConcRuns    int    `json:"conc_runs"`
	Warmup      int    `json:"warmup"`
	HTTPURL     string `json:"http_url"`
	Dir         string `json:"dir,omitempty"` // docket: the ledger directory
	DSN         string `json:"dsn,omitempty"` // dbos: the system database; docket-pg: the ledger's database
	// Profiles of the measured window, when set: CPU and heap (pprof).
	CPUProfile string `json:"cpu_profile,omitempty"`
	MemProfile string `json:"mem_profile,omitempty"`
	// MemoryLimit is the soft memory limit the child sets (0: none set,
	// the Go runtime's own from GOMEMLIMIT or unlimited).
	MemoryLimit int64 `json:"memory_limit,omitempty"`
}

// Result is one child's figures (plus, for the sides on PostgreSQL, DBOS and
// docket-pg, PostgreSQL's, added by the parent).
type Result struct {
	Round    int    `json:"round"`
	Side     string `json:"side"`
	Workload string `json:"workload"`
	// Added latency per durable step: from one step's function returning to
	// the next step's function being entered, within a run (sequential phase).
	GapP50US float64 `json:"gap_p50_us"`
	GapP99US float64 `json:"gap_p99_us"`
	// Its mean: what the sequential rate follows, tail included.
	GapMeanUS float64 `json:"gap_mean_us"`
	// Start and end of a run: from the call that starts it to the first step,
	// plus from the last step to the caller getting the result.
	RunOverheadP50US float64 `json:"run_overhead_p50_us"`
	SeqStepsPerSec   float64 `json:"seq_steps_per_s"`
	ConcStepsPerSec  float64 `json:"conc_steps_per_s"`
	// Memory: the child's peak RSS (VmHWM); for DBOS and docket-pg also PostgreSQL's peak
	// proportional set size (postmaster and all its children, sampled).
	ChildPeakKiB int64 `json:"child_peak_kib"`
	// GoMemLimit is the soft memory limit the child ran with (bytes;
	// math.MaxInt64: none).
	GoMemLimit      int64 `json:"go_mem_limit"`
	PostgresPeakKiB int64 `json:"postgres_peak_kib,omitempty"`
	// CPU in the measured window (sequential phase, concurrent warm-up and
	// phase): the child's user+sys time, plus for DBOS and docket-pg
	// PostgreSQL's meanwhile.
	ChildCPUMS    float64 `json:"child_cpu_ms"`
	PostgresCPUMS float64 `json:"postgres_cpu_ms,omitempty"`
	StepsTotal    int     `json:"steps_total"`
	// Every step the child ran, warm-ups included (the parent checks that
	// the endpoint saw exactly this many requests in the http workload).
	StepsRun int `json:"steps_run"`
}

// PeakMiB is the side's whole peak memory.
func (r Result) PeakMiB() float64 { return float64(r.ChildPeakKiB+r.PostgresPeakKiB) / 1024 }

// CPUPerStepUS is the side's whole CPU per durable step.
func (r Result) CPUPerStepUS() float64 {
	if r.StepsTotal == 0 {
		return 0
	}
	return (r.ChildCPUMS + r.PostgresCPUMS) * 1000 / float64(r.StepsTotal)
}

// onPostgres says whether a side keeps its state in the throwaway cluster
// (its CPU and memory count as the side's).
func onPostgres(side string) bool { return side == "dbos" || side == "docket-pg" }

// engine is one side as the child drives it.
type engine interface {
	// run performs one run of steps durable steps, each calling the workload
	// through rec, and returns when the run has completed.
	run(ctx context.Context, id string, steps int) error
	close() error
}

// recorder times the step functions of the sequential phase.
type recorder struct {
	mu         sync.Mutex
	on         bool
	firstEnter time.Time
	lastExit   time.Time
	gaps       []time.Duration
	overheads  []time.Duration
}

func (r *recorder) enter() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	if r.lastExit.IsZero() {
		r.firstEnter = now
	} else {
		r.gaps = append(r.gaps, now.Sub(r.lastExit))
	}
}

func (r *recorder) exit() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.lastExit = now
	}
}

func (r *recorder) begin() {
	r.mu.Lock()
	r.firstEnter, r.lastExit = time.Time{}, time.Time{}
	r.mu.Unlock()
}

func (r *recorder) end(start, done time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on && !r.firstEnter.IsZero() {
		r.overheads = append(r.overheads, r.firstEnter.Sub(start)+done.Sub(r.lastExit))
	}
}

func (r *recorder) set(on bool) {
	r.mu.Lock()
	r.on = on
	r.mu.Unlock()
}

func childMain(specJSON string, stdin io.Reader, stdout io.Writer) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "peers child: bad spec: %v\n", err)
		return 2
	}
	in := bufio.NewReader(stdin)
	res, err := runSide(context.Background(), spec, func(name string) error {
		// Tell the parent, and wait for it, so that what it measures of the
		// database (CPU, memory) covers the same window as the child's own.
		fmt.Fprintf(stdout, "MARK %s\n", name)
		_, err := in.ReadString('\n')
		return err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "peers child (%s, %s): %v\n", spec.Side, spec.Workload, err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "RESULT %s\n", b)
	return 0
}

// runSide opens the side, runs both phases and reports.
//
// mark is called at the start ("start") and end ("end") of the measured
// window: from the end of the first warm-up to the end of the concurrent
// phase, while the side is still up with all its connections open.
func runSide(ctx context.Context, spec childSpec, mark func(name string) error) (Result, error) {
	if mark == nil {
		mark = func(string) error { return nil }
	}
	goMemLimit := applyMemoryLimit(spec.MemoryLimit) // before the side allocates anything
	rec := &recorder{}
	var (
		eng engine
		err error
	)
	switch spec.Side {
	case "docket", "docket-pg":
		eng, err = openDocket(ctx, spec, rec)
	case "dbos":
		eng, err = openDBOS(ctx, spec, rec)
	default:
		err = fmt.Errorf("unknown side %q", spec.Side)
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Side: spec.Side, Workload: spec.Workload, GoMemLimit: goMemLimit}
	closed := false
	defer func() {
		if !closed {
			eng.close()
		}
	}()
	// Every run gets a new id; n counts the runs started, by both phases.
	var (
		mu sync.Mutex
		n  int
	)
	runOne := func(tag string) error {
		mu.Lock()
		n++
		id := fmt.Sprintf("%s-%d", tag, n)
		mu.Unlock()
		return eng.run(ctx, id, spec.Steps)
	}

	// Sequential phase.
	for range spec.Warmup {
		if err := runOne("warm"); err != nil {
			return res, err
		}
	}
	if err := mark("start"); err != nil {
		return res, err
	}
	cpu0, n0 := cpuMS(), n
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	rec.set(true)
	start := time.Now()
	for range spec.SeqRuns {
		rec.begin()
		t0 := time.Now()
		if err := runOne("seq"); err != nil {
			return res, err
		}
		rec.end(t0, time.Now())
	}
	seq := time.Since(start)
	rec.set(false)
	res.SeqStepsPerSec = float64(spec.SeqRuns*spec.Steps) / seq.Seconds()
	res.GapP50US = usQ(rec.gaps, 0.50)
	res.GapP99US = usQ(rec.gaps, 0.99)
	res.GapMeanUS = usMean(rec.gaps)
	res.RunOverheadP50US = usQ(rec.overheads, 0.50)

	// Concurrent phase: spec.Concurrency workers, each spec.ConcRuns runs in turn.
	concurrently := func(runs int, tag string) error {
		var wg sync.WaitGroup
		errs := make(chan error, spec.Concurrency)
		for range spec.Concurrency {
			wg.Go(func() {
				for range runs {
					if err := runOne(tag); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if spec.Warmup > 0 {
		if err := concurrently(1, "cwarm"); err != nil {
			return res, err
		}
	}
	start = time.Now()
	if err := concurrently(spec.ConcRuns, "conc"); err != nil {
		return res, err
	}
	res.ConcStepsPerSec = float64(spec.Concurrency*spec.ConcRuns*spec.Steps) / time.Since(start).Seconds()
	res.ChildCPUMS = cpuMS() - cpu0
	res.StepsTotal = (n - n0) * spec.Steps
	res.StepsRun = n * spec.Steps
	if spec.MemProfile != "" {
		if err := writeHeapProfile(spec.MemProfile); err != nil {
			return res, err
		}
	}
	if err := mark("end"); err != nil {
		return res, err
	}
	closed = true
	if err := eng.close(); err != nil {
		return res, err
	}
	res.ChildPeakKiB = selfPeakKiB()
	return res, nil
}

// writeHeapProfile writes a heap profile and says on stderr how the
// process's memory splits (Go heap, other runtime memory, file-backed pages).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := func(field string) float64 { return float64(statusKiB("/proc/self/status", field)) / 1024 }
	fmt.Fprintf(os.Stderr, "peers child: heap in use %.1f MiB, heap from the OS %.1f MiB, all Go runtime memory %.1f MiB; "+
		"RSS %.1f MiB (anonymous %.1f, file-backed %.1f), peak %.1f MiB\n",
		mib(ms.HeapInuse), mib(ms.HeapSys), mib(ms.Sys), st("VmRSS:"), st("RssAnon:"), st("RssFile:"), st("VmHWM:"))
	return pprof.Lookup("heap").WriteTo(f, 0)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// cpuMS is this process's user+system CPU so far.
func cpuMS() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

func usMean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum) / float64(len(ds)) / float64(time.Microsecond)
}

func usQ(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(float64(len(s))*q))]) / float64(time.Microsecond)
}

// selfPeakKiB is this process's peak resident set (VmHWM).
func selfPeakKiB() int64 { return statusKiB("/proc/self/status", "VmHWM:") }

func statusKiB(path, field string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kib int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kib)
			return kib
		}
	}
	return 0
}

// runChild runs one side in a child process. While a child on PostgreSQL
// (DBOS, docket-pg) runs, the parent samples PostgreSQL's memory and CPU.
func runChild(ctx context.Context, exe string, spec childSpec, pg *postgres, log io.Writer) (Result, error) {
	b, _ := json.Marshal(spec)
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.Stderr = log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return Result{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	var mon *pgMonitor
	if onPostgres(spec.Side) {
		mon = pg.monitor()
	}
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	var res Result
	got := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "MARK "):
			if mon != nil {
				mon.mark(strings.TrimPrefix(line, "MARK "))
			}
			io.WriteString(stdin, "ok\n")
		case strings.HasPrefix(line, "RESULT "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &res); err != nil {
				return res, fmt.Errorf("child result: %w", err)
			}
			got = true
		default:
			fmt.Fprintln(log, line)
		}
	}
	werr := cmd.Wait()
	if mon != nil {
		res.PostgresPeakKiB, res.PostgresCPUMS = mon.stop()
	}
	if werr != nil {
		return res, fmt.Errorf("child: %w", werr)
	}
	if !got {
		return res, fmt.Errorf("child exited without a result")
	}
	return res, nil
}
