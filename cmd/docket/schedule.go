package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/executor/schedule"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

func init() {
	register("schedule", "create, list, show, pause, resume or delete schedules (runs fired by docket serve on a cron expression or an interval)",
		func(env Env) command { return &scheduleCmd{env: env} })
}

// scheduleCmd is `docket schedule create|list|show|pause|resume|delete`.
type scheduleCmd struct{ env Env }

const scheduleUsage = `schedule create --spec SPEC (--plan FILE --tools FILE | --goal TEXT) [--id ID] [--tz ZONE] [--overlap skip|queue|cancel_previous] [--catch-up latest|none|all] [--approve safe|all|none] [--paused]
       schedule list
       schedule show ID
       schedule pause ID
       schedule resume ID
       schedule delete ID
  each with [--data DIR | --ledger URL | --server URL --token T] [--json]`

// Run dispatches to the subcommand.
func (c *scheduleCmd) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("schedule needs a subcommand: create, list, show, pause, resume or delete")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return showHelp("usage: docket " + scheduleUsage + "\n\nRun 'docket schedule create -h' for its flags.\n")
	}
	if strings.HasPrefix(args[0], "-") {
		// A flag before the subcommand: say what is wrong with it.
		fs := newFlags("schedule", scheduleUsage, c.env.Stderr)
		data := fs.String("data", defaultDataDir, "data directory (the ledger)")
		ledgerFlag(fs, data, c.env.Getenv)
		fs.Bool("json", false, "print JSON (the API's answer)")
		addServerFlags(fs)
		if _, err := parseArgs(fs, args); err != nil {
			return err
		}
		return usageError("schedule needs a subcommand first: create, list, show, pause, resume or delete")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "create", "list", "show", "pause", "resume", "delete":
	default:
		return usageError("schedule %s: no such subcommand (create, list, show, pause, resume, delete)", sub)
	}
	fs := newFlags("schedule "+sub, scheduleUsage, c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	asJSON := fs.Bool("json", false, "print JSON (the API's answer)")
	sf := addServerFlags(fs)
	var cf createFlags
	if sub == "create" {
		cf.add(fs)
	}
	pos, err := parseArgs(fs, rest)
	if err != nil {
		return err
	}
	id := ""
	switch {
	case sub == "create" || sub == "list":
		if len(pos) != 0 {
			return usageError("schedule %s takes no arguments", sub)
		}
	case len(pos) != 1:
		return usageError("schedule %s takes one schedule id", sub)
	default:
		id = pos[0]
	}
	var out any
	if sf.remote() {
		out, err = c.remote(ctx, sf, sub, id, &cf)
	} else {
		out, err = c.local(ctx, *data, key, sub, id, &cf)
	}
	if err != nil || out == nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(c.env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	switch v := out.(type) {
	case ui.ScheduleList:
		return printSchedules(c.env.Stdout, v.Schedules)
	case ui.ScheduleView:
		return printSchedule(c.env.Stdout, v)
	}
	return nil
}

// createFlags are schedule create's own flags.
type createFlags struct {
	id, spec, tz, overlap, catchUp, planPath, toolsPath, goal, approve *string
	paused                                                             *bool
}

func (f *createFlags) add(fs interface {
	String(name, value, usage string) *string
	Bool(name string, value bool, usage string) *bool
}) {
	f.id = fs.String("id", "", "the schedule's id (1 to 64 letters, digits, '.', '_', '-'; default: a new one)")
	f.spec = fs.String("spec", "", `when it fires: a cron expression ("*/15 * * * *"), a macro (@hourly, @daily, @weekly, @monthly, @yearly) or an interval ("every 15m")`)
	f.tz = fs.String("tz", "", `the IANA time zone of a cron expression ("Europe/Paris"; default UTC)`)
	f.overlap = fs.String("overlap", "", "a slot due while the previous run has not ended: skip (default), queue, cancel_previous")
	f.catchUp = fs.String("catch-up", "", "slots missed while no docket serve ran: latest (default: one run for the most recent), none, all")
	f.planPath = fs.String("plan", "", "the plan file each run performs")
	f.toolsPath = fs.String("tools", "", "the tools file the plan is checked against (with --plan, without --server)")
	f.goal = fs.String("goal", "", "a goal the model plans when each slot fires (instead of --plan)")
	f.approve = fs.String("approve", "", "the runs' approval policy: safe (default), all, none")
	f.paused = fs.Bool("paused", false, "create it paused")
}

// body is the POST /v1/schedules body the flags describe.
func (f *createFlags) body() (map[string]any, error) {
	b := map[string]any{"spec": *f.spec}
	for k, v := range map[string]string{"id": *f.id, "tz": *f.tz, "overlap": *f.overlap, "catch_up": *f.catchUp, "goal": *f.goal, "approve": *f.approve} {
		if v != "" {
			b[k] = v
		}
	}
	if *f.paused {
		b["paused"] = true
	}
	switch {
	case *f.spec == "":
		return nil, usageError("schedule create needs --spec (a cron expression or an interval such as \"every 15m\")")
	case (*f.planPath == "") == (*f.goal == ""):
		return nil, usageError("schedule create needs either --plan FILE or --goal TEXT")
	case *f.planPath != "":
		raw, err := os.ReadFile(*f.planPath)
		if err != nil {
			return nil, usageError("reading plan: %v", err)
		}
		b["plan"] = json.RawMessage(raw)
	}
	return b, nil
}

func (c *scheduleCmd) remote(ctx context.Context, sf *serverFlags, sub, id string, cf *createFlags) (any, error) {
	cl, err := sf.client(c.env)
	if err != nil {
		return nil, err
	}
	path := "/v1/schedules/" + url.PathEscape(id)
	var view ui.ScheduleView
	switch sub {
	case "create":
		body, err := cf.body()
		if err != nil {
			return nil, err
		}
		return view, cl.do(ctx, "POST", "/v1/schedules", body, nil, &view)
	case "list":
		var list ui.ScheduleList
		return list, cl.do(ctx, "GET", "/v1/schedules", nil, nil, &list)
	case "show":
		return view, cl.do(ctx, "GET", path, nil, nil, &view)
	case "pause", "resume":
		return view, cl.do(ctx, "POST", path+"/"+sub, map[string]any{}, nil, &view)
	}
	if err := cl.do(ctx, "DELETE", path, nil, nil, nil); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.env.Stdout, "deleted schedule %s\n", id)
	return nil, nil
}

