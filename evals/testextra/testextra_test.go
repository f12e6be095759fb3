package testextra_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/testextra"
)

// recorder is a testing.TB that records how the test was ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestMissing(t *testing.T) {
	for _, c := range []struct {
		ci, require string
		fail        bool
	}{
		{"", "", false},
		{"false", "0", false},
		{"true", "", true},
		{"", "1", true},
		{"0", "true", true},
	} {
		t.Run(fmt.Sprintf("CI=%q,%s=%q", c.ci, testextra.RequireEnv, c.require), func(t *testing.T) {
			t.Setenv("CI", c.ci)
			t.Setenv(testextra.RequireEnv, c.require)
			// This test's skips are of its own making: not in the summary.
			t.Setenv(testextra.SkipsEnv, "")
			r := &recorder{TB: t}
			testextra.Missing(r, "Chromium at /usr/bin/chromium", "apt-get install -y chromium")
			got := r.skipped
			if c.fail {
				got = r.failed
			}
			if (r.failed != "") != c.fail || (r.skipped != "") == c.fail {
				t.Fatalf("skipped %q, failed %q; want a failure: %v", r.skipped, r.failed, c.fail)
			}
			if !strings.Contains(got, "missing Chromium at /usr/bin/chromium: apt-get install -y chromium") || strings.Contains(got, "\n") {
				t.Errorf("message %q: want one line naming what is missing and how to get it", got)
			}
		})
	}
}

// TestSkipsRecorded: with $DOCKET_TEST_SKIPS set, every skip appends one
// line (the package directory, the test, the reason) to that file; a
// failure (extras required) and an unset variable record nothing.
func TestSkipsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "skips")
	t.Setenv("CI", "")
	t.Setenv(testextra.RequireEnv, "")
	t.Setenv(testextra.SkipsEnv, path)
	testextra.Missing(&recorder{TB: t}, "PostgreSQL's server binaries", "apt-get install -y postgresql")
	testextra.Missing(&recorder{TB: t}, "Node.js", "apt-get install -y\nnodejs")
	t.Setenv(testextra.RequireEnv, "1")
	testextra.Missing(&recorder{TB: t}, "Chromium", "apt-get install -y chromium")
	t.Setenv(testextra.RequireEnv, "")
	t.Setenv(testextra.SkipsEnv, "")
	testextra.Missing(&recorder{TB: t}, "promtool", "apt-get install -y prometheus")

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := os.Getwd()
	want := dir + "\t" + t.Name() + "\tmissing PostgreSQL's server binaries: apt-get install -y postgresql (skipping; `make test` installs what it can and requires the rest)\n" +
		dir + "\t" + t.Name() + "\tmissing Node.js: apt-get install -y nodejs (skipping; `make test` installs what it can and requires the rest)\n"
	if string(b) != want {
		t.Fatalf("skips file:\n%s\nwant:\n%s", b, want)
	}
}
