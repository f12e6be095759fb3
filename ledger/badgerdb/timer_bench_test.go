package badgerdb_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// BenchmarkPendingTimers records TIMER_BENCH_RUNS runs (default 10,000),
// each with one action waiting for a time, their wake times spread over 30
// days, then measures finding the 100 earliest due runs through the wake
// index (ns/op), and reports the data directory's allocated size per waiting run and
// the Go heap in use after a GC with the ledger open.
//
//	TIMER_BENCH_RUNS=100000 go test ./ledger/badgerdb -run '^$' -bench PendingTimers -benchtime=200x -timeout 30m
func BenchmarkPendingTimers(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("TIMER_BENCH_RUNS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	dir := b.TempDir()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	t0 := l.Now().Add(time.Hour)
	spread := 30 * 24 * time.Hour / time.Duration(n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				id := fmt.Sprintf("run-%07d", i)
				a := plan.Action{ID: "remind", Tool: "t", Args: []byte(`{"i":1}`), NotBefore: t0.Add(time.Duration(i) * spread).UTC().Format(time.RFC3339Nano)}
				p := &plan.Plan{Goal: "remind", Actions: []plan.Action{a}}
				row := ledger.Action{ID: a.ID, Tool: a.Tool, Args: a.Args, Status: ledger.StatusApproved, ApprovedArgs: a.Args, Timer: ledger.TimerOf(a)}
				if _, _, err := l.CreateRun(ctx, ledger.Run{ID: id, Policy: "all"}, p, []ledger.Action{row}); err != nil {
					errs <- err
					return
				}
				due := row.Timer.NotBefore
				if _, err := l.Apply(ctx, ledger.Wait(id, due, map[string]time.Time{"remind": due})); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.Logf("recorded %d waiting runs in %s", n, time.Since(start).Round(time.Millisecond))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	size := int64(0)
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					size += st.Blocks * 512 // allocated, not the preallocated length
				}
			}
		}
		return nil
	})
	before := t0.Add(99 * spread) // the 100 earliest are due
	b.ResetTimer()
	for range b.N {
		ws, err := l.Wakes(ctx, before, 1000)
		if err != nil || len(ws) != 100 {
			b.Fatalf("Wakes = %d, %v; want 100", len(ws), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "timers")
	b.ReportMetric(float64(size)/float64(n), "dir-bytes/timer")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}
