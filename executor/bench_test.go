package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/tooltest"
)

// Benchmarks of the executor's overhead on a durable ledger (real clock, real
// fsync). Each round interleaves, in the same temp dir:
//   - the executor driving a chain of benchChain actions (each depends on the
//     previous one) of a no-op keyed tool;
//   - the ledger alone doing what one action minimally needs: Claim then
//     Succeed as two synced Apply calls;
//   - a raw loop of 4 KiB appends + fdatasync.
//
// Reported per action: exec_us (wall time of the chain / actions), gap_p50_us
// and gap_p99_us (from the end of one call to the start of the next: what the
// executor adds between two actions), ledger2_us, fsync_us and the ratios
// exec/ledger2 (target <= 1.3) and exec/fsync, and gap/sync_p50, gap/sync_p99
// (the gaps against the raw loop's single appends+fdatasync, same rounds).
//
//	go test -run '^$' -bench . -benchtime 20x ./executor/

const benchChain = 32

type benchEnv struct {
	dir  string
	led  ledger.Store
	eng  *Engine
	raw  *os.File
	gaps []time.Duration
	// syncs are the raw loop's appends+fdatasync, one by one.
	syncs []time.Duration

	mu      sync.Mutex
	callEnd time.Time
	gapOn   bool
}

// noopTool is an in-process keyed tool that returns at once and measures the
// gap since the previous call of the chain returned.
func (be *benchEnv) noopTool() tools.Tool {
	return &tooltest.Tool{SpecValue: spec("noop", tools.Keyed), CallFunc: func(ctx context.Context, c tools.Call) (json.RawMessage, error) {
		be.markStart()
		defer be.markEnd()
		return json.RawMessage(`{"ok":true}`), nil
	}}
}

func (be *benchEnv) markStart() {
	be.mu.Lock()
	if be.gapOn && !be.callEnd.IsZero() {
		be.gaps = append(be.gaps, time.Since(be.callEnd))
	}
	be.mu.Unlock()
}

func (be *benchEnv) markEnd() {
	be.mu.Lock()
	be.callEnd = time.Now()
	be.mu.Unlock()
}

