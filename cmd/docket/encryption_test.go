package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
)

// grepDir lists the files under dir that hold s.
func grepDir(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// The whole life of an encrypted data directory through the CLI: keygen,
// run (the secret argument is in no file of the directory), reads with the
// key from the file or the environment, refusals without it or with another
// key (exit 2, saying where the key comes from), an encrypted backup that
// restores only with the key, rekey, and a plain directory encrypted by
// backup and restore. No output ever shows a key.
func TestEncryptionCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const secret = "ref-SECRET-7f3a9"
	keyFile, newKeyFile, otherKeyFile := filepath.Join(b.dir, "key"), filepath.Join(b.dir, "new.key"), filepath.Join(b.dir, "other.key")
	var all []result
	do := func(code int, vars map[string]string, args ...string) result {
		t.Helper()
		r := inprocEnv(t, vars, args...)
		all = append(all, r)
		wantCode(t, r, code)
		return r
	}
	for _, f := range []string{keyFile, newKeyFile, otherKeyFile} {
		do(exitOK, nil, "keygen", "--out", f)
	}
	if r := do(exitBad, nil, "keygen", "--out", keyFile); !strings.Contains(r.stderr, "never overwrites") {
		t.Fatalf("keygen over a key file:\n%s", r)
	}
	keyHex := func(f string) string {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
	if k := do(exitOK, nil, "keygen").stdout; len(strings.TrimSpace(k)) != 64 {
		t.Fatalf("keygen printed %q", k)
	}

	p := b.plan(t, "pay", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "`+secret+`"}}]}`)
	do(exitOK, nil, b.runArgs(p, "--run-id", "enc", "--approve", "all", "--encryption-key-file", keyFile)...)
	if files := grepDir(t, b.data, secret); len(files) > 0 {
		t.Fatalf("the secret argument is in %v", files)
	}
	withEnv := map[string]string{"DOCKET_ENCRYPTION_KEY": keyHex(keyFile)}
	do(exitOK, withEnv, "version")
	show := do(exitOK, withEnv, "runs", "show", "--json", "--data", b.data, "enc").stdout
	if !strings.Contains(show, secret) {
		t.Fatalf("runs show with the key from the environment does not show the args:\n%s", show)
	}
	if r := do(exitBad, nil, "runs", "show", "--data", b.data, "enc"); !strings.Contains(r.stderr, "is encrypted and no key was given") || !strings.Contains(r.stderr, "--encryption-key-file") {
		t.Fatalf("runs show without the key:\n%s", r)
	}
	if r := do(exitBad, nil, "runs", "list", "--data", b.data, "--encryption-key-file", otherKeyFile); !strings.Contains(r.stderr, "another key") {
		t.Fatalf("runs list with another key:\n%s", r)
	}
	bad := filepath.Join(b.dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := do(exitBad, nil, "runs", "list", "--data", b.data, "--encryption-key-file", bad); !strings.Contains(r.stderr, "want 64 hexadecimal digits") {
		t.Fatalf("a malformed key:\n%s", r)
	}

	// Backup and restore.
	bak := filepath.Join(b.dir, "enc.bak")
	do(exitOK, nil, "backup", "--data", b.data, "--out", bak, "--encryption-key-file", keyFile)
	if files := grepDir(t, bak, secret); len(files) > 0 {
		t.Fatal("the backup holds the secret")
	}
	if r := do(exitBad, nil, "restore", "--data", filepath.Join(b.dir, "r0"), "--in", bak); !strings.Contains(r.stderr, "no key was given") {
		t.Fatalf("restore without the key:\n%s", r)
	}
	restored := filepath.Join(b.dir, "restored")
	do(exitOK, nil, "restore", "--data", restored, "--in", bak, "--encryption-key-file", keyFile)
	if got := do(exitOK, withEnv, "runs", "show", "--json", "--data", restored, "enc").stdout; got != show {
		t.Fatalf("restored:\n%s\nwant\n%s", got, show)
	}

	// Rekey: the old key stops working, the new one reads everything.
	do(exitOK, nil, "rekey", "--data", b.data, "--encryption-key-file", keyFile, "--new-key-file", newKeyFile)
	do(exitBad, nil, "runs", "show", "--data", b.data, "--encryption-key-file", keyFile, "enc")
	if got := do(exitOK, nil, "runs", "show", "--json", "--data", b.data, "--encryption-key-file", newKeyFile, "enc").stdout; got != show {
		t.Fatalf("after rekey:\n%s\nwant\n%s", got, show)
	}

	// A plain directory: refused with a key; encrypted by backup + restore.
	plain := filepath.Join(b.dir, "plain")
	do(exitOK, nil, "run", "--data", plain, "--tools", b.tools, "--plan", p, "--run-id", "pl", "--approve", "all")
	if r := do(exitBad, nil, "runs", "list", "--data", plain, "--encryption-key-file", keyFile); !strings.Contains(r.stderr, "is not encrypted") {
		t.Fatalf("plain directory with a key:\n%s", r)
	}
	plainBak := filepath.Join(b.dir, "plain.bak")
	do(exitOK, nil, "backup", "--data", plain, "--out", plainBak)
	migrated := filepath.Join(b.dir, "migrated")
	do(exitOK, nil, "restore", "--data", migrated, "--in", plainBak, "--encryption-key-file", keyFile)
	if files := grepDir(t, migrated, secret); len(files) > 0 {
		t.Fatalf("the encrypted copy holds the secret in %v", files)
	}
	do(exitOK, withEnv, "runs", "show", "--data", migrated, "pl")

	// The shared ledger: the same flag and variable give its keyring (the
	// current key first, older ones after it).
	url, _ := sharedLedger(t)
	do(exitOK, nil, "run", "--ledger", url, "--tools", b.tools, "--plan", p, "--run-id", "sh", "--approve", "all", "--encryption-key-file", keyFile)
	if r := do(exitBad, nil, "runs", "list", "--ledger", url); !strings.Contains(r.stderr, "is encrypted") || !strings.Contains(r.stderr, "--encryption-key-file") {
		t.Fatalf("the encrypted shared ledger without a key:\n%s", r)
	}
	ring := filepath.Join(b.dir, "ring")
	if err := os.WriteFile(ring, []byte("# current\n"+keyHex(newKeyFile)+"\n# older\n"+keyHex(keyFile)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := do(exitOK, nil, "runs", "show", "--json", "--ledger", url, "--encryption-key-file", ring, "sh").stdout; !strings.Contains(got, secret) {
		t.Fatalf("the shared ledger after rotation:\n%s", got)
	}
	if r := do(exitBad, nil, "runs", "list", "--ledger", url, "--encryption-key-file", newKeyFile); !strings.Contains(r.stderr, "lacks") {
		t.Fatalf("a keyring without the key in use:\n%s", r)
	}
	if r := do(exitOK, nil, "rekey", "--ledger", url, "--encryption-key-file", ring); !strings.Contains(r.stderr, "may now be removed") {
		t.Fatalf("rekey of the shared ledger:\n%s", r)
	}
	if got := do(exitOK, nil, "runs", "show", "--json", "--ledger", url, "--encryption-key-file", newKeyFile, "sh").stdout; !strings.Contains(got, secret) {
		t.Fatalf("the shared ledger after rekey, with the new key alone:\n%s", got)
	}
	if r := do(exitBad, nil, "runs", "list", "--data", b.data, "--encryption-key-file", ring); !strings.Contains(r.stderr, "holds 2 keys") {
		t.Fatalf("a keyring for a data directory:\n%s", r)
	}

	for _, r := range all {
		for _, f := range []string{keyFile, newKeyFile, otherKeyFile} {
			if k := keyHex(f); strings.Contains(r.stdout+r.stderr, k) && !(len(r.args) == 1 && r.args[0] == "keygen") {
				t.Fatalf("a key is shown:\n%s", r)
			}
		}
	}
}

// docket serve with a key from the environment: it says the ledger is
// encrypted (by the key's id, never the key), and what it records is in no
// file of the data directory.
func TestServeEncrypted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "d")
	r := inproc(t, "keygen")
	wantCode(t, r, exitOK)
	key := strings.TrimSpace(r.stdout)
	s := startServe(t, map[string]string{"DOCKET_TOKEN": "ci=0123456789abcdef0123", "DOCKET_ENCRYPTION_KEY": key}, "--data", dir)
	s.token = "0123456789abcdef0123"
	if !strings.Contains(strings.Join(s.lines, "\n"), "encrypted at rest: key k") {
		t.Fatalf("serve does not say the ledger is encrypted:\n%s", strings.Join(s.lines, "\n"))
	}
	var doc runJSON
	if code := s.post(t, "/v1/runs", map[string]any{"plan": json.RawMessage(demoworld.OnboardingPlan()), "approve": "none", "run_id": "srv"}, &doc); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs = %d", code)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if out := strings.Join(s.lines, "\n") + s.stderr.String(); strings.Contains(out, key) {
		t.Fatalf("serve showed the key:\n%s", out)
	}
	if files := grepDir(t, dir, "billing@acme.example"); len(files) > 0 {
		t.Fatalf("an argument is in %v", files)
	}
	show := inprocEnv(t, map[string]string{"DOCKET_ENCRYPTION_KEY": key}, "runs", "show", "--json", "--data", dir, "srv")
	wantCode(t, show, exitOK)
	if !strings.Contains(show.stdout, "billing@acme.example") {
		t.Fatalf("runs show with the key:\n%s", show)
	}
}
