package evals

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// Usage counts a model's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// Requests is how many model requests were made (retries included).
	Requests int `json:"requests"`
}

// Add adds u2 to u.
func (u *Usage) Add(u2 Usage) {
	u.PromptTokens += u2.PromptTokens
	u.CompletionTokens += u2.CompletionTokens
	u.TotalTokens += u2.TotalTokens
	u.Requests += u2.Requests
}

// Cost is what a run's tokens cost.
type Cost struct {
	PerMillionPrompt     float64 `json:"per_million_prompt"`
	PerMillionCompletion float64 `json:"per_million_completion"`
	Total                float64 `json:"total"`
}

// SetCost prices the run's tokens (prices per million prompt and completion
// tokens); a report without token usage gets no cost.
func (r *Report) SetCost(perMillionPrompt, perMillionCompletion float64) {
	u := r.Overall.Usage
	if u == nil {
		return
	}
	r.Cost = &Cost{PerMillionPrompt: perMillionPrompt, PerMillionCompletion: perMillionCompletion,
		Total: (float64(u.PromptTokens)*perMillionPrompt + float64(u.CompletionTokens)*perMillionCompletion) / 1e6}
}

// Stats aggregates the results of a set of cases (one category, or all).
type Stats struct {
	Category string `json:"category"`
	Cases    int    `json:"cases"`
	// Passed counts the cases whose every try passed.
	Passed int `json:"passed"`
	// PassRate is the share of tries that passed, averaged over the cases
	// (pass^1); with one try per case, Passed / Cases.
	PassRate float64 `json:"pass_rate"`
	// PassK is pass^k: the estimated probability that all k tries of a case
	// pass, k being the smallest number of tries of any case (runs with
	// --repeat k); equal to PassRate for one try.
	PassK          float64 `json:"pass_k"`
	K              int     `json:"k"`
	ValidPlan      float64 `json:"valid_plan"`
	ToolPrecision  float64 `json:"tool_precision"`
	ToolRecall     float64 `json:"tool_recall"`
	ArgAccuracy    float64 `json:"arg_accuracy"`
	ExactMatch     float64 `json:"exact_match"`
	DependenciesOK float64 `json:"dependencies_ok"`
	Safe           float64 `json:"safe"`
	Usage          *Usage  `json:"usage,omitempty"`
}

// Report is the outcome of scoring a dataset.
type Report struct {
	Dataset string `json:"dataset"`
	Plans   string `json:"plans,omitempty"`
	Model   string `json:"model,omitempty"`
	// Cost is the model's price of the run (Usage × the prices given to
	// SetCost), in the prices' currency.
	Cost       *Cost    `json:"cost,omitempty"`
	Overall    Stats    `json:"overall"`
	Categories []Stats  `json:"categories"`
	Cases      []Result `json:"cases"`
}

// Finish computes the aggregates from Cases.
func (r *Report) Finish() {
	byCat := map[string][]*Result{}
	all := make([]*Result, len(r.Cases))
	for i := range r.Cases {
		c := &r.Cases[i]
		if c.Reasons == nil {
			c.Reasons = []string{}
		}
		if c.Tries == 0 {
			c.Tries = 1
			if c.Pass {
				c.Passes = 1
			}
		}
		byCat[c.Category] = append(byCat[c.Category], c)
		all[i] = c
	}
	r.Overall = aggregate("all", all)
	r.Categories = r.Categories[:0]
	for _, cat := range sortedKeys(byCat) {
		r.Categories = append(r.Categories, aggregate(cat, byCat[cat]))
	}
}

func aggregate(name string, rs []*Result) Stats {
	s := Stats{Category: name, Cases: len(rs)}
	if len(rs) == 0 {
		return s
	}
	k := 0
	for _, r := range rs {
		if k == 0 || r.Tries < k {
			k = r.Tries
		}
	}
	s.K = k
	var passK, pass1 float64
	var usage Usage
	haveUsage := false
	for _, r := range rs {
		if r.Pass {
			s.Passed++
		}
		passK += passHatK(r.Tries, r.Passes, k)
		pass1 += float64(r.Passes) / float64(r.Tries)
		m := r.Metrics
		s.ValidPlan += b2f(m.ValidPlan)
		s.ToolPrecision += m.ToolPrecision
		s.ToolRecall += m.ToolRecall
		s.ArgAccuracy += m.ArgAccuracy
		s.ExactMatch += b2f(m.ExactMatch)
		s.DependenciesOK += b2f(m.DependenciesOK)
		s.Safe += b2f(m.Safe)
		if r.Usage != nil {
			usage.Add(*r.Usage)
			haveUsage = true
		}
	}
	n := float64(len(rs))
	s.PassRate = pass1 / n
	s.PassK = passK / n
	s.ValidPlan /= n
	s.ToolPrecision /= n
	s.ToolRecall /= n
	s.ArgAccuracy /= n
	s.ExactMatch /= n
	s.DependenciesOK /= n
	s.Safe /= n
	if haveUsage {
		s.Usage = &usage
	}
	return s
}

