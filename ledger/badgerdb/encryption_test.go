package badgerdb_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/masterkey"
)

// secret is an argument, an output and an error text that must never be
// found in the files of an encrypted ledger or its backups.
const secret = "sk-live-4f7Zq9SECRETvalue"

func newKey(t *testing.T) masterkey.Key {
	t.Helper()
	k, err := masterkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// recordSecret records a run whose plan, args, output, error and a memo hold
// the secret, with enough padding that some of it goes to the value log.
func recordSecret(t *testing.T, l *badgerdb.Ledger, runID string) {
	ledgertest.RecordSecret(t, l, runID, secret, 4<<10)
}

// filesHolding lists the files under dir whose bytes contain s.
func filesHolding(t *testing.T, dir string, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// dirDigest is a digest of every file's name and bytes under dir.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// The files of an encrypted ledger hold none of its arguments, outputs,
// errors or plans, whether the data is still in the write-ahead log, in the
// value log or compacted into tables; the same ledger without a key does
// (so the search can find it); reads round-trip.
func TestEncryptedAtRest(t *testing.T) {
	t.Parallel()
	for _, encrypted := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypted), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var key masterkey.Key
			if encrypted {
				key = newKey(t)
			}
			l := openBadger(t, badgerdb.Config{Dir: dir, Key: key})
			const runID = "run-Q7ZX2W" // record keys hold it: encrypted too
			recordSecret(t, l, runID)
			want := readRunState(t, l, runID)
			// Unflushed: in the write-ahead and value logs.
			live := append(filesHolding(t, dir, secret), filesHolding(t, dir, runID)...)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Flushed into tables at Close.
			closed := append(filesHolding(t, dir, secret), filesHolding(t, dir, runID)...)
			if !encrypted {
				if len(live) == 0 || len(closed) == 0 {
					t.Fatalf("plain ledger: the secret was not found in its files (open: %v, closed: %v): the search cannot fail", live, closed)
				}
				return
			}
			if len(live) > 0 || len(closed) > 0 {
				t.Fatalf("encrypted ledger: the secret is in %v (open) / %v (closed)", live, closed)
			}
			l2 := openBadger(t, badgerdb.Config{Dir: dir, Key: key})
			if got := readRunState(t, l2, runID); !reflect.DeepEqual(got, want) {
				t.Fatalf("reopened with the key: %+v, want %+v", got, want)
			}
			if got := readRunState(t, l2, runID); !strings.Contains(string(got.Doc.Actions[0].Args), secret) {
				t.Fatalf("args do not round-trip: %s", got.Doc.Actions[0].Args)
			}
		})
	}
}

// A key that does not fit the directory is refused with ErrKey, changing
// none of its files, and no error shows the key.
func TestEncryptionKeyRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key, other := newKey(t), newKey(t)
	encDir, plainDir := t.TempDir(), t.TempDir()
	for _, c := range []struct {
		dir string
		key masterkey.Key
	}{{encDir, key}, {plainDir, masterkey.Key{}}} {
		l := openBadger(t, badgerdb.Config{Dir: c.dir, Key: c.key})
		recordSecret(t, l, "r1")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		dir  string
		key  masterkey.Key
		want string
	}{
		{"encrypted without a key", encDir, masterkey.Key{}, "no key was given"},
		{"encrypted with another key", encDir, other, "another key"},
		{"plain with a key", plainDir, key, "is not encrypted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := dirDigest(t, c.dir)
			l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: c.dir, Key: c.key})
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ledger.ErrKey) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v, want ledger.ErrKey saying %q", err, c.want)
			}
			for _, k := range []masterkey.Key{key, other} {
				if strings.Contains(err.Error(), k.Hex()) {
					t.Fatalf("the error shows a key: %v", err)
				}
			}
			if after := dirDigest(t, c.dir); after != before {
				t.Fatal("the refused open changed the directory's files")
			}
		})
	}
	// Still opens with the right key afterwards.
	l := openBadger(t, badgerdb.Config{Dir: encDir, Key: key})
	readRunState(t, l, "r1")
}

