package ui_test

import (
	"testing"
)

// TestBrowserHashRoutes: once the page has started, changing its address's
// hash (a link, the address bar, back and forward) opens what it names: the
// inbox, or a run.
func TestBrowserHashRoutes(t *testing.T) {
	b := setup(t, options{})
	b.createPayMail("r-hash")
	p := openBrowser(t, 1280, 900)
	p.signIn(b.hs.URL)
	// Started: the runs list is shown (the page routes its first hash right
	// after it, in the same task).
	p.poll("the runs list", `document.querySelector('#runs [data-run="r-hash"]') !== null`)
	p.eval(`(location.hash = "#inbox", "")`)
	p.poll("the inbox view", `!document.getElementById("inbox-view").hidden && document.getElementById("run-view").hidden`)
	p.eval(`(location.hash = "#run=r-hash", "")`)
	p.poll("the run view", `!document.getElementById("run-view").hidden && document.getElementById("inbox-view").hidden`)
}
