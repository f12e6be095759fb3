package main

import (
	"github.com/gorilla/websocket"

	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/docketrun/docket/evals/testextra"
	"io"
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

// diskTmpfsSize is the tmpfs the disk-full tests fill: room for the ledger's
// default headroom (59 MiB) and reserve (21 MiB) plus the runs, so that
// docket writes before the fill and again once it is removed.
const diskTmpfsSize = 100 << 20

// fillDisk writes zeros into a file until the file system is full (ENOSPC)
// and returns the file's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "fill")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := len(buf); n >= 512; n /= 2 {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling %s: %v", dir, err)
				}
				break
			}
		}
	}
	return p
}

// chargeWorld is a payments API that deduplicates by Idempotency-Key and
// counts effects per key, with a gate: the first request for reference
// "gate" waits until the test opens it.
type chargeWorld struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects map[string]int // reference → charges made
	byKey   map[string][]byte
	arrived chan struct{} // closed when the gated request arrives
	open    chan struct{} // closed by the test to let it through
	gated   bool
}

func newChargeWorld(t *testing.T) *chargeWorld {
	w := &chargeWorld{effects: map[string]int{}, byKey: map[string][]byte{}, arrived: make(chan struct{}), open: make(chan struct{})}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			Reference string `json:"reference"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || r.Header.Get("Idempotency-Key") == "" {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		w.mu.Lock()
		gate := body.Reference == "gate" && !w.gated
		if gate {
			w.gated = true
			close(w.arrived)
		}
		w.mu.Unlock()
		if gate {
			select {
			case <-w.open:
			case <-r.Context().Done():
				return
			}
		}
		w.mu.Lock()
		resp, ok := w.byKey[key]
		if !ok {
			w.effects[body.Reference]++
			resp = []byte(fmt.Sprintf(`{"id": "ch_%s", "reference": %q}`, key[4:16], body.Reference))
			w.byKey[key] = resp
		}
		w.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		rw.Write(resp)
	}))
	t.Cleanup(func() {
		select {
		case <-w.open:
		default:
			close(w.open)
		}
		w.srv.Close()
	})
	return w
}

func (w *chargeWorld) toolsFile(t *testing.T, dir string) string {
	t.Helper()
	tools := fmt.Sprintf(`{"version": 1, "tools": [{
  "name": "charge", "description": "Charge a customer; deduplicated by Idempotency-Key.", "effect": "keyed",
  "input_schema": {"type": "object", "properties": {"reference": {"type": "string"}, "amount": {"type": "integer"}},
                   "required": ["reference", "amount"], "additionalProperties": false},
  "request": {"method": "POST", "url": %q}, "key_header": "Idempotency-Key", "key_ttl": "24h", "timeout": "5s"}]}`, w.srv.URL+"/charges")
	p := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(p, []byte(tools), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (w *chargeWorld) effectsOf(refs ...string) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := map[string]int{}
	for _, r := range refs {
		m[r] = w.effects[r]
	}
	return m
}

// diskPlan: first, then gate (the test fills the disk while gate's request
// is held), then last.
const diskPlan = `{"goal": "charge three times", "actions": [
  {"id": "first", "tool": "charge", "args": {"reference": "first", "amount": 1}},
  {"id": "gate", "tool": "charge", "depends_on": ["first"], "args": {"reference": "gate", "amount": 2}},
  {"id": "last", "tool": "charge", "depends_on": ["gate"], "args": {"reference": "last", "amount": 3}}]}`

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A disk that fills while `docket run` performs a plan (issue 13): the real
// binary stops with exit 5 and "no space left on DIR: free space and run the
// same command again", prints the Run JSON, and reads (`runs list`, `runs
// show`, the same run command) work while the disk is full. Once space is
// freed the same command completes the run with exactly one charge per
// action. Before the fix the child died of SIGBUS (exit 2, a goroutine dump,
// no Run JSON) and so did `runs list`.
func TestDiskFullRun(t *testing.T) {
	mnt := testextra.MountTmpfs(t, diskTmpfsSize)
	w := newChargeWorld(t)
	dir := t.TempDir()
	data := filepath.Join(mnt, "data")
	tools := w.toolsFile(t, dir)
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(diskPlan), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--data", data, "--tools", tools, "--plan", planPath, "--run-id", "full-1", "--approve", "all"}

	p := start(t, "", args...)
	waitClosed(t, w.arrived, "the gated charge")
	filler := fillDisk(t, mnt)
	close(w.open)
	r := p.finish(t, false)
	wantCode(t, r, exitNoSpace)
	wantMsg := "no space left on " + data + ": free space and run the same command again"
	if !strings.Contains(r.stderr, wantMsg) {
		t.Fatalf("stderr lacks %q\n%s", wantMsg, r)
	}
	d := doc(t, r)
	if d.RunID != "full-1" || d.action("first").Status != "succeeded" || d.action("last").Status == "succeeded" {
		t.Fatalf("Run JSON after the disk filled: %+v\n%s", d, r)
	}

	// Reads while the disk is full.
	list := child(t, "", "runs", "list", "--data", data)
	wantCode(t, list, exitOK)
	if !strings.Contains(list.stdout, "full-1") {
		t.Fatalf("runs list does not show the run\n%s", list)
	}
	show := child(t, "", "runs", "show", "--json", "--data", data, "full-1")
	wantCode(t, show, exitOK)
	if doc(t, show).RunID != "full-1" {
		t.Fatalf("runs show\n%s", show)
	}
	again := child(t, "", args...)
	wantCode(t, again, exitNoSpace)
	if !strings.Contains(again.stderr, wantMsg) || doc(t, again).RunID != "full-1" {
		t.Fatalf("the same command on a full disk\n%s", again)
	}

	// Space freed: the same command finishes the run, one charge per action.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	done := child(t, "", args...)
	wantCode(t, done, exitOK)
	if s := doc(t, done).Status; s != "completed" {
		t.Fatalf("status %q after space was freed\n%s", s, done)
	}
	for ref, n := range w.effectsOf("first", "gate", "last") {
		if n != 1 {
			t.Errorf("%d charges for %s, want exactly 1", n, ref)
		}
	}
}

// A process killed mid-run leaves its memtable in the write-ahead log, which
// Badger will not open read-only; when the disk is then full, the ledger
// gives back its reserve and opens for writing, so reads still work, writes
// are refused (exit 5, Run JSON), and the rerun after freeing space
// completes with one charge per action.
func TestDiskFullAfterKill(t *testing.T) {
	mnt := testextra.MountTmpfs(t, diskTmpfsSize)
	w := newChargeWorld(t)
	close(w.open)
	dir := t.TempDir()
	data := filepath.Join(mnt, "data")
	tools := w.toolsFile(t, dir)
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(diskPlan), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--data", data, "--tools", tools, "--plan", planPath, "--run-id", "killed-1", "--approve", "all"}
	if r := child(t, "after_outcome:gate", args...); !r.killed {
		t.Fatalf("the child never reached after_outcome of gate\n%s", r)
	}
	filler := fillDisk(t, mnt)

	list := child(t, "", "runs", "list", "--data", data)
	wantCode(t, list, exitOK)
	if !strings.Contains(list.stdout, "killed-1") {
		t.Fatalf("runs list does not show the run\n%s", list)
	}
	again := child(t, "", args...)
	wantCode(t, again, exitNoSpace)
	if d := doc(t, again); d.RunID != "killed-1" || d.action("gate").Status != "succeeded" {
		t.Fatalf("the same command on a full disk after a kill\n%s", again)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	done := child(t, "", args...)
	wantCode(t, done, exitOK)
	if s := doc(t, done).Status; s != "completed" {
		t.Fatalf("status %q after space was freed\n%s", s, done)
	}
	for ref, n := range w.effectsOf("first", "gate", "last") {
		if n != 1 {
			t.Errorf("%d charges for %s, want exactly 1", n, ref)
		}
	}
}

// servedChild is `docket serve` running as a child process (a fault in it
// must not take the test down with it).
type servedChild struct {
	cmd    *exec.Cmd
	base   string
	stderr *lockedBuffer // its log
	done   chan error
}

// output is what the service logged so far.
func (s *servedChild) output() string { return s.stderr.String() }

func startServeChild(t *testing.T, args ...string) *servedChild {
	t.Helper()
	return startServeChildEnv(t, os.Environ(), args...)
}

// startServeChildEnv is startServeChild with the child's environment env.
func startServeChildEnv(t testing.TB, env []string, args ...string) *servedChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(env, asDocketEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	s := &servedChild{cmd: cmd, done: make(chan error, 1), stderr: stderr}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "docket serve: listening on "); ok {
				select {
				case listening <- strings.TrimSuffix(rest, "/"):
				default:
				}
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case s.base = <-listening:
	case err := <-s.done:
		t.Fatalf("serve ended before listening: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve printed no URL in time\n%s", stderr.String())
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.done
	})
	return s
}

