package badgerdb_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/plan"
)

// gcRun records run id with n actions, each claimed (with a budget hold)
// and succeeded, one with a large argument, a memo, and ends it when ended.
func gcRun(t testing.TB, l ledger.Store, id string, n int, ended bool) []string {
	t.Helper()
	ctx := context.Background()
	p := &plan.Plan{Goal: id}
	for i := 1; i <= n; i++ {
		args := fmt.Sprintf(`{"i":%d}`, i)
		if i == 1 {
			args = fmt.Sprintf(`{"i":1,"pad":%q}`, strings.Repeat("x", 70<<10))
		}
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(args)})
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: id}, p, nil); err != nil {
		t.Fatalf("CreateRun(%s): %v", id, err)
	}
	var keys []string
	for _, a := range p.Actions {
		k, err := plan.Key(id, a.ID, "t", a.Args)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		for _, op := range []ledger.Op{
			ledger.Claim(id, a.ID, "t", k, a.Args, 1).WithCharges(ledger.Charge{Budget: "calls", Scope: "run:" + id, Amount: "1", Limit: "99"}),
			ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`)),
		} {
			if _, err := ledger.ApplyOne(ctx, l, op); err != nil {
				t.Fatalf("%s %s: %v", id, a.ID, err)
			}
		}
	}
	if _, err := l.Memo(ctx, id, "m", json.RawMessage(`"v"`)); err != nil {
		t.Fatal(err)
	}
	if ended {
		if _, err := ledger.ApplyOne(ctx, l, ledger.SetRunStatus(id, ledger.RunCompleted, ledger.EventRunCompleted, "", nil)); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// rawKeys lists every Badger key of a closed data directory.
func rawKeys(t *testing.T, dir string) map[string]bool {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithReadOnly(false))
	if err != nil {
		t.Fatalf("opening %s with Badger: %v", dir, err)
	}
	defer db.Close()
	out := map[string]bool{}
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			out[string(it.Item().KeyCopy(nil))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mentions reports whether Badger key k belongs to run id or to one of keys
// (as text or as the 32 raw bytes of an executor-derived key).
func mentions(k, id string, keys []string) bool {
	if strings.Contains(k, "\x00"+id+"\x00") || strings.HasSuffix(k, "\x00"+id) ||
		((k[0] == 't' || k[0] == 'g') && strings.HasSuffix(k, id)) {
		return true
	}
	for _, key := range keys {
		if strings.Contains(k, key) {
			return true
		}
		if raw, ok := strings.CutPrefix(key, "dk1_"); ok {
			if b, err := hex.DecodeString(raw); err == nil && strings.Contains(k, string(b)) {
				return true
			}
		}
	}
	return false
}

// TestCollectLeavesNothingOfTheRun: every record of a collected run is gone
// (all Badger keys are read back), the other runs' records all stay, and the
// report counts exactly what went.
func TestCollectLeavesNothingOfTheRun(t *testing.T) {
	dir := t.TempDir()
	clock := ledgertest.NewClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	l := openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	goneKeys := gcRun(t, l, "gone", 3, true)
	keptKeys := gcRun(t, l, "kept", 3, false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before := rawKeys(t, dir)
	l = openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	clock.Add(2 * time.Hour)
	rep, err := l.Collect(context.Background(), ledger.CollectOptions{Retention: time.Hour})
	if err != nil || rep.Runs != 1 {
		t.Fatalf("Collect = %+v, %v; want 1 run", rep, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	after := rawKeys(t, dir)
	var removed int64
	for k := range before {
		switch {
		case !after[k]:
			removed++
			if !mentions(k, "gone", goneKeys) {
				t.Errorf("key %q of another run was deleted", k)
			}
		case mentions(k, "gone", goneKeys):
			t.Errorf("key %q of the collected run is left", k)
		}
	}
	for k := range after {
		if mentions(k, "kept", keptKeys) && !before[k] {
			t.Errorf("new key %q", k)
		}
	}
	// Every deleted record is counted, plus the ended-run index entry.
	if removed != rep.Records+1 {
		t.Errorf("deleted %d Badger keys, report says %d records (+1 index entry)", removed, rep.Records)
	}
	if rep.Bytes <= 70<<10 {
		t.Errorf("report says %d bytes; the run held a 70 KiB argument", rep.Bytes)
	}
}

// TestCollectMarkedRunIsGone: a run whose header is marked (a collect killed
// between its steps) reads as gone, refuses ops, and the next Collect
// finishes it whatever the retention.
func TestCollectMarkedRunIsGone(t *testing.T) {
	dir := t.TempDir()
	clock := ledgertest.NewClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	l := openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	keys := gcRun(t, l, "half", 2, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Mark it, as step 1 of a collect does (the header and the mark entry
	// of the ended-run index), and delete one of its events.
	rewriteHeader(t, dir, "half", func(m map[string]any) error {
		m["collecting"] = true
		return nil
	}, func(txn *badger.Txn) error {
		if err := txn.Set(append([]byte{'g', 0, 0, 0, 0, 0, 0, 0, 0, 0}, "half"...), nil); err != nil {
			return err
		}
		return txn.Delete(append(append([]byte{'e', 0}, "half"...), 0, 0, 0, 0, 0, 0, 0, 0, 1))
	})
	l = openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	ctx := context.Background()
	if _, err := l.GetRun(ctx, "half"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("GetRun of a marked run: %v, want ErrNotFound", err)
	}
	if _, err := l.Doc(ctx, "half"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Doc of a marked run: %v, want ErrNotFound", err)
	}
	if _, err := l.Key(ctx, keys[0]); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Key of a marked run: %v, want ErrNotFound", err)
	}
	if evs, err := l.Events(ctx, "half", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events of a marked run = %d, %v; want none", len(evs), err)
	}
	if _, err := ledger.ApplyOne(ctx, l, ledger.SetRunStatus("half", ledger.RunRunning, "", "", nil)); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an op on a marked run: %v, want ErrNotFound", err)
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "half"}, &plan.Plan{Goal: "x"}, nil); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("CreateRun over a marked run: %v, want ErrNotFound (being deleted)", err)
	}
	// Within any retention, the marked run is finished.
	rep, err := l.Collect(ctx, ledger.CollectOptions{Retention: 1000 * time.Hour})
	if err != nil || rep.Runs != 1 {
		t.Fatalf("Collect = %+v, %v; want the marked run", rep, err)
	}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "half"}, &plan.Plan{Goal: "x"}, nil); err != nil {
		t.Errorf("CreateRun once collected: %v", err)
	}
}

const collectCrashRuns = 400

// collectChild collects every run of dir (ended long ago) and says so.
func collectChild(dir string) int {
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "collect child:", err)
		return 3
	}
	fmt.Println("ready")
	rep, err := l.Collect(context.Background(), ledger.CollectOptions{Retention: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, "collect child:", err)
		return 1
	}
	fmt.Printf("done %d\n", rep.Runs)
	_ = l.Close()
	return 0
}

// TestCollectKilled: a collect SIGKILLed at random points leaves every run
// either whole (its document, events and keys read) or gone (none of them
// does), and a later collect finishes: nothing of any run is left.
func TestCollectKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	clock := ledgertest.NewClock(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	l := openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	keys := map[string][]string{}
	for i := range collectCrashRuns {
		id := fmt.Sprintf("r%03d", i)
		keys[id] = gcRun(t, l, id, 3, true)
	}
	events := map[string]int{}
	for id := range keys {
		evs, err := l.Events(context.Background(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		events[id] = len(evs)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	kills := 0
	for attempt := 0; attempt < 8; attempt++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=collect", "DOCKET_LEDGER_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			_ = cmd.Wait()
			t.Fatalf("child did not start: %s", stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(80)) * time.Millisecond) // the kill point, not a wait for something
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() {
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			kills++
		}
		marked := 0
		for k := range rawKeys(t, dir) {
			if k[0] == 'g' && strings.HasPrefix(k, "g\x00\x00\x00\x00\x00\x00\x00\x00\x00") {
				marked++
			}
		}
		t.Logf("kill %d: %d runs marked, not yet deleted", attempt, marked)
		checkWholeOrGone(t, dir, keys, events)
	}
	t.Logf("%d of 8 children were killed while collecting", kills)
	// A collect to the end leaves nothing of any run.
	l = openBadger(t, badgerdb.Config{Dir: dir})
	if _, err := l.Collect(context.Background(), ledger.CollectOptions{Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for k := range rawKeys(t, dir) {
		if k[0] != 'v' && k[0] != 'u' { // the format record and the budget buckets stay
			t.Errorf("key %q left after the last collect", k)
		}
	}
}

func checkWholeOrGone(t *testing.T, dir string, keys map[string][]string, events map[string]int) {
	t.Helper()
	ctx := context.Background()
	l := openBadger(t, badgerdb.Config{Dir: dir})
	defer l.Close()
	whole, gone := 0, 0
	for id, ks := range keys {
		_, err := l.Doc(ctx, id)
		switch {
		case err == nil:
			whole++
			evs, err := l.Events(ctx, id, 0, 0)
			if err != nil || len(evs) != events[id] {
				t.Fatalf("run %s reads but has %d events (%v), want %d", id, len(evs), err, events[id])
			}
			for _, k := range ks {
				if _, err := l.Key(ctx, k); err != nil {
					t.Fatalf("run %s reads but its key %s does not: %v", id, k, err)
				}
			}
		case errors.Is(err, ledger.ErrNotFound):
			gone++
			if _, err := l.GetRun(ctx, id); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("run %s: Doc not found, GetRun %v", id, err)
			}
			for _, k := range ks {
				if _, err := l.Key(ctx, k); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("run %s is gone but its key %s reads: %v", id, k, err)
				}
			}
			if evs, _ := l.Events(ctx, id, 0, 0); len(evs) != 0 {
				t.Fatalf("run %s is gone but %d events read", id, len(evs))
			}
		default:
			t.Fatalf("Doc(%s): %v", id, err)
		}
	}
	t.Logf("after a kill: %d runs whole, %d gone", whole, gone)
}

// A run that ended before the ledger recorded end times (its header has
// none, the ended-run index has no entry) is given its last change as end
// time by the first collect, and collected by the rule.
func TestCollectRunsEndedBeforeRetention(t *testing.T) {
	dir := t.TempDir()
	clock := ledgertest.NewClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	l := openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	gcRun(t, l, "older", 1, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteHeader(t, dir, "older", func(m map[string]any) error {
		if _, ok := m["ended_at"]; !ok {
			return errors.New("the header has no ended_at")
		}
		delete(m, "ended_at")
		return nil
	}, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{'g', 0}})
		defer it.Close()
		var del [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			del = append(del, it.Item().KeyCopy(nil))
		}
		for _, k := range del {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	l = openBadger(t, badgerdb.Config{Dir: dir, Clock: clock})
	ctx := context.Background()
	if rep, err := l.Collect(ctx, ledger.CollectOptions{Retention: time.Hour}); err != nil || rep.Runs != 0 {
		t.Fatalf("within the retention: %+v, %v", rep, err)
	}
	clock.Add(2 * time.Hour)
	if rep, err := l.Collect(ctx, ledger.CollectOptions{Retention: time.Hour}); err != nil || rep.Runs != 1 {
		t.Fatalf("past the retention: %+v, %v; want the older run", rep, err)
	}
}

// rewriteHeader opens the closed data directory dir with Badger itself and,
// in one transaction, rewrites run runID's header (its JSON) with edit and
// then makes the other changes of more: what a process killed in the middle
// of a collect, or an older build, leaves behind.
func rewriteHeader(t *testing.T, dir, runID string, edit func(m map[string]any) error, more func(txn *badger.Txn) error) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		k := append([]byte{'h', 0}, runID...)
		item, err := txn.Get(k)
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			return err
		}
		if err := edit(m); err != nil {
			return err
		}
		v, _ = json.Marshal(m)
		if err := txn.Set(k, v); err != nil {
			return err
		}
		return more(txn)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}
