// Command ledgerbench measures the ledger's memory: the resident set of a
// process with a ledger open and idle, and its peak under a burst of durable
// actions with 4 KiB outputs (the peak is the kernel's VmHWM from
// /proc/self/status). It prints a Markdown table.
//
//	go run ./ledger/internal/ledgerbench -actions 100000
//
// Imports: the standard library and docket's ledger, ledger/badgerdb and plan packages.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "data directory (default: a new temporary directory, removed afterwards)")
	actions := flag.Int("actions", 100_000, "actions in the burst")
	workers := flag.Int("workers", 64, "concurrent callers in the burst")
	outBytes := flag.Int("output", 4096, "output size of each action")
	memProfile := flag.String("memprofile", "", "write a heap profile after the burst")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the burst")
	memLimit := flag.Int64("memlimit", 48<<20, "debug.SetMemoryLimit for this process (0: leave the default)")
	flag.Parse()
	if *memLimit > 0 {
		// A soft limit for the Go heap: the GC works harder instead of letting
		// garbage from a burst grow the heap.
		debug.SetMemoryLimit(*memLimit)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "ledgerbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rss0, _ := procStatus("VmRSS")
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: *dir, Logger: log})
	if err != nil {
		return err
	}
	defer l.Close()
	// Idle: opened, one small run recorded, background goroutines settled.
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "idle"}, &plan.Plan{Goal: "idle", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}, nil); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // measurement pause, not a synchronisation
	runtime.GC()
	idle, _ := procStatus("VmRSS")
	idleHWM, _ := procStatus("VmHWM")

	// Burst: workers drive chains of actions, outcome + next claim per commit.
	out := json.RawMessage(`{"pad":"` + strings.Repeat("x", max(0, *outBytes-10)) + `"}`)
	const perRun = 1000
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, *workers)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	start := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(next.Add(perRun)) - perRun
				if first >= *actions {
					return
				}
				n := min(perRun, *actions-first)
				if err := chain(ctx, l, fmt.Sprintf("burst%d", first), n, out); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			return err
		}
		f.Close()
	}
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	burstRSS, _ := procStatus("VmRSS")
	peak, _ := procStatus("VmHWM")
	st := l.Stats()
	fmt.Printf("| measure | value |\n|---|---|\n")
	fmt.Printf("| RSS before Open | %s |\n", mib(rss0))
	fmt.Printf("| RSS open and idle | %s (peak so far %s) |\n", mib(idle), mib(idleHWM))
	fmt.Printf("| burst | %d actions, %d B outputs, %d callers: %.0f actions/s, %.1f Applies per commit |\n",
		*actions, len(out), *workers, float64(*actions)/elapsed.Seconds(), float64(st.Requests)/float64(max(1, st.Commits)))
	fmt.Printf("| RSS after the burst | %s |\n", mib(burstRSS))
	fmt.Printf("| peak RSS (VmHWM) | %s |\n", mib(peak))
	anon, _ := procStatus("RssAnon")
	file, _ := procStatus("RssFile")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("| RSS after the burst: anonymous / file-backed (mmapped tables, logs) | %s / %s |\n", mib(anon), mib(file))
	fmt.Printf("| Go heap in use / obtained from the OS | %s / %s |\n", mib(int64(ms.HeapInuse)), mib(int64(ms.Sys)))
	fmt.Printf("| Go memory limit | %s |\n", mib(*memLimit))
	return nil
}

// chain records n actions of a new run: Claim(a1), then Succeed(a_i)+Claim(a_i+1).
func chain(ctx context.Context, l *badgerdb.Ledger, runID string, n int, out json.RawMessage) error {
	p := &plan.Plan{Goal: runID}
	for i := 1; i <= n; i++ {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(`{}`)})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: runID}, p, nil); err != nil {
		return err
	}
	key := func(i int) string { return fmt.Sprintf("dk1_%s_%d", runID, i) }
	claim := func(i int) ledger.Op {
		return ledger.Claim(runID, fmt.Sprintf("a%d", i), "t", key(i), json.RawMessage(`{}`), 1)
	}
	if err := apply(ctx, l, claim(1)); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		ops := []ledger.Op{ledger.Succeed(key(i), 1, out)}
		if i < n {
			ops = append(ops, claim(i+1))
		}
		if err := apply(ctx, l, ops...); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, l *badgerdb.Ledger, ops ...ledger.Op) error {
	res, err := l.Apply(ctx, ops...)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// procStatus reads a "kB" field of /proc/self/status, in bytes.
func procStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if ok && name == field {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