// call sends a request with the token and returns the status, the
// Retry-After header and the decoded error code, if any.
func (s *servedChild) call(t *testing.T, method, path, token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v (is serve still up?)", method, path, err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, resp.Header.Get("Retry-After"), e.Error.Code
}

// `docket serve` on a disk that fills: it stays up, refuses writes with 503
// no_space and Retry-After, keeps answering reads, and once space is freed
// the same request is accepted and the run completes with one charge per
// action; it then stops cleanly.
func TestDiskFullServe(t *testing.T) {
	mnt := testextra.MountTmpfs(t, diskTmpfsSize)
	w := newChargeWorld(t)
	close(w.open) // nothing is gated here
	dir := t.TempDir()
	data := filepath.Join(mnt, "data")
	tools := w.toolsFile(t, dir)
	const token = "disk-full-test-token"
	s := startServeChild(t, "--data", data, "--tools", tools, "--token", token)

	body := func(id string) string {
		return fmt.Sprintf(`{"run_id": %q, "approve": "all", "plan": %s}`, id, diskPlan)
	}
	// A run before the disk fills, waited for through the CLI (--server).
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, []byte(diskPlan), 0o600); err != nil {
		t.Fatal(err)
	}
	before := child(t, "", "run", "--server", s.base, "--token", token, "--plan", planPath, "--run-id", "before", "--approve", "all")
	wantCode(t, before, exitOK)

	filler := fillDisk(t, mnt)
	status, retry, code := s.call(t, "POST", "/v1/runs", token, body("during"))
	if status != http.StatusServiceUnavailable || code != "no_space" || retry == "" {
		t.Fatalf("POST /v1/runs on a full disk: %d %q (Retry-After %q), want 503 no_space with Retry-After", status, code, retry)
	}
	for _, path := range []string{"/v1/runs/before", "/v1/runs", "/readyz"} {
		if status, _, code := s.call(t, "GET", path, token, ""); status != http.StatusOK {
			t.Fatalf("GET %s on a full disk: %d %s", path, status, code)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	during := child(t, "", "run", "--server", s.base, "--token", token, "--plan", planPath, "--run-id", "during", "--approve", "all")
	wantCode(t, during, exitOK)
	if st := doc(t, during).Status; st != "completed" {
		t.Fatalf("run after space was freed: %s\n%s", st, during)
	}
	for ref, n := range w.effectsOf("first", "gate", "last") {
		if n != 2 { // one per run: "before" and "during"
			t.Errorf("%d charges for %s, want 2 (one per run)", n, ref)
		}
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("serve stopped with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop after SIGTERM")
	}
}

// TestDiskFullServeResumesAnInterruptedRun: the disk fills while a run is
// being driven by `docket serve` (the call of "gate" is at the provider).
// Recording its outcome is refused; once space is freed the service goes on
// with the run by itself, without a restart, and each charge happens once.
func TestDiskFullServeResumesAnInterruptedRun(t *testing.T) {
	mnt := testextra.MountTmpfs(t, diskTmpfsSize)
	w := newChargeWorld(t)
	dir := t.TempDir()
	const token = "disk-full-test-token"
	s := startServeChild(t, "--data", filepath.Join(mnt, "data"), "--tools", w.toolsFile(t, dir), "--token", token)
	body := fmt.Sprintf(`{"run_id": "mid", "approve": "all", "plan": %s}`, diskPlan)
	if status, _, code := s.call(t, "POST", "/v1/runs", token, body); status != http.StatusCreated {
		t.Fatalf("POST /v1/runs: %d %s", status, code)
	}
	waitClosed(t, w.arrived, "the gate charge at the provider")
	filler := fillDisk(t, mnt)
	close(w.open) // the provider answers; the outcome cannot be recorded now

	// Follow the run's events; free the space once the drive was refused.
	u := "ws" + strings.TrimPrefix(s.base, "http") + "/v1/runs/mid/ws?after=0"
	c, resp, err := websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", u, err, resp)
	}
	defer c.Close()
	freed := false
	deadline := time.Now().Add(90 * time.Second)
	for {
		if !freed && strings.Contains(s.output(), "no space left: the run continues once space is freed") {
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			freed = true
		}
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var m struct {
			Event *struct {
				Type string `json:"type"`
			} `json:"event"`
		}
		err := c.ReadJSON(&m)
		if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
			if time.Now().After(deadline) {
				t.Fatalf("run mid did not complete (freed %v); serve said:\n%s", freed, s.output())
			}
			// A read deadline breaks a gorilla connection: dial again, from the start.
			c.Close()
			if c, _, err = websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {"Bearer " + token}}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("reading events: %v", err)
		}
		if m.Event != nil && m.Event.Type == "run.completed" {
			break
		}
		if m.Event != nil && (m.Event.Type == "run.failed" || m.Event.Type == "run.paused") {
			t.Fatalf("run mid ended %s", m.Event.Type)
		}
	}
	if !freed {
		t.Fatal("the run completed on a full disk?")
	}
	for ref, n := range w.effectsOf("first", "gate", "last") {
		if n != 1 {
			t.Errorf("%d charges for %s, want 1", n, ref)
		}
	}
}
