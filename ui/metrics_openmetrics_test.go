package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/oteltrace"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// manualClock is a clock that moves only when the test moves it: every
// wait the server measures with it is exact.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// awaitingSignal is told, after the server's own metrics (Config.Executor's
// Observer comes last), when a run stops to wait for a person.
type awaitingSignal struct {
	executor.NopObserver
	ch chan string
}

func (a awaitingSignal) RunStatus(runID string, st ledger.RunStatus) {
	if st == ledger.RunAwaitingApproval {
		select {
		case a.ch <- runID:
		default:
		}
	}
}

// openMetricsType is how promhttp's answer to an OpenMetrics scrape names
// its format (followed by the escaping of names, "; escaping=underscores").
const openMetricsType = "application/openmetrics-text; version=1.0.0; charset=utf-8"

// scrapeAs reads /metrics with accept as the Accept header ("" : none) and
// returns the body and its Content-Type.
func scrapeAs(t *testing.T, b *bundle, accept string) (body, contentType string) {
	t.Helper()
	req, _ := http.NewRequest("GET", b.hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := b.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics (Accept %q) = %d, %v", accept, resp.StatusCode, err)
	}
	return string(raw), resp.Header.Get("Content-Type")
}

// sample is one sample line of an exposition, its exemplar split off.
type sample struct {
	name, labels string // labels as written, without braces
	value        float64
	exemplar     string // the exemplar's label set as written ("" : none)
}

var (
	// A sample: name, optional {labels}, value, optional timestamp, then
	// optionally an exemplar: ` # {labels} value [timestamp]`.
	omSampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*?)\})? (\S+)(?: \S+)?(?: # \{(.*)\} (\S+)(?: (\S+))?)?$`)
	leLabel      = regexp.MustCompile(`(?:^|,)le="([^"]*)"`)
	// The exemplar of a docket histogram: exactly one trace id.
	traceExemplar = regexp.MustCompile(`^trace_id="([0-9a-f]{32})"$`)
)

// parseExposition reads an exposition's sample lines and its TYPE lines
// (family → type), failing the test on a line that is neither.
func parseExposition(t *testing.T, text string) (samples []sample, types map[string]string) {
	t.Helper()
	types = map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				t.Fatalf("bad TYPE line %q", line)
			}
			types[f[0]] = f[1]
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := omSampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a sample line: %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("sample value in %q: %v", line, err)
		}
		samples = append(samples, sample{name: m[1], labels: m[2], value: v, exemplar: m[4]})
	}
	return samples, types
}

// histogram sums a histogram's _count and _sum over the series whose
// labels contain every one of want, and reads the cumulative count of
// bucket le (over the same series).
func histogram(samples []sample, name string, le string, want ...string) (count, sum, bucket float64) {
	for _, s := range samples {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(s.labels, w)
		}
		if !ok {
			continue
		}
		switch s.name {
		case name + "_count":
			count += s.value
		case name + "_sum":
			sum += s.value
		case name + "_bucket":
			// OpenMetrics writes le as a float ("900.0"), the text format
			// as Go formats it ("900").
			if m := leLabel.FindStringSubmatch(s.labels); m != nil && le != "" {
				got, err1 := strconv.ParseFloat(m[1], 64)
				want, err2 := strconv.ParseFloat(le, 64)
				if err1 == nil && err2 == nil && got == want {
					bucket += s.value
				}
			}
		}
	}
	return count, sum, bucket
}

// durationHistograms are the run and action duration histograms.
var durationHistograms = []string{
	"docket_run_queue_wait_seconds",
	"docket_run_duration_seconds",
	"docket_action_queue_wait_seconds",
	"docket_action_approval_wait_seconds",
	"docket_action_duration_seconds",
}

