package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inprocEnv is inproc with the environment getenv (falling back to the
// process's) instead of the process's alone.
func inprocEnv(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := testEnv(&out, &errb)
	env.Getenv = func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	err := runEnv(context.Background(), args, env)
	code := report(err, &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// startExampleAPI builds cmd/docket/examples/api, starts it on a free
// loopback port and returns its base URL.
func startExampleAPI(t *testing.T, extra ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example-api")
	build := exec.Command("go", "build", "-o", bin, "./examples/api")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example API: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"-addr", "127.0.0.1:0"}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the example API printed no address: %v", err)
	}
	m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the example API's first line %q names no address", line)
	}
	go func() { // keep the pipe drained
		var sink bytes.Buffer
		sink.ReadFrom(stdout)
	}()
	return m[1]
}

// exampleEffects reads the example API's effect counters.
func exampleEffects(t *testing.T, base string) map[string]int {
	t.Helper()
	resp, err := http.Get(base + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		Effects map[string]int `json:"effects"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c.Effects
}

// readmeBlock returns the lines of the first ```fence block after the line
// of the markdown file path (relative to this package) that contains marker.
func readmeBlock(t *testing.T, path, marker, fence string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("%s no longer contains %q", path, marker)
	}
	text = text[i:]
	start := strings.Index(text, "```"+fence+"\n")
	if start < 0 {
		t.Fatalf("no ```%s block after %q in %s", fence, marker, path)
	}
	text = text[start+len("```"+fence+"\n"):]
	end := strings.Index(text, "```")
	if end < 0 {
		t.Fatalf("unterminated block in %s", path)
	}
	return strings.Split(strings.TrimRight(text[:end], "\n"), "\n")
}

var exitComment = regexp.MustCompile(`\bexit (\d)\b`)

// TestReadmeRunYourOwnPlan runs the README's "run your own plan" commands as
// written, against the shipped example files and the example API, from a
// directory that looks like the repository's root (so ./docket-data lands in
// a temporary directory). Every line is either understood here or the test
// fails: the README cannot drift from what works.
func TestReadmeRunYourOwnPlan(t *testing.T) {
	lines := readmeBlock(t, "../../README.md", "start from the example pair", "sh")
	base := startExampleAPI(t)
	repoCmd, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Symlink(repoCmd, filepath.Join(root, "cmd")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)

	vars := map[string]string{}
	var runLine []string
	sawCurl, startedAPI, killedAPI := false, false, false
	for _, line := range lines {
		cmdText, comment, _ := strings.Cut(line, "#")
		cmdText = strings.TrimSpace(cmdText)
		want := exitOK
		if m := exitComment.FindStringSubmatch(comment); m != nil {
			want, _ = strconv.Atoi(m[1])
		}
		fields := strings.Fields(cmdText)
		switch {
		case cmdText == "go build -o bin/example-api ./cmd/docket/examples/api":
			// Built by startExampleAPI above.
		case cmdText == "bin/example-api & pid=$!":
			// Started above, on a free port instead of 8765.
			startedAPI = true
			if !strings.Contains(comment, "127.0.0.1:8765") {
				t.Errorf("the README no longer says where the API listens: %q", line)
			}
		case cmdText == "kill $pid":
			// The API is stopped by its PID (the test's cleanup stops it).
			if !startedAPI {
				t.Errorf("README line %q stops an API it did not start", line)
			}
			killedAPI = true
		case strings.HasPrefix(cmdText, "export EXAMPLE_API="):
			if got := strings.TrimPrefix(cmdText, "export EXAMPLE_API="); got != "http://127.0.0.1:8765" {
				t.Errorf("README exports EXAMPLE_API=%s, but the API listens on http://127.0.0.1:8765 by default", got)
			}
			vars["EXAMPLE_API"] = base
		case strings.HasPrefix(cmdText, "./docket "):
			// The binary of the quick start's `go build -o docket ./cmd/docket`.
			args := fields[1:]
			r := inprocEnv(t, vars, args...)
			if r.code != want {
				t.Fatalf("README line %q: exit %d, want %d\n%s", line, r.code, want, r)
			}
			if args[0] == "run" {
				runLine = args
			}
		case strings.HasPrefix(cmdText, "curl -s http://127.0.0.1:8765/effects"):
			sawCurl = true
			got := exampleEffects(t, base)
			for kind, n := range map[string]int{"customers": 1, "charges": 1, "emails": 1, "refunds": 0} {
				if got[kind] != n {
					t.Errorf("after the README's commands: %d %s, want %d (%v)", got[kind], kind, n, got)
				}
			}
		default:
			t.Fatalf("README line %q is not understood by this test: teach it, or keep the block literal", line)
		}
	}
	if runLine == nil || !sawCurl || !startedAPI || !killedAPI {
		t.Fatalf("the README block lost its run or its curl line:\n%s", strings.Join(lines, "\n"))
	}
	// "Run the run line again: it finds the run completed, calls nothing and exits 0."
	before := exampleEffects(t, base)
	again := inprocEnv(t, vars, runLine...)
	wantCode(t, again, exitOK)
	if d := doc(t, again); d.Status != "completed" {
		t.Fatalf("the rerun: %+v", d)
	}
	if after := exampleEffects(t, base); !equalCounts(before, after) {
		t.Fatalf("the rerun made effects: before %v, after %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(root, "docket-data")); err != nil {
		t.Fatalf("the README's commands should keep the ledger in ./docket-data: %v", err)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestExampleAPIKeyedInFlight: the example payment provider answers 409 while
// a request with the same key is in flight, and the stored answer after it,
// with one charge in all (what the README asks of a keyed provider).
func TestExampleAPIKeyedInFlight(t *testing.T) {
	t.Parallel()
	base := startExampleAPI(t, "-slow", "3s")
	post := func() (int, string) {
		req, _ := http.NewRequest("POST", base+"/charges", strings.NewReader(`{"customer":"cus_1","amount":5,"currency":"EUR"}`))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	first := make(chan string, 1)
	go func() {
		code, body := post()
		if code != http.StatusCreated {
			t.Errorf("first request: %d %s", code, body)
		}
		first <- body
	}()
	// Wait until the first request is being processed (its effect counted;
	// it then takes 3 s to answer).
	deadline := time.Now().Add(30 * time.Second)
	for exampleEffects(t, base)["charges"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first charge never started")
		}
	}
	if code, body := post(); code != http.StatusConflict {
		t.Fatalf("same key while in flight: %d %s, want 409", code, body)
	}
	body1 := <-first
	if code, body := post(); code != http.StatusCreated || body != body1 {
		t.Fatalf("same key after: %d %s, want the stored answer %s", code, body, body1)
	}
	if n := exampleEffects(t, base)["charges"]; n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// TestReadmeToolsExample: the tools-file example in the README checks clean
// (every tool it names is defined), given its environment variables.
func TestReadmeToolsExample(t *testing.T) {
	t.Parallel()
	lines := readmeBlock(t, "../../tools/README.md", "runs as shipped: [cmd/docket/examples/tools.json]", "json")
	path := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	r := inprocEnv(t, map[string]string{"PAY_URL": "http://127.0.0.1:1", "PAY_KEY": "sk_test_example"}, "tools", "check", "--tools", path)
	wantCode(t, r, exitOK)
}
