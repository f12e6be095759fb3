//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRunChain200 measures `docket run` end to end (tools file, ledger
// open, plan recorded, every action claimed, called and recorded durably) on
// a chain of 200 dependent keyed actions against a loopback HTTP API, and
// compares it with the floor any durable executor pays on the same
// filesystem: a loop of 200 appends of 4 KiB, each followed by fdatasync.
//
// x_fsync_loop = (time of the raw loop) / (time of docket run): 1.0 would
// be as fast as one sync per action with nothing else; the target is >= 0.35.
//
//	go test -run '^$' -bench RunChain200 -benchtime 5x ./cmd/docket
func BenchmarkRunChain200(b *testing.B) {
	const n = 200
	dir := b.TempDir()
	toolsPath := benchStepTools(b, dir)
	planPath := filepath.Join(dir, "plan.json")
	benchPlan(b, planPath, n, true)
	data := filepath.Join(dir, "data")
	block := bytes.Repeat([]byte("x"), 4096)

	var docketTime, rawTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var out, errb bytes.Buffer
		start := time.Now()
		err := runEnv(context.Background(), []string{"run", "--data", data, "--tools", toolsPath, "--plan", planPath,
			"--run-id", fmt.Sprintf("bench-%d", i), "--approve", "all"}, testEnv(&out, &errb))
		docketTime += time.Since(start)
		if err != nil {
			b.Fatalf("docket run: %v\n%s", err, errb.String())
		}
		if !strings.Contains(out.String(), fmt.Sprintf(`"n": %d`, n)) {
			b.Fatalf("the chain did not reach %d:\n%s", n, out.String())
		}

		b.StopTimer()
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("raw-%d", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for j := 0; j < n; j++ {
			if _, err := f.Write(block); err != nil {
				b.Fatal(err)
			}
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
		rawTime += time.Since(start)
		f.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(docketTime.Nanoseconds())/float64(b.N*n), "ns/action")
	b.ReportMetric(float64(rawTime.Nanoseconds())/float64(b.N*n), "ns/fsync")
	b.ReportMetric(float64(rawTime)/float64(docketTime), "x_fsync_loop")
}

// benchStepTools starts a loopback API with one keyed endpoint that answers
// {"n": n+1} at once (the same answer for the same Idempotency-Key) and
// writes a tools file for it in dir; it returns the tools file's path.
func benchStepTools(b *testing.B, dir string) string {
	b.Helper()
	var mu sync.Mutex
	seen := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		var in struct{ N int }
		if key == "" || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		out, ok := seen[key]
		if !ok {
			out = fmt.Appendf(nil, `{"n":%d}`, in.N+1)
			seen[key] = out
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	}))
	b.Cleanup(srv.Close)
	toolsPath := filepath.Join(dir, "tools.json")
	tf := `{"version": 1, "tools": [{"name": "step", "description": "count one up", "effect": "keyed",
  "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false},
  "request": {"method": "POST", "url": "` + srv.URL + `/step"}, "key_header": "Idempotency-Key", "timeout": "5s"}]}`
	if err := os.WriteFile(toolsPath, []byte(tf), 0o600); err != nil {
		b.Fatal(err)
	}
	return toolsPath
}

