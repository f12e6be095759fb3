package badgerdb_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
)

var (
	crashSeed  = flag.Uint64("crash.seed", 0, "seed of TestCrashKill (0: random, printed)")
	crashKills = flag.Int("crash.kills", 24, "SIGKILLs in TestCrashKill")
)

// childEnv switches the test binary into a child role (see TestMain).
const childEnv = "DOCKET_LEDGER_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "crash":
		os.Exit(crashChild(os.Getenv("DOCKET_LEDGER_DIR"), os.Getenv("DOCKET_LEDGER_SEED")))
	case "hold":
		os.Exit(holdChild(os.Getenv("DOCKET_LEDGER_DIR")))
	case "rekey":
		os.Exit(rekeyChild(os.Getenv("DOCKET_LEDGER_DIR"), os.Getenv("DOCKET_KEY_A"), os.Getenv("DOCKET_KEY_B")))
	case "collect":
		os.Exit(collectChild(os.Getenv("DOCKET_LEDGER_DIR")))
	}
	goleak.VerifyTestMain(m,
		// Badger's and ristretto's package-level goroutines outlive any DB.
		goleak.IgnoreTopFunction("github.com/dgraph-io/ristretto/v2/z.(*AllocatorPool).freeupAllocators"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		// A badger.Open that fails (the crash-leftover retry in Open) leaves
		// its cache monitor running: Badger's error path does not stop it.
		goleak.IgnoreTopFunction("github.com/dgraph-io/badger/v4.(*DB).monitorCache"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

const (
	crashRuns    = 4
	crashActions = 2000
)

func crashArgs(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)) }

func crashKey(run string, i int) string {
	k, err := plan.Key(run, fmt.Sprintf("a%d", i), "t", crashArgs(i))
	if err != nil {
		panic(err)
	}
	return k
}

// crashChild drives crashRuns runs concurrently, resuming whatever a killed
// predecessor left, and prints every acknowledged write on stdout:
//
//	claim RUN I N     (Claim of action aI, attempt N, acknowledged)
//	succeed RUN I N   (Succeed of action aI attempt N, acknowledged)
func crashChild(dir, seed string) int {
	s, _ := strconv.ParseUint(seed, 10, 64)
	ctx := context.Background()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 3
	}
	var outMu sync.Mutex
	ack := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		outMu.Unlock()
	}
	var wg sync.WaitGroup
	errc := make(chan error, crashRuns)
	for r := 0; r < crashRuns; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(s, uint64(r)))
			run := fmt.Sprintf("run%d", r)
			p := &plan.Plan{Goal: run}
			for i := 1; i <= crashActions; i++ {
				p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: crashArgs(i)})
			}
			if _, _, err := l.CreateRun(ctx, ledger.Run{ID: run}, p, nil); err != nil {
				errc <- err
				return
			}
			output := func(i int) json.RawMessage {
				n := 16 + rng.IntN(4096)
				if rng.IntN(10) == 0 {
					n = 20 << 10 // goes to the value log
				}
				return json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", n)))
			}
			// claimNext returns the attempt to claim for action i, or 0 when done.
			next := func(i int) (int, error) {
				rec, err := l.Key(ctx, crashKey(run, i))
				if errors.Is(err, ledger.ErrNotFound) {
					return 1, nil
				}
				if err != nil {
					return 0, err
				}
				if rec.State == ledger.StatusSucceeded {
					return 0, nil
				}
				return rec.Attempt + 1, nil // pending, or claimed by a dead incarnation
			}
			held := 0 // attempt of action i already claimed by this process
			for i := 1; i <= crashActions; i++ {
				n := held
				if n == 0 {
					var err error
					if n, err = next(i); err != nil {
						errc <- err
						return
					}
					if n == 0 {
						continue
					}
					res, err := l.Apply(ctx, ledger.Claim(run, fmt.Sprintf("a%d", i), "t", crashKey(run, i), crashArgs(i), n))
					if err == nil {
						err = res[0].Err
					}
					if err != nil {
						errc <- fmt.Errorf("claim %s a%d/%d: %w", run, i, n, err)
						return
					}
					ack("claim %s %d %d", run, i, n)
				}
				held = 0
				ops := []ledger.Op{ledger.Succeed(crashKey(run, i), n, output(i))}
				// Half the time, the next action's claim rides in the same commit.
				nextN := 0
				if i < crashActions && rng.IntN(2) == 0 {
					var err error
					if nextN, err = next(i + 1); err != nil {
						errc <- err
						return
					}
					if nextN > 0 {
						ops = append(ops, ledger.Claim(run, fmt.Sprintf("a%d", i+1), "t", crashKey(run, i+1), crashArgs(i+1), nextN))
					}
				}
				res, err := l.Apply(ctx, ops...)
				if err != nil {
					errc <- err
					return
				}
				for j, r := range res {
					if r.Err != nil {
						errc <- fmt.Errorf("op %d on %s a%d: %w", j, run, i, r.Err)
						return
					}
				}
				ack("succeed %s %d %d", run, i, n)
				if len(ops) == 2 {
					ack("claim %s %d %d", run, i+1, nextN)
					held = nextN
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "child close:", err)
		return 1
	}
	fmt.Println("done")
	return 0
}

type ackState struct {
	claims   map[string]int // run/i -> highest acknowledged claim attempt
	succeeds map[string]int // run/i -> acknowledged succeeded attempt
}

