package badgerdb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// makeRun records a run of n actions and drives action i: 0 succeeded, 1
// failed, 2 claimed, the rest pending. It returns the actions' keys.
func makeRun(t *testing.T, l *badgerdb.Ledger, runID string, n int) {
	t.Helper()
	ctx := context.Background()
	p := &plan.Plan{Goal: "goal of " + runID}
	for i := range n {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: runID, Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
		t.Fatalf("CreateRun %s: %v", runID, err)
	}
	apply := func(ops ...ledger.Op) {
		t.Helper()
		res, err := l.Apply(ctx, ops...)
		if err != nil {
			t.Fatalf("Apply on %s: %v", runID, err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("op on %s: %v", runID, r.Err)
			}
		}
	}
	for i, a := range p.Actions {
		if i > 2 {
			break
		}
		k, err := plan.Key(runID, a.ID, a.Tool, a.Args)
		if err != nil {
			t.Fatal(err)
		}
		apply(ledger.Claim(runID, a.ID, a.Tool, k, a.Args, 1))
		switch i {
		case 0:
			apply(ledger.Succeed(k, 1, json.RawMessage(fmt.Sprintf(`{"out":%q}`, runID))))
		case 1:
			apply(ledger.Fail(k, 1, "boom", false, nil))
		}
	}
	if _, err := l.Memo(ctx, runID, "m", json.RawMessage(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
}

// runState is everything a run holds that a restore must bring back.
type runState struct {
	Doc    ledger.RunDoc
	Events []ledger.Event
	Keys   map[string]ledger.KeyRecord
	Memo   json.RawMessage
}

func readRunState(t *testing.T, l *badgerdb.Ledger, runID string) runState {
	t.Helper()
	ctx := context.Background()
	doc, err := l.Doc(ctx, runID)
	if err != nil {
		t.Fatalf("Doc %s: %v", runID, err)
	}
	evs, err := l.Events(ctx, runID, 0, 0)
	if err != nil {
		t.Fatalf("Events %s: %v", runID, err)
	}
	s := runState{Doc: doc, Events: evs, Keys: map[string]ledger.KeyRecord{}}
	for _, a := range doc.Actions {
		if a.Key == "" {
			continue
		}
		rec, err := l.Key(ctx, a.Key)
		if err != nil {
			t.Fatalf("Key %s: %v", a.Key, err)
		}
		s.Keys[a.Key] = rec
	}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("run %s: event %d has seq %d (gap)", runID, i, ev.Seq)
		}
	}
	return s
}

