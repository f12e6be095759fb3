package evals

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressTerminalAndPlain(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	var term bytes.Buffer
	p := newProgress(&term, true, 4, clock)
	for i := 0; i < 4; i++ {
		now = now.Add(10 * time.Second)
		p.step(i != 2)
	}
	p.finish()
	out := term.String()
	if !strings.Contains(out, "\r\033[K[=======                       ] 1/4  25% ETA 30s") || !strings.Contains(out, "4/4 100% ETA 0s, 1 planner error") || !strings.HasSuffix(out, "\n") {
		t.Errorf("terminal progress: %q", out)
	}
	var plain bytes.Buffer
	now = time.Unix(0, 0)
	p = newProgress(&plain, false, 100, clock)
	for i := 0; i < 100; i++ {
		now = now.Add(time.Second)
		p.step(true)
	}
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 20 || strings.Contains(plain.String(), "\r") || lines[9] != "eval: 50/100 planned (50%), elapsed 50s, eta 50s" {
		t.Errorf("plain progress (%d lines): %q", len(lines), lines)
	}
}

func TestHTMLReportEscapesAndCharts(t *testing.T) {
	t.Parallel()
	rep := &Report{Dataset: "d<1>.jsonl", Cases: []Result{
		{ID: "a", Category: "crm", Pass: true},
		{ID: "b<script>", Category: "crm", Reasons: []string{`argument x is "<script>alert(1)</script>", expected 1`}},
		{ID: "c", Category: "payments", Pass: true},
	}}
	rep.Finish()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b, ""); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if strings.Contains(html, "<script>") || !strings.Contains(html, "&lt;script&gt;alert(1)") {
		t.Errorf("reasons are not escaped")
	}
	if !strings.Contains(html, `width="240.0"`) || !strings.Contains(html, `width="480.0"`) || !strings.Contains(html, "2 passed (66.7%)") {
		t.Errorf("chart or summary wrong:\n%s", html)
	}
	if strings.Contains(html, "http://") || strings.Contains(html, "https://") || strings.Contains(html, "<link") {
		t.Errorf("the report is not self-contained")
	}
}

func TestCompareFlipsAndDeltas(t *testing.T) {
	t.Parallel()
	a := &Report{Cases: []Result{{ID: "x", Category: "c", Pass: true}, {ID: "y", Category: "c", Reasons: []string{"bad"}}, {ID: "gone", Category: "c"}}}
	b := &Report{Cases: []Result{{ID: "x", Category: "c", Reasons: []string{"now bad"}}, {ID: "y", Category: "c", Pass: true}, {ID: "new", Category: "c", Pass: true}}}
	a.Finish()
	b.Finish()
	cmp := Compare(a, b)
	if len(cmp.Flips) != 2 || cmp.Flips[0].ID != "x" || cmp.Flips[0].After || cmp.Flips[0].Reasons[0] != "now bad" || !cmp.Flips[1].After || cmp.Flips[1].Reasons[0] != "bad" {
		t.Errorf("flips %+v", cmp.Flips)
	}
	if len(cmp.OnlyA) != 1 || cmp.OnlyA[0] != "gone" || len(cmp.OnlyB) != 1 || cmp.OnlyB[0] != "new" {
		t.Errorf("only in A %v, only in B %v", cmp.OnlyA, cmp.OnlyB)
	}
	var text bytes.Buffer
	cmp.WriteText(&text)
	if !strings.Contains(text.String(), "2 cases flipped: 1 now pass, 1 now fail") || !strings.Contains(text.String(), "pass_rate") {
		t.Errorf("text:\n%s", text.String())
	}
	for _, m := range cmp.Metrics {
		if m.Category == "all" && m.Metric == "pass_rate" && (m.Before < 0.333 || m.Before > 0.334 || m.After < 0.666 || m.After > 0.667) {
			t.Errorf("pass rate delta %+v", m)
		}
	}
}
