package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

type pastClock struct{ t time.Time }

func (c pastClock) Now() time.Time { return c.t }

// gcFixture records, in 2020, a completed run "old" and a running run
// "live" in l.
func gcFixture(t *testing.T, l ledger.Store) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"old", "live"} {
		p := &plan.Plan{Goal: id, Actions: []plan.Action{{ID: "a", Tool: "t", Args: json.RawMessage(`{}`)}}}
		if _, _, err := l.CreateRun(ctx, ledger.Run{ID: id}, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ledger.ApplyOne(ctx, l, ledger.SetRunStatus("old", ledger.RunCompleted, ledger.EventRunCompleted, "", nil)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// docket gc on both ledgers: without --retention nothing goes; --dry-run
// says what would go and deletes nothing; then the ended run goes, the
// running one stays; a bad --retention is a usage error.
func TestGCCommand(t *testing.T) {
	t.Parallel()
	past := pastClock{time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var where []string
			if backend == "badger" {
				dir := t.TempDir()
				l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir, Clock: past})
				if err != nil {
					t.Fatal(err)
				}
				gcFixture(t, l)
				where = []string{"--data", dir}
			} else {
				url, _ := sharedLedger(t)
				l, err := postgres.Open(context.Background(), postgres.Config{URL: url, Clock: past})
				if err != nil {
					t.Fatal(err)
				}
				gcFixture(t, l)
				where = []string{"--ledger", url}
			}
			gc := func(args ...string) result {
				return inproc(t, append(append([]string{"gc"}, where...), args...)...)
			}
			show := func(id string) int {
				return inproc(t, append(append([]string{"runs", "show", "--json"}, where...), id)...).code
			}
			r := gc()
			wantCode(t, r, exitOK)
			if !strings.Contains(r.stdout, "deleted 0 ended runs") || !strings.Contains(r.stdout, "kept for ever") {
				t.Fatalf("gc without --retention:\n%s", r)
			}
			r = gc("--retention", "30d", "--dry-run")
			wantCode(t, r, exitOK)
			if !strings.Contains(r.stdout, "would delete 1 ended run") {
				t.Fatalf("gc --dry-run:\n%s", r)
			}
			if show("old") != exitOK {
				t.Fatal("a dry run deleted the run")
			}
			r = gc("--retention", "30d", "--json")
			wantCode(t, r, exitOK)
			var rep struct {
				Runs    int   `json:"runs"`
				Records int64 `json:"records"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Runs != 1 || rep.Records < 5 {
				t.Fatalf("gc --json = %+v, %v:\n%s", rep, err, r)
			}
			if show("old") == exitOK {
				t.Fatal("the ended run is still shown after gc")
			}
			if show("live") != exitOK {
				t.Fatal("gc deleted a running run")
			}
			wantCode(t, gc("--retention", "soon"), exitBad)
			wantCode(t, gc("--retention", "-1d"), exitBad)
		})
	}
}

// docket run --retention stores the run's own retention: the Run JSON shows
// it.
func TestRunRetentionFlag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	planPath := b.plan(t, "p", `{"goal": "one lookup", "actions": [{"id": "a", "tool": "catalogue_price", "args": {"plan": "pro"}}]}`)
	r := inproc(t, b.runArgs(planPath, "--retention", "2d")...)
	if r.code != exitOK {
		t.Fatalf("%s", r)
	}
	var d struct {
		Retention string `json:"retention"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Retention != "2d" {
		t.Fatalf("Run JSON retention = %q, %v; want 2d\n%s", d.Retention, err, r)
	}
}

// docket serve --retention sweeps at start and every --gc-every, logging
// each sweep once with its counts; bad values are usage errors.
func TestServeRetentionSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range [][]string{{"--gc-every", "-1s"}, {"--retention", "soon"}} {
		r := inproc(t, append([]string{"serve", "--data", filepath.Join(dir, "bad")}, c...)...)
		if r.code != exitBad {
			t.Errorf("%v: %s", c, r)
		}
	}
	data := filepath.Join(dir, "data")
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: data, Clock: pastClock{time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}})
	if err != nil {
		t.Fatal(err)
	}
	gcFixture(t, l)
	s := startServe(t, map[string]string{"DOCKET_TOKEN": "ci=0123456789abcdef0123"}, "--data", data, "--retention", "30d", "--gc-every", "1h")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.stderr.String(), `msg="gc sweep" runs=1 `) {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep logged:\n%s", s.stderr)
		}
		time.Sleep(20 * time.Millisecond) // polling the log for the sweep
	}
	if strings.Count(s.stderr.String(), `msg="gc sweep"`) != 1 {
		t.Errorf("one sweep should be logged once:\n%s", s.stderr)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if code := inproc(t, "runs", "show", "--data", data, "old").code; code == exitOK {
		t.Error("the ended run is still there after the sweep")
	}
	if code := inproc(t, "runs", "show", "--data", data, "live").code; code != exitOK {
		t.Error("the sweep deleted a running run")
	}
}
