package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Environment variables through which the harness gives a docket child its
// role. `docket chaos` reads them (cmd/docket/chaos.go).
const (
	// WorldEnv holds a WorldConfig (JSON): the process serves the world
	// (ServeWorld) instead of running the harness.
	WorldEnv = "DOCKET_CHAOS_WORLD"
	// ChildEnv holds a ChildSpec (JSON): the process runs a docket command
	// line with a crash point armed.
	ChildEnv = "DOCKET_CHAOS_CHILD"
)

// CrashMarker starts the line (on stderr) a child prints when it reaches its
// crash point; it then blocks until it is killed. It must equal the marker of
// cmd/docket's crash hooks.
const CrashMarker = "DOCKET-CRASH-POINT"

// CrashPoints are the executor hooks a child can stop at, in the order an
// action passes them.
var CrashPoints = []string{"before_claim", "after_claim", "after_call", "after_outcome"}

// ChildSpec tells a child process what to run and where to stop.
type ChildSpec struct {
	Args  []string `json:"args"`  // a docket command line
	Crash string   `json:"crash"` // POINT:ACTION
}

// Docket says how to start the docket binary.
type Docket struct {
	Exe string   // path of the binary
	Env []string // extra environment for every child (tests run their own binary as docket)
}

// kill is when the harness kills one child.
type kill struct {
	After  time.Duration // > 0: SIGKILL this long after the start
	Point  string        // != "": SIGKILL when the child reports reaching Point of Action
	Action string
}

func (k kill) String() string {
	switch {
	case k.Point != "":
		return k.Point + ":" + k.Action
	case k.After > 0:
		return "after " + k.After.Round(time.Millisecond).String()
	}
	return "none"
}

// outcome is what one child did.
type outcome struct {
	args   []string
	code   int  // exit code, -1 when killed by a signal
	killed bool // died of our SIGKILL
	stdout []byte
	stderr string // the last few KiB
}

func (o outcome) String() string {
	return fmt.Sprintf("docket %s: exit %d killed=%v\nstderr:\n%s", strings.Join(o.args, " "), o.code, o.killed, o.stderr)
}

// childTimeout bounds one child; a child that takes longer is killed and
// reported as stuck.
const childTimeout = 5 * time.Minute

// errStuck means a child outlived childTimeout.
var errStuck = errors.New("the docket child did not finish in time")

// spawn runs docket with args and kills it as k says.
func (d Docket) spawn(ctx context.Context, args []string, k kill) (outcome, error) {
	out := outcome{args: args}
	cmd := exec.Command(d.Exe, args...)
	cmd.Env = append(os.Environ(), d.Env...)
	if k.Point != "" {
		cmd.Args = []string{d.Exe, "chaos"}
		spec, err := json.Marshal(ChildSpec{Args: args, Crash: k.Point + ":" + k.Action})
		if err != nil {
			return out, err
		}
		cmd.Env = append(cmd.Env, ChildEnv+"="+string(spec))
	}
	setParentDeath(cmd)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return out, err
	}
	if err := cmd.Start(); err != nil {
		return out, fmt.Errorf("starting docket: %w", err)
	}
	var (
		mu     sync.Mutex
		signal bool
	)
	killNow := func() {
		mu.Lock()
		signal = true
		mu.Unlock()
		cmd.Process.Signal(syscall.SIGKILL)
	}
	if k.After > 0 {
		t := time.AfterFunc(k.After, killNow)
		defer t.Stop()
	}
	var stuck atomic.Bool
	guard := time.AfterFunc(childTimeout, func() { stuck.Store(true); cmd.Process.Signal(syscall.SIGKILL) })
	defer guard.Stop()
	stop := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGKILL) })
	defer stop()

	tail := &tailBuffer{max: 8 << 10}
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k.Point != "" && strings.HasPrefix(line, CrashMarker) {
			killNow()
		}
		tail.WriteString(line + "\n")
	}
	io.Copy(io.Discard, stderr)
	werr := cmd.Wait()
	guard.Stop()
	out.stdout = stdout.Bytes()
	out.stderr = tail.String()
	out.code = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		mu.Lock()
		out.killed = signal
		mu.Unlock()
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	if stuck.Load() {
		return out, fmt.Errorf("%w (%s): %s", errStuck, childTimeout, out)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return out, fmt.Errorf("running docket: %w", werr)
	}
	return out, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) WriteString(s string) {
	t.b = append(t.b, s...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
}

func (t *tailBuffer) String() string {
	if len(t.b) > t.max {
		return "…" + string(t.b[len(t.b)-t.max:])
	}
	return string(t.b)
}

// worldProc is the world's process.
type worldProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
	errs  *tailBuffer
	done  chan struct{}
}

