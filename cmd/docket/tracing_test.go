package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/docketrun/docket/executor/oteltrace"
)

// TestRunExportsTraces: `docket run` with OTEL_EXPORTER_OTLP_ENDPOINT set
// exports the run's spans to that OTLP/HTTP endpoint before it exits (the
// batch is flushed), prints the run's trace id in the Run JSON, and every
// span it sent is in that trace. Without the variable, no trace_id.
func TestRunExportsTraces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	names := map[string]int{}
	traces := map[string]bool{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(raw, &msg) != nil {
			t.Errorf("the exporter sent %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name]++
					traces[string(s.TraceId)] = true
				}
			}
		}
		mu.Unlock()
	}))
	defer rcv.Close()
	b := setup(t)
	planPath := b.plan(t, "p", `{"goal":"t","actions":[{"id":"s","tool":"settings_put","args":{"account":"acme","settings":{"plan":"pro"}}}]}`)
	run := func(getenv func(string) string, args ...string) result {
		var out, errb bytes.Buffer
		env := testEnv(&out, &errb)
		env.Getenv = getenv
		code := report(runEnv(context.Background(), args, env), &errb)
		return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
	}
	r := run(func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			return rcv.URL
		}
		return os.Getenv(k)
	}, b.runArgs(planPath, "--run-id", "traced", "--approve", "all")...)
	wantCode(t, r, 0)
	d := doc(t, r)
	if d.TraceID != oteltrace.TraceID("traced") {
		t.Fatalf("trace_id %q, want %q", d.TraceID, oteltrace.TraceID("traced"))
	}
	mu.Lock()
	if names["docket.run"] != 1 || names["docket.action"] != 1 || names["docket.attempt"] != 1 || len(traces) != 1 {
		t.Errorf("spans received: %v in %d traces", names, len(traces))
	}
	mu.Unlock()

	r = run(os.Getenv, b.runArgs(planPath, "--run-id", "untraced", "--approve", "all")...)
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, "trace_id") {
		t.Fatalf("trace_id without tracing:\n%s", r.stdout)
	}
}

// TestUnsupportedExporterWarns: an exporter or protocol docket does not ship
// does not stop the command: it runs untraced and says so once on stderr.
func TestUnsupportedExporterWarns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	planPath := b.plan(t, "p", `{"goal":"t","actions":[{"id":"s","tool":"settings_put","args":{"account":"acme","settings":{"plan":"pro"}}}]}`)
	for i, kv := range [][2]string{{"OTEL_TRACES_EXPORTER", "zipkin"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}} {
		var out, errb bytes.Buffer
		env := testEnv(&out, &errb)
		env.Getenv = func(k string) string {
			switch k {
			case kv[0]:
				return kv[1]
			case "OTEL_EXPORTER_OTLP_ENDPOINT":
				return "http://127.0.0.1:4318"
			}
			return os.Getenv(k)
		}
		args := b.runArgs(planPath, "--run-id", fmt.Sprintf("untraced-%d", i), "--approve", "all")
		r := result{args: args, code: report(runEnv(context.Background(), args, env), &errb), stdout: out.String(), stderr: errb.String()}
		wantCode(t, r, 0)
		if d := doc(t, r); d.Status != "completed" || d.TraceID != "" {
			t.Errorf("%s=%s: run %s, trace_id %q", kv[0], kv[1], d.Status, d.TraceID)
		}
		if n := strings.Count(r.stderr, "warning: tracing off"); n != 1 || !strings.Contains(r.stderr, kv[0]+"="+kv[1]) {
			t.Errorf("%s=%s: stderr has %d warnings:\n%s", kv[0], kv[1], n, r.stderr)
		}
	}
}
