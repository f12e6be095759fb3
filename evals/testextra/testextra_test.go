package testextra_test

import (
	"fmt"
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