// benchPlan writes a plan of n step actions to path: a chain (each takes
// the previous one's output) or n independent ones.
func benchPlan(b *testing.B, path string, n int, chain bool) {
	b.Helper()
	var p strings.Builder
	fmt.Fprintf(&p, `{"goal": "%d steps", "actions": [{"id": "a0", "tool": "step", "args": {"n": 0}}`, n)
	for i := 1; i < n; i++ {
		if chain {
			fmt.Fprintf(&p, `,
  {"id": "a%d", "tool": "step", "args": {"n": "${a%d.output.n}"}, "depends_on": ["a%d"]}`, i, i-1, i-1)
		} else {
			fmt.Fprintf(&p, `,
  {"id": "a%d", "tool": "step", "args": {"n": %d}}`, i, i)
		}
	}
	p.WriteString("]}")
	if err := os.WriteFile(path, []byte(p.String()), 0o600); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRunParallel200 measures `docket run` (in process: tools file,
// ledger open, plan recorded, every action claimed, called and recorded
// durably, ledger closed) on 200 independent keyed actions and on a chain of
// 200, in turn, each run on a fresh data directory, against a loopback API
// that answers at once. x_chain = (time of the chain) / (time of the
// independent ones); the target is >= 4.
//
//	go test -run '^$' -bench RunParallel200 -benchtime 5x ./cmd/docket
func BenchmarkRunParallel200(b *testing.B) {
	const n = 200
	dir := b.TempDir()
	toolsPath := benchStepTools(b, dir)
	chainPath, indepPath := filepath.Join(dir, "chain.json"), filepath.Join(dir, "independent.json")
	benchPlan(b, chainPath, n, true)
	benchPlan(b, indepPath, n, false)
	run := func(planPath, data string) {
		var out, errb bytes.Buffer
		err := runEnv(context.Background(), []string{"run", "--data", data, "--tools", toolsPath, "--plan", planPath,
			"--run-id", "bench", "--approve", "all"}, testEnv(&out, &errb))
		if err != nil {
			b.Fatalf("docket run: %v\n%s", err, errb.String())
		}
		if !strings.Contains(out.String(), `"status": "completed"`) {
			b.Fatalf("the run did not complete:\n%s", out.String())
		}
	}
	var chainTime, indepTime, chainCPU, indepCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start, cpu := time.Now(), processCPU(b)
		run(indepPath, filepath.Join(dir, fmt.Sprintf("indep-%d", i)))
		indepTime += time.Since(start)
		indepCPU += processCPU(b) - cpu
		b.StopTimer()
		start, cpu = time.Now(), processCPU(b)
		run(chainPath, filepath.Join(dir, fmt.Sprintf("chain-%d", i)))
		chainTime += time.Since(start)
		chainCPU += processCPU(b) - cpu
		b.StartTimer()
	}
	b.ReportMetric(float64(indepTime.Nanoseconds())/float64(b.N*n), "ns/action")
	b.ReportMetric(float64(chainTime.Nanoseconds())/float64(b.N*n), "ns/chained_action")
	b.ReportMetric(float64(chainTime)/float64(indepTime), "x_chain")
	// CPU (user+system) of the whole process, the loopback API included.
	b.ReportMetric(float64(indepCPU.Nanoseconds())/float64(b.N*n), "cpu_ns/action")
	b.ReportMetric(float64(chainCPU.Nanoseconds())/float64(b.N*n), "cpu_ns/chained_action")
}

// processCPU is the user+system CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunChain1000Process runs `docket run` of a chain of 1,000 keyed
// actions (each takes the previous one's output) as a child process (this
// test binary as docket), a fresh data directory each time, against the
// loopback API of benchStepTools in this process, and reports the child's
// CPU (user+system, from the kernel's accounting, as /usr/bin/time gives
// it) per action (target <= 0.45 ms), its user and system parts, wall time
// per action and peak RSS.
//
//	go test -run '^$' -bench RunChain1000Process -benchtime 3x ./cmd/docket
func BenchmarkRunChain1000Process(b *testing.B) {
	const n = 1000
	dir := b.TempDir()
	toolsPath := benchStepTools(b, dir)
	planPath := filepath.Join(dir, "plan.json")
	benchPlan(b, planPath, n, true)
	var user, sys, wall time.Duration
	var rss int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		data := filepath.Join(dir, fmt.Sprintf("data-%d", i))
		cmd := exec.Command(os.Args[0], "run", "--data", data, "--tools", toolsPath, "--plan", planPath, "--approve", "all")
		cmd.Env = append(os.Environ(), asDocketEnv+"=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("docket run: %v\n%s", err, errb.String())
		}
		wall += time.Since(start)
		if !strings.Contains(out.String(), fmt.Sprintf(`"n": %d`, n)) {
			b.Fatalf("the chain did not reach %d:\n%.2048s", n, out.String())
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			b.Fatal("no rusage for the child")
		}
		user += time.Duration(syscall.TimevalToNsec(ru.Utime))
		sys += time.Duration(syscall.TimevalToNsec(ru.Stime))
		rss = max(rss, ru.Maxrss)
		os.RemoveAll(data)
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N*n) }
	b.ReportMetric(per(user+sys), "cpu_ms/action")
	b.ReportMetric(per(user), "user_ms/action")
	b.ReportMetric(per(sys), "sys_ms/action")
	b.ReportMetric(per(wall), "wall_ms/action")
	b.ReportMetric(float64(rss)/1024, "peak_rss_MiB")
	b.ReportMetric(0, "ns/op")
}
