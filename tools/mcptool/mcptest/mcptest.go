// Package mcptest finds the reference MCP servers (from the npm registry,
// pinned) that tests run as real subprocesses.
//
// .ci/run installs them with
//
//	npm install --prefix .mcpservers --no-save @modelcontextprotocol/server-memory@2026.8.31 @modelcontextprotocol/server-everything@2026.8.31
//
// at the repository root (the folder is not committed). Tests skip only when
// Node.js is absent; a missing install is a test failure that prints the
// command above.
//
// Imports: the standard library only.
package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Pinned versions of the reference servers.
const (
	MemoryVersion     = "2026.8.31"
	EverythingVersion = "2026.8.31"
)

// InstallCommand installs the servers where Servers looks for them.
const InstallCommand = "npm install --prefix .mcpservers --no-save @modelcontextprotocol/server-memory@" + MemoryVersion +
	" @modelcontextprotocol/server-everything@" + EverythingVersion

// Paths are what a test needs to start the servers.
type Paths struct {
	Node       string // the node executable
	Memory     string // server-memory's entry script
	Everything string // server-everything's entry script
}

// Servers returns the paths of node and the installed servers. It skips the
// test when node is not on PATH and fails it when the servers are not
// installed. The folder is $DOCKET_MCP_SERVERS, or .mcpservers in the first
// parent of the working directory that has one.
func Servers(t testing.TB) Paths {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js is not installed (node not on PATH): skipping the tests against real MCP servers")
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
		p.Memory = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-memory", "dist", "index.js")
		p.Everything = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	}
	for _, f := range []string{p.Memory, p.Everything} {
		if _, err := os.Stat(f); dir == "" || err != nil {
			t.Fatalf("the reference MCP servers are not installed; at the repository root run:\n  %s\n(or set DOCKET_MCP_SERVERS to a folder where they are installed)", InstallCommand)
		}
	}
	return p
}