// The backup of an encrypted ledger is encrypted: it does not hold the
// secret, restores only with the key, and a damaged or cut one is
// ErrCorrupt. A plain backup restored with a key makes an encrypted ledger.
func TestEncryptedBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	key, other := newKey(t), newKey(t)
	// Long enough that random ciphertext does not hold it by chance (a
	// two-letter id is in about every 64 KiB of it).
	const runID = "run-with-an-id-no-ciphertext-holds"
	src := openBadger(t, badgerdb.Config{Dir: filepath.Join(root, "src"), Key: key})
	recordSecret(t, src, runID)
	want := readRunState(t, src, runID)
	var buf bytes.Buffer
	if err := src.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	backup := buf.Bytes()
	if bytes.Contains(backup, []byte(secret)) || bytes.Contains(backup, []byte(runID)) {
		t.Fatal("the encrypted backup holds the secret or the run id in plaintext")
	}
	if !bytes.Contains(backup[:64], []byte(key.ID())) {
		t.Fatal("the backup's header does not name its key")
	}
	restore := func(name string, b []byte, k masterkey.Key) (string, error) {
		dir := filepath.Join(root, name)
		return dir, badgerdb.Restore(ctx, dir, bytes.NewReader(b), badgerdb.Config{Key: k})
	}
	for _, c := range []struct {
		name string
		key  masterkey.Key
		want string
	}{{"nokey", masterkey.Key{}, "no key was given"}, {"otherkey", other, "encrypted with key " + key.ID()}} {
		dir, err := restore(c.name, backup, c.key)
		if !errors.Is(err, ledger.ErrKey) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("restore %s: %v, want ErrKey saying %q", c.name, err, c.want)
		}
		if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("restore %s left %s behind", c.name, dir)
		}
	}
	damaged := bytes.Clone(backup)
	damaged[len(damaged)/2] ^= 1
	cut := backup[:len(backup)-1]
	for name, b := range map[string][]byte{"damaged": damaged, "cut": cut, "cutheader": backup[:20]} {
		if _, err := restore(name, b, key); !errors.Is(err, badgerdb.ErrCorrupt) {
			t.Fatalf("restore %s: %v, want ErrCorrupt", name, err)
		}
	}
	dir, err := restore("ok", backup, key)
	if err != nil {
		t.Fatalf("restore with the key: %v", err)
	}
	if _, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir}); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("the restored ledger opened without the key: %v", err)
	}
	if files := filesHolding(t, dir, secret); len(files) > 0 {
		t.Fatalf("the restored ledger holds the secret in %v", files)
	}
	got := openBadger(t, badgerdb.Config{Dir: dir, Key: key})
	if s := readRunState(t, got, runID); !reflect.DeepEqual(s, want) {
		t.Fatalf("restored: %+v, want %+v", s, want)
	}

	// Encrypting a plain ledger: a plain backup restored with a key.
	plain := openBadger(t, badgerdb.Config{Dir: filepath.Join(root, "plain")})
	recordSecret(t, plain, runID)
	wantPlain := readRunState(t, plain, runID)
	buf.Reset()
	if err := plain.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(secret)) {
		t.Fatal("a plain backup does not hold the secret: the search cannot fail")
	}
	dir, err = restore("migrated", buf.Bytes(), key)
	if err != nil {
		t.Fatalf("restore a plain backup with a key: %v", err)
	}
	got.Close()
	mig := openBadger(t, badgerdb.Config{Dir: dir, Key: key})
	if s := readRunState(t, mig, runID); !reflect.DeepEqual(s, wantPlain) {
		t.Fatalf("migrated: %+v, want %+v", s, wantPlain)
	}
	mig.Close()
	if files := filesHolding(t, dir, secret); len(files) > 0 {
		t.Fatalf("the migrated ledger holds the secret in %v", files)
	}
}

// Rekey moves a directory to a new master key: the old key is refused
// afterwards, the records stay readable with the new one, a second Rekey
// is success, and a plain directory or a wrong old key is ErrKey.
func TestRekey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	oldKey, newK, wrong := newKey(t), newKey(t), newKey(t)
	dir := t.TempDir()
	l := openBadger(t, badgerdb.Config{Dir: dir, Key: oldKey, DataKeyRotation: time.Nanosecond})
	recordSecret(t, l, "r1")
	want := readRunState(t, l, "r1")
	if err := badgerdb.Rekey(ctx, dir, oldKey, newK); !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("Rekey of an open directory: %v, want ErrLocked", err)
	}
	l.Close()
	before := dirDigest(t, dir)
	if err := badgerdb.Rekey(ctx, dir, wrong, newK); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("Rekey with a wrong old key: %v, want ErrKey", err)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("a refused Rekey changed the directory")
	}
	if err := badgerdb.Rekey(ctx, dir, oldKey, newK); err != nil {
		t.Fatalf("Rekey: %v", err)
	}
	if err := badgerdb.Rekey(ctx, dir, oldKey, newK); err != nil {
		t.Fatalf("Rekey again: %v", err)
	}
	if _, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir, Key: oldKey}); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("Open with the old key after Rekey: %v, want ErrKey", err)
	}
	l2 := openBadger(t, badgerdb.Config{Dir: dir, Key: newK})
	if got := readRunState(t, l2, "r1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Rekey: %+v, want %+v", got, want)
	}
	recordSecret(t, l2, "r2")
	l2.Close()
	if files := filesHolding(t, dir, secret); len(files) > 0 {
		t.Fatalf("after Rekey the secret is in %v", files)
	}

	plainDir := t.TempDir()
	p := openBadger(t, badgerdb.Config{Dir: plainDir})
	p.Close()
	if err := badgerdb.Rekey(ctx, plainDir, oldKey, newK); !errors.Is(err, ledger.ErrKey) {
		t.Fatalf("Rekey of a plain directory: %v, want ErrKey", err)
	}
}

