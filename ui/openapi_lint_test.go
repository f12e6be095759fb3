package ui_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/ui"
)

// redoclyDir is where .ci/extras installs the pinned @redocly/cli (npm ci of
// ui/testdata/redocly into .redocly at the repository root).
const redoclyDir = "../.redocly"

// The served document passes `redocly lint` (its recommended rules) with no
// error; its warnings are listed in the test's log. Needs the pinned
// @redocly/cli (make test installs it: .ci/extras); skipped without it,
// failed where extras are required.
func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	var pin struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	raw, err := os.ReadFile("testdata/redocly/package.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &pin); err != nil || pin.Dependencies["@redocly/cli"] == "" {
		t.Fatalf("testdata/redocly/package.json pins no @redocly/cli: %v", err)
	}
	cli := filepath.Join(redoclyDir, "node_modules", "@redocly", "cli")
	var installed struct {
		Version string `json:"version"`
	}
	node, nodeErr := exec.LookPath("node")
	raw, err = os.ReadFile(filepath.Join(cli, "package.json"))
	if err == nil {
		err = json.Unmarshal(raw, &installed)
	}
	switch {
	case nodeErr != nil:
		testextra.Missing(t, "Node.js (node is not on PATH), needed to run @redocly/cli", "install Node.js 20.19+ and npm, then run .ci/extras")
		return
	case err != nil || installed.Version != pin.Dependencies["@redocly/cli"]:
		testextra.Missing(t, "@redocly/cli "+pin.Dependencies["@redocly/cli"]+" in "+redoclyDir, "run .ci/extras (npm ci of ui/testdata/redocly into .redocly)")
		return
	}
	doc := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(doc, ui.OpenAPIDocument(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(cli, "bin", "cli.js"), "lint", "--format=json", doc)
	// No telemetry, no update check: the lint runs offline.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.Output()
	var report struct {
		Totals struct {
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
		} `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if jerr := json.Unmarshal(out, &report); jerr != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("redocly lint: %v, its report is not JSON (%v):\n%s\n%s", err, jerr, out, stderr)
	}
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		if p.Severity == "error" {
			t.Errorf("redocly lint error %s at %s: %s", p.RuleID, where, p.Message)
		} else {
			t.Logf("redocly lint %s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
		}
	}
	if report.Totals.Errors > 0 || err != nil {
		t.Fatalf("redocly lint: %d errors (exit: %v)", report.Totals.Errors, err)
	}
	t.Logf("redocly lint %s: 0 errors, %d warnings", installed.Version, report.Totals.Warnings)
}
