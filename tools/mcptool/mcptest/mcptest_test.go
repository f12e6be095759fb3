package mcptest_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/tools/mcptool/mcptest"
)

const childEnv = "MCPTEST_SERVERS_CHILD"

// TestServersChild is the child of TestServersWhenMissing: it only calls
// Servers, in the environment its parent chose.
func TestServersChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs only as the child of TestServersWhenMissing")
	}
	p := mcptest.Servers(t)
	t.Logf("found %+v", p)
}

// TestServersWhenMissing runs Servers in a child test process without node,
// without the servers, and with the wrong version installed: each time it
// skips with one line naming what is missing and how to get it, and under
// CI=true or DOCKET_REQUIRE_EXTRAS=1 it fails with the same line instead.
func TestServersWhenMissing(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testextra.Missing(t, "Node.js (node is not on PATH)", "apt-get install -y nodejs npm")
	}
	pins, err := mcptest.Pins()
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	stale := t.TempDir()
	for pkg, v := range map[string]string{"@modelcontextprotocol/server-memory": "0.6.2", "@modelcontextprotocol/server-everything": pins["@modelcontextprotocol/server-everything"]} {
		d := filepath.Join(stale, "node_modules", pkg)
		if err := os.MkdirAll(filepath.Join(d, "dist"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "package.json"), []byte(`{"version": "`+v+`"}`), 0o644)
		os.WriteFile(filepath.Join(d, "dist", "index.js"), nil, 0o644)
	}
	cases := []struct {
		name, path, servers, want string
	}{
		{"no node", t.TempDir(), empty, "missing Node.js (node is not on PATH)"},
		{"no servers", filepath.Dir(node), empty, "missing the reference MCP servers (@modelcontextprotocol/server-"},
		{"stale servers", filepath.Dir(node), stale, `server-memory in ` + stale + ` is version "0.6.2", pinned ` + pins["@modelcontextprotocol/server-memory"]},
	}
	for _, c := range cases {
		for _, require := range []string{"", "CI=true", testextra.RequireEnv + "=1"} {
			t.Run(c.name+"/"+cmp.Or(require, "plain"), func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run", "^TestServersChild$", "-test.v")
				cmd.Dir = t.TempDir()
				for _, kv := range os.Environ() {
					k, _, _ := strings.Cut(kv, "=")
					// The child's skips are of this test's making: not in the summary.
					if k != "CI" && k != testextra.RequireEnv && k != "PATH" && k != "DOCKET_MCP_SERVERS" && k != testextra.SkipsEnv {
						cmd.Env = append(cmd.Env, kv)
					}
				}
				cmd.Env = append(cmd.Env, childEnv+"=1", "PATH="+c.path, "DOCKET_MCP_SERVERS="+c.servers)
				if require != "" {
					cmd.Env = append(cmd.Env, require)
				}
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				failed := errors.As(err, &exit)
				if err != nil && !failed {
					t.Fatal(err)
				}
				verdict := "--- SKIP: TestServersChild"
				if require != "" {
					verdict = "--- FAIL: TestServersChild"
				}
				if failed != (require != "") || !strings.Contains(string(out), verdict) || !strings.Contains(string(out), c.want) {
					t.Fatalf("child exit %v, want %q and %q in:\n%s", err, verdict, c.want, out)
				}
				if !strings.Contains(string(out), "make mcpservers") && !strings.Contains(string(out), "apt-get install -y nodejs npm") {
					t.Fatalf("the line does not say how to get what is missing:\n%s", out)
				}
			})
		}
	}
}

// TestPinsMatchTheLockfile: package.json pins the servers, package-lock.json
// (what npm ci installs) must pin the same versions.
func TestPinsMatchTheLockfile(t *testing.T) {
	pins, err := mcptest.Pins()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Version      string            `json:"version"`
			Dependencies map[string]string `json:"dependencies"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	if root := lock.Packages[""].Dependencies; !maps.Equal(root, pins) {
		t.Fatalf("package-lock.json requires %v, package.json pins %v: run npm install --package-lock-only in a copy of both", root, pins)
	}
	for pkg, v := range pins {
		if got := lock.Packages["node_modules/"+pkg].Version; got != v {
			t.Errorf("package-lock.json locks %s at %q, pinned %s", pkg, got, v)
		}
	}
}
