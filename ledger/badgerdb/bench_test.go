package badgerdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/plan"
)

// Benchmarks measure the raw durable-write loop (4 KiB appended to a fresh
// file in the same filesystem, each followed by fdatasync) in the same run,
// interleaved with the workload, and report ratios: this machine class's sync
// rate swings 3x over minutes, so absolute rates alone mean little.
//
//	go test ./ledger -run '^$' -bench . -benchtime=2000x
//	LEDGER_BENCH_BIG=1 go test ./ledger -run '^$' -bench ResumeScan -benchtime=20x -timeout 30m

// rawLoop appends n blocks of 4 KiB to a fresh file in dir, each followed by
// fdatasync, and returns each iteration's latency.
func rawLoop(tb testing.TB, dir string, n int) []time.Duration {
	f, err := os.CreateTemp(dir, "raw-*")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			tb.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sum(d []time.Duration) time.Duration {
	var s time.Duration
	for _, x := range d {
		s += x
	}
	return s
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// benchLedger opens a ledger in a fresh directory.
func benchLedger(b *testing.B) (*badgerdb.Ledger, string) {
	dir := b.TempDir()
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: filepath.Join(dir, "db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l, dir
}

// actionRun is a run whose actions are driven in order, the way the executor
// drives a chain: Claim(a1), then Apply(Succeed(a_i), Claim(a_i+1)).
type actionRun struct {
	l    *badgerdb.Ledger
	id   string
	n, i int
	out  json.RawMessage
}

const benchRunActions = 1000

func newActionRun(tb testing.TB, l *badgerdb.Ledger, id string, out json.RawMessage) *actionRun {
	p := &plan.Plan{Goal: id}
	for i := 1; i <= benchRunActions; i++ {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(`{}`)})
	}
	if _, _, err := l.CreateRun(context.Background(), ledger.Run{ID: id}, p, nil); err != nil {
		tb.Fatal(err)
	}
	return &actionRun{l: l, id: id, n: benchRunActions, out: out}
}

func (r *actionRun) key(i int) string { return fmt.Sprintf("dk1_%s_%d", r.id, i) }

func (r *actionRun) claim(i int) ledger.Op {
	return ledger.Claim(r.id, fmt.Sprintf("a%d", i), "t", r.key(i), json.RawMessage(`{}`), 1)
}

// step records one durable action: the outcome of the current action and
// the claim of the next in one commit. It reports false when the run is done.
func (r *actionRun) step(tb testing.TB) bool {
	ctx := context.Background()
	if r.i == 0 {
		if _, err := r.l.Apply(ctx, r.claim(1)); err != nil {
			tb.Fatal(err)
		}
		r.i = 1
	}
	if r.i > r.n {
		return false
	}
	ops := []ledger.Op{ledger.Succeed(r.key(r.i), 1, r.out)}
	if r.i < r.n {
		ops = append(ops, r.claim(r.i+1))
	}
	res, err := r.l.Apply(ctx, ops...)
	if err != nil {
		tb.Fatal(err)
	}
	for _, x := range res {
		if x.Err != nil {
			tb.Fatal(x.Err)
		}
	}
	r.i++
	return true
}

func output(n int) json.RawMessage {
	return json.RawMessage(`{"pad":"` + strings.Repeat("x", n) + `"}`)
}

// BenchmarkSequentialActions: one caller, one durable action (outcome + next
// claim) per commit; chunks of 50 alternate with 50 iterations of the raw loop.
func BenchmarkSequentialActions(b *testing.B) {
	l, dir := benchLedger(b)
	var runs []*actionRun
	cur := func() *actionRun {
		if len(runs) == 0 || runs[len(runs)-1].i > benchRunActions {
			runs = append(runs, newActionRun(b, l, fmt.Sprintf("seq%d", len(runs)), output(200)))
		}
		return runs[len(runs)-1]
	}
	var work time.Duration
	var raw []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		chunk := min(50, b.N-done)
		t0 := time.Now()
		for i := 0; i < chunk; i++ {
			for !cur().step(b) {
			}
		}
		work += time.Since(t0)
		done += chunk
		raw = append(raw, rawLoop(b, dir, chunk)...)
	}
	b.StopTimer()
	ar, rr := rate(b.N, work), rate(len(raw), sum(raw))
	b.ReportMetric(ar, "actions/s")
	b.ReportMetric(rr, "raw_syncs/s")
	b.ReportMetric(ar/rr, "ratio_vs_raw")
}