func newBenchEnv(b *testing.B, ts func(be *benchEnv) []tools.Tool, parallelism int) *benchEnv {
	b.Helper()
	be := &benchEnv{dir: b.TempDir()}
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: filepath.Join(be.dir, "ledger"), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	be.led = l
	b.Cleanup(func() { l.Close() })
	reg, err := tools.NewRegistry(ts(be)...)
	if err != nil {
		b.Fatal(err)
	}
	be.eng, err = New(Config{Ledger: l, Tools: reg, Logger: quietLogger(), Parallelism: parallelism})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(be.dir, "raw.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	be.raw = f
	b.Cleanup(func() { f.Close() })
	return be
}

func chainPlan(tool string, n int) *plan.Plan {
	p := &plan.Plan{Goal: "bench"}
	for i := range n {
		a := plan.Action{ID: fmt.Sprintf("a%d", i), Tool: tool, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if i > 0 {
			a.DependsOn = []string{fmt.Sprintf("a%d", i-1)}
		}
		p.Actions = append(p.Actions, a)
	}
	return p
}

func fanPlan(tool string, n int) *plan.Plan {
	p := &plan.Plan{Goal: "bench"}
	for i := range n {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: tool, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	return p
}

// runPlan drives p as a new run and returns its wall time.
func (be *benchEnv) runPlan(b *testing.B, runID string, p *plan.Plan) time.Duration {
	start := time.Now()
	doc, err := be.eng.Run(context.Background(), runID, p, &RunOptions{Policy: PolicyAll})
	d := time.Since(start)
	if err != nil || doc.Run.Status != ledger.RunCompleted {
		b.Fatalf("run %s: %v (status %s %s)", runID, err, doc.Run.Status, doc.Run.Error)
	}
	return d
}

// ledgerPairs does n × (Claim, Succeed) as two Apply calls each and returns
// the total time of the pairs.
func (be *benchEnv) ledgerPairs(b *testing.B, runID string, n int) time.Duration {
	ctx := context.Background()
	p := fanPlan("noop", n)
	p.RunID = runID
	h, _ := plan.Hash(p)
	rows := make([]ledger.Action, n)
	for i, a := range p.Actions {
		rows[i] = ledger.Action{ID: a.ID, Tool: a.Tool, Class: "keyed", Status: ledger.StatusApproved, Args: a.Args}
	}
	if _, _, err := be.led.CreateRun(ctx, ledger.Run{ID: runID, Status: ledger.RunRunning, Policy: "all", PlanHash: h}, p, rows); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, a := range p.Actions {
		key, _ := plan.Key(runID, a.ID, a.Tool, a.Args)
		start := time.Now()
		res, err := be.led.Apply(ctx, ledger.Claim(runID, a.ID, a.Tool, key, a.Args, 1))
		if err != nil || res[0].Err != nil {
			b.Fatalf("claim: %v %v", err, res)
		}
		res, err = be.led.Apply(ctx, ledger.Succeed(key, 1, json.RawMessage(`{"ok":true}`)))
		if err != nil || res[0].Err != nil {
			b.Fatalf("succeed: %v %v", err, res)
		}
		total += time.Since(start)
	}
	return total
}

var block4k = make([]byte, 4096)

// fsyncs appends 4 KiB and fdatasyncs, n times.
func (be *benchEnv) fsyncs(b *testing.B, n int) time.Duration {
	start := time.Now()
	for range n {
		one := time.Now()
		if _, err := be.raw.Write(block4k); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(be.raw.Fd())); err != nil {
			b.Fatal(err)
		}
		be.syncs = append(be.syncs, time.Since(one))
	}
	return time.Since(start)
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// benchSequential reports the per-action overhead of a chain against the
// ledger's two synced commits and a raw fsync, interleaved round by round.
func benchSequential(b *testing.B, ts func(be *benchEnv) []tools.Tool, tool string) {
	be := newBenchEnv(b, ts, 8)
	var exec, led, raw time.Duration
	actions := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.mu.Lock()
		be.callEnd, be.gapOn = time.Time{}, true
		be.mu.Unlock()
		exec += be.runPlan(b, fmt.Sprintf("seq-%d", i), chainPlan(tool, benchChain))
		be.mu.Lock()
		be.gapOn = false
		be.mu.Unlock()
		led += be.ledgerPairs(b, fmt.Sprintf("led-%d", i), benchChain)
		raw += be.fsyncs(b, benchChain)
		actions += benchChain
	}
	b.StopTimer()
	n := time.Duration(actions)
	b.ReportMetric(us(exec/n), "exec_us/action")
	b.ReportMetric(float64(actions)/exec.Seconds(), "actions/s")
	b.ReportMetric(us(pct(be.gaps, 0.5)), "gap_p50_us")
	b.ReportMetric(us(pct(be.gaps, 0.99)), "gap_p99_us")
	// Added latency per step against one raw 4 KiB append+fdatasync of the
	// same rounds: targets <= 1.3 at p50 and <= 2 at p99.
	b.ReportMetric(float64(pct(be.gaps, 0.5))/float64(pct(be.syncs, 0.5)), "gap/sync_p50")
	b.ReportMetric(float64(pct(be.gaps, 0.99))/float64(pct(be.syncs, 0.99)), "gap/sync_p99")
	b.ReportMetric(us(led/n), "ledger2_us/action")
	b.ReportMetric(us(raw/n), "fsync_us")
	b.ReportMetric(float64(exec)/float64(led), "exec/ledger2")
	b.ReportMetric(float64(exec)/float64(raw), "exec/fsync")
	b.ReportMetric(0, "ns/op")
}

// benchParallel reports the throughput of 64 independent actions against a
// chain of 64 on the same ledger, interleaved.
func benchParallel(b *testing.B, ts func(be *benchEnv) []tools.Tool, tool string) {
	const n = 64
	be := newBenchEnv(b, ts, n)
	var par, seq, raw time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		par += be.runPlan(b, fmt.Sprintf("par-%d", i), fanPlan(tool, n))
		seq += be.runPlan(b, fmt.Sprintf("seq-%d", i), chainPlan(tool, n))
		raw += be.fsyncs(b, n)
	}
	b.StopTimer()
	actions := float64(n * b.N)
	b.ReportMetric(actions/par.Seconds(), "par_actions/s")
	b.ReportMetric(actions/seq.Seconds(), "seq_actions/s")
	b.ReportMetric(float64(seq)/float64(par), "par/seq")
	b.ReportMetric(actions/raw.Seconds(), "fsyncs/s")
	b.ReportMetric(0, "ns/op")
}

func inProcess(be *benchEnv) []tools.Tool { return []tools.Tool{be.noopTool()} }

// overHTTP is a keyed httptool tool against an httptest server on loopback.
func overHTTP(b *testing.B) func(be *benchEnv) []tools.Tool {
	return func(be *benchEnv) []tools.Tool {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			be.markStart()
			defer be.markEnd()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true}`))
		}))
		b.Cleanup(srv.Close)
		file := `{"version":1,"tools":[{"name":"hnoop","description":"noop","effect":"keyed","input_schema":{"type":"object"},
			"request":{"method":"POST","url":"` + srv.URL + `/noop"},"key_header":"Idempotency-Key","timeout":"5s"}]}`
		f, err := httptool.Parse([]byte(file), func(string) string { return "" })
		if err != nil {
			b.Fatal(err)
		}
		return f.Tools
	}
}

func BenchmarkSequentialInProcess(b *testing.B) { benchSequential(b, inProcess, "noop") }
func BenchmarkParallel64InProcess(b *testing.B) { benchParallel(b, inProcess, "noop") }
func BenchmarkSequentialHTTP(b *testing.B)      { benchSequential(b, overHTTP(b), "hnoop") }
func BenchmarkParallel64HTTP(b *testing.B)      { benchParallel(b, overHTTP(b), "hnoop") }

// BenchmarkRuns64InFlight compares, on one ledger, runs of a chain of 10
// no-op keyed actions driven one at a time with the same runs driven 64 at
// a time (each of 64 goroutines drives its runs one after another), in turn
// within each round. x_sequential = (steps/s with 64 in flight) / (steps/s
// one at a time); the target is >= 10. cpu_us/step is the process's
// user+system CPU per step with 64 in flight.
//
//	go test -run '^$' -bench Runs64InFlight -benchtime 3x ./executor/
func BenchmarkRuns64InFlight(b *testing.B) {
	const (
		steps    = 10
		seqRuns  = 40
		inFlight = 64
		perG     = 5
	)
	be := newBenchEnv(b, inProcess, 0)
	p := chainPlan("noop", steps)
	var seq, conc, concCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for r := range seqRuns {
			be.runPlan(b, fmt.Sprintf("seq-%d-%d", i, r), p)
		}
		seq += time.Since(start)
		var wg sync.WaitGroup
		start, cpu := time.Now(), processCPU(b)
		for g := range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range perG {
					be.runPlan(b, fmt.Sprintf("conc-%d-%d-%d", i, g, r), p)
				}
			}()
		}
		wg.Wait()
		conc += time.Since(start)
		concCPU += processCPU(b) - cpu
	}
	b.StopTimer()
	seqRate := float64(b.N*seqRuns*steps) / seq.Seconds()
	concSteps := float64(b.N * inFlight * perG * steps)
	concRate := concSteps / conc.Seconds()
	b.ReportMetric(seqRate, "seq_steps/s")
	b.ReportMetric(concRate, "conc_steps/s")
	b.ReportMetric(concRate/seqRate, "x_sequential")
	b.ReportMetric(float64(concCPU.Microseconds())/concSteps, "cpu_us/step")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user+system CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
