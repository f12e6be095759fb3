package evals

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkScoreBFCL scores every case of the committed leaderboard subset
// (3,475 cases) against its own answer, one op per full pass.
func BenchmarkScoreBFCL(b *testing.B) {
	sets := importDirB(b, filepath.Join("testdata", "bfcl"))
	var cases []*Case
	var plans [][]Call
	for _, d := range sets {
		for _, c := range d.Cases {
			cases = append(cases, c)
			if c.Expect.NoAction {
				plans = append(plans, nil)
			} else {
				plans = append(plans, GroundTruthCalls(c, 0))
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i, c := range cases {
			Score(c, plans[i])
		}
	}
	b.ReportMetric(float64(len(cases)), "cases/op")
}

// tenThousand writes a dataset of 10,000 cases (the leaderboard subset and
// the starter dataset, cycled under new ids) and a plans file answering
// each with its own answer, and returns their paths.
func tenThousand(b *testing.B) (dataset, plans string) {
	b.Helper()
	dir := b.TempDir()
	var lines [][]byte
	var calls [][]Call
	for _, d := range importDirB(b, filepath.Join("testdata", "bfcl")) {
		for _, c := range d.Cases {
			raw, _ := json.Marshal(c)
			lines = append(lines, raw)
			if c.Expect.NoAction {
				calls = append(calls, nil)
			} else {
				calls = append(calls, GroundTruthCalls(c, 0))
			}
		}
	}
	st, err := LoadDataset(starterDataset, nil)
	if err != nil {
		b.Fatal(err)
	}
	tf, _ := os.ReadFile(filepath.Join("testdata", "starter", "tools.json"))
	os.WriteFile(filepath.Join(dir, "tools.json"), tf, 0o644)
	for _, c := range st.Cases {
		raw, _ := json.Marshal(c)
		lines = append(lines, raw)
		calls = append(calls, c.Reference)
	}
	var ds, ps bytes.Buffer
	for i := 0; i < 10000; i++ {
		var c map[string]any
		json.Unmarshal(lines[i%len(lines)], &c)
		id := fmt.Sprintf("%s#%d", c["id"], i)
		c["id"] = id
		line, _ := json.Marshal(c)
		ds.Write(line)
		ds.WriteByte('\n')
		WritePlanLine(&ps, PlanLine{ID: id, Calls: calls[i%len(calls)]})
	}
	dataset, plans = filepath.Join(dir, "d.jsonl"), filepath.Join(dir, "p.jsonl")
	os.WriteFile(dataset, ds.Bytes(), 0o644)
	os.WriteFile(plans, ps.Bytes(), 0o644)
	return dataset, plans
}

// BenchmarkScore10000 is docket eval score on 10,000 cases: load the
// dataset (schemas compiled), read the plans, score, aggregate.
func BenchmarkScore10000(b *testing.B) {
	dataset, plans := tenThousand(b)
	b.ReportAllocs()
	var peak uint64
	cpu := cpuTime()
	for b.Loop() {
		d, err := LoadDataset(dataset, nil)
		if err != nil {
			b.Fatal(err)
		}
		ps, err := ReadPlans(plans)
		if err != nil {
			b.Fatal(err)
		}
		rep, err := ScorePlans(d, ps, nil)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Overall.Cases != 10000 || rep.Overall.Passed < 9980 {
			b.Fatalf("%d cases, %d passed", rep.Overall.Cases, rep.Overall.Passed)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-heap-inuse")
	b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
}

// cpuTime is the CPU time (user + system) this process used so far: the
// machine may be shared, so wall time alone says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplay10000 is docket eval run --replay on 10,010 cases (the
// starter dataset 143 times under new ids): the planner plans every case
// from recorded exchanges, the runner scores them.
func BenchmarkReplay10000(b *testing.B) {
	clones := 143
	if s := os.Getenv("DOCKET_BENCH_CLONES"); s != "" {
		fmt.Sscan(s, &clones)
	}
	st, err := LoadDataset(starterDataset, nil)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	recs := filepath.Join(dir, "recordings")
	os.MkdirAll(recs, 0o755)
	tf, _ := os.ReadFile(filepath.Join("testdata", "starter", "tools.json"))
	os.WriteFile(filepath.Join(dir, "tools.json"), tf, 0o644)
	raw, _ := os.ReadFile(starterDataset)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var ds bytes.Buffer
	for k := 0; k < clones; k++ {
		for i, c := range st.Cases {
			// keep every byte but the id: observations are sent to the
			// model as written, and the recordings hold them so
			id := fmt.Sprintf("%s-%d", c.ID, k)
			ds.WriteString(strings.Replace(lines[i], `"id": "`+c.ID+`"`, `"id": "`+id+`"`, 1))
			ds.WriteByte('\n')
			rec, err := os.ReadFile(recordingFile(starterRecordings, caseTag{c.ID, 1}))
			if err != nil {
				b.Fatal(err)
			}
			os.WriteFile(recordingFile(recs, caseTag{id, 1}), rec, 0o644)
		}
	}
	path := filepath.Join(dir, "d.jsonl")
	os.WriteFile(path, ds.Bytes(), 0o644)
	b.ReportAllocs()
	var peak uint64
	cpu := cpuTime()
	for b.Loop() {
		d, err := LoadDataset(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		rp, err := NewReplayer(recs)
		if err != nil {
			b.Fatal(err)
		}
		rep, err := Run(context.Background(), d, RunOptions{Plan: PlannerFunc(plannerConfig("https://replay.invalid/v1", rp)), Concurrency: runtime.GOMAXPROCS(0) * 2})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range rep.Cases {
			if hasCode(c, CodePlannerError) {
				b.Fatalf("%s: %s", c.ID, strings.Join(c.Reasons, "; "))
			}
		}
		if rep.Overall.Cases != 70*clones || rep.Overall.Passed != clones*45 {
			b.Fatalf("%d cases, %d passed", rep.Overall.Cases, rep.Overall.Passed)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-heap-inuse")
	b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
}
