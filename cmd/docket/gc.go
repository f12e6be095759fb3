package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

func init() {
	register("gc", "delete ended runs past their retention, and budget windows that have passed", func(env Env) command { return &gcCmd{env: env} })
}

// retentionValue is a flag holding a duration read by plan.ParseDuration
// ("30d", "2w", "1h30m"); 0 is "not set".
type retentionValue struct{ d *time.Duration }

func (v retentionValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return plan.FormatDuration(*v.d)
}

func (v retentionValue) Set(s string) error {
	d, err := plan.ParseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	*v.d = d
	return nil
}

func retentionFlag(fs *flag.FlagSet, d *time.Duration, usage string) {
	fs.Var(retentionValue{d}, "retention", usage)
}

// gcCmd is `docket gc [--data DIR | --ledger URL] [--retention D] [--dry-run] [--json]`.
type gcCmd struct{ env Env }

func (c *gcCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("gc", "gc [--data DIR | --ledger URL] [--retention D] [--dry-run] [--json]", c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	var retention time.Duration
	retentionFlag(fs, &retention, "keep every ended run at least this long after it ended (30d, 2w, 12h); default: only runs with their own retention (docket run --retention) are deleted")
	dry := fs.Bool("dry-run", false, "count what would be deleted, delete nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("gc takes no positional arguments (got %q)", pos)
	}
	l, err := openRecorded(ctx, *data, key, c.env.Stderr)
	if err != nil {
		return err
	}
	defer l.Close()
	rep, err := collect(ctx, l, retention, *dry)
	if err != nil {
		return fmt.Errorf("collecting %s: %w", ledgerName(*data), err)
	}
	if *asJSON {
		return json.NewEncoder(c.env.Stdout).Encode(struct {
			DryRun    bool   `json:"dry_run"`
			Retention string `json:"retention,omitempty"`
			ledger.CollectReport
		}{*dry, retentionValue{&retention}.String(), rep})
	}
	printCollect(c.env.Stdout, rep, retention, *dry)
	return nil
}

// collect runs the ledger's collector once.
func collect(ctx context.Context, l ledger.Store, retention time.Duration, dry bool) (ledger.CollectReport, error) {
	c, ok := l.(ledger.Collector)
	if !ok {
		return ledger.CollectReport{}, errors.New("this ledger cannot delete runs")
	}
	return c.Collect(ctx, ledger.CollectOptions{Retention: retention, DryRun: dry})
}

func printCollect(w io.Writer, rep ledger.CollectReport, retention time.Duration, dry bool) {
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	fmt.Fprintf(w, "%s %d ended %s (%d records", verb, rep.Runs, plural(rep.Runs, "run", "runs"), rep.Records)
	if rep.Bytes > 0 {
		fmt.Fprintf(w, ", %s", sizeLabel(rep.Bytes))
	}
	fmt.Fprintf(w, ") and %d budget %s past their window\n", rep.Buckets, plural(rep.Buckets, "bucket", "buckets"))
	if rep.Kept > 0 {
		fmt.Fprintf(w, "kept %d %s past their retention: a key of theirs is still honoured by its provider (key_ttl)\n", rep.Kept, plural(rep.Kept, "run", "runs"))
	}
	if retention == 0 {
		fmt.Fprintln(w, "no --retention: only runs with their own retention were considered; the others are kept for ever")
	}
}

// sweepRetention collects every period until ctx ends, logging each sweep
// once with its counts (serve --retention, --gc-every).
func sweepRetention(ctx context.Context, l ledger.Store, retention, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		start := time.Now()
		rep, err := collect(ctx, l, retention, false)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("gc sweep failed (the next sweep tries again)", "err", err)
		default:
			log.Info("gc sweep", "runs", rep.Runs, "records", rep.Records, "bytes", rep.Bytes, "buckets", rep.Buckets,
				"kept_by_keys", rep.Kept, "took", time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ledgerName names a data directory, or a shared ledger's URL with its
// password masked.
func ledgerName(data string) string {
	if postgres.IsURL(data) {
		return postgres.Redact(data)
	}
	return data
}

// startRetentionSweep starts serve's sweep (--gc-every, --retention) and
// returns what stops it.
func startRetentionSweep(ctx context.Context, st *serveState) (stop func()) {
	if st.o.gcEvery == 0 {
		return func() {}
	}
	if _, ok := st.l.(ledger.Collector); !ok {
		st.log.Warn("this ledger cannot delete runs: no gc sweep")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepRetention(ctx, st.l, st.o.retention, st.o.gcEvery, st.log)
	}()
	return func() {
		cancel()
		<-done
	}
}
