package badgerdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// BenchmarkEmptyValueLogSync measures what Badger (v4.9.6, SyncWrites) pays
// on every commit for its value log even when the commit wrote nothing to
// it: valueLog.write msyncs the current value-log file in a defer. The
// benchmark opens a real ledger, records a run (later commits of small
// records write nothing to the value log), maps that ledger's current
// value-log file shared, as Badger does, and msyncs the untouched mapping;
// interleaved with the raw loop (4 KiB append + fdatasync) and with one
// durable commit of a small memo (Badger's two msyncs: memtable log and
// value log), in the same file system. Reported: latency p50/p99 and the
// process CPU (user+system) per operation of each (vlog_msync_*,
// raw_sync_*, commit_*).
//
//	go test -run '^$' -bench EmptyValueLogSync -benchtime 500x ./ledger/badgerdb/
func BenchmarkEmptyValueLogSync(b *testing.B) {
	l, dir := benchLedger(b)
	ctx := context.Background()
	p := &plan.Plan{Goal: "vlog", Actions: []plan.Action{{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)}}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "vlog"}, p, nil); err != nil {
		b.Fatal(err)
	}
	vlogs, err := filepath.Glob(filepath.Join(dir, "db", "*.vlog"))
	if err != nil || len(vlogs) == 0 {
		b.Fatalf("no value-log file in %s (%v)", dir, err)
	}
	// Opened for writing and mapped writable, as Badger maps it: msync only
	// syncs the file of a shared mapping of a file opened for writing. Nothing
	// is written through it.
	f, err := os.OpenFile(vlogs[len(vlogs)-1], os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Munmap(data)
	raw, err := os.CreateTemp(dir, "raw-*")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	block := make([]byte, 4096)

	var vlog, rawLat, commit []time.Duration
	var vlogCPU, rawCPU, commitCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0, t0 := cpuTime(), time.Now()
		if _, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), syscall.MS_SYNC); e != 0 {
			b.Fatal(e)
		}
		vlog = append(vlog, time.Since(t0))
		c1, t1 := cpuTime(), time.Now()
		vlogCPU += c1 - c0
		if _, err := raw.Write(block); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(raw.Fd())); err != nil {
			b.Fatal(err)
		}
		rawLat = append(rawLat, time.Since(t1))
		c2, t2 := cpuTime(), time.Now()
		rawCPU += c2 - c1
		if _, err := l.Memo(ctx, "vlog", fmt.Sprintf("m%d", i), []byte(`{}`)); err != nil {
			b.Fatal(err)
		}
		commit = append(commit, time.Since(t2))
		commitCPU += cpuTime() - c2
	}
	b.StopTimer()
	n := time.Duration(b.N)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(pct(vlog, 0.5)), "vlog_msync_p50_us")
	b.ReportMetric(us(pct(vlog, 0.99)), "vlog_msync_p99_us")
	b.ReportMetric(us(vlogCPU/n), "vlog_msync_cpu_us")
	b.ReportMetric(us(pct(rawLat, 0.5)), "raw_sync_p50_us")
	b.ReportMetric(us(pct(rawLat, 0.99)), "raw_sync_p99_us")
	b.ReportMetric(us(rawCPU/n), "raw_sync_cpu_us")
	b.ReportMetric(us(pct(commit, 0.5)), "commit_p50_us")
	b.ReportMetric(us(commitCPU/n), "commit_cpu_us")
	b.ReportMetric(0, "ns/op")
}
