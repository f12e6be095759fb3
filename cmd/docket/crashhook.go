package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/docketrun/docket/executor"
)

// Crash injection for the demo's child process and the crash tests: at a
// chosen executor hook for a chosen action, the process prints a marker line
// on stderr and blocks; the parent, reading stderr, kills it with SIGKILL at
// that exact point. Nothing here runs unless a hook spec is given.

// crashMarker starts the line a process prints when it reaches its crash point.
const crashMarker = "DOCKET-CRASH-POINT"

// crashPoints are the points a crash can be injected at, in the order an
// action passes them.
var crashPoints = []string{"before_claim", "after_claim", "after_call", "after_outcome"}

// crashHooks returns executor hooks that stop the process at point for
// action: "before_claim" (nothing written yet), "after_claim" (claim durable,
// tool not called), "after_call" (the external system acted, the outcome is
// not recorded), "after_outcome" (outcome durable). There the process prints
// "DOCKET-CRASH-POINT <point> <action>" on w and blocks until it is killed; if
// ctx ends first (Ctrl-C) it exits at once with status 1, recording nothing
// more, as a crash would.
func crashHooks(ctx context.Context, point, action string, w io.Writer) (executor.Hooks, error) {
	stop := func(id string) {
		if id != action {
			return
		}
		fmt.Fprintf(w, "%s %s %s\n", crashMarker, point, action)
		if f, ok := w.(*os.File); ok {
			f.Sync()
		}
		<-ctx.Done()
		os.Exit(exitFailed)
	}
	var h executor.Hooks
	switch point {
	case "before_claim":
		h.BeforeClaim = stop
	case "after_claim":
		h.AfterClaim = stop
	case "after_call":
		h.AfterCall = stop
	case "after_outcome":
		h.AfterOutcome = stop
	default:
		return h, fmt.Errorf("unknown crash point %q (want one of %s)", point, strings.Join(crashPoints, ", "))
	}
	return h, nil
}

// parseCrashSpec splits "POINT:ACTION".
func parseCrashSpec(spec string) (point, action string, err error) {
	point, action, ok := strings.Cut(spec, ":")
	if !ok || point == "" || action == "" {
		return "", "", fmt.Errorf("crash spec %q: want POINT:ACTION", spec)
	}
	return point, action, nil
}

// crashChild is a docket child process that may stop at its crash point and
// say so on stderr; its parent then kills it there with SIGKILL.
type crashChild struct {
	cmd  *exec.Cmd
	pipe io.ReadCloser
	sc   *bufio.Scanner
}

// startCrashChild starts cmd (its Stdout set by the caller) and reads its
// stderr line by line.
func startCrashChild(cmd *exec.Cmd) (*crashChild, error) {
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return &crashChild{cmd: cmd, pipe: pipe, sc: bufio.NewScanner(pipe)}, nil
}

// untilCrashPoint passes each stderr line to seen until the child reports its
// crash point (reached, with "POINT ACTION") or closes stderr (it is ending).
func (c *crashChild) untilCrashPoint(seen func(line string)) (reached bool, where string) {
	for c.sc.Scan() {
		line := c.sc.Text()
		if rest, ok := strings.CutPrefix(line, crashMarker); ok {
			return true, strings.TrimSpace(rest)
		}
		seen(line)
	}
	return false, ""
}

// kill sends SIGKILL: the child stops where it is, recording nothing more.
func (c *crashChild) kill() error { return c.cmd.Process.Signal(syscall.SIGKILL) }

// wait copies the rest of stderr to rest and waits for the child to end.
func (c *crashChild) wait(rest io.Writer) error {
	io.Copy(rest, c.pipe)
	return c.cmd.Wait()
}

// deathSignal says which signal ended a child, from its Wait error.
func deathSignal(err error) (syscall.Signal, bool) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal(), true
		}
	}
	return 0, false
}
