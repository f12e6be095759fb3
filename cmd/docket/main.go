// Command docket plans agent actions with a language model and performs them
// exactly once in effect. See README.md.
//
// Imports: anything of docket's (it wires the packages together: the
// ledger's backends, the executor, the planner, tools and their connectors,
// the service, the evals and the demo world and model); nothing imports it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/oteltrace"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// report prints err (unless it was already printed) and returns the exit code.
func report(err error, stderr io.Writer) int {
	if err != nil && !errors.Is(err, errQuiet) {
		fmt.Fprintln(stderr, "docket:", err)
	}
	return exitCode(err)
}

// Exit codes, a contract (cmd/docket/README.md, Exit codes).
const (
	exitOK     = 0
	exitFailed = 1
	exitBad    = 2
	exitPaused = 3
	exitBusy   = 4
)

// exitError carries an exit code; its message (if any) is printed to stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// errQuiet is wrapped by exit errors whose message was already printed.
var errQuiet = errors.New("quiet")

// withCode wraps err with an exit code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// usageError is a bad-input error (exit 2).
func usageError(format string, a ...any) error {
	return withCode(exitBad, fmt.Errorf(format, a...))
}

// Env is what a command may touch of the outside world; tests supply their own.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Hooks are the executor's fault-injection points. Only tests and the
	// demo's crashing child set them; zero does nothing.
	Hooks executor.Hooks
	// Tune, when set, adjusts every executor config a command builds (tests:
	// a smaller clock-skew margin so a lookup's "not found" is trusted sooner).
	Tune func(*executor.Config)

	// tracing is set while a command traces (startTracing).
	tracing *oteltrace.Tracing
	// PolicyFile is a policy file (--policy) whose rules join the tools
	// file's global ones; "" : $DOCKET_POLICY, else none.
	PolicyFile string
	// As is who acts through the CLI (--as NAME: "cli:NAME"); "" : the OS
	// user ($USER). It is recorded as a run's creator and as an approver.
	As string
}

// command is one subcommand: a struct with its own flag.FlagSet.
type command interface {
	Run(ctx context.Context, args []string) error
}

// commands maps a subcommand name to its constructor and a one-line summary.
// Each subcommand's file registers itself in init.
var commands = map[string]struct {
	summary string
	new     func(env Env) command
}{}

func register(name, summary string, mk func(env Env) command) {
	commands[name] = struct {
		summary string
		new     func(env Env) command
	}{summary, mk}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv})
}

// runEnv runs one command line with env (tests set hooks through it).
// Help that was asked for (docket help [CMD...], -h, --help, CMD -h) goes to
// stdout with exit 0; usage printed because of a mistake goes to stderr with
// exit 2.
func runEnv(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		usage(env.Stderr)
		return withCode(exitBad, errQuiet)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(env.Stdout)
		return nil
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	case "help":
		if len(args) == 1 {
			usage(env.Stdout)
			return nil
		}
		// docket help CMD [SUB] is docket CMD [SUB] -h.
		args = append(append([]string(nil), args[1:]...), "-h")
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(env.Stderr)
		return usageError("unknown command %q", args[0])
	}
	// Traces go where the OTEL_* variables say (nowhere when they name no
	// endpoint): every command's runs, model calls and Run JSON.
	env, stopTracing, err := startTracing(ctx, env)
	if err != nil {
		return err
	}
	defer stopTracing()
	err = c.new(env).Run(ctx, args[1:])
	var h *helpError
	if errors.As(err, &h) {
		_, werr := io.WriteString(env.Stdout, h.text)
		return werr
	}
	return err
}

// helpError is help a person asked for (-h): runEnv prints its text on
// stdout and exits 0.
type helpError struct{ text string }

func (e *helpError) Error() string { return "help" }
func (e *helpError) Unwrap() error { return errQuiet }

// showHelp is what a command returns when asked for help: text goes to
// stdout, exit 0.
func showHelp(text string) error { return withCode(exitOK, &helpError{text: text}) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: docket <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'docket <command> -h' (or 'docket help <command>') for a command's flags;\n'docket --version' prints the version.")
}
