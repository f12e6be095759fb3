package badgerdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// formatFixtures are data directories written by earlier versions of the
// ledger, committed so that every later version proves it still opens them.
// FORMAT_FIXTURE_WRITE=DIR writes such a directory with the code at hand:
//
//	FORMAT_FIXTURE_WRITE=$PWD/testdata/format-json-events go test -run TestWriteFormatFixture ./ledger/badgerdb
//
// (then remove DIR/docket-space-reserve, the free-space reserve).
var formatFixtures = []string{
	// Format "1" before events had their binary encoding: JSON event and
	// key records (written by the commit before the binary event encoding).
	"testdata/format-json-events",
	// Format "1" before the records of format "2" (keys as text in Badger
	// keys; events with their run id, seq, type name, JSON data and whole
	// hash; key records with their key, run id and a copy of the args; rows
	// with every field; the plan as JSON beside rows that repeat it):
	// written by main at f92e0e0, the commit this change started from.
	"testdata/format-binary-v1",
}

// fixtureRun records a run of three chained actions "a0", "a1", "a2" and
// takes it to step: 3 finishes it (all succeeded, run completed), 1 leaves
// a0 succeeded, a1 claimed and a2 pending.
func fixtureRun(t *testing.T, l *badgerdb.Ledger, runID string, step int) {
	t.Helper()
	ctx := context.Background()
	p := &plan.Plan{Goal: "fixture " + runID}
	for i := range 3 {
		a := plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if i > 0 {
			a.DependsOn = []string{fmt.Sprintf("a%d", i-1)}
		}
		p.Actions = append(p.Actions, a)
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: runID, Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
		t.Fatalf("CreateRun %s: %v", runID, err)
	}
	if _, err := l.Memo(ctx, runID, "m", json.RawMessage(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	mustApply(t, l, ledger.Claim(runID, "a0", "t", fixtureKey(t, runID, 0), p.Actions[0].Args, 1))
	for i := range step {
		ops := []ledger.Op{ledger.Succeed(fixtureKey(t, runID, i), 1, json.RawMessage(fmt.Sprintf(`{"out":%d}`, i)))}
		if i+1 < 3 {
			ops = append(ops, ledger.Claim(runID, fmt.Sprintf("a%d", i+1), "t", fixtureKey(t, runID, i+1), p.Actions[i+1].Args, 1))
		} else {
			ops = append(ops, ledger.SetRunStatus(runID, ledger.RunCompleted, "run.completed", "", nil))
		}
		mustApply(t, l, ops...)
	}
}

func fixtureKey(t *testing.T, runID string, i int) string {
	t.Helper()
	k, err := plan.Key(runID, fmt.Sprintf("a%d", i), "t", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustApply(t *testing.T, l *badgerdb.Ledger, ops ...ledger.Op) {
	t.Helper()
	res, err := l.Apply(context.Background(), ops...)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("op: %v", r.Err)
		}
	}
}

func TestWriteFormatFixture(t *testing.T) {
	dir := os.Getenv("FORMAT_FIXTURE_WRITE")
	if dir == "" {
		t.Skip("FORMAT_FIXTURE_WRITE=DIR writes the format fixture")
	}
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fixtureRun(t, l, "done", 3)
	fixtureRun(t, l, "open", 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkFixtureRun reads a run in full and checks its rows and its events:
// gap-free from seq 1, the audit chain intact up to the run's last hash.
func checkFixtureRun(t *testing.T, l *badgerdb.Ledger, runID string, run ledger.RunStatus, rows ...ledger.Status) []ledger.Event {
	t.Helper()
	ctx := context.Background()
	doc, err := l.Doc(ctx, runID)
	if err != nil {
		t.Fatalf("Doc %s: %v", runID, err)
	}
	if doc.Run.Status != run || len(doc.Actions) != len(rows) {
		t.Fatalf("run %s: %s with %d actions, want %s with %d", runID, doc.Run.Status, len(doc.Actions), run, len(rows))
	}
	for i, a := range doc.Actions {
		if a.Status != rows[i] {
			t.Fatalf("run %s action %s: %s, want %s", runID, a.ID, a.Status, rows[i])
		}
		if a.Status == ledger.StatusSucceeded && string(a.Output) != fmt.Sprintf(`{"out":%d}`, i) {
			t.Fatalf("run %s action %s: output %s", runID, a.ID, a.Output)
		}
	}
	evs, err := l.Events(ctx, runID, 0, 0)
	if err != nil {
		t.Fatalf("Events %s: %v", runID, err)
	}
	if len(evs) == 0 {
		t.Fatalf("run %s: no events", runID)
	}
	if chained, err := ledger.VerifyChain(runID, evs, doc.Run.AuditHash); err != nil || !chained {
		t.Fatalf("run %s: chained %v, %v", runID, chained, err)
	}
	if m, err := l.Memo(ctx, runID, "m", json.RawMessage(`{"x":2}`)); err != nil || string(m) != `{"x":1}` {
		t.Fatalf("run %s: memo %s, %v (want the recorded one)", runID, m, err)
	}
	return evs
}

// A data directory written by an earlier format opens, reads every run
// (rows, outputs, events with their audit chain, memos) and continues: the
// open run's next actions are recorded after its old events, and the chain
// holds across both encodings, also after a reopen.
func TestOpenPreviousFormat(t *testing.T) {
	t.Parallel()
	for _, fixture := range formatFixtures {
		t.Run(filepath.Base(fixture), func(t *testing.T) {
			t.Parallel()
			openPreviousFormat(t, fixture)
		})
	}
}

func openPreviousFormat(t *testing.T, fixture string) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(fixture)); err != nil {
		t.Fatal(err)
	}
	// CopyFS makes read-only copies of read-only files: the ledger writes.
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			mode := os.FileMode(0o600)
			if d.IsDir() {
				mode = 0o700
			}
			err = os.Chmod(p, mode)
		}
		return err
	})
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatalf("opening the fixture: %v", err)
	}
	runs, _, err := l.ListRuns(ctx, ledger.ListOptions{})
	if err != nil || len(runs) != 2 {
		t.Fatalf("ListRuns: %d runs, %v", len(runs), err)
	}
	s, c, p := ledger.StatusSucceeded, ledger.StatusClaimed, ledger.StatusPending
	checkFixtureRun(t, l, "done", ledger.RunCompleted, s, s, s)
	old := checkFixtureRun(t, l, "open", ledger.RunRunning, s, c, p)

	mustApply(t, l, ledger.Succeed(fixtureKey(t, "open", 1), 1, json.RawMessage(`{"out":1}`)),
		ledger.Claim("open", "a2", "t", fixtureKey(t, "open", 2), json.RawMessage(`{"i":2}`), 1))
	mustApply(t, l, ledger.Succeed(fixtureKey(t, "open", 2), 1, json.RawMessage(`{"out":2}`)),
		ledger.SetRunStatus("open", ledger.RunCompleted, "run.completed", "", nil))
	evs := checkFixtureRun(t, l, "open", ledger.RunCompleted, s, s, s)
	if len(evs) <= len(old) {
		t.Fatalf("%d events after continuing, %d before", len(evs), len(old))
	}
	for i, ev := range old {
		if got := evs[i]; got.Seq != ev.Seq || got.Hash != ev.Hash || !got.At.Equal(ev.At) || string(got.Data) != string(ev.Data) {
			t.Fatalf("old event %d changed: %+v, was %+v", ev.Seq, got, ev)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkFixtureRun(t, l, "done", ledger.RunCompleted, s, s, s)
	again := checkFixtureRun(t, l, "open", ledger.RunCompleted, s, s, s)
	if len(again) != len(evs) {
		t.Fatalf("%d events after reopening, %d before", len(again), len(evs))
	}
}
