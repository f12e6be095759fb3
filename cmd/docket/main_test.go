package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/executor"
)

// The test binary doubles as the docket binary: with asDocketEnv=1 it runs
// the command line it was given, like main, with crash hooks from crashAtEnv
// (POINT:ACTION) and the executor's clock-skew margin from skewEnv. The crash
// tests start it as a child and SIGKILL it at the crash point.
const (
	asDocketEnv = "DOCKET_TEST_AS_DOCKET"
	crashAtEnv  = "DOCKET_TEST_CRASH_AT"
	skewEnv     = "DOCKET_TEST_SKEW"
)

// testSkew is the executor's clock-skew margin in tests: a crashed lookup
// action's "not found" is trusted after the tool's timeout (1s) plus this.
const testSkew = 100 * time.Millisecond

func TestMain(m *testing.M) {
	if os.Getenv(asDocketEnv) == "1" || os.Getenv(demoChildEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	sharedPG.Stop()
	os.Exit(code)
}

func childMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	if spec := os.Getenv(crashAtEnv); spec != "" {
		point, action, err := parseCrashSpec(spec)
		if err == nil {
			env.Hooks, err = crashHooks(ctx, point, action, os.Stderr)
		}
		if err != nil {
			return report(err, os.Stderr)
		}
	}
	if v := os.Getenv(skewEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return report(fmt.Errorf("%s: %w", skewEnv, err), os.Stderr)
		}
		env.Tune = func(c *executor.Config) { c.SkewMargin = d }
	}
	return report(runEnv(ctx, os.Args[1:], env), os.Stderr)
}

// testEnv is the Env of in-process command runs: the same tuning as children.
func testEnv(stdout, stderr io.Writer) Env {
	return Env{
		Stdin:  strings.NewReader(""),
		Stdout: stdout,
		Stderr: stderr,
		Getenv: os.Getenv,
		Tune:   func(c *executor.Config) { c.SkewMargin = testSkew },
	}
}

