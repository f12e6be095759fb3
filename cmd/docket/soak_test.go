package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// soakEnv turns on the soak tests: the long chaos and kill loops that prove
// the promise at scale. The default suite (make test) runs their smaller
// versions on every change; `make soak` (DOCKET_SOAK=1, and go test -run
// soakRun) runs them, and .ci/run runs make soak after make test, so CI loses
// none of them.
const soakEnv = "DOCKET_SOAK"

// soakRun is the -run pattern of the soak tests; the Makefile's soak target
// reads it from this line, so keep it on one line.
const soakRun = `^(TestChaos|TestChaosVisibilityLag|TestChaosNodesSoak)$`

// soak skips the calling test unless DOCKET_SOAK is set; a test that calls it
// must be listed in soakRun, or make soak would never run it.
func soak(t *testing.T) {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	if !regexp.MustCompile(soakRun).MatchString(top) {
		t.Fatalf("%s calls soak but soakRun (%s) does not list it: make soak would never run it", top, soakRun)
	}
	if !soakOn() {
		t.Skipf("soak test: runs with %s=1 (make soak; .ci/run runs it)", soakEnv)
	}
}

func soakOn() bool {
	v := os.Getenv(soakEnv)
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}
