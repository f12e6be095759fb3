package badgerdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

// fill writes a file of zeros until the file system is full (ENOSPC) and
// returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "fill")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// Smaller writes take the last partial chunk.
	for n := len(buf) / 2; n >= 512; n /= 2 {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	return p
}

func freeOn(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// spacePlan is a plan of n greet actions.
func spacePlan(n int) *plan.Plan {
	p := &plan.Plan{Goal: "space"}
	for i := range n {
		p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "greet", Args: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	return p
}

// claimAndSucceed performs action i of run through the ledger: claim, then
// outcome with an output of outBytes.
func claimAndSucceed(ctx context.Context, l *badgerdb.Ledger, run string, p *plan.Plan, i, outBytes int) error {
	a := p.Actions[i]
	k, err := plan.Key(run, a.ID, a.Tool, a.Args)
	if err != nil {
		return err
	}
	res, err := l.Apply(ctx, ledger.Claim(run, a.ID, a.Tool, k, a.Args, 1))
	if err != nil {
		return err
	}
	if res[0].Err != nil {
		return res[0].Err
	}
	out, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", outBytes)})
	res, err = l.Apply(ctx, ledger.Succeed(k, 1, out))
	if err != nil {
		return err
	}
	return res[0].Err
}

// A full file system under a running ledger: writes are refused with
// ErrNoSpace (no SIGBUS), reads keep working, and once space is freed the
// same handle writes again. Filled again and closed, the reserve makes room
// for Badger's final flush; opened while full, the ledger reads and refuses
// writes. Everything acknowledged is there at the end. Before the guard this
// test died of SIGBUS ("unexpected fault address") inside Badger.
func TestNoSpaceRefusesWritesAndRecovers(t *testing.T) {
	mnt := testextra.MountTmpfs(t, 32<<20)
	ctx := context.Background()
	dir := filepath.Join(mnt, "data")
	cfg := badgerdb.Config{Dir: dir, MemTableSize: 1 << 20} // MinFreeBytes: default, 17 MiB here
	var l *badgerdb.Ledger
	open := func() {
		t.Helper()
		var err error
		if l, err = badgerdb.Open(ctx, cfg); err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	t.Cleanup(func() { l.Close() }) // before the unmount
	open()
	p := spacePlan(400)
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	done := 0
	perform := func(n int) {
		t.Helper()
		for end := done + n; done < end; done++ {
			if err := claimAndSucceed(ctx, l, "r", p, done, 100); err != nil {
				t.Fatalf("action %d: %v", done, err)
			}
		}
	}
	refused := func(when string) {
		t.Helper()
		err := claimAndSucceed(ctx, l, "r", p, done, 100)
		if !errors.Is(err, ledger.ErrNoSpace) {
			t.Fatalf("write %s: %v, want ErrNoSpace", when, err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("the error does not name the directory: %v", err)
		}
	}
	reads := func(when string) {
		t.Helper()
		d, err := l.Doc(ctx, "r")
		if err != nil {
			t.Fatalf("reading %s: %v", when, err)
		}
		if n := succeeded(d); n != done {
			t.Fatalf("%s: %d actions succeeded in the ledger, %d acknowledged", when, n, done)
		}
		if _, _, err := l.ListRuns(ctx, ledger.ListOptions{}); err != nil {
			t.Fatalf("listing %s: %v", when, err)
		}
	}
	perform(10)
	if _, err := os.Stat(filepath.Join(dir, "docket-space-reserve")); err != nil {
		t.Fatalf("no free-space reserve: %v", err)
	}

	filler := fill(t, mnt)
	t.Logf("free after the fill: %d bytes", freeOn(t, mnt))
	refused("on a full file system")
	reads("on a full file system")
	// Space comes back: the same handle writes again, no reopen.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	perform(30)

	// Full again, then closed: the reserve gives Badger's flush its room.
	filler = fill(t, mnt)
	refused("on a full file system, again")
	if err := l.Close(); err != nil {
		t.Fatalf("Close on a full file system: %v", err)
	}
	// Opened while full: read-only, reads work, writes are ErrNoSpace.
	open()
	reads("after opening on a full file system")
	refused("after opening on a full file system")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	open()
	perform(10)
	reads("after freeing space")
	if _, err := os.Stat(filepath.Join(dir, "docket-space-reserve")); err != nil {
		t.Fatalf("the free-space reserve was not remade: %v", err)
	}
}

// spaceMemtable and spaceFill size TestNoSpaceUnderOwnWrites; the defaults
// keep it quick, -space.memtable=8388608 -space.fill=67108864 measures
// docket's defaults (59 MiB headroom, 21 MiB reserve, 64 MiB of writes).
var (
	spaceMemtable = flag.Int64("space.memtable", 1<<20, "memtable size for TestNoSpaceUnderOwnWrites")
	spaceFill     = flag.Int64("space.fill", 6<<20, "bytes TestNoSpaceUnderOwnWrites writes beyond the headroom and reserve")
)

// Our own writes fill the file system: the ledger refuses them before Badger
// runs out of pages for its memtable flushes, compactions and Close. A
// poller samples the free space all along; the test logs the lowest it saw,
// which says how much of the headroom Badger really used after the last
// admitted commit (the measure behind minFree).
func TestNoSpaceUnderOwnWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: fills a tmpfs through the ledger")
	}
	mt := *spaceMemtable
	cfg := badgerdb.Config{MemTableSize: mt}
	headroom := 6*mt + 11<<20   // minFree for cfg
	reserve := 2*mt*5/4 + 1<<20 // reserveBytes for cfg
	mnt := testextra.MountTmpfs(t, headroom+reserve+*spaceFill)
	ctx := context.Background()
	cfg.Dir = filepath.Join(mnt, "data")
	l, err := badgerdb.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() }) // on failure: before the unmount
	var lowest atomic.Int64
	lowest.Store(freeOn(t, mnt))
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { // samples the free space every 250µs (a sample, not a wait)
		defer close(polled)
		tick := time.NewTicker(250 * time.Microsecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var st syscall.Statfs_t
			if syscall.Statfs(mnt, &st) == nil {
				if f := int64(st.Bavail) * int64(st.Bsize); f < lowest.Load() {
					lowest.Store(f)
				}
			}
		}
	}()
	// One run per worker, so that no single commit is large.
	const workers = 32
	p := spacePlan(int(*spaceFill/(workers<<10)) + 500) // about twice what fills it
	for w := range workers {
		if _, _, err := l.CreateRun(ctx, ledger.Run{ID: fmt.Sprint("r", w), Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	var acked atomic.Int64
	ackedBy := make([]int, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range p.Actions {
				// Outputs under 2 KiB stay in the LSM tree: flushes and compactions.
				if err := claimAndSucceed(ctx, l, fmt.Sprint("r", w), p, i, 1500); err != nil {
					errs <- fmt.Errorf("action %d: %w", i, err)
					return
				}
				ackedBy[w]++
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	refusals := 0
	for err := range errs {
		if !errors.Is(err, ledger.ErrNoSpace) {
			t.Fatal(err)
		}
		refusals++
	}
	if refusals == 0 {
		t.Fatal("the file system never filled")
	}
	atRefusal := freeOn(t, mnt)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-polled
	t.Logf("memtable %d: %d actions acknowledged before ErrNoSpace; headroom %d; free at the refusal %d, lowest ever %d (%d of the headroom used), after Close %d",
		mt, acked.Load(), headroom, atRefusal, lowest.Load(), headroom-lowest.Load(), freeOn(t, mnt))

	cfg.MinFreeBytes = 1 // read back whatever the space
	l, err = badgerdb.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for w := range workers {
		d, err := l.Doc(ctx, fmt.Sprint("r", w))
		if err != nil {
			t.Fatal(err)
		}
		// A refused Apply wrote nothing: exactly the acknowledged actions
		// succeeded (a claim acknowledged before the refusal stays claimed).
		if n := succeeded(d); n != ackedBy[w] {
			t.Fatalf("run r%d: after reopen %d actions succeeded, %d acknowledged", w, n, ackedBy[w])
		}
	}
}

// A directory opened while its file system lacks the headroom is read-only:
// reads work, writes are ErrNoSpace; opened again with space, it writes.
// Needs no mount: MinFreeBytes above the free space stands in for a full
// disk.
func TestOpenWithoutSpaceIsReadOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := spacePlan(3)
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: "r", Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
		t.Fatal(err)
	}
	if err := claimAndSucceed(ctx, l, "r", p, 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	full := badgerdb.Config{Dir: dir, MinFreeBytes: 1 << 62}
	l, err = badgerdb.Open(ctx, full)
	if err != nil {
		t.Fatalf("opening a full directory to read: %v", err)
	}
	d, err := l.Doc(ctx, "r")
	if err != nil || succeeded(d) != 1 {
		t.Fatalf("read on a full directory: %d succeeded, %v", succeeded(d), err)
	}
	if err := claimAndSucceed(ctx, l, "r", p, 1, 10); !errors.Is(err, ledger.ErrNoSpace) {
		t.Fatalf("write on a read-only (full) directory: %v, want ErrNoSpace", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A new ledger cannot be created without space: ErrNoSpace, not a crash.
	if _, err := badgerdb.Open(ctx, badgerdb.Config{Dir: t.TempDir(), MinFreeBytes: 1 << 62}); !errors.Is(err, ledger.ErrNoSpace) {
		t.Fatalf("creating a ledger without space: %v, want ErrNoSpace", err)
	}

	l, err = badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := claimAndSucceed(ctx, l, "r", p, 1, 10); err != nil {
		t.Fatalf("write after reopening with space: %v", err)
	}
}

func succeeded(d ledger.RunDoc) int {
	n := 0
	for _, a := range d.Actions {
		if a.Status == ledger.StatusSucceeded {
			n++
		}
	}
	return n
}
