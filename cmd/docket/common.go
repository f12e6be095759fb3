package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// defaultDataDir is where every command keeps its ledger unless --data says otherwise.
const defaultDataDir = "./docket-data"

// newFlags makes a command's FlagSet. Its usage goes to stderr after a
// mistake (an unknown flag, a bad value, a missing argument) and to stdout
// when asked for with -h or --help (parseArgs).
func newFlags(name, usageLine string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: docket %s\n", usageLine)
		if hasFlags(fs) {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseArgs parses flags placed anywhere among args (before, between or after
// the positional arguments) and returns the positional arguments in order.
// Everything after "--" is positional. A parse error was already printed on
// the FlagSet's output (stderr): it comes back as a quiet exit 2. Help (-h,
// --help) comes back as showHelp: the usage on stdout, exit 0.
// --data and --ledger given together are refused (exit 2).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if set := setFlags(fs); set["data"] && set["ledger"] {
		return nil, usageError("--data and --ledger both name the ledger: give one (--data DIR for a data directory, --ledger URL for the shared ledger)")
	}
	return pos, nil
}

// parseFlags is fs.Parse with what it prints held back until it is known
// whether it was asked for (help: stdout) or a mistake (stderr).
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return showHelp(buf.String())
	case err != nil:
		out.Write(buf.Bytes())
		return withCode(exitBad, errQuiet)
	}
	return nil
}

// setFlags is the set of flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// ledgerEnv names the shared ledger when neither --ledger nor --data is given.
const ledgerEnv = "DOCKET_LEDGER"

// ledgerListenEnv is docket serve's direct connection to LISTEN on when the
// shared ledger is reached through a pooler in transaction mode
// (postgres.Config.ListenURL).
const ledgerListenEnv = "DOCKET_LEDGER_LISTEN"

// ledgerValue is the --ledger flag: a postgres:// URL, or libpq's
// keyword/value form (host=… dbname=…), that takes the place of the --data
// directory (data holds either).
type ledgerValue struct{ data *string }

func (v ledgerValue) String() string {
	if v.data != nil && postgres.IsURL(*v.data) {
		return postgres.Redact(*v.data)
	}
	return ""
}

func (v ledgerValue) Set(s string) error {
	if !postgres.IsURL(s) {
		return errors.New("--ledger takes a postgres:// URL or a keyword/value connection string such as 'host=HOST port=5432 dbname=DB user=USER' (for a data directory, use --data DIR)")
	}
	*v.data = s
	return nil
}

// ledgerFlag adds --ledger URL next to a command's --data: the shared
// ledger on PostgreSQL instead of the data directory. $DOCKET_LEDGER is the
// default of both (an explicit --data or --ledger wins). It also adds
// --encryption-key-file, and returns where the ledger's key comes from.
func ledgerFlag(fs *flag.FlagSet, data *string, getenv func(string) string) *ledgerKey {
	if u := getenv(ledgerEnv); u != "" && postgres.IsURL(u) {
		*data = u
	}
	fs.Var(ledgerValue{data}, "ledger", "the shared ledger: postgres://USER:PASSWORD@HOST:PORT/DB or 'host=HOST port=PORT dbname=DB user=USER' (instead of --data; default $"+ledgerEnv+")")
	return addKeyFlag(fs, getenv)
}

// openLedger opens the data directory, or the shared ledger when dir is a
// postgres:// URL (--ledger), with its encryption key (nil: none). A
// directory held by another process comes back as exit 4 with a message
// saying what to do.
func openLedger(ctx context.Context, dir string, key *ledgerKey, stderr io.Writer) (ledger.Store, error) {
	return openLedgerConfig(ctx, badgerdb.Config{Dir: dir, Logger: cliLogger(stderr)}, key)
}

// openRecorded opens the ledger of a command that reads or continues runs
// already recorded (runs, audit, budgets, backup, approve, reject, resolve,
// pause, resume, replay, fork). A data directory that does not exist is
// refused with exit 2 (a mistyped --data would otherwise get a new, empty
// ledger); the commands that record new runs (run, step, serve, mcp, chat,
// demo, restore) create it with openLedger.
func openRecorded(ctx context.Context, dir string, key *ledgerKey, stderr io.Writer) (ledger.Store, error) {
	if err := dataDirExists(dir); err != nil {
		return nil, err
	}
	return openLedger(ctx, dir, key, stderr)
}

// dataDirExists refuses (exit 2) a data directory that does not exist or is
// not a directory. The shared ledger (a postgres:// URL) is not checked here:
// opening it says whether it can be reached.
func dataDirExists(dir string) error {
	if dir == "" || postgres.IsURL(dir) {
		return nil
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		hint := "check --data"
		if dir == defaultDataDir {
			hint = "give --data DIR, the directory the run was recorded in"
		}
		return usageError("data directory %s does not exist: nothing was recorded there (%s; docket run creates one)", dir, hint)
	case err != nil:
		return fmt.Errorf("data directory %s: %w", dir, err)
	case !st.IsDir():
		return usageError("data directory %s is not a directory", dir)
	}
	return nil
}

