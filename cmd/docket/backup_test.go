package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
)

// runWithStdin runs one command struct with stdin and reports like main does.
func runWithStdin(t *testing.T, c func(Env) command, stdin []byte, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := testEnv(&out, &errb)
	env.Stdin = bytes.NewReader(stdin)
	err := c(env).Run(context.Background(), args)
	code := report(err, &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

func newBackup(env Env) command  { return &backupCmd{env: env} }
func newRestore(env Env) command { return &restoreCmd{env: env} }

// backup → restore (through stdout/stdin and through files) → runs show
// --json gives the same Run JSON.
func TestBackupRestoreCommands(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	src := filepath.Join(root, "src")
	seedRuns(t, src, map[string]ledger.RunStatus{"r1": ledger.RunRunning, "r2": ledger.RunPaused})
	show := func(dir, run string) string {
		t.Helper()
		r := inproc(t, "runs", "show", "--json", "--data", dir, run)
		wantCode(t, r, exitOK)
		return r.stdout
	}

	// stdout → stdin
	b := runWithStdin(t, newBackup, nil, "--data", src)
	wantCode(t, b, exitOK)
	viaStdin := filepath.Join(root, "via-stdin")
	r := runWithStdin(t, newRestore, []byte(b.stdout), "--data", viaStdin)
	wantCode(t, r, exitOK)

	// file → file
	file := filepath.Join(root, "ledger.bak")
	wantCode(t, runWithStdin(t, newBackup, nil, "--data", src, "--out", file), exitOK)
	viaFile := filepath.Join(root, "via-file")
	wantCode(t, runWithStdin(t, newRestore, nil, "--data", viaFile, "--in", file), exitOK)

	for _, run := range []string{"r1", "r2"} {
		want := show(src, run)
		for _, dir := range []string{viaStdin, viaFile} {
			if got := show(dir, run); got != want {
				t.Errorf("run %s restored in %s:\n%s\nwant\n%s", run, dir, got, want)
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary %s left behind", e.Name())
		}
	}

	// Refusals: a non-empty target (exit 2, the ledger there untouched), a
	// truncated stream (exit 2, nothing left), no --data (exit 2).
	refused := runWithStdin(t, newRestore, []byte(b.stdout), "--data", viaFile)
	wantCode(t, refused, exitBad)
	if !strings.Contains(refused.stderr, "not empty") {
		t.Errorf("non-empty target message:\n%s", refused)
	}
	cut := filepath.Join(root, "cut")
	trunc := runWithStdin(t, newRestore, []byte(b.stdout[:len(b.stdout)-12]), "--data", cut)
	wantCode(t, trunc, exitBad)
	if !strings.Contains(trunc.stderr, "truncated") {
		t.Errorf("truncated stream message:\n%s", trunc)
	}
	if _, err := os.Stat(cut); !os.IsNotExist(err) {
		t.Errorf("truncated restore left %s: %v", cut, err)
	}
	wantCode(t, runWithStdin(t, newRestore, nil), exitBad)
	wantCode(t, runWithStdin(t, newBackup, nil, "--data", filepath.Join(root, "nowhere")), exitBad)
}

// A backup of a data directory another handle holds exits 4.
func TestBackupBusy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := runWithStdin(t, newBackup, nil, "--data", dir)
	wantCode(t, r, exitBusy)
	if r.stdout != "" || !strings.Contains(r.stderr, "busy") {
		t.Errorf("busy backup:\n%s", r)
	}
}