// result is what one docket command did.
type result struct {
	args   []string
	code   int    // exit code (-1 when killed)
	killed bool   // reached the crash point and was SIGKILLed
	stdout string // what it printed on stdout
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("docket %s: exit %d killed=%v\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.killed, r.stdout, r.stderr)
}

// inproc runs a docket command line in this process, the way main does.
func inproc(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	err := runEnv(context.Background(), args, testEnv(&out, &errb))
	code := report(err, &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// proc is a docket child process (this test binary) under the test's control.
type proc struct {
	args   []string
	c      *crashChild
	cancel context.CancelFunc
	out    bytes.Buffer
	errb   strings.Builder
}

// start starts docket with args as a child. With crash = "POINT:ACTION" the
// child stops at that point and reports it on stderr (see waitMarker).
func start(t *testing.T, crash string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	p := &proc{args: args, cancel: cancel}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asDocketEnv+"=1", skewEnv+"="+testSkew.String())
	if crash != "" {
		cmd.Env = append(cmd.Env, crashAtEnv+"="+crash)
	}
	cmd.Stdout = &p.out
	var err error
	if p.c, err = startCrashChild(cmd); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitMarker reads the child's stderr until it reports its crash point (true)
// or closes stderr (false: it is ending).
func (p *proc) waitMarker() bool {
	reached, _ := p.c.untilCrashPoint(func(line string) { p.errb.WriteString(line + "\n") })
	return reached
}

// finish kills the child with SIGKILL if kill is set, waits for it and
// returns what it did. A child that died of a signal the test did not send
// fails the test.
func (p *proc) finish(t *testing.T, kill bool) result {
	t.Helper()
	defer p.cancel()
	if kill {
		if err := p.c.kill(); err != nil {
			t.Fatalf("killing the child: %v", err)
		}
	}
	werr := p.c.wait(&p.errb)
	res := result{args: p.args, killed: kill, stdout: p.out.String(), stderr: p.errb.String()}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		res.code = ee.ExitCode()
		if sig, ok := deathSignal(werr); ok && (!kill || sig != syscall.SIGKILL) {
			t.Fatalf("child died of %v without being killed by the test:\n%s", sig, res)
		}
	default:
		t.Fatalf("waiting for the child: %v", werr)
	}
	if kill && res.code != -1 {
		t.Fatalf("child reached the crash point but exited %d before the kill:\n%s", res.code, res)
	}
	return res
}

// child runs a docket command line as a child process. With crash =
// "POINT:ACTION" the child stops there and the test kills it with SIGKILL
// (result.killed); if it ends without reaching the point, the result is its
// normal exit.
func child(t *testing.T, crash string, args ...string) result {
	t.Helper()
	p := start(t, crash, args...)
	return p.finish(t, p.waitMarker() && crash != "")
}

// startBlocked starts a child that stops at its crash point and stays there,
// holding the data directory, until the test kills it with finish(t, true).
func startBlocked(t *testing.T, crash string, args ...string) *proc {
	t.Helper()
	p := start(t, crash, args...)
	if !p.waitMarker() {
		t.Fatalf("child never reached %s:\n%s", crash, p.finish(t, false))
	}
	return p
}

// runJSON is the Run JSON contract (ledger/README.md, Run JSON), decoded strictly enough to
// notice a missing or misspelled field.
type runJSON struct {
	RunID     string       `json:"run_id"`
	Status    string       `json:"status"`
	Revision  int          `json:"revision"`
	Goal      string       `json:"goal"`
	Policy    string       `json:"policy"`
	CreatedAt string       `json:"created_at"`
	UpdatedAt string       `json:"updated_at"`
	Actions   []actionJSON `json:"actions"`
	Error     string       `json:"error"`
	TraceID   string       `json:"trace_id,omitempty"` // only when tracing is on
	// WaitingUntil: only while an action waits for its time.
	WaitingUntil string `json:"waiting_until,omitempty"`
	// Retention: only on a run with a retention of its own.
	Retention string `json:"retention,omitempty"`
}

type actionJSON struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Class     string          `json:"class"`
	Key       string          `json:"key"`
	Status    string          `json:"status"`
	Attempts  int             `json:"attempts"`
	Args      json.RawMessage `json:"args"`
	DependsOn []string        `json:"depends_on"`
	Output    json.RawMessage `json:"output"`
	Error     string          `json:"error"`
	Timer     json.RawMessage `json:"timer,omitempty"`     // only on actions with not_before or after
	ToolWait  json.RawMessage `json:"tool_wait,omitempty"` // only while its tool's limits hold it back
}

var runJSONFields = []string{"run_id", "status", "revision", "goal", "policy", "created_at", "updated_at", "actions", "error"}
var actionJSONFields = []string{"id", "tool", "class", "key", "status", "attempts", "args", "depends_on", "output", "error"}

// doc decodes r's stdout as Run JSON, failing the test if it is not exactly that.
func doc(t *testing.T, r result) runJSON {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &fields); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, r)
	}
	for _, f := range runJSONFields {
		if _, ok := fields[f]; !ok {
			t.Fatalf("Run JSON lacks %q\n%s", f, r)
		}
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var d runJSON
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("stdout is not the Run JSON: %v\n%s", err, r)
	}
	var acts []map[string]json.RawMessage
	if err := json.Unmarshal(fields["actions"], &acts); err != nil {
		t.Fatalf("actions: %v\n%s", err, r)
	}
	for _, a := range acts {
		for _, f := range actionJSONFields {
			if _, ok := a[f]; !ok {
				t.Fatalf("an action in the Run JSON lacks %q\n%s", f, r)
			}
		}
	}
	return d
}

func (d runJSON) action(id string) actionJSON {
	for _, a := range d.Actions {
		if a.ID == id {
			return a
		}
	}
	return actionJSON{}
}

// bundle is what a command test works with: a simulated world, its tools
// file and a data directory.
type bundle struct {
	world *demoworld.World
	dir   string // temporary directory of the test
	data  string // data directory
	tools string // tools file
}

func setup(t *testing.T) *bundle {
	t.Helper()
	w := demoworld.Start()
	t.Cleanup(w.Close)
	dir := t.TempDir()
	b := &bundle{world: w, dir: dir, data: filepath.Join(dir, "data"), tools: filepath.Join(dir, "tools.json")}
	if err := os.WriteFile(b.tools, w.ToolsFile(demoworld.ToolsOptions{Timeout: "1s"}), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// plan writes a plan file and returns its path.
func (b *bundle) plan(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(b.dir, name+".json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runArgs is a `docket run` command line against b.
func (b *bundle) runArgs(planPath string, extra ...string) []string {
	return append([]string{"run", "--data", b.data, "--tools", b.tools, "--plan", planPath}, extra...)
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\n%s", r.code, code, r)
	}
}
