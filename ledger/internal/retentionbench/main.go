// Command retentionbench shows that the ledger's size stays flat under a
// steady load when retention is set: runs are created, driven (every
// action claimed and succeeded with a 2 KiB output) and completed
// continuously, a collector deletes the ended runs past the retention
// every gc-every, and the ledger's size is printed after each sweep: the
// data directory's blocks on disk (Badger) or the schema's tables and
// indexes (PostgreSQL, pg_total_relation_size).
//
//	go run ./ledger/internal/retentionbench -ledger /tmp/dir -for 5m -retention 1m -gc-every 10s
//	go run ./ledger/internal/retentionbench -ledger 'postgres://…' -for 5m
//
// Imports: the standard library, pgx and docket's ledger, ledger/badgerdb,
// ledger/postgres and plan packages.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

func main() {
	where := flag.String("ledger", "", "a data directory (Badger) or a postgres:// URL")
	schema := flag.String("schema", "retentionbench", "with a postgres:// URL: the schema to use")
	total := flag.Duration("for", 5*time.Minute, "how long to run")
	retention := flag.Duration("retention", time.Minute, "the global retention")
	every := flag.Duration("gc-every", 10*time.Second, "how often to collect")
	rate := flag.Int("rate", 20, "runs created per second")
	actions := flag.Int("actions", 3, "actions per run")
	flag.Parse()
	if err := run(*where, *schema, *total, *retention, *every, *rate, *actions); err != nil {
		fmt.Fprintln(os.Stderr, "retentionbench:", err)
		os.Exit(1)
	}
}

func run(where, schema string, total, retention, every time.Duration, rate, actions int) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var l ledger.Store
	var size func() (int64, error)
	if postgres.IsURL(where) {
		pg, err := postgres.Open(ctx, postgres.Config{URL: where, Schema: schema, Logger: log})
		if err != nil {
			return err
		}
		l = pg
		conn, err := pgx.Connect(ctx, where)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		size = func() (n int64, err error) {
			err = conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
				JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&n)
			return n, err
		}
	} else {
		b, err := badgerdb.Open(ctx, badgerdb.Config{Dir: where, Logger: log})
		if err != nil {
			return err
		}
		l = b
		size = func() (int64, error) { return dirBytes(where) }
	}
	defer l.Close()
	c, ok := l.(ledger.Collector)
	if !ok {
		return fmt.Errorf("%T does not collect", l)
	}
	output := json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 2<<10)))
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	sweep := time.NewTicker(every)
	defer sweep.Stop()
	fmt.Printf("| elapsed | runs created | runs deleted (total) | sweep took | size |\n|---|---|---|---|---|\n")
	created, deleted := 0, 0
	for time.Since(start) < total {
		select {
		case <-sweep.C:
			t0 := time.Now()
			rep, err := c.Collect(ctx, ledger.CollectOptions{Retention: retention})
			if err != nil {
				return err
			}
			took := time.Since(t0)
			deleted += rep.Runs
			n, err := size()
			if err != nil {
				return err
			}
			fmt.Printf("| %v | %d | %d | %v | %.1f MiB |\n", time.Since(start).Round(time.Second), created, deleted,
				took.Round(time.Millisecond), float64(n)/(1<<20))
		case <-tick.C:
			id := fmt.Sprintf("run-%d-%d", start.Unix(), created)
			if err := oneRun(ctx, l, id, actions, output); err != nil {
				return err
			}
			created++
		}
	}
	return nil
}

// oneRun creates, drives and completes run id.
func oneRun(ctx context.Context, l ledger.Store, id string, n int, output json.RawMessage) error {
	p := &plan.Plan{Goal: "steady load"}
	for i := range n {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: id}, p, nil); err != nil {
		return err
	}
	for _, a := range p.Actions {
		k, err := plan.Key(id, a.ID, a.Tool, a.Args)
		if err != nil {
			return err
		}
		if _, err := ledger.ApplyOne(ctx, l, ledger.Claim(id, a.ID, a.Tool, k, a.Args, 1)); err != nil {
			return err
		}
		if _, err := ledger.ApplyOne(ctx, l, ledger.Succeed(k, 1, output)); err != nil {
			return err
		}
	}
	_, err := ledger.ApplyOne(ctx, l, ledger.SetRunStatus(id, ledger.RunCompleted, ledger.EventRunCompleted, "", nil))
	return err
}

// dirBytes is the space dir's files take on disk (their blocks).
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += info.Size()
		}
		return nil
	})
	return n, err
}