func allRuns(t *testing.T, l *badgerdb.Ledger) []ledger.Run {
	t.Helper()
	var out []ledger.Run
	after := ""
	for {
		runs, next, err := l.ListRuns(context.Background(), ledger.ListOptions{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, runs...)
		if next == "" {
			return out
		}
		after = next
	}
}

// A backup taken while another goroutine keeps writing restores to a ledger
// holding everything written before it started, and of the writes racing it
// whole operations only: every restored live run is a prefix of the source's.
func TestBackupRestoreWhileWriting(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	src := openBadger(t, badgerdb.Config{Dir: filepath.Join(root, "src")})
	fixed := []string{"run-a", "run-b", "run-c"}
	for _, id := range fixed {
		makeRun(t, src, id, 4)
	}
	want := map[string]runState{}
	for _, id := range fixed {
		want[id] = readRunState(t, src, id)
	}

	// The writer: one live run after another, each an Apply at a time.
	stop := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			runID := fmt.Sprintf("live-%03d", i)
			p := &plan.Plan{Goal: "live", Actions: []plan.Action{
				{ID: "a1", Tool: "t", Args: json.RawMessage(`{}`)},
				{ID: "a2", Tool: "t", Args: json.RawMessage(`{}`), DependsOn: []string{"a1"}},
			}}
			if _, _, err := src.CreateRun(ctx, ledger.Run{ID: runID, Policy: "all"}, p, nil); err != nil {
				werr = err
				return
			}
			k1, _ := plan.Key(runID, "a1", "t", p.Actions[0].Args)
			k2, _ := plan.Key(runID, "a2", "t", p.Actions[1].Args)
			for _, ops := range [][]ledger.Op{
				{ledger.Claim(runID, "a1", "t", k1, p.Actions[0].Args, 1)},
				{ledger.Succeed(k1, 1, json.RawMessage(`{"ok":1}`)), ledger.Claim(runID, "a2", "t", k2, p.Actions[1].Args, 1)},
				{ledger.Succeed(k2, 1, json.RawMessage(`{"ok":2}`)), ledger.SetRunStatus(runID, ledger.RunCompleted, "run.completed", "", nil)},
			} {
				res, err := src.Apply(ctx, ops...)
				if err == nil {
					for _, r := range res {
						err = cmpOrErr(err, r.Err)
					}
				}
				if err != nil {
					werr = fmt.Errorf("run %s: %w", runID, err)
					return
				}
			}
			if i == 1 {
				close(started)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("writer made no progress")
	}
	var buf bytes.Buffer
	backupErr := src.Backup(ctx, &buf)
	close(stop)
	wg.Wait()
	if backupErr != nil {
		t.Fatalf("Backup: %v", backupErr)
	}
	if werr != nil {
		t.Fatalf("writer: %v", werr)
	}

	dstDir := filepath.Join(root, "dst")
	if err := badgerdb.Restore(ctx, dstDir, bytes.NewReader(buf.Bytes()), badgerdb.Config{}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	dst := openBadger(t, badgerdb.Config{Dir: dstDir})
	for _, id := range fixed {
		if got := readRunState(t, dst, id); !reflect.DeepEqual(jsonOf(t, got), jsonOf(t, want[id])) {
			t.Errorf("run %s after restore:\n got %s\nwant %s", id, jsonOf(t, got), jsonOf(t, want[id]))
		}
		memo, err := dst.Memo(ctx, id, "m", json.RawMessage(`"other"`))
		if err != nil || string(memo) != `{"x":1}` {
			t.Errorf("memo of %s after restore: %s, %v", id, memo, err)
		}
	}
	live := 0
	for _, r := range allRuns(t, dst) {
		if len(r.ID) < 5 || r.ID[:5] != "live-" {
			continue
		}
		live++
		got := readRunState(t, dst, r.ID)
		full := readRunState(t, src, r.ID)
		if len(got.Events) == 0 || len(got.Events) > len(full.Events) ||
			!reflect.DeepEqual(jsonOf(t, got.Events), jsonOf(t, full.Events[:len(got.Events)])) {
			t.Fatalf("run %s: restored events are not a prefix of the source's:\n got %s\nfull %s", r.ID, jsonOf(t, got.Events), jsonOf(t, full.Events))
		}
		// Rows and key records agree with the restored event log.
		last := map[string]string{}
		for _, ev := range got.Events {
			if ev.ActionID != "" {
				last[ev.ActionID] = string(ev.Type)
			}
		}
		for _, a := range got.Doc.Actions {
			wantStatus := map[string]ledger.Status{"": ledger.StatusPending, "action.claimed": ledger.StatusClaimed, "action.succeeded": ledger.StatusSucceeded}[last[a.ID]]
			if a.Status != wantStatus {
				t.Errorf("run %s action %s: status %s, but its last event is %q", r.ID, a.ID, a.Status, last[a.ID])
			}
			if a.Key != "" && got.Keys[a.Key].State != a.Status {
				t.Errorf("run %s action %s: row %s, key record %s", r.ID, a.ID, a.Status, got.Keys[a.Key].State)
			}
		}
		if wantDone := last["a2"] == "action.succeeded"; (got.Doc.Run.Status == ledger.RunCompleted) != wantDone {
			t.Errorf("run %s: status %s with a2's last event %q", r.ID, got.Doc.Run.Status, last["a2"])
		}
	}
	if live < 2 {
		t.Errorf("only %d live runs restored; the writer had finished at least 2 before the backup", live)
	}
	t.Logf("backup of %d bytes, %d live runs restored", buf.Len(), live)

	// The restored ledger takes new writes, continuing each run's seqs.
	res, err := dst.Apply(ctx, ledger.Note("run-a", "note.after_restore", "", nil))
	if err != nil || res[0].Err != nil {
		t.Fatalf("Apply after restore: %v %v", err, res)
	}
	evs, err := dst.Events(ctx, "run-a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(want["run-a"].Events); len(evs) != n+1 || evs[n].Seq != uint64(n+1) || evs[n].Type != "note.after_restore" {
		t.Fatalf("events after a write on the restored ledger: %s", jsonOf(t, evs))
	}
}

func cmpOrErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// backupOf returns a small ledger's backup stream.
func backupOf(t *testing.T) []byte {
	t.Helper()
	l := openBadger(t, badgerdb.Config{Dir: t.TempDir()})
	makeRun(t, l, "run-1", 3)
	var buf bytes.Buffer
	if err := l.Backup(context.Background(), &buf); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	return buf.Bytes()
}

// assertNoLedger checks that a failed restore left neither dir nor a
// temporary sibling behind.
func assertNoLedger(t *testing.T, dir string) {
	t.Helper()
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		t.Errorf("%s holds %d entries after a failed restore", dir, len(entries))
	}
	siblings, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range siblings {
		if e.Name() != filepath.Base(dir) {
			t.Errorf("restore left %s behind", e.Name())
		}
	}
}

func TestRestoreRefusesNonEmptyTarget(t *testing.T) {
	t.Parallel()
	stream := backupOf(t)
	ctx := context.Background()

	existing := t.TempDir()
	l := openBadger(t, badgerdb.Config{Dir: existing})
	makeRun(t, l, "mine", 1)
	before := readRunState(t, l, "mine")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	stray := t.TempDir()
	if err := os.WriteFile(filepath.Join(stray, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{existing, stray, filepath.Join(stray, "notes.txt")} {
		err := badgerdb.Restore(ctx, dir, bytes.NewReader(stream), badgerdb.Config{})
		if !errors.Is(err, badgerdb.ErrNotEmpty) {
			t.Errorf("Restore into %s: %v, want ErrNotEmpty", dir, err)
		}
	}
	l = openBadger(t, badgerdb.Config{Dir: existing})
	if got := readRunState(t, l, "mine"); !reflect.DeepEqual(jsonOf(t, got), jsonOf(t, before)) {
		t.Errorf("existing ledger changed by a refused restore")
	}
	if _, err := l.Doc(ctx, "run-1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("refused restore wrote into the existing ledger: %v", err)
	}

	// An existing empty directory is fine.
	empty := t.TempDir()
	if err := badgerdb.Restore(ctx, empty, bytes.NewReader(stream), badgerdb.Config{}); err != nil {
		t.Fatalf("Restore into an empty directory: %v", err)
	}
	r := openBadger(t, badgerdb.Config{Dir: empty})
	if _, err := r.Doc(ctx, "run-1"); err != nil {
		t.Fatalf("restored run: %v", err)
	}
}

func TestRestoreTruncatedOrCorrupt(t *testing.T) {
	t.Parallel()
	stream := backupOf(t)
	flip := func(i int) []byte {
		b := bytes.Clone(stream)
		b[i] ^= 0x40
		return b
	}
	cases := map[string][]byte{
		"header only":            stream[:len("DOCKETBK")+2],
		"inside the first frame": stream[:len(stream)/2],
		"at a frame boundary":    stream[:len(stream)-12], // no end marker: raw Badger would load this
		"inside the end marker":  stream[:len(stream)-5],
		"payload byte flipped":   flip(len(stream) / 2),
		"frame length flipped":   flip(len("DOCKETBK") + 2),
		"trailing garbage":       append(bytes.Clone(stream), 0),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ledger")
			err := badgerdb.Restore(context.Background(), dir, bytes.NewReader(data), badgerdb.Config{})
			if !errors.Is(err, badgerdb.ErrCorrupt) {
				t.Fatalf("Restore: %v, want ErrCorrupt", err)
			}
			t.Logf("error: %v", err)
			assertNoLedger(t, dir)
		})
	}
}

func TestRestoreRefusesForeignStream(t *testing.T) {
	t.Parallel()
	stream := backupOf(t)
	newer := bytes.Clone(stream)
	newer[len("DOCKETBK")+1] = '9' // a format newer than this build's ("3")
	older := bytes.Clone(stream)
	older[len("DOCKETBK")+1] = '2' // a development build's format before it
	cases := map[string][]byte{
		"empty":           nil,
		"not a backup":    []byte("{\"run_id\":\"x\"}\n"),
		"newer format":    newer,
		"older format":    older,
		"raw badger dump": stream[len("DOCKETBK")+2+8:],
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ledger")
			err := badgerdb.Restore(context.Background(), dir, bytes.NewReader(data), badgerdb.Config{})
			if !errors.Is(err, ledger.ErrFormat) {
				t.Fatalf("Restore: %v, want ErrFormat", err)
			}
			t.Logf("error: %v", err)
			assertNoLedger(t, dir)
		})
	}
}

func TestBackupClosed(t *testing.T) {
	t.Parallel()
	l := openBadger(t, badgerdb.Config{Dir: t.TempDir()})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Backup(context.Background(), &bytes.Buffer{}); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("Backup after Close: %v, want ErrClosed", err)
	}
}
