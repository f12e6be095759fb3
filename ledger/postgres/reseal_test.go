package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
	"github.com/docketrun/docket/ledger/postgres"
)

// rotatedLedger records r0 in plaintext, r1 under key a and r2 under key b
// (with a kept), and returns the keyring [b, a] and what each run reads as.
func rotatedLedger(t *testing.T, schema string, extra int) (*masterkey.Keyring, masterkey.Key, map[string]pgState) {
	t.Helper()
	want := map[string]pgState{}
	s := open(t, postgres.Config{Schema: schema})
	recordSecretRun(t, s, "r0")
	want["r0"] = readPGState(t, s, "r0")
	s.Close()
	a := postgres.NewTestKeyring(t, 1)
	s = open(t, postgres.Config{Schema: schema, Keyring: a})
	recordSecretRun(t, s, "r1")
	for i := range extra {
		recordSecretRun(t, s, fmt.Sprintf("x%d", i))
	}
	want["r1"] = readPGState(t, s, "r1")
	s.Close()
	b, err := masterkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := masterkey.NewKeyring(b, a.Current())
	if err != nil {
		t.Fatal(err)
	}
	s = open(t, postgres.Config{Schema: schema, Keyring: ring})
	recordSecretRun(t, s, "r2")
	want["r2"] = readPGState(t, s, "r2")
	s.Close()
	return ring, b, want
}

func checkRuns(t *testing.T, s ledger.Store, want map[string]pgState) {
	t.Helper()
	for id, w := range want {
		got := readPGState(t, s, id)
		if !reflect.DeepEqual(got.Plan, w.Plan) || !reflect.DeepEqual(got.Doc.Actions, w.Doc.Actions) || got.Doc.Run.Goal != w.Doc.Run.Goal || len(got.Events) != len(w.Events) {
			t.Fatalf("run %s reads differently after resealing", id)
		}
		for i := range got.Events {
			if string(got.Events[i].Data) != string(w.Events[i].Data) {
				t.Fatalf("run %s event %d: %s, want %s", id, i, got.Events[i].Data, w.Events[i].Data)
			}
		}
	}
}

// Reseal moves every value to the current key and seals the plaintext
// ones: afterwards the keyring without the old key opens the ledger, no
// value names the old key and no column holds the secret.
func TestReseal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaFor(t.Name())
	ring, b, want := rotatedLedger(t, schema, 0)
	old := ring.Key(ring.IDs()[1])
	onlyNew, err := masterkey.NewKeyring(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, postgres.Config{URL: database(t), Schema: schema, Keyring: onlyNew}); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("before resealing, the keyring without the old key: %v", err)
	}
	s := open(t, postgres.Config{Schema: schema, Keyring: ring})
	st, err := s.Reseal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if st.Sealed == 0 || st.Resealed == 0 || st.Left != 0 {
		t.Fatalf("Reseal: %+v", st)
	}
	if st, err := s.Reseal(ctx); err != nil || st != (postgres.ResealStats{}) {
		t.Fatalf("Reseal again: %+v %v", st, err)
	}
	s.Close()
	if cols := rawHolding(t, schema, pgSecret); len(cols) > 0 {
		t.Fatalf("after Reseal the secret is in %v", cols)
	}
	if cols := rawHolding(t, schema, old.ID()); len(cols) > 0 {
		t.Fatalf("after Reseal the old key is named in %v", cols)
	}
	s2 := open(t, postgres.Config{Schema: schema, Keyring: onlyNew})
	checkRuns(t, s2, want)
}

// holdRow locks run runID's row in a transaction of its own until release
// is called; pid is the backend holding it.
func holdRow(t *testing.T, schema, runID string) (release func(), pid uint32) {
	t.Helper()
	ctx := context.Background()
	conn := rawConn(t)
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := conn.QueryRow(ctx, `SELECT run_id FROM `+pgx.Identifier{schema, "runs"}.Sanitize()+` WHERE run_id = $1 FOR UPDATE`, runID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return func() { conn.Close(ctx) }, conn.PgConn().PID()
}

const resealChildEnv = "DOCKET_RESEAL_CHILD"

// resealChild reseals the schema named in the environment, printing
// "started" first, until done or killed.
func resealChild() int {
	kr, err := masterkey.ParseKeyring([]byte(strings.ReplaceAll(os.Getenv("DOCKET_RESEAL_RING"), ",", "\n")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := postgres.Open(context.Background(), postgres.Config{URL: os.Getenv("DOCKET_RESEAL_URL"), Schema: os.Getenv(resealChildEnv), Keyring: kr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("started")
	st, err := s.Reseal(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("done %+v\n", st)
	return 0
}

// A Reseal killed at any moment leaves a ledger that reads whole with the
// keyring, and running it again finishes.
func TestResealKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	schema := schemaFor(t.Name() + t.TempDir()) // a new one for every run of the test
	ring, b, want := rotatedLedger(t, schema, 25)
	ringText := strings.Join([]string{ring.Current().Hex(), ring.Key(ring.IDs()[1]).Hex()}, ",")
	kills := 0
	for round := range 4 {
		// A row the reseal must write is held locked until the kill, so the
		// kill lands mid-reseal however fast the reseal is: before the row,
		// or waiting on it (which row is random, and so is when the kill
		// comes).
		hold, _ := holdRow(t, schema, fmt.Sprintf("x%d", rng.IntN(25)))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), resealChildEnv+"="+schema, "DOCKET_RESEAL_URL="+database(t), "DOCKET_RESEAL_RING="+ringText)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "started" {
			cmd.Wait()
			t.Fatalf("round %d: the child did not start: %s", round, stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // a random kill point, not a wait
		cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() {
			t.Logf("round %d: %s", round, sc.Text())
		}
		hold()
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			kills++
		}
		s := open(t, postgres.Config{Schema: schema, Keyring: ring})
		checkRuns(t, s, want)
		s.Close()
	}
	if kills == 0 {
		t.Fatalf("seed %d: every reseal finished before its kill: nothing was tested", seed)
	}
	s := open(t, postgres.Config{Schema: schema, Keyring: ring})
	if st, err := s.Reseal(ctx); err != nil || st.Left != 0 {
		t.Fatalf("Reseal after the kills: %+v %v", st, err)
	}
	s.Close()
	onlyNew, _ := masterkey.NewKeyring(b)
	s2 := open(t, postgres.Config{Schema: schema, Keyring: onlyNew})
	checkRuns(t, s2, want)
	t.Logf("%d of 4 reseals killed midway", kills)
}
