package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/evals/testextra"
	"github.com/docketrun/docket/ledger"
)

// chromiumPath is where .ci/run installs Chromium (apt-get install chromium).
const chromiumPath = "/usr/bin/chromium"

// flakyEmail forwards welcome emails to the demo world, except those for
// Globex: it reads them and drops the connection, so the outcome of that
// at-most-once send is unknown and a person must resolve it.
func flakyEmail(t *testing.T, w *demoworld.World) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("globex")) {
			if conn, _, err := rw.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		resp, err := http.Post(w.Email.URL+r.URL.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(resp.StatusCode)
		io.Copy(rw, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The review page in a real headless Chromium: sign in with the token,
// plan a goal with the demo model, approve in the page and watch every action
// succeed live, then resolve a needs-review action while a second tab on the
// same run follows along.
func TestBrowserReview(t *testing.T) {
	if _, err := exec.LookPath(chromiumPath); err != nil {
		testextra.Missing(t, "Chromium at "+chromiumPath+" ("+err.Error()+")",
			"apt-get install -y chromium (Debian's package; `make test` installs it when it runs as root or with passwordless sudo)")
	}
	var emailURL string
	b := setup(t, options{toolsFile: func(w *demoworld.World) []byte {
		emailURL = flakyEmail(t, w)
		return []byte(strings.Replace(string(w.ToolsFile(demoworld.ToolsOptions{Timeout: "2s"})), w.Email.URL, emailURL, 1))
	}})

	ctx := startChromium(t, 1366, 900)
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTime()

	shot := func(name string) {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Logf("screenshot %s: %v", name, err)
			return
		}
		path := filepath.Join(t.ArtifactDir(), name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Logf("screenshot %s: %v", name, err)
			return
		}
		t.Logf("screenshot: %s", path)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			shot("failed")
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll := func(tabCtx context.Context, what, predicate string) {
		t.Helper()
		if _, err := chromedp.Run(tabCtx, chromedp.Poll[bool](predicate)); err != nil {
			shot("failed")
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	eval := func(tabCtx context.Context, expr string) string {
		t.Helper()
		s, err := chromedp.Run(tabCtx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		return s
	}

	// Sign in: the token is typed once and traded for the session cookie; it
	// never appears in a URL.
	do("open the page", chromedp.Navigate(b.hs.URL+"/"))
	poll(ctx, "the sign-in form", `!document.getElementById("signin").hidden`)
	do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), testToken), chromedp.KeyEvent("\r"))
	poll(ctx, "the signed-in page", `!document.getElementById("app").hidden && document.getElementById("who").textContent === "token:alice"`)
	if u := eval(ctx, `location.href`); strings.Contains(u, testToken) {
		t.Fatalf("the token is in the address bar: %s", u)
	}
	if c := eval(ctx, `document.cookie`); strings.Contains(c, "docket_session") {
		t.Fatalf("the session cookie is readable by scripts: %q", c)
	}

	// Plan a goal with the demo model; every action waits for a person.
	do("plan a goal",
		chromedp.SetValue(chromedp.CSS("#policy"), "none"),
		chromedp.SendKeys(chromedp.CSS("#goal"), "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack"),
		chromedp.Click(chromedp.CSS("#create")))
	poll(ctx, "the plan", `document.querySelectorAll("#actions [data-action][data-status=pending]").length === 3 && document.getElementById("run-status").dataset.status === "awaiting_approval"`)
	if n := b.world.Requests("crm") + b.world.Requests("payments") + b.world.Requests("email"); n != 0 {
		t.Fatalf("%d requests before approval", n)
	}
	if got := eval(ctx, `document.querySelector("#actions [data-action] .preview pre").textContent`); !strings.HasPrefix(got, "POST "+b.world.CRM.URL+"/contacts") {
		t.Fatalf("request preview = %q", got)
	}
	shot("1-plan")

	// Approve with the keyboard: focus the button, press Enter. Approve again
	// when the email comes back with its reference resolved.
	for range 3 {
		do("approve", chromedp.Focus(chromedp.CSS("#approve-all")), chromedp.KeyEvent("\r"))
		// The answer shows nothing waiting any more.
		poll(ctx, "the approval", `document.getElementById("approve-all").disabled`)
		poll(ctx, "the run to stop", `(() => {
			const s = document.getElementById("run-status").dataset.status;
			const waiting = document.querySelectorAll("#actions [data-status=pending]").length;
			return s === "completed" || (s === "awaiting_approval" && waiting > 0 && !document.getElementById("approve-all").disabled);
		})()`)
		if eval(ctx, `document.getElementById("run-status").dataset.status`) == "completed" {
			break
		}
	}
	poll(ctx, "every action succeeded", `[...document.querySelectorAll("#actions [data-action]")].every(a => a.dataset.status === "succeeded") && document.querySelectorAll("#actions [data-action]").length === 3`)
	poll(ctx, "the event log", `[...document.querySelectorAll("#events .etype")].some(e => e.textContent === "run.completed")`)
	shot("2-completed")
	for _, e := range []string{"crm/billing@acme.example", "payments/onboarding-acme", "email/billing@acme.example/welcome-pack"} {
		if n := b.world.Effect(e); n != 1 {
			t.Fatalf("effect %s = %d, want 1", e, n)
		}
	}

	// A second run whose email outcome is unknown, followed in two tabs.
	do("plan a second goal",
		chromedp.SetValue(chromedp.CSS("#policy"), "all"),
		chromedp.SendKeys(chromedp.CSS("#goal"), "onboard Globex: create the CRM contact, invoice 300 EUR, email the welcome pack"),
		chromedp.Click(chromedp.CSS("#create")))
	poll(ctx, "the email in needs_review", `document.querySelector("#actions [data-action][data-status=needs_review]") !== null`)
	runID := eval(ctx, `document.getElementById("run-title").textContent`)
	tab2, cancelTab2 := chromedp.NewContext(ctx)
	defer cancelTab2()
	if err := chromedp.Do(tab2, chromedp.Navigate(b.hs.URL+"/#run="+runID)); err != nil {
		t.Fatalf("second tab: %v", err)
	}
	poll(tab2, "the second tab to show the run", `document.getElementById("conn").textContent === "live" && document.querySelector("#actions [data-action][data-status=needs_review]") !== null`)
	shot("3-needs-review")

	do("mark the email done",
		chromedp.Click(chromedp.CSS(`#actions [data-status=needs_review] [data-op=done]`)),
		chromedp.WaitVisible(chromedp.CSS(`#actions textarea.json`)))
	do("type the output",
		chromedp.SetValue(chromedp.CSS(`#actions textarea.json`), `{"message_id": "msg_sent_by_hand"}`),
		chromedp.Click(chromedp.CSS(`#actions [data-op=save-done]`)))
	poll(ctx, "the run to complete", `document.getElementById("run-status").dataset.status === "completed"`)
	poll(tab2, "the second tab to follow live", `document.getElementById("run-status").dataset.status === "completed" && [...document.querySelectorAll("#actions [data-action]")].every(a => a.dataset.status === "succeeded")`)
	shot("4-resolved")

	// Replay with edits from the page: a new invoice reference; only the
	// invoice (and what depends on its output) runs again.
	do("open the replay editor", chromedp.Click(chromedp.CSS("#replay")), chromedp.WaitVisible(chromedp.CSS("#replay-plan")))
	edited := eval(ctx, `(() => { const t = document.getElementById("replay-plan"); t.value = t.value.replace("onboarding-globex", "onboarding-globex-2"); return t.value; })()`)
	if !strings.Contains(edited, "onboarding-globex-2") {
		t.Fatalf("replay editor holds %q", edited)
	}
	do("record the revision", chromedp.Click(chromedp.CSS("#replay-save")))
	poll(ctx, "revision 2 to complete", `document.getElementById("run-rev").textContent.startsWith("revision 2") && document.getElementById("run-status").dataset.status === "completed"`)
	shot("5-replayed")
	if b.world.Effect("payments/onboarding-globex-2") != 1 || b.world.Effect("crm/billing@globex.example") != 1 {
		t.Fatalf("after the replay: %s", b.world.Describe())
	}

	doc, err := b.led.Doc(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Run.Status != ledger.RunCompleted {
		t.Fatalf("run %s is %s", runID, doc.Run.Status)
	}
	for _, a := range doc.Actions {
		if a.Tool == "email_send" {
			var out map[string]string
			json.Unmarshal(a.Output, &out)
			if out["message_id"] != "msg_sent_by_hand" {
				t.Fatalf("email output = %s", a.Output)
			}
		}
	}
	evs, err := b.led.Events(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	resolvedBy := false
	for _, ev := range evs {
		resolvedBy = resolvedBy || (ev.Type == "action.resolved" && strings.Contains(string(ev.Data), "token:alice"))
	}
	if !resolvedBy {
		t.Fatal("no action.resolved event naming the reviewer")
	}
}
