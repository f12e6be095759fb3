package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/ui"
)

// browserPage is one headless Chromium tab on a bundle's server, with the
// helpers a page test needs; failures leave a screenshot as an artifact.
type browserPage struct {
	t   *testing.T
	ctx context.Context
}

// trustBundleCerts makes Chromium accept the certificates of TLS bundles
// (their key's SPKI hash), so the page is tested over HTTPS too; any other
// certificate error still fails. Chromium honours the flag with a
// --user-data-dir, which chromedp always gives it.
var trustBundleCerts = chromedp.Flag("ignore-certificate-errors-spki-list", bundleKeySPKI())

// startChromium starts a headless Chromium and returns its tab's context,
// closed when the test ends. The browser starts here, in a Run of its own:
// chromedp starts it on a context's first Run, and a second start on the
// same context after a failed one panics inside chromedp ("close of closed
// channel"), taking every test of the package with it. So a start that fails
// (a loaded machine) is tried again with a new browser, twice at most.
func startChromium(t *testing.T, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(width, height), trustBundleCerts)
	for try := 1; ; try++ {
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelTab := chromedp.NewContext(allocCtx)
		err := chromedp.Do(ctx) // starts the browser and its tab
		if err == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancelTab)
			return ctx
		}
		cancelTab()
		cancelAlloc()
		if try == 3 {
			t.Fatalf("starting Chromium: %v", err)
		}
		t.Logf("starting Chromium failed (%v); trying a new one", err)
	}
}

func openBrowser(t *testing.T, width, height int) *browserPage {
	t.Helper()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		testextra.Missing(t, "Chromium at "+chromiumPath+" ("+err.Error()+")",
			"apt-get install -y chromium (Debian's package; `make test` installs it when it runs as root or with passwordless sudo)")
	}
	ctx := startChromium(t, width, height)
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTime)
	return &browserPage{t: t, ctx: ctx}
}

func (p *browserPage) shot(name string) {
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *browserPage) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.shot("failed")
		p.t.Fatalf("%s: %v", what, err)
	}
}

func (p *browserPage) poll(what, predicate string) {
	p.t.Helper()
	if err := pollPage(p.ctx, predicate); err != nil {
		p.shot("failed")
		p.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// pollPage waits until predicate holds on the page. A poll that meets the
// page between two documents (a navigation destroys the JavaScript context
// it was evaluating in) polls again in the new one, until ctx ends.
func pollPage(ctx context.Context, predicate string) error {
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate))
		if err == nil || ctx.Err() != nil {
			return err
		}
		if m := err.Error(); !strings.Contains(m, "Cannot find context with specified id") && !strings.Contains(m, "Execution context was destroyed") {
			return err
		}
	}
}

func (p *browserPage) eval(expr string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return s
}

func (p *browserPage) truth(expr string) bool {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// signIn opens the page and signs in with the token.
func (p *browserPage) signIn(base string) {
	p.t.Helper()
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.poll("the sign-in form", `!document.getElementById("signin").hidden`)
	p.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), testToken), chromedp.KeyEvent("\r"))
	p.poll("the signed-in page", `!document.getElementById("app").hidden && document.getElementById("who").textContent === "token:alice"`)
}

