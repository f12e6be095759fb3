package oteltrace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ledger/memory"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/tooltest"
)

// cpuTime is the CPU time (user + system) this process used so far: every
// goroutine's, the exporter's included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunTracing measures what tracing adds to a run: a chain of
// benchChain actions (each depends on the previous one) on the in-memory
// ledger (no fsync, so the executor's own CPU is all there is to compare
// with: the worst case for the overhead), with tracing off (no Tracer) and
// on (spans batched and exported over OTLP/HTTP to an in-process receiver
// that reads and drops them). Reported per action: wall time (us/action,
// noisy on a shared machine) and the process's CPU time (cpu_us/action, the
// export included). Tools: an in-process no-op, and an HTTP tool
// on loopback (which also sends traceparent when tracing is on).
//
//	go test -run '^$' -bench RunTracing -benchtime 200x ./executor/oteltrace/
func BenchmarkRunTracing(b *testing.B) {
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer rcv.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer api.Close()
	noop := &tooltest.Tool{SpecValue: tools.Spec{Name: "noop", Class: tools.Idempotent, InputSchema: json.RawMessage(`{"type":"object"}`)},
		CallFunc: func(context.Context, tools.Call) (json.RawMessage, error) { return json.RawMessage(`{"ok":true}`), nil }}
	f, err := httptool.Parse([]byte(`{"version":1,"tools":[{"name":"put","effect":"idempotent","input_schema":{"type":"object"},
	  "request":{"method":"PUT","url":"`+api.URL+`/put"}}]}`), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	for _, tool := range []tools.Tool{noop, f.Tools[0]} {
		for _, on := range []bool{false, true} {
			name := fmt.Sprintf("tool=%s/tracing=%v", tool.Spec().Name, on)
			b.Run(name, func(b *testing.B) {
				var tr *oteltrace.Tracing
				cfgTracer := executor.Tracer(nil)
				if on {
					if tr, err = oteltrace.New(context.Background(), oteltrace.Config{EndpointURL: rcv.URL + "/v1/traces"}); err != nil {
						b.Fatal(err)
					}
					defer tr.Close(context.Background())
					cfgTracer = tr.Tracer()
				}
				reg, err := tools.NewRegistry(tool)
				if err != nil {
					b.Fatal(err)
				}
				led, err := memory.New(memory.Config{})
				if err != nil {
					b.Fatal(err)
				}
				eng, err := executor.New(executor.Config{Ledger: led, Tools: reg, Tracer: cfgTracer, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				const benchChain = 16
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := range b.N {
					p := &plan.Plan{Goal: "bench"}
					for j := range benchChain {
						a := plan.Action{ID: fmt.Sprintf("a%d", j), Tool: tool.Spec().Name, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))}
						if j > 0 {
							a.DependsOn = []string{fmt.Sprintf("a%d", j-1)}
						}
						p.Actions = append(p.Actions, a)
					}
					if _, err := eng.Run(context.Background(), fmt.Sprintf("run-%d", i), p, &executor.RunOptions{Policy: executor.PolicyAll}); err != nil {
						b.Fatal(err)
					}
				}
				if on {
					tr.Close(context.Background()) // the export's CPU counts too
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*benchChain), "cpu_us/action")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*benchChain), "us/action")
			})
		}
	}
}