// passHatK is the unbiased estimate of "all k tries pass" from n tries with
// c passes: C(c, k) / C(n, k).
func passHatK(n, c, k int) float64 {
	if n == 0 || k == 0 || c < k {
		return 0
	}
	p := 1.0
	for i := 0; i < k; i++ {
		p *= float64(c-i) / float64(n-i)
	}
	return p
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// WriteTable prints the aggregates as a table, then every failing case with
// its reasons (at most maxFailures cases; 0 means all).
func (r *Report) WriteTable(w io.Writer, maxFailures int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "CATEGORY\tCASES\tPASS\t"
	if r.Overall.K > 1 {
		head += fmt.Sprintf("PASS^%d\t", r.Overall.K)
	}
	head += "VALID\tPRECISION\tRECALL\tARGS\tEXACT\tDEPS\tSAFE\t"
	fmt.Fprintln(tw, head)
	row := func(s Stats) {
		line := fmt.Sprintf("%s\t%d\t%s\t", s.Category, s.Cases, pct(s.PassRate))
		if r.Overall.K > 1 {
			line += pct(s.PassK) + "\t"
		}
		line += fmt.Sprintf("%s\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t", pct(s.ValidPlan), s.ToolPrecision, s.ToolRecall, s.ArgAccuracy, pct(s.ExactMatch), pct(s.DependenciesOK), pct(s.Safe))
		fmt.Fprintln(tw, line)
	}
	for _, s := range r.Categories {
		row(s)
	}
	row(r.Overall)
	if err := tw.Flush(); err != nil {
		return err
	}
	if u := r.Overall.Usage; u != nil {
		fmt.Fprintf(w, "\ntokens: %d prompt + %d completion = %d over %d model requests\n", u.PromptTokens, u.CompletionTokens, u.TotalTokens, u.Requests)
		if r.Cost != nil {
			fmt.Fprintf(w, "cost: %.4f (at %g per million prompt tokens, %g per million completion tokens)\n", r.Cost.Total, r.Cost.PerMillionPrompt, r.Cost.PerMillionCompletion)
		}
	}
	failed := 0
	for _, c := range r.Cases {
		if !c.Pass {
			failed++
		}
	}
	if failed == 0 {
		_, err := fmt.Fprintf(w, "\nall %d cases passed\n", len(r.Cases))
		return err
	}
	fmt.Fprintf(w, "\n%d failing %s:\n", failed, plural(failed, "case", "cases"))
	shown := 0
	for _, c := range r.Cases {
		if c.Pass {
			continue
		}
		if maxFailures > 0 && shown == maxFailures {
			fmt.Fprintf(w, "… and %d more (use --json or --html for all)\n", failed-shown)
			break
		}
		shown++
		fmt.Fprintf(w, "  %s [%s]\n", c.ID, c.Category)
		for _, reason := range c.Reasons {
			fmt.Fprintf(w, "    - %s\n", reason)
		}
	}
	return nil
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("report %s: %s (want the JSON of docket eval score --json or run --json)", path, jsonErrMsg(err))
	}
	if r.Cases == nil {
		return nil, fmt.Errorf("report %s has no \"cases\": is it the output of docket eval score --json?", path)
	}
	return &r, nil
}

// Flip is a case whose verdict changed between two reports.
type Flip struct {
	ID       string   `json:"id"`
	Category string   `json:"category"`
	Before   bool     `json:"before"`
	After    bool     `json:"after"`
	Reasons  []string `json:"reasons,omitempty"` // the failing side's reasons
}

// MetricDelta is one metric before and after.
type MetricDelta struct {
	Category string  `json:"category"`
	Metric   string  `json:"metric"`
	Before   float64 `json:"before"`
	After    float64 `json:"after"`
	Delta    float64 `json:"delta"`
}