// The page of a server without a model: the app stays out of sight under
// the sign-in card, the connection badge says live once signed in (before any
// run is opened), a goal cannot be "planned", and a plan is submitted from
// the page — pasted (every action waits; the email, approved before its
// references resolved, comes back with a note saying why) and from a file.
// Long run ids and event timestamps stay inside the page.
func TestBrowserPlanSubmitWithoutModel(t *testing.T) {
	b := setup(t, options{tune: func(c *ui.Config) { c.Planner = nil }})
	p := openBrowser(t, 1100, 900)

	p.do("open the page", chromedp.Navigate(b.hs.URL+"/"))
	p.poll("the sign-in form", `!document.getElementById("signin").hidden`)
	// [hidden] must win over main{display:grid}: nothing of the app shows
	// under the sign-in card, and no red "not connected" badge either.
	if d := p.eval(`getComputedStyle(document.getElementById("app")).display`); d != "none" {
		p.shot("failed")
		t.Fatalf("before sign-in the app is displayed as %q, want none", d)
	}
	if p.truth(`document.getElementById("app").getBoundingClientRect().height > 0`) {
		t.Fatal("before sign-in the app takes room on the page")
	}
	if d := p.eval(`getComputedStyle(document.getElementById("conn")).display`); d != "none" {
		t.Fatalf("before sign-in the connection badge shows (%q): %q", d, p.eval(`document.getElementById("conn").textContent`))
	}
	p.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), testToken), chromedp.KeyEvent("\r"))
	p.poll("the signed-in page", `!document.getElementById("app").hidden && document.getElementById("who").textContent === "token:alice"`)
	if d := p.eval(`getComputedStyle(document.getElementById("signin")).display`); d != "none" {
		t.Fatalf("after sign-in the sign-in card is displayed as %q", d)
	}
	// Signed in, no run open: the all-runs stream is live and the badge says so.
	p.poll("the badge to say live", `document.getElementById("conn").textContent === "live" && document.getElementById("conn").classList.contains("conn-on")`)
	if !p.truth(`document.getElementById("run-view").hidden`) {
		t.Fatal("a run is open already")
	}

	// No model: the goal form says so and cannot be submitted; the plan
	// form is open.
	if !p.truth(`document.getElementById("create").disabled && document.getElementById("goal").disabled`) {
		t.Fatal(`"Plan it" is enabled on a server without a model`)
	}
	if !p.truth(`!document.getElementById("no-model").hidden && document.getElementById("plan-box").open`) {
		t.Fatal("the page does not say there is no model, or hides the plan form")
	}
	p.shot("1-no-model")

	// A bad plan is refused with the server's reasons, on the page.
	p.do("submit a broken plan",
		chromedp.SetValue(chromedp.CSS("#plan-json"), `{"actions": [{"id": "a", "tool": "nope", "args": {}}]}`),
		chromedp.Click(chromedp.CSS("#submit-plan")))
	p.poll("the refusal", `document.getElementById("plan-error").textContent.includes("nope")`)

	// Paste the onboarding plan; every action waits for a person.
	p.do("paste the plan",
		chromedp.SetValue(chromedp.CSS("#policy"), "none"),
		chromedp.SetValue(chromedp.CSS("#plan-json"), string(demoworld.OnboardingPlan())),
		chromedp.Click(chromedp.CSS("#submit-plan")))
	p.poll("the recorded plan", `document.querySelectorAll("#actions [data-action]").length === 5 && document.getElementById("run-status").dataset.status === "awaiting_approval"`)
	runID := p.eval(`document.getElementById("run-title").textContent`)
	p.poll("the run's stream", `document.getElementById("conn").textContent === "live"`)
	if n := b.world.Requests("crm") + b.world.Requests("payments") + b.world.Requests("email"); n != 0 {
		t.Fatalf("%d requests before approval", n)
	}
	if p.truth(`document.querySelector("#actions [data-role=resolved]") !== null`) {
		t.Fatal("a resolved-arguments note before anything was approved")
	}

	// Approve the whole plan: the email's references resolve after the
	// approval, so it waits again, and the page says why.
	p.do("approve all", chromedp.Click(chromedp.CSS("#approve-all")))
	p.poll("the email to wait again", `(() => {
		const w = document.querySelector('#actions [data-action="welcome"]');
		return w && w.dataset.status === "pending" && document.getElementById("run-status").dataset.status === "awaiting_approval" && !document.getElementById("approve-all").disabled;
	})()`)
	p.poll("the resolved-arguments note", `(() => {
		const n = document.querySelector('#actions [data-action="welcome"] [data-role=resolved]');
		return n !== null && n.textContent.includes("Arguments resolved: confirm what will be sent");
	})()`)
	if got := p.eval(`document.querySelector('#actions [data-action="welcome"] pre').textContent`); strings.Contains(got, "${") {
		t.Fatalf("the email shown for its second approval still holds a reference: %s", got)
	}
	if n := b.world.Requests("email"); n != 0 {
		t.Fatalf("the email was sent before its second approval (%d requests)", n)
	}
	p.shot("2-resolved-note")
	p.do("approve the resolved email", chromedp.Click(chromedp.CSS(`#actions [data-action="welcome"] [data-op=approve]`)))
	p.poll("the run to complete", `document.getElementById("run-status").dataset.status === "completed"`)
	if p.truth(`document.querySelector("#actions [data-role=resolved]") !== null`) {
		t.Fatal("the resolved-arguments note outlived the approval")
	}
	for _, e := range demoworld.OnboardingEffects {
		if n := b.world.Effect(e); n != 1 {
			t.Fatalf("effect %s = %d, want 1", e, n)
		}
	}
	// Timestamps of the event log stay on one line.
	p.poll("the event log", `document.querySelectorAll("#events .at").length > 5`)
	if bad := p.eval(`[...document.querySelectorAll("#events .at")].filter(e => { const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length !== 1; }).map(e => e.textContent).join(", ")`); bad != "" {
		t.Fatalf("event timestamps wrap: %s", bad)
	}

	// A plan from a file (shown in the editor before it is sent), approved
	// whole by the policy.
	plan := `{"goal": "settings only", "actions": [{"id": "s", "tool": "settings_put", "args": {"account": "c_file", "settings": {"plan": "team"}}}]}`
	file := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(file, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	p.do("pick the plan file",
		chromedp.SetValue(chromedp.CSS("#policy"), "all"),
		chromedp.SetUploadFiles(chromedp.CSS("#plan-file"), []string{file}))
	p.poll("the file's plan in the editor", `document.getElementById("plan-json").value.includes("c_file")`)
	p.do("submit the file's plan", chromedp.Click(chromedp.CSS("#submit-plan")))
	p.poll("the file's run to complete", fmt.Sprintf(`document.getElementById("run-title").textContent !== %q && document.getElementById("run-status").dataset.status === "completed"`, runID))
	if n := b.world.Effect("settings/c_file"); n != 1 {
		t.Fatalf("effect settings/c_file = %d, want 1: %s", n, b.world.Describe())
	}

	// A run with a very long id stays inside the page, in the list and in
	// the run view.
	longID := "run-" + strings.Repeat("0123456789abcdef", 7)
	if code := b.call("POST", "/v1/runs", map[string]any{"run_id": longID, "plan": onboardingPlan(t), "approve": "none"}, nil); code != http.StatusCreated {
		t.Fatalf("creating %s = %d", longID, code)
	}
	p.do("open the long run", chromedp.Navigate(b.hs.URL+"/#run="+longID), chromedp.Reload())
	// Right after the reload the page may not have its elements yet.
	p.poll("the long run", fmt.Sprintf(`document.getElementById("run-title")?.textContent === %q && document.querySelector('.run-item[data-run=%q]') !== null`, longID, longID))
	p.shot("3-long-run-id")
	if !p.truth(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Fatalf("the page scrolls sideways: %s wide in a %s window", p.eval(`String(document.documentElement.scrollWidth)`), p.eval(`String(window.innerWidth)`))
	}
	for _, sel := range []string{"#run-title", ".run-item.current .run-id", "nav"} {
		if !p.truth(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e.scrollWidth <= e.clientWidth + 1 && e.getBoundingClientRect().right <= window.innerWidth; })()`, sel)) {
			t.Fatalf("%s overflows its box", sel)
		}
	}
}