// BenchmarkConcurrentActions64: 64 callers in flight, each driving its own
// chain; rounds alternate 64x32 concurrent actions, 40 sequential actions and
// 100 iterations of the raw loop. Reports throughput against the sequential
// rate of the same run, and the p99 latency of one Apply against the raw
// loop's p99.
func BenchmarkConcurrentActions64(b *testing.B) {
	const workers, perRound = 64, 32
	l, dir := benchLedger(b)
	runs := make([]*actionRun, workers)
	for w := range runs {
		runs[w] = newActionRun(b, l, fmt.Sprintf("c%d", w), output(200))
	}
	seq := newActionRun(b, l, "seq", output(200))
	var work, seqWork time.Duration
	var seqN, total int
	var reqs, commits uint64
	var lat, raw []time.Duration
	var mu sync.Mutex
	b.ResetTimer()
	for total < b.N {
		st0 := l.Stats()
		t0 := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := runs[w]
				mine := make([]time.Duration, 0, perRound)
				for i := 0; i < perRound; i++ {
					s := time.Now()
					if !r.step(b) {
						r = newActionRun(b, l, fmt.Sprintf("c%d-%d", w, total), output(200))
						runs[w] = r
						continue
					}
					mine = append(mine, time.Since(s))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		work += time.Since(t0)
		total += workers * perRound
		st1 := l.Stats()
		reqs += st1.Requests - st0.Requests
		commits += st1.Commits - st0.Commits
		t0 = time.Now()
		for i := 0; i < 40; i++ {
			if !seq.step(b) {
				seq = newActionRun(b, l, fmt.Sprintf("seq%d", total), output(200))
			}
		}
		seqWork += time.Since(t0)
		seqN += 40
		raw = append(raw, rawLoop(b, dir, 100)...)
	}
	b.StopTimer()
	cr, sr := rate(total, work), rate(seqN, seqWork)
	b.ReportMetric(cr, "actions/s")
	b.ReportMetric(sr, "seq_actions/s")
	b.ReportMetric(cr/sr, "speedup")
	b.ReportMetric(rate(len(raw), sum(raw)), "raw_syncs/s")
	p99, rawP99 := pct(lat, 0.99), pct(raw, 0.99)
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(rawP99.Microseconds())/1000, "raw_p99_ms")
	b.ReportMetric(float64(p99)/float64(rawP99), "p99_ratio")
	b.ReportMetric(float64(reqs)/float64(commits), "applies/commit")
}

// fillRun records n succeeded actions (outputs of outBytes) in run id, in big Applies.
func fillRun(tb testing.TB, l *badgerdb.Ledger, id string, n, outBytes int) {
	ctx := context.Background()
	p := &plan.Plan{Goal: id}
	for i := 1; i <= n; i++ {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(`{}`)})
	}
	rows := make([]ledger.Action, 0, n)
	for _, a := range p.Actions {
		rows = append(rows, ledger.Action{ID: a.ID, Tool: a.Tool, Args: a.Args})
	}
	// A 10,000-row plan is one big CreateRun; it fits one transaction.
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: id}, p, rows); err != nil {
		tb.Fatal(err)
	}
	out := output(outBytes)
	const chunk = 100
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for start := 1; start <= n; start += chunk {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var ops []ledger.Op
			for i := start; i < start+chunk && i <= n; i++ {
				k := fmt.Sprintf("dk1_%s_%d", id, i)
				ops = append(ops, ledger.Claim(id, fmt.Sprintf("a%d", i), "t", k, json.RawMessage(`{}`), 1),
					ledger.Succeed(k, 1, out))
			}
			res, err := l.Apply(ctx, ops...)
			if err != nil {
				tb.Error(err)
				return
			}
			for _, r := range res {
				if r.Err != nil {
					tb.Error(r.Err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkResumeScan loads the rows of a run with 10,000 recorded actions
// (1 KiB outputs). With LEDGER_BENCH_BIG=1, 1,000,000 actions of 100 other
// runs (128-byte outputs) are recorded first (slow: minutes; opt-in).
func BenchmarkResumeScan(b *testing.B) {
	l, _ := benchLedger(b)
	others := 0
	if os.Getenv("LEDGER_BENCH_BIG") != "" {
		others = 100
	}
	for r := 0; r < others; r++ {
		fillRun(b, l, fmt.Sprintf("other%03d", r), 10000, 128)
	}
	fillRun(b, l, "target", 10000, 1024)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		acts, err := l.Actions(context.Background(), "target")
		if err != nil || len(acts) != 10000 || acts[9999].Status != ledger.StatusSucceeded || len(acts[9999].Output) < 1024 {
			b.Fatalf("Actions: %d rows, %v", len(acts), err)
		}
	}
	// CPU time per load: on a shared, overloaded machine wall time mostly
	// measures waiting for a CPU.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu_ms/op")
	b.ReportMetric(float64(others*10000), "other_actions")
}

// BenchmarkClaimLimits: a call's claim and outcome, two synced commits,
// without and with tool limits (ledgertest.BenchClaimLimits).
//
//	go test -run '^$' -bench ClaimLimits -count 5 ./ledger/badgerdb/
func BenchmarkClaimLimits(b *testing.B) {
	l, _ := benchLedger(b)
	ledgertest.BenchClaimLimits(b, l)
}