// openLedgerConfig is openLedger with a whole configuration (for the
// shared ledger: its Logger and SubscriberBuffer) and the key's source.
func openLedgerConfig(ctx context.Context, cfg badgerdb.Config, key *ledgerKey) (ledger.Store, error) {
	dir := cfg.Dir
	if dir == "" {
		return nil, usageError("--data must not be empty")
	}
	if postgres.IsURL(dir) {
		kr, err := key.keyring()
		if err != nil {
			return nil, err
		}
		return openSharedLedger(ctx, postgres.Config{URL: dir, Logger: cfg.Logger, SubscriberBuffer: cfg.SubscriberBuffer, Keyring: kr})
	}
	k, err := key.load()
	if err != nil {
		return nil, err
	}
	cfg.Key = k
	l, err := badgerdb.Open(ctx, cfg)
	if errors.Is(err, ledger.ErrLocked) {
		return nil, withCode(exitBusy, fmt.Errorf("data directory %s is busy: another docket process holds it (%w); retry when it is done, or, if it is docket serve, act through it: add --server URL --token T to this command", dir, err))
	}
	if err != nil {
		return nil, keyError(noSpace(fmt.Errorf("opening data directory %s: %w", dir, err), dir))
	}
	return l, nil
}

// openSharedLedger opens the shared ledger on PostgreSQL. Many processes
// share it: there is no "busy". Errors name the ledger without its password.
func openSharedLedger(ctx context.Context, cfg postgres.Config) (*postgres.Store, error) {
	l, err := postgres.Open(ctx, cfg)
	if err != nil {
		code := exitFailed
		switch {
		case errors.Is(err, ledger.ErrInvalid):
			code = exitBad
		case errors.Is(err, ledger.ErrUnavailable):
			code = exitBusy // retry later
		}
		if errors.Is(err, ledger.ErrKey) {
			return nil, keyError(fmt.Errorf("opening the shared ledger %s: %w", postgres.Redact(cfg.URL), err))
		}
		return nil, withCode(code, fmt.Errorf("opening the shared ledger %s: %w", postgres.Redact(cfg.URL), err))
	}
	return l, nil
}

// noSpace explains ledger.ErrNoSpace (exit 5): what happened and what to do.
// Other errors pass through.
func noSpace(err error, dir string) error {
	if !errors.Is(err, ledger.ErrNoSpace) {
		return err
	}
	return withCode(exitNoSpace, fmt.Errorf("no space left on %s: free space and run the same command again (%w)", dir, err))
}

// cliLogger is the logger commands give to the libraries: warnings and errors
// on stderr, as text.
func cliLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// readPlan reads and strictly decodes a plan file. Every problem is reported,
// as bad input (exit 2).
func readPlan(path string) (*plan.Plan, error) {
	if path == "" {
		return nil, usageError("--plan FILE is required")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("reading plan: %v", err)
	}
	p, err := plan.Decode(data)
	if err != nil {
		return nil, withCode(exitBad, describeProblems("plan "+path+" is invalid", err))
	}
	return p, nil
}

// checkPlan validates the plan's arguments against the tools' schemas,
// reporting every problem (exit 2).
func checkPlan(p *plan.Plan, path string, reg *tools.Registry) error {
	if err := p.Validate(reg); err != nil {
		return withCode(exitBad, describeProblems("plan "+path+" does not fit the tools", err))
	}
	return nil
}

// describeProblems lists plan problems one per line under a heading.
func describeProblems(heading string, err error) error {
	var pe plan.Errors
	if !errors.As(err, &pe) || len(pe) == 0 {
		return fmt.Errorf("%s: %w", heading, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d %s):", heading, len(pe), plural(len(pe), "problem", "problems"))
	for _, p := range pe {
		b.WriteString("\n  ")
		switch {
		case p.Action != "" && p.Field != "":
			fmt.Fprintf(&b, "action %s, %s: ", p.Action, p.Field)
		case p.Action != "":
			fmt.Fprintf(&b, "action %s: ", p.Action)
		case p.Field != "":
			fmt.Fprintf(&b, "%s: ", p.Field)
		}
		b.WriteString(p.Msg)
	}
	return problemsError{msg: b.String(), err: err}
}

type problemsError struct {
	msg string
	err error
}

func (e problemsError) Error() string { return e.msg }
func (e problemsError) Unwrap() error { return e.err }

// newEngine builds the executor for a command, applying env's test hooks.
func newEngine(env Env, l ledger.Store, reg *tools.Registry) (*executor.Engine, error) {
	cfg := executor.Config{
		Ledger: l,
		Tools:  reg,
		Logger: cliLogger(env.Stderr),
		Hooks:  env.Hooks,
	}
	if env.Tune != nil {
		env.Tune(&cfg)
	}
	e, err := executor.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting the executor: %w", err)
	}
	return e, nil
}

// parsePolicy checks an --approve value.
func parsePolicy(s string) (executor.Policy, error) {
	switch p := executor.Policy(s); p {
	case executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
		return p, nil
	}
	return "", usageError("--approve must be all, safe or none, not %q", s)
}

