package main

import (
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"128MiB": 128 << 20, "1GiB": 1 << 30, "2 GiB": 2 << 30, "4096": 4096, "512KiB": 512 << 10, "100B": 100, "off": math.MaxInt64}
	for in, want := range good {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5MiB", "12MB", "lots", "1.5GiB", "9999999999TiB"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
}

// `docket serve` runs under a soft memory limit: 128 MiB by default,
// GOMEMLIMIT when it is set, --memory-limit over both; the child's own Go
// runtime reports the limit it runs under (go_gc_gomemlimit_bytes on
// /metrics), and the log says where it came from.
func TestServeMemoryLimit(t *testing.T) {
	t.Parallel()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			env = append(env, kv)
		}
	}
	const token = "memlimit-test-token-0123456789"
	cases := []struct {
		name string
		env  []string
		args []string
		want int64
		from string
	}{
		{"default", env, nil, 128 << 20, "default"},
		{"GOMEMLIMIT", append(env[:len(env):len(env)], "GOMEMLIMIT=96MiB"), nil, 96 << 20, "GOMEMLIMIT"},
		{"flag over GOMEMLIMIT", append(env[:len(env):len(env)], "GOMEMLIMIT=96MiB"), []string{"--memory-limit", "64MiB"}, 64 << 20, "--memory-limit"},
	}
	re := regexp.MustCompile(`(?m)^go_gc_gomemlimit_bytes (\S+)$`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append([]string{"--data", filepath.Join(dir, "data"), "--token", token}, c.args...)
			s := startServeChildEnv(t, c.env, args...)
			req, err := http.NewRequest("GET", s.base+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := re.FindSubmatch(body)
			if m == nil {
				t.Fatalf("no go_gc_gomemlimit_bytes on /metrics (status %d)", resp.StatusCode)
			}
			got, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil || int64(got) != c.want {
				t.Fatalf("the child runs under a memory limit of %s, want %d", m[1], c.want)
			}
			if want := `from=` + c.from; !strings.Contains(s.output(), want) {
				t.Fatalf("the log does not say %s:\n%s", want, s.output())
			}
		})
	}
}

// `docket serve` hands start-up's garbage back to the OS before it says it
// listens (a forced collection: debug.FreeOSMemory), so that an idle
// server's resident set is what it keeps. Not parallel: no other test's
// body runs meanwhile to force a collection of its own.
func TestServeHandsBackStartupGarbage(t *testing.T) {
	forced := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := forced()
	s := startServe(t, nil, "--data", filepath.Join(t.TempDir(), "data"), "--token", "startup-garbage-token-0123456789")
	after := forced()
	_ = s // stopped by startServe's cleanup (a stop this early may report the interrupted start-up)
	if after <= before {
		t.Fatalf("forced collections %d before serve started, %d once it listened: start-up's garbage was not handed back", before, after)
	}
}
