package evals

import (
	"fmt"
	"html/template"
	"io"
	"math"
)

// htmlReport is the template's data.
type htmlReport struct {
	*Report
	Title    string
	Chart    []chartBar
	ChartH   int
	Failures []Result
	Passed   int
}

type chartBar struct {
	Category string
	Rate     string
	Y        int // top of the bar's row
	Width    float64
	Colour   string
	Cases    int
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": pct,
	"f3":  func(f float64) string { return fmt.Sprintf("%.3f", f) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;padding:0 1rem;color:#1d232a}
h1{font-size:1.4rem;margin-bottom:.2rem}h2{font-size:1.1rem;margin-top:2rem}
.meta{color:#5b6570}
table{border-collapse:collapse;width:100%;margin-top:.5rem}
th,td{border-bottom:1px solid #e3e7eb;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f5f7f9;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:600;border-top:2px solid #c9d0d6}
ul{margin:.2rem 0;padding-left:1.1rem}
code{font-size:12px;background:#f1f3f5;padding:0 .2rem;border-radius:3px}
.ok{color:#17803d}.bad{color:#b42318}
svg text{font:12px system-ui,sans-serif}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="meta">dataset <code>{{.Dataset}}</code>{{if .Plans}} · plans <code>{{.Plans}}</code>{{end}}{{if .Model}} · model <code>{{.Model}}</code>{{end}} ·
{{.Overall.Cases}} cases, <span class="{{if eq .Passed .Overall.Cases}}ok{{else}}bad{{end}}">{{.Passed}} passed ({{pct .Overall.PassRate}})</span>{{if gt .Overall.K 1}} · pass^{{.Overall.K}} {{pct .Overall.PassK}}{{end}}</p>

<h2>Pass rate by category</h2>
<svg role="img" aria-label="pass rate by category" width="100%" viewBox="0 0 760 {{.ChartH}}" preserveAspectRatio="xMinYMin meet">
{{range .Chart}}<text x="0" y="{{.Y}}" dy="15">{{.Category}}</text>
<rect x="200" y="{{.Y}}" width="480" height="20" fill="#eef1f4"/>
<rect x="200" y="{{.Y}}" width="{{printf "%.1f" .Width}}" height="20" fill="{{.Colour}}"><title>{{.Category}}: {{.Rate}} of {{.Cases}}</title></rect>
<text x="690" y="{{.Y}}" dy="15">{{.Rate}}</text>
{{end}}</svg>

<h2>Metrics</h2>
<table><thead><tr><th>category</th><th>cases</th><th>pass</th>{{if gt .Overall.K 1}}<th>pass^{{.Overall.K}}</th>{{end}}<th>valid plan</th><th>tool precision</th><th>tool recall</th><th>argument accuracy</th><th>exact match</th><th>dependencies</th><th>safe</th></tr></thead><tbody>
{{range .Categories}}<tr><td>{{.Category}}</td><td class="n">{{.Cases}}</td><td class="n">{{pct .PassRate}}</td>{{if gt $.Overall.K 1}}<td class="n">{{pct .PassK}}</td>{{end}}<td class="n">{{pct .ValidPlan}}</td><td class="n">{{f3 .ToolPrecision}}</td><td class="n">{{f3 .ToolRecall}}</td><td class="n">{{f3 .ArgAccuracy}}</td><td class="n">{{pct .ExactMatch}}</td><td class="n">{{pct .DependenciesOK}}</td><td class="n">{{pct .Safe}}</td></tr>
{{end}}{{with .Overall}}<tr class="total"><td>all</td><td class="n">{{.Cases}}</td><td class="n">{{pct .PassRate}}</td>{{if gt .K 1}}<td class="n">{{pct .PassK}}</td>{{end}}<td class="n">{{pct .ValidPlan}}</td><td class="n">{{f3 .ToolPrecision}}</td><td class="n">{{f3 .ToolRecall}}</td><td class="n">{{f3 .ArgAccuracy}}</td><td class="n">{{pct .ExactMatch}}</td><td class="n">{{pct .DependenciesOK}}</td><td class="n">{{pct .Safe}}</td></tr>{{end}}
</tbody></table>
{{with .Overall.Usage}}<p class="meta">tokens: {{.PromptTokens}} prompt + {{.CompletionTokens}} completion = {{.TotalTokens}} over {{.Requests}} model requests{{with $.Cost}} · cost {{printf "%.4f" .Total}}{{end}}</p>{{end}}

<h2>Failures ({{len .Failures}})</h2>
{{if .Failures}}<table><thead><tr><th>case</th><th>category</th><th>reasons</th></tr></thead><tbody>
{{range .Failures}}<tr><td><code>{{.ID}}</code>{{if gt .Tries 1}}<br><span class="meta">{{.Passes}}/{{.Tries}} tries passed</span>{{end}}</td><td>{{.Category}}</td><td><ul>{{range .Reasons}}<li>{{.}}</li>{{end}}</ul></td></tr>
{{end}}</tbody></table>{{else}}<p class="ok">Every case passed.</p>{{end}}
</body></html>
`))

// WriteHTML writes a self-contained HTML page (no scripts, no external
// files): a chart of the pass rate by category, the metrics table and every
// failing case with its reasons.
func (r *Report) WriteHTML(w io.Writer, title string) error {
	if title == "" {
		title = "docket eval report"
	}
	d := htmlReport{Report: r, Title: title}
	for _, c := range r.Cases {
		if c.Pass {
			d.Passed++
		} else {
			d.Failures = append(d.Failures, c)
		}
	}
	for i, s := range r.Categories {
		colour := "#17803d"
		switch {
		case s.PassRate < 0.5:
			colour = "#b42318"
		case s.PassRate < 0.9:
			colour = "#c27c0e"
		}
		d.Chart = append(d.Chart, chartBar{
			Category: clipText(s.Category, 28), Rate: pct(s.PassRate), Y: 4 + 28*i,
			Width: math.Round(480*s.PassRate*10) / 10, Colour: colour, Cases: s.Cases,
		})
	}
	d.ChartH = 8 + 28*len(r.Categories)
	return htmlTmpl.Execute(w, d)
}