// writeDoc prints the Run JSON on w, indented, with a final newline.
func writeDoc(w io.Writer, doc ledger.RunDoc) error {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the run: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// storedDoc is the run as the ledger holds it, when it holds one: what a
// command that failed prints instead of a Run JSON it would have to make up.
func storedDoc(ctx context.Context, l ledger.Store, runID string) (ledger.RunDoc, bool) {
	if runID == "" {
		return ledger.RunDoc{}, false
	}
	doc, err := l.Doc(context.WithoutCancel(ctx), runID)
	return doc, err == nil
}

// runOutcome turns a run's status into the command's result: completed → nil
// (exit 0); paused or awaiting approval → exit 3 with what the person can do;
// waiting for an action's time → exit 7 saying until when; failed or
// cancelled → exit 1.
func runOutcome(doc ledger.RunDoc, dataDir, toolsPath string) error {
	return outcome(doc, localFlags(dataDir, toolsPath))
}

// outcome is runOutcome with the flags that name where the run lives
// (" --data DIR --tools FILE", or " --server URL").
func outcome(doc ledger.RunDoc, flags string) error {
	r := doc.Run
	switch r.Status {
	case ledger.RunCompleted:
		return nil
	case ledger.RunPaused, ledger.RunAwaitingApproval:
		return withCode(exitPaused, errors.New(waitingMessageFlags(doc, flags)))
	case ledger.RunRunning:
		if waitingFor(doc) { // waits for a time (wake.go)
			return withCode(exitWaiting, errors.New(waitingTimerMessage(doc, flags)))
		}
		return withCode(exitFailed, fmt.Errorf("run %s stopped while %s; run the same command again to continue it", r.ID, r.Status))
	case ledger.RunFailed, ledger.RunCancelled:
		msg := fmt.Sprintf("run %s %s", r.ID, r.Status)
		if r.Error != "" {
			msg += ": " + r.Error
		}
		return withCode(exitFailed, errors.New(msg))
	default:
		return withCode(exitFailed, fmt.Errorf("run %s stopped while %s; run the same command again to continue it", r.ID, r.Status))
	}
}

// waitingMessage says which actions wait for a person and which command
// moves each on.
func waitingMessage(doc ledger.RunDoc, dataDir, toolsPath string) string {
	return waitingMessageFlags(doc, localFlags(dataDir, toolsPath))
}

// localFlags are the flags that name a local run's data directory and tools.
func localFlags(dataDir, toolsPath string) string {
	data := ""
	switch {
	case postgres.IsURL(dataDir):
		data = " --ledger '" + postgres.Redact(dataDir) + "'"
	case dataDir != defaultDataDir:
		data = " --data " + dataDir
	}
	return data + " --tools " + cmp.Or(toolsPath, "FILE")
}

// waitingMessageFlags is waitingMessage with the commands' location flags given.
func waitingMessageFlags(doc ledger.RunDoc, data string) string {
	r := doc.Run
	var review, approve []string
	why := map[string]string{}
	shown := map[string]string{}
	for _, a := range doc.Actions {
		switch a.Status {
		case ledger.StatusNeedsReview:
			review = append(review, a.ID)
			why[a.ID] = a.Error
		case ledger.StatusPending:
			approve = append(approve, a.ID)
			shown[a.ID] = a.Tool + " " + clip(string(a.Args), 200)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "run %s is %s: waiting for a person", r.ID, r.Status)
	if r.Error != "" {
		fmt.Fprintf(&b, " (%s)", r.Error)
	}
	for _, id := range review {
		fmt.Fprintf(&b, "\n  %s: %s; check the external system, then: docket resolve%s %s %s (--done OUTPUT_JSON | --retry | --skip)",
			id, cmp.Or(why[id], "outcome unknown"), data, r.ID, id)
	}
	if len(review) == 0 && len(approve) > 0 {
		for _, id := range approve {
			// The arguments as they will be sent (references resolved once
			// their actions ran: approving confirms these values).
			fmt.Fprintf(&b, "\n  %s waits for approval: %s", id, shown[id])
		}
		fmt.Fprintf(&b, "\n  to approve: docket approve%s %s %s   (or reject one: docket reject%s %s ACTION)",
			data, r.ID, strings.Join(approve, " "), data, r.ID)
	}
	// A paused run with nothing to resolve was paused by a person (the Run
	// JSON a service sends does not say who): only resume lifts it.
	if r.Status == ledger.RunPaused && (r.PausedBy != "" || len(review) == 0) {
		fmt.Fprintf(&b, "\n  paused by %s: nothing new starts (approving or running it again does not resume it); to continue: docket resume%s %s",
			cmp.Or(r.PausedBy, "a person"), data, r.ID)
	}
	return b.String()
}

// reviewer names the person acting through the CLI, for the ledger's "by"
// fields (a user name, never a secret).
func reviewer(env Env) string {
	if env.As != "" {
		return "cli:" + env.As
	}
	if u := env.Getenv("USER"); u != "" {
		return "cli:" + u
	}
	return "cli"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
