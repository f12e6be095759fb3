// Package testextra decides what a test does when something outside Go that
// it needs is missing: Node.js and the reference MCP servers, Chromium,
// PostgreSQL's server binaries. The README's test command (make test)
// installs them where it can; plain `go test ./...` without them skips those
// tests, each with one line that names what is missing and how to get it.
// When extras are required (CI=true, or DOCKET_REQUIRE_EXTRAS=1, which
// make test sets), a missing extra fails the test instead, so a run that must
// prove everything can never pass by skipping.
//
// go test shows nothing of a passing package without -v, skip messages
// included. So that a skip is seen anyway, each one is also appended to the
// file $DOCKET_TEST_SKIPS names (SkipsEnv), and make test prints a summary
// of that file at the end (.ci/skips).
//
// Imports: the standard library only.
package testextra

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireEnv, when true, makes a missing extra a test failure. CI=true does
// the same.
const RequireEnv = "DOCKET_REQUIRE_EXTRAS"

// Required reports whether a missing extra fails the test rather than skipping
// it: CI or DOCKET_REQUIRE_EXTRAS is set to anything but "", "0" or "false".
func Required() bool {
	return truthy(os.Getenv("CI")) || truthy(os.Getenv(RequireEnv))
}

func truthy(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// SkipsEnv names a file that every test skipped here (Missing, MountTmpfs)
// appends one line to: the package directory, the test, and why, separated
// by tabs. Unset, nothing is recorded. Name a file inside the module under
// test: go test's cache then notices the write and runs a package that
// skipped again, instead of answering "(cached)" and recording nothing (it
// does not look at files outside the module).
const SkipsEnv = "DOCKET_TEST_SKIPS"

// skip records why t is skipped (SkipsEnv), then skips it.
func skip(t testing.TB, why string) {
	t.Helper()
	if path := os.Getenv(SkipsEnv); path != "" {
		if err := record(path, t.Name(), why); err != nil {
			t.Logf("recording the skip in $%s: %v", SkipsEnv, err)
		}
	}
	t.Skipf("%s", why)
}

// record appends one line to the skips file, in a single write (O_APPEND),
// so that the test binaries of several packages can share the file.
func record(path, test, why string) error {
	dir, _ := os.Getwd()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	line := strings.Join([]string{dir, test, oneLine(why)}, "\t") + "\n"
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Missing ends the test because an extra is missing: what names it (and where
// it was looked for), how says how to get it. It skips the test, or fails it
// when Required; either way with one line.
func Missing(t testing.TB, what, how string) {
	t.Helper()
	if Required() {
		t.Fatalf("missing %s: %s (extras are required here: CI or %s is set)", what, how, RequireEnv)
		return
	}
	skip(t, fmt.Sprintf("missing %s: %s (skipping; `make test` installs what it can and requires the rest)", what, how))
}

// MountTmpfs mounts a tmpfs of size bytes on a new directory, for tests that
// fill a file system (a full disk), and unmounts it when the test ends. It
// needs root and a kernel that lets this process mount; where mounting is
// refused it skips the test saying why. That is a property of the machine,
// not something make test could install, so it skips under CI too: a CI
// machine that runs as root on a VM runs these tests.
func MountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "mounting a small tmpfs to fill needs root")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		skip(t, fmt.Sprintf("mounting a tmpfs is not allowed here: %v: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