// TestCrashKill re-executes the test binary as a child that writes claims,
// outcomes and events across several runs, SIGKILLs it at random moments,
// reopens the directory and checks that every acknowledged write and its
// event survived and that event sequences have no gaps.
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	st := ackState{claims: map[string]int{}, succeeds: map[string]int{}}
	kills, finished := 0, false
	for round := 0; kills < *crashKills && !finished; round++ {
		killAfter := 1 + rng.IntN(100) // acknowledgements to read before the kill
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=crash", "DOCKET_LEDGER_DIR="+dir,
			fmt.Sprintf("DOCKET_LEDGER_SEED=%d", rng.Uint64()))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		n := 0
		killed := false
		for sc.Scan() {
			line := sc.Text()
			if line == "done" {
				finished = true
				continue
			}
			st.record(t, line)
			n++
			if n == killAfter && !killed {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
				// Lines already written before the kill still count: keep reading.
			}
		}
		err = cmd.Wait()
		if killed {
			kills++
		} else if err != nil {
			t.Fatalf("round %d (seed %d): child failed: %v\n%s", round, seed, err, stderr.String())
		}
		st.verify(t, dir, seed, round)
	}
	if kills < *crashKills && !finished {
		t.Fatalf("only %d kills", kills)
	}
	t.Logf("%d kills, %d claims and %d outcomes acknowledged, work finished: %v", kills, len(st.claims), len(st.succeeds), finished)
}

func (st *ackState) record(t *testing.T, line string) {
	var op, run string
	var i, n int
	if _, err := fmt.Sscanf(line, "%s %s %d %d", &op, &run, &i, &n); err != nil {
		t.Fatalf("child line %q: %v", line, err)
	}
	k := fmt.Sprintf("%s/%d", run, i)
	switch op {
	case "claim":
		st.claims[k] = max(st.claims[k], n)
	case "succeed":
		st.succeeds[k] = n
	default:
		t.Fatalf("child line %q", line)
	}
}

func (st *ackState) verify(t *testing.T, dir string, seed uint64, round int) {
	t.Helper()
	ctx := context.Background()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatalf("round %d (seed %d): reopen: %v", round, seed, err)
	}
	defer l.Close()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("round %d (seed %d): %s", round, seed, fmt.Sprintf(format, args...))
	}
	for k, n := range st.claims {
		var run string
		var i int
		fmt.Sscanf(strings.Replace(k, "/", " ", 1), "%s %d", &run, &i)
		rec, err := l.Key(ctx, crashKey(run, i))
		if err != nil {
			fail("acknowledged claim %s attempt %d lost: %v", k, n, err)
		}
		if rec.Attempt < n {
			fail("acknowledged claim %s attempt %d, record has attempt %d", k, n, rec.Attempt)
		}
	}
	for k, n := range st.succeeds {
		var run string
		var i int
		fmt.Sscanf(strings.Replace(k, "/", " ", 1), "%s %d", &run, &i)
		rec, err := l.Key(ctx, crashKey(run, i))
		if err != nil || rec.State != ledger.StatusSucceeded || rec.Attempt != n {
			fail("acknowledged success %s attempt %d: record %+v, %v", k, n, rec, err)
		}
		if !strings.HasPrefix(string(rec.Output), fmt.Sprintf(`{"i":%d,`, i)) {
			fail("output of %s: %.40s", k, rec.Output)
		}
	}
	for r := 0; r < crashRuns; r++ {
		run := fmt.Sprintf("run%d", r)
		evs, err := l.Events(ctx, run, 0, 0)
		if err != nil {
			fail("events of %s: %v", run, err)
		}
		claimed := map[string]bool{}
		succeeded := map[string]bool{}
		for j, ev := range evs {
			if ev.Seq != uint64(j+1) {
				fail("run %s: event %d has seq %d", run, j, ev.Seq)
			}
			var d struct{ Attempt int }
			_ = json.Unmarshal(ev.Data, &d)
			switch ev.Type {
			case "action.claimed":
				claimed[fmt.Sprintf("%s/%s/%d", run, ev.ActionID, d.Attempt)] = true
			case "action.succeeded":
				if succeeded[run+"/"+ev.ActionID] {
					fail("run %s: action %s succeeded twice", run, ev.ActionID)
				}
				succeeded[run+"/"+ev.ActionID] = true
			}
		}
		for k, n := range st.claims {
			if strings.HasPrefix(k, run+"/") {
				i := strings.TrimPrefix(k, run+"/")
				if !claimed[fmt.Sprintf("%s/a%s/%d", run, i, n)] {
					fail("no action.claimed event for acknowledged claim %s attempt %d", k, n)
				}
			}
		}
		for k := range st.succeeds {
			if strings.HasPrefix(k, run+"/") && !succeeded[run+"/a"+strings.TrimPrefix(k, run+"/")] {
				fail("no action.succeeded event for acknowledged success %s", k)
			}
		}
	}
}

// holdChild opens dir and holds it until stdin closes.
func holdChild(dir string) int {
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := l.Close(); err != nil {
		return 1
	}
	return 0
}

func TestLocked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir}); !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("second Open in the same process: %v, want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		return
	}
	// Another process holds the directory.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=hold", "DOCKET_LEDGER_DIR="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("holder said %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("holder did not open the directory")
	}
	_, err = badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if !errors.Is(err, ledger.ErrLocked) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("Open while another process holds the directory: %v, want ErrLocked", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	l, err = badgerdb.Open(ctx, badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open after the holder exited: %v", err)
	}
	l.Close()
}
