//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLargeArgFootprint measures what one action with a large argument costs:
// a plan with one keyed action whose argument is a string of N MiB goes
// through the real `docket run` (a child process: this test binary as docket)
// against an httptest API that reads the body and answers {"ok": true}. It
// prints, per size, the data directory's bytes on disk (du: allocated blocks,
// after the child exits; also without the ledger's fixed free-space reserve
// file), the child's peak RSS (getrusage's ru_maxrss), its CPU time and the
// wall time.
//
// It is a measurement, not a check (the figures depend on the machine), and
// takes a while: it runs only when asked for,
//
//	DOCKET_MEASURE_LARGE=1 go test -run TestLargeArgFootprint -v ./cmd/docket
//
// DOCKET_MEASURE_LARGE may also list the sizes in MiB ("1,4,15", the default).
func TestLargeArgFootprint(t *testing.T) {
	spec := os.Getenv("DOCKET_MEASURE_LARGE")
	if spec == "" {
		t.Skip("a measurement: run with DOCKET_MEASURE_LARGE=1 (or a list of sizes in MiB, e.g. 1,4,15)")
	}
	if spec == "1" {
		spec = "1,4,15"
	}
	var sizes []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 15 {
			t.Fatalf("DOCKET_MEASURE_LARGE: %q is not a size in MiB from 1 to 15", f)
		}
		sizes = append(sizes, n)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok": true, "received": %d}`, n)
	}))
	defer srv.Close()

	var table strings.Builder
	fmt.Fprintf(&table, "| argument | data dir (du) | per MiB | without the space reserve | peak RSS | per MiB | CPU (user+sys) | wall |\n|---|---|---|---|---|---|---|---|\n")
	for _, mib := range sizes {
		m := measureLargeArg(t, srv.URL, mib)
		fmt.Fprintf(&table, "| %d MiB | %.1f MiB | %.1f | %.1f MiB | %.1f MiB | %.1f | %.2f s | %.2f s |\n", mib,
			m.du, m.du/float64(mib), m.du-m.reserve, m.rss, m.rss/float64(mib), m.cpu.Seconds(), m.wall.Seconds())
	}
	t.Logf("one keyed action with an N MiB string argument through docket run:\n%s", table.String())
}

type largeArgFigures struct {
	du, reserve, rss float64 // MiB; reserve: the ledger's free-space reserve file, part of du
	cpu, wall        time.Duration
}

func measureLargeArg(t *testing.T, url string, mib int) largeArgFigures {
	t.Helper()
	dir := t.TempDir()
	toolsPath := writeFile(t, filepath.Join(dir, "tools.json"), `{"version": 1, "tools": [{"name": "store", "description": "store a blob",
  "effect": "keyed", "key_header": "Idempotency-Key", "timeout": "60s",
  "input_schema": {"type": "object", "properties": {"blob": {"type": "string"}}, "required": ["blob"]},
  "request": {"method": "POST", "url": "`+url+`/blobs"}}]}`)
	// The argument: mib MiB of JSON string, minus the plan's own few bytes.
	blob := strings.Repeat("x", mib<<20-256)
	planPath := writeFile(t, filepath.Join(dir, "plan.json"),
		`{"goal": "store one large blob", "actions": [{"id": "put", "tool": "store", "args": {"blob": "`+blob+`"}}]}`)
	blob = ""
	data := filepath.Join(dir, "data")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "--data", data, "--tools", toolsPath, "--plan", planPath,
		"--run-id", "large", "--approve", "all")
	cmd.Env = append(os.Environ(), asDocketEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	err := cmd.Run()
	wall := time.Since(began)
	if err != nil {
		t.Fatalf("docket run with a %d MiB argument: %v\nstderr:\n%s\nstdout (first 2 KiB):\n%.2048s", mib, err, errb.String(), out.String())
	}
	if !strings.Contains(out.String(), `"status": "completed"`) {
		t.Fatalf("docket run with a %d MiB argument did not complete:\n%.2048s", mib, out.String())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Fatal("no rusage for the child")
	}
	var reserve int64
	if st, err := os.Stat(filepath.Join(data, "docket-space-reserve")); err == nil {
		reserve = st.Sys().(*syscall.Stat_t).Blocks * 512
	}
	return largeArgFigures{du: float64(duBytes(t, data)) / (1 << 20), reserve: float64(reserve) / (1 << 20),
		rss: float64(ru.Maxrss) / 1024, wall: wall,
		cpu: time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))}
}

// duBytes is what du reports for dir: the blocks allocated to its files.
func duBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