func (c *scheduleCmd) local(ctx context.Context, data string, key *ledgerKey, sub, id string, cf *createFlags) (any, error) {
	open := openRecorded
	if sub == "create" {
		open = openLedger
	}
	l, err := open(ctx, data, key, c.env.Stderr)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	sk, ok := l.(ledger.ScheduleKeeper)
	if !ok {
		return nil, fmt.Errorf("the ledger (%T) keeps no schedules", l)
	}
	now := time.Now()
	switch sub {
	case "create":
		rec, err := c.newSchedule(ctx, cf, now)
		if err != nil {
			return nil, err
		}
		out, err := sk.CreateSchedule(ctx, rec)
		if err != nil {
			return nil, fmt.Errorf("creating schedule %s: %w", rec.ID, err)
		}
		return ui.ViewSchedule(out, now), nil
	case "list":
		all, err := sk.Schedules(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading schedules: %w", err)
		}
		list := ui.ScheduleList{Schedules: []ui.ScheduleView{}}
		for _, rec := range all {
			list.Schedules = append(list.Schedules, ui.ViewSchedule(rec, now))
		}
		return list, nil
	case "show":
		rec, err := sk.Schedule(ctx, id)
		if err != nil {
			return nil, err
		}
		return ui.ViewSchedule(rec, now), nil
	case "pause", "resume":
		rec, err := ui.SetSchedulePaused(ctx, sk, id, sub == "pause", now)
		if err != nil {
			return nil, err
		}
		return ui.ViewSchedule(rec, now), nil
	}
	if err := sk.DeleteSchedule(ctx, id); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.env.Stdout, "deleted schedule %s\n", id)
	return nil, nil
}

