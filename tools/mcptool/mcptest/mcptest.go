// Package mcptest finds the reference MCP servers (from the npm registry,
// pinned) that tests run as real subprocesses.
//
// The pins live in one place: package.json and package-lock.json beside this
// file. `make mcpservers` (which `make test` runs) installs exactly those into
// .mcpservers at the repository root (the folder is not committed) with
//
//	npm ci --prefix .mcpservers   # after copying both files into .mcpservers
//
// When Node.js or the servers at the pinned versions are missing, Servers
// skips the test with one line saying what to do, or fails it where extras are
// required (CI=true or DOCKET_REQUIRE_EXTRAS=1: see evals/testextra).
//
// Imports: the standard library, the MCP go-sdk and evals/testextra.
package mcptest

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/docketrun/docket/evals/testextra"
)

// InstallCommand installs the servers where Servers looks for them; run it at
// the repository root.
const InstallCommand = "make mcpservers"

// manifest is the npm manifest that pins the servers' versions.
//
//go:embed package.json
var manifest []byte

const (
	memoryPkg     = "@modelcontextprotocol/server-memory"
	everythingPkg = "@modelcontextprotocol/server-everything"
	filesystemPkg = "@modelcontextprotocol/server-filesystem"
)

// Pins returns the pinned version of each server package, by npm name.
func Pins() (map[string]string, error) {
	var m struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("mcptest: reading the pinned manifest: %w", err)
	}
	for _, p := range []string{memoryPkg, everythingPkg, filesystemPkg} {
		if m.Dependencies[p] == "" {
			return nil, fmt.Errorf("mcptest: the pinned manifest has no version of %s", p)
		}
	}
	return m.Dependencies, nil
}

// Paths are what a test needs to start the servers.
type Paths struct {
	Node       string // the node executable
	Memory     string // server-memory's entry script
	Everything string // server-everything's entry script
	Filesystem string // server-filesystem's entry script (give it the directories it may touch as arguments)
}

// Servers returns the paths of node and the installed servers. When node is
// not on PATH, or the servers are not installed at their pinned versions, it
// skips the test (fails it where extras are required: see the package doc).
// The folder is $DOCKET_MCP_SERVERS, or .mcpservers in the first parent of the
// working directory that has one.
func Servers(t testing.TB) Paths {
	t.Helper()
	pins, err := Pins()
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testextra.Missing(t, "Node.js (node is not on PATH), needed to run the reference MCP servers",
			"install Node.js 20+ and npm (Debian: apt-get install -y nodejs npm), then run `"+InstallCommand+"` at the repository root")
		return Paths{}
	}
	dir := os.Getenv("DOCKET_MCP_SERVERS")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for d := wd; ; d = filepath.Dir(d) {
			if fi, err := os.Stat(filepath.Join(d, ".mcpservers", "node_modules")); err == nil && fi.IsDir() {
				dir = filepath.Join(d, ".mcpservers")
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	p := Paths{Node: node}
	if dir != "" {
		p.Memory = filepath.Join(dir, "node_modules", memoryPkg, "dist", "index.js")
		p.Everything = filepath.Join(dir, "node_modules", everythingPkg, "dist", "index.js")
		p.Filesystem = filepath.Join(dir, "node_modules", filesystemPkg, "dist", "index.js")
	}
	for _, pkg := range []string{memoryPkg, everythingPkg, filesystemPkg} {
		if problem := installed(dir, pkg, pins[pkg]); problem != "" {
			testextra.Missing(t, "the reference MCP servers ("+problem+")",
				"run `"+InstallCommand+"` at the repository root (npm ci of the pinned servers into .mcpservers), or set DOCKET_MCP_SERVERS to a folder where they are installed")
			return Paths{}
		}
	}
	return p
}

// installed says what is wrong with package pkg under dir/node_modules, or ""
// when it is installed at version want with its entry script.
func installed(dir, pkg, want string) string {
	if dir == "" {
		return "no .mcpservers folder above the working directory and DOCKET_MCP_SERVERS unset"
	}
	root := filepath.Join(dir, "node_modules", pkg)
	b, err := os.ReadFile(filepath.Join(root, "package.json"))
	if err != nil {
		return fmt.Sprintf("%s is not installed in %s", pkg, dir)
	}
	var m struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Version != want {
		return fmt.Sprintf("%s in %s is version %q, pinned %s", pkg, dir, m.Version, want)
	}
	if _, err := os.Stat(filepath.Join(root, "dist", "index.js")); err != nil {
		return fmt.Sprintf("%s in %s has no dist/index.js", pkg, dir)
	}
	return ""
}