// rekeyChild rekeys the directory back and forth between two keys until
// it is killed, printing each finished rekey.
func rekeyChild(dir, keyA, keyB string) int {
	a, errA := masterkey.Parse([]byte(keyA))
	b, errB := masterkey.Parse([]byte(keyB))
	if errA != nil || errB != nil {
		fmt.Fprintln(os.Stderr, errA, errB)
		return 2
	}
	fmt.Println("ready") // the parent's kill point counts from here, not from the process start
	for i := 0; ; i++ {
		from, to := a, b
		if i%2 == 1 {
			from, to = b, a
		}
		if err := badgerdb.Rekey(context.Background(), dir, from, to); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("rekeyed %d\n", i)
	}
}

// A rekey killed at any moment leaves a directory that opens, whole, with
// one of the two keys, and a rekey from that key finishes.
func TestRekeyKill(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	a, b := newKey(t), newKey(t)
	dir := t.TempDir()
	l := openBadger(t, badgerdb.Config{Dir: dir, Key: a})
	recordSecret(t, l, "r1")
	want := readRunState(t, l, "r1")
	l.Close()
	var rekeys, underB int
	for round := range 8 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=rekey", "DOCKET_LEDGER_DIR="+dir,
			"DOCKET_KEY_A="+a.Hex(), "DOCKET_KEY_B="+b.Hex())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The kill point is random within the rekeys, whatever the child's
		// start-up takes on a loaded machine.
		r := bufio.NewReader(out)
		if line, err := r.ReadString('\n'); line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d (seed %d): the child said %q (%v), want ready\n%s", round, seed, line, err, stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(100_000)) * time.Microsecond) // a random kill point, not a wait
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(r)
		stdout := string(rest)
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d (seed %d): child ended by itself: %v\n%s", round, seed, err, stderr.String())
		}
		var opened *badgerdb.Ledger
		var with masterkey.Key
		for _, k := range []masterkey.Key{a, b} {
			if l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir, Key: k}); err == nil {
				opened, with = l, k
				break
			} else if !errors.Is(err, ledger.ErrKey) {
				t.Fatalf("round %d (seed %d): open after kill: %v", round, seed, err)
			}
		}
		if opened == nil {
			t.Fatalf("round %d (seed %d): the directory opens with neither key (%d rekeys done)", round, seed, strings.Count(stdout, "\n"))
		}
		if got := readRunState(t, opened, "r1"); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d (seed %d): after kill: %+v, want %+v", round, seed, got, want)
		}
		opened.Close()
		rekeys += strings.Count(stdout, "\n")
		if with != a {
			underB++ // start the next round from a
			if err := badgerdb.Rekey(context.Background(), dir, b, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d rekeys finished before the kills; %d kills left the directory under the second key", rekeys, underB)
	if rekeys == 0 {
		t.Fatalf("seed %d: no kill came after a finished rekey: nothing was tested", seed)
	}
}

// The conformance suite passes on an encrypted directory (reopens, backups
// and restores included).
func TestConformanceEncrypted(t *testing.T) {
	key := newKey(t)
	ledgertest.Run(t, func(t *testing.T, c ledgertest.Config) ledger.Store {
		return openBadger(t, badgerdb.Config{Dir: c.Dir, Clock: c.Clock, Key: key,
			SubscriberBuffer: c.SubscriberBuffer, MaxOutputBytes: c.MaxOutputBytes})
	}, ledgertest.Options{Durable: true, ApplyLimit: true})
}

// Nothing the ledger or Badger logs, at any level, shows the key.
func TestKeyNotLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := newKey(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
	dir := t.TempDir()
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: dir, Key: key, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	recordSecret(t, l, "r1")
	var buf bytes.Buffer
	if err := l.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := badgerdb.Restore(ctx, filepath.Join(t.TempDir(), "r"), &buf, badgerdb.Config{Key: key, Logger: log}); err != nil {
		t.Fatal(err)
	}
	if logs.Len() == 0 {
		t.Fatal("nothing was logged: the check cannot fail")
	}
	b64 := base64.StdEncoding.EncodeToString(key.Bytes())
	if s := logs.String(); strings.Contains(strings.ToLower(s), key.Hex()) || strings.Contains(s, b64) || bytes.Contains(logs.Bytes(), key.Bytes()) {
		t.Fatal("the log shows the key")
	}
}