// newSchedule builds and checks the record schedule create asks for, as
// POST /v1/schedules does: the spec, zone and policies, the plan against
// the tools file.
func (c *scheduleCmd) newSchedule(ctx context.Context, cf *createFlags, now time.Time) (ledger.Schedule, error) {
	body, err := cf.body()
	if err != nil {
		return ledger.Schedule{}, err
	}
	overlap, catchUp, err := schedule.Check(*cf.spec, *cf.tz, *cf.overlap, *cf.catchUp)
	if err != nil {
		return ledger.Schedule{}, withCode(exitBad, err)
	}
	switch executor.Policy(*cf.approve) {
	case "", executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
	default:
		return ledger.Schedule{}, usageError("--approve must be safe, all or none, not %q", *cf.approve)
	}
	id := *cf.id
	if id == "" {
		id = "sch_" + now.UTC().Format("20060102T150405")
	}
	rec := ledger.Schedule{ID: id, Spec: strings.TrimSpace(*cf.spec), TZ: *cf.tz, Overlap: string(overlap), CatchUp: string(catchUp),
		Goal: *cf.goal, Approve: *cf.approve, CreatedBy: reviewer(c.env), CreatedAt: now.UTC(), Handled: now.UTC(), Paused: *cf.paused}
	if *cf.planPath != "" {
		if *cf.toolsPath == "" {
			return ledger.Schedule{}, usageError("--plan needs --tools FILE to check it against (or create it through --server)")
		}
		p, err := readPlan(*cf.planPath)
		if err != nil {
			return ledger.Schedule{}, err
		}
		reg, closeTools, err := loadTools(ctx, *cf.toolsPath, c.env)
		if err != nil {
			return ledger.Schedule{}, err
		}
		defer closeTools()
		if err := checkPlan(p, *cf.planPath, reg); err != nil {
			return ledger.Schedule{}, err
		}
		rec.Plan = body["plan"].(json.RawMessage)
	}
	if err := ledger.CheckSchedule(rec); err != nil {
		return ledger.Schedule{}, withCode(exitBad, err)
	}
	return rec, nil
}

func printSchedules(w io.Writer, all []ui.ScheduleView) error {
	if len(all) == 0 {
		fmt.Fprintln(w, "no schedules (docket schedule create adds one)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSPEC\tTZ\tSTATE\tNEXT\tLAST FIRED\tLAST RUN\tSKIPPED")
	for _, v := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", v.ID, v.Spec, orDash(v.TZ), state(v), firstOr(v.Next), timeOr(v.LastFired), orDash(v.LastRunID), v.Skipped)
	}
	return tw.Flush()
}

func printSchedule(w io.Writer, v ui.ScheduleView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	what := "goal: " + v.Goal
	if v.Goal == "" {
		what = "a plan (" + fmt.Sprint(len(v.Plan)) + " bytes)"
	}
	rows := [][2]string{
		{"id", v.ID}, {"spec", v.Spec}, {"time zone", orDash(v.TZ)}, {"state", state(v)},
		{"overlap", v.Overlap}, {"catch-up", v.CatchUp}, {"runs", what}, {"approve", orDash(v.Approve)},
		{"created", timeOr(v.CreatedAt) + " by " + orDash(v.CreatedBy)},
		{"last fired", timeOr(v.LastFired)}, {"last run", orDash(v.LastRunID)},
		{"skipped", fmt.Sprintf("%d (last %s)", v.Skipped, timeOr(v.LastSkipped))},
	}
	if v.LastError != "" {
		rows = append(rows, [2]string{"last error", v.LastError})
	}
	for i, n := range v.Next {
		rows = append(rows, [2]string{fmt.Sprintf("next %d", i+1), timeOr(n)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

func state(v ui.ScheduleView) string {
	if v.Paused {
		return "paused"
	}
	return "active"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOr(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func firstOr(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return timeOr(ts[0])
}

// startScheduler runs the schedules' loop (ui.Server.RunScheduler) beside
// the service until ctx ends or stop is called. On a shared ledger every
// node runs it: each slot's run id is the same on all, so one creates it.
func startScheduler(ctx context.Context, st *serveState) (stop func()) {
	if _, ok := st.l.(ledger.ScheduleKeeper); !ok {
		return func() {}
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := st.srv.RunScheduler(sctx, 0); err != nil && !errors.Is(err, context.Canceled) {
			st.log.Warn("the scheduler stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