// TestMetricsOpenMetricsWithTraceExemplars drives a run that waits for a
// person through the service, with tracing on and a clock only the test
// moves, then scrapes /metrics twice: as Prometheus' text format (no Accept)
// and as OpenMetrics (the Accept header Prometheus sends). Both carry the
// run and action duration histograms with the waits as the server saw them;
// only OpenMetrics carries exemplars, each naming the run's trace (the id
// its spans carry), and it ends with # EOF. promtool checks the text format
// (check metrics) and parses the OpenMetrics one with Prometheus' own
// OpenMetrics parser (tsdb create-blocks-from openmetrics, which wants a
// timestamp on every sample: the test adds them).
func TestMetricsOpenMetricsWithTraceExemplars(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	awaiting := awaitingSignal{ch: make(chan string, 16)}
	b := setup(t, options{tune: func(c *ui.Config) {
		c.TraceID = oteltrace.TraceID
		c.Now = clock.Now
		c.Executor.Observer = awaiting
	}})
	const runID = "om-run"
	// "safe": the read-only price is performed at once; every write waits
	// for a person.
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": runID, "plan": onboardingPlan(t), "approve": "safe"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	// The server's metrics have seen the run stop to wait (the ledger says
	// so a moment before the engine tells its observers).
	select {
	case <-awaiting.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the run never stopped to wait for a person")
	}
	// The reviewer takes an hour over the first approval; the rest are
	// approved at once.
	clock.advance(time.Hour)
	if doc := b.approveUntilDone(runID); doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("run %s ended %s, want completed", runID, doc.Run.Status)
	}
	run, err := b.led.GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}

	// Prometheus' text format: what it has always been, plus the histograms.
	text, ct := scrapeAs(t, b, "")
	if !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics without Accept: Content-Type %q, want the text format", ct)
	}
	if strings.Contains(text, "# EOF") || strings.Contains(text, " # {") {
		t.Errorf("the text format carries OpenMetrics syntax (# EOF or an exemplar)")
	}
	lintMetrics(t, text)
	textSamples, _ := parseExposition(t, text)

	// OpenMetrics, asked for as Prometheus asks for it.
	om, ct := scrapeAs(t, b, "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	if !strings.HasPrefix(ct, openMetricsType) {
		t.Fatalf("GET /metrics with the OpenMetrics Accept: Content-Type %q, want %q", ct, openMetricsType)
	}
	if !strings.HasSuffix(om, "\n# EOF\n") || strings.Count(om, "# EOF") != 1 {
		t.Fatalf("OpenMetrics exposition does not end with exactly one # EOF line; its end:\n%s", om[max(0, len(om)-300):])
	}
	omSamples, types := parseExposition(t, om)
	// Counters are families without _total whose samples have it.
	if types["docket_drives"] != "counter" || types["docket_drives_total"] != "" {
		t.Errorf("OpenMetrics counter family: TYPE of docket_drives %q, of docket_drives_total %q (want counter, none)", types["docket_drives"], types["docket_drives_total"])
	}
	for _, s := range omSamples {
		// (Not the Go collector's: it has a gauge go_memstats_alloc_bytes
		// beside the counter go_memstats_alloc_bytes_total.)
		if strings.HasPrefix(s.name, "docket_") && types[s.name] == "counter" {
			t.Errorf("counter sample %s without the _total suffix", s.name)
		}
	}

	wantTrace := oteltrace.TraceID(runID)
	exemplarsOf := map[string]int{} // histogram → bucket samples with an exemplar
	for _, s := range omSamples {
		if s.exemplar == "" {
			continue
		}
		m := traceExemplar.FindStringSubmatch(s.exemplar)
		if m == nil {
			t.Errorf("%s{%s}: exemplar {%s}, want exactly a 32-hex-digit trace_id", s.name, s.labels, s.exemplar)
			continue
		}
		if m[1] != wantTrace {
			t.Errorf("%s{%s}: exemplar trace_id %s, want the run's trace %s", s.name, s.labels, m[1], wantTrace)
		}
		if !strings.HasSuffix(s.name, "_bucket") {
			t.Errorf("exemplar on %s, want it on buckets only", s.name)
		}
		exemplarsOf[strings.TrimSuffix(s.name, "_bucket")]++
	}
	for _, h := range append(durationHistograms, "docket_tool_call_duration_seconds") {
		if exemplarsOf[h] == 0 {
			t.Errorf("%s: no exemplar with the run's trace id in the OpenMetrics scrape", h)
		}
	}

	// Both formats say the same about the waits.
	for format, samples := range map[string][]sample{"text": textSamples, "OpenMetrics": omSamples} {
		for _, h := range durationHistograms {
			if n, _, _ := histogram(samples, h, ""); n == 0 {
				t.Errorf("%s: %s has no observation", format, h)
			}
		}
		// The hour the reviewer took is the approval wait of the first
		// approval round (nothing waited longer), in no queue wait. ("safe"
		// leaves the at-most-once email to a person.)
		n, sum, under := histogram(samples, "docket_action_approval_wait_seconds", "900")
		if _, _, upTo := histogram(samples, "docket_action_approval_wait_seconds", "3600"); n == 0 || under == n || upTo != n || math.Mod(sum, 3600) != 0 {
			t.Errorf("%s: approval waits: %v observations summing to %vs, %v of them up to 15m, want some of exactly 1h and none longer", format, n, sum, under)
		}
		for _, h := range []string{"docket_run_queue_wait_seconds", "docket_action_queue_wait_seconds"} {
			if n, sum, _ := histogram(samples, h, ""); n == 0 || sum != 0 {
				t.Errorf("%s: %s: %v observations summing to %vs, want the claims at the instant the run was created or approved (the clock did not move)", format, h, n, sum)
			}
		}
		// Every write (and the read) succeeded: five actions, each from its
		// first claim to its outcome.
		if n, _, _ := histogram(samples, "docket_action_duration_seconds", "", `outcome="succeeded"`); n != 5 {
			t.Errorf("%s: docket_action_duration_seconds{outcome=succeeded} counts %v, want 5", format, n)
		}
		// The run's whole time is what the ledger recorded: created to completed.
		want := run.UpdatedAt.Sub(run.CreatedAt).Seconds()
		if n, sum, _ := histogram(samples, "docket_run_duration_seconds", "", `status="completed"`); n != 1 || math.Abs(sum-want) > 1e-9 {
			t.Errorf("%s: docket_run_duration_seconds{status=completed}: %v observations summing to %vs, want 1 of %vs (updated_at - created_at)", format, n, sum, want)
		}
	}

	promtoolOpenMetrics(t, om)
}