// startWorld starts the world in its own process and waits for its address.
func (d Docket) startWorld(ctx context.Context, cfg WorldConfig) (*worldProc, error) {
	spec, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(d.Exe, "chaos")
	cmd.Env = append(append(os.Environ(), d.Env...), WorldEnv+"="+string(spec))
	setParentDeath(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &worldProc{cmd: cmd, stdin: stdin, errs: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	var errMu sync.Mutex
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the world: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errMu.Lock()
			w.errs.WriteString(sc.Text() + "\n")
			errMu.Unlock()
		}
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				line <- sc.Text()
				first = false
			}
		}
		if first {
			close(line)
		}
		cmd.Wait()
		close(w.done)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case l, ok := <-line:
		if !ok || !strings.HasPrefix(l, worldLine) {
			w.stop()
			errMu.Lock()
			defer errMu.Unlock()
			return nil, fmt.Errorf("the world did not start (%q): %s", l, w.errs.String())
		}
		w.url = strings.TrimPrefix(l, worldLine)
		return w, nil
	case <-t.C:
	case <-ctx.Done():
	}
	w.stop()
	return nil, fmt.Errorf("the world did not say where it listens within 30s")
}

// stop ends the world: closing its stdin tells it to exit.
func (w *worldProc) stop() {
	w.stdin.Close()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.cmd.Process.Signal(syscall.SIGKILL)
		<-w.done
	}
}

// serveProc is a `docket serve` child: the process that drives a run while
// the harness issues pauses, cancels, edits and replays through its API.
type serveProc struct {
	url  string        // http://ADDR, once it listens
	done chan struct{} // closed when the process has exited
	out  outcome       // valid once done is closed
	cmd  *exec.Cmd
}

// serveLine starts the line `docket serve` prints on stdout when it listens.
const serveLine = "docket serve: listening on "

// startServe starts `docket serve` with args (which must listen on
// 127.0.0.1:0) and kills it as k says. It returns once the child says where
// it listens, or once it exited without saying so (then url is "" and done
// is closed).
func (d Docket) startServe(ctx context.Context, args []string, k kill) (*serveProc, error) {
	p := &serveProc{done: make(chan struct{}), out: outcome{args: args}}
	cmd := exec.Command(d.Exe, args...)
	cmd.Env = append(os.Environ(), d.Env...)
	if k.Point != "" {
		cmd.Args = []string{d.Exe, "chaos"}
		spec, err := json.Marshal(ChildSpec{Args: args, Crash: k.Point + ":" + k.Action})
		if err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, ChildEnv+"="+string(spec))
	}
	setParentDeath(cmd)
	p.cmd = cmd
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting docket serve: %w", err)
	}
	var (
		mu     sync.Mutex
		signal bool
	)
	killNow := func() {
		mu.Lock()
		signal = true
		mu.Unlock()
		cmd.Process.Signal(syscall.SIGKILL)
	}
	var timed *time.Timer
	if k.After > 0 {
		timed = time.AfterFunc(k.After, killNow)
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGKILL) })
	listening := make(chan string, 1)
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if l := sc.Text(); !sent && strings.HasPrefix(l, serveLine) {
				listening <- strings.TrimSuffix(strings.TrimPrefix(l, serveLine), "/")
				sent = true
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	tail := &tailBuffer{max: 8 << 10}
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if k.Point != "" && strings.HasPrefix(line, CrashMarker) {
				killNow()
			}
			tail.WriteString(line + "\n")
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		pipes.Wait()
		cmd.Wait()
		stop()
		if timed != nil {
			timed.Stop()
		}
		p.out.stderr = tail.String()
		p.out.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			mu.Lock()
			p.out.killed = signal
			mu.Unlock()
		}
		close(p.done)
	}()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case p.url = <-listening:
		return p, nil
	case <-p.done:
		return p, nil
	case <-t.C:
		p.kill()
		return nil, fmt.Errorf("docket serve did not say where it listens within a minute")
	}
}

// kill ends the child at once and waits for it.
func (p *serveProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the child to shut down (SIGTERM: in-flight actions finish and
// are recorded) and waits for it.
func (p *serveProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// dead reports whether the child has exited.
func (p *serveProc) dead() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