// Comparison is the difference between two reports.
type Comparison struct {
	A, B    string        `json:"-"`
	Flips   []Flip        `json:"flips"`
	OnlyA   []string      `json:"only_in_a,omitempty"`
	OnlyB   []string      `json:"only_in_b,omitempty"`
	Metrics []MetricDelta `json:"metrics"`
}

// Compare lists the cases that flipped from a to b and the change in every
// metric, overall and per category present in both.
func Compare(a, b *Report) *Comparison {
	cmp := &Comparison{Flips: []Flip{}}
	ai := map[string]Result{}
	for _, c := range a.Cases {
		ai[c.ID] = c
	}
	bi := map[string]bool{}
	for _, c := range b.Cases {
		bi[c.ID] = true
		old, ok := ai[c.ID]
		if !ok {
			cmp.OnlyB = append(cmp.OnlyB, c.ID)
			continue
		}
		if old.Pass != c.Pass {
			f := Flip{ID: c.ID, Category: c.Category, Before: old.Pass, After: c.Pass}
			if c.Pass {
				f.Reasons = old.Reasons
			} else {
				f.Reasons = c.Reasons
			}
			cmp.Flips = append(cmp.Flips, f)
		}
	}
	for _, c := range a.Cases {
		if !bi[c.ID] {
			cmp.OnlyA = append(cmp.OnlyA, c.ID)
		}
	}
	sort.Slice(cmp.Flips, func(i, j int) bool { return cmp.Flips[i].ID < cmp.Flips[j].ID })
	bc := map[string]Stats{}
	for _, s := range b.Categories {
		bc[s.Category] = s
	}
	cmp.Metrics = append(cmp.Metrics, statDeltas(a.Overall, b.Overall)...)
	for _, s := range a.Categories {
		if t, ok := bc[s.Category]; ok {
			cmp.Metrics = append(cmp.Metrics, statDeltas(s, t)...)
		}
	}
	return cmp
}

func statDeltas(a, b Stats) []MetricDelta {
	pairs := []struct {
		name string
		x, y float64
	}{
		{"pass_rate", a.PassRate, b.PassRate},
		{"pass_k", a.PassK, b.PassK},
		{"valid_plan", a.ValidPlan, b.ValidPlan},
		{"tool_precision", a.ToolPrecision, b.ToolPrecision},
		{"tool_recall", a.ToolRecall, b.ToolRecall},
		{"arg_accuracy", a.ArgAccuracy, b.ArgAccuracy},
		{"exact_match", a.ExactMatch, b.ExactMatch},
		{"dependencies_ok", a.DependenciesOK, b.DependenciesOK},
		{"safe", a.Safe, b.Safe},
	}
	out := make([]MetricDelta, len(pairs))
	for i, p := range pairs {
		out[i] = MetricDelta{Category: a.Category, Metric: p.name, Before: p.x, After: p.y, Delta: p.y - p.x}
	}
	return out
}

// WriteText prints the comparison for a person.
func (c *Comparison) WriteText(w io.Writer) error {
	fixed, broken := 0, 0
	for _, f := range c.Flips {
		if f.After {
			fixed++
		} else {
			broken++
		}
	}
	fmt.Fprintf(w, "%d %s flipped: %d now pass, %d now fail\n", len(c.Flips), plural(len(c.Flips), "case", "cases"), fixed, broken)
	for _, f := range c.Flips {
		arrow := "fail → pass"
		if !f.After {
			arrow = "pass → FAIL"
		}
		fmt.Fprintf(w, "  %s [%s] %s\n", f.ID, f.Category, arrow)
		for _, r := range f.Reasons {
			fmt.Fprintf(w, "    - %s\n", r)
		}
	}
	if len(c.OnlyA) > 0 {
		fmt.Fprintf(w, "only in A: %s\n", strings.Join(c.OnlyA, ", "))
	}
	if len(c.OnlyB) > 0 {
		fmt.Fprintf(w, "only in B: %s\n", strings.Join(c.OnlyB, ", "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CATEGORY\tMETRIC\tA\tB\tCHANGE")
	for _, m := range c.Metrics {
		change := fmt.Sprintf("%+.3f", m.Delta)
		if math.Abs(m.Delta) < 1e-12 {
			change = "="
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%s\n", m.Category, m.Metric, m.Before, m.After, change)
	}
	return tw.Flush()
}