// TestMetricsOpenMetricsWithoutTracing: with tracing off the OpenMetrics
// scrape carries no exemplar (there is no trace to name) and still ends
// with # EOF.
func TestMetricsOpenMetricsWithoutTracing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": "plain", "plan": onboardingPlan(t), "approve": "all"}, nil); code != http.StatusCreated {
		t.Fatalf("create = %d", code)
	}
	b.waitStatus("plain", ledger.RunCompleted)
	om, ct := scrapeAs(t, b, "application/openmetrics-text; version=1.0.0")
	if !strings.HasPrefix(ct, openMetricsType) || !strings.HasSuffix(om, "\n# EOF\n") {
		t.Fatalf("Content-Type %q; ends with # EOF: %v", ct, strings.HasSuffix(om, "\n# EOF\n"))
	}
	samples, _ := parseExposition(t, om)
	for _, s := range samples {
		if s.exemplar != "" {
			t.Errorf("exemplar {%s} on %s without tracing", s.exemplar, s.name)
		}
	}
	if n, _, _ := histogram(samples, "docket_run_duration_seconds", "", `status="completed"`); n != 1 {
		t.Errorf("docket_run_duration_seconds{status=completed} counts %v, want 1", n)
	}
}

// promtoolOpenMetrics parses an OpenMetrics exposition with promtool's
// OpenMetrics importer (Prometheus' strict OpenMetrics parser, exemplars
// included). The importer wants a timestamp on every sample, which a scrape
// leaves out: the test adds one to each.
func promtoolOpenMetrics(t *testing.T, om string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testextra.Missing(t, "promtool ("+err.Error()+")", "apt-get install -y prometheus (Debian's package ships promtool; make test installs it when it runs as root)")
		return
	}
	var stamped strings.Builder
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sc := bufio.NewScanner(strings.NewReader(om))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.Contains(line, " # {"):
			i := strings.Index(line, " # {")
			line = line[:i] + " " + ts + line[i:]
		default:
			line += " " + ts
		}
		fmt.Fprintln(&stamped, line)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "scrape.om")
	if err := os.WriteFile(in, []byte(stamped.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), path, "tsdb", "create-blocks-from", "openmetrics", "--quiet", in, filepath.Join(dir, "blocks"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
	}
}
