package toolsfile

import (
	"encoding/json"
	"time"

	"github.com/docketrun/docket/tools"
)

// retryFields are the fields of a tool's "retry" block.
var retryFields = []string{"attempts", "max_backoff", "budget"}

// retry parses a tool's "retry" block (tools.Spec.Retry): attempts a whole
// number of at least 1, max_backoff and budget positive durations, the
// first no longer than the second. A field left out keeps the executor's
// setting.
func (p *parser) retry(raw json.RawMessage, where string) tools.Retry {
	m := p.object(raw, where, retryFields, nil)
	if m == nil {
		return tools.Retry{}
	}
	var r tools.Retry
	if v, ok := m["attempts"]; ok {
		if err := json.Unmarshal(v, &r.Attempts); err != nil || r.Attempts < 1 {
			p.add(join(where, "attempts"), "must be a whole number of at least 1 (the first attempt counts: 1 never retries), got %s", v)
			r.Attempts = 0
		}
	}
	r.MaxBackoff = p.positiveDuration(m, where, "max_backoff")
	r.Budget = p.positiveDuration(m, where, "budget")
	if r.MaxBackoff > 0 && r.Budget > 0 && r.MaxBackoff > r.Budget {
		p.add(join(where, "max_backoff"), "%v is longer than budget %v: no wait may reach past the budget", r.MaxBackoff, r.Budget)
	}
	return r
}

// positiveDuration is duration, refusing "0s" too.
func (p *parser) positiveDuration(m map[string]json.RawMessage, where, key string) time.Duration {
	n := len(p.problems)
	d := p.duration(m, where, key)
	if _, ok := m[key]; ok && d == 0 && len(p.problems) == n {
		p.add(join(where, key), `must be longer than 0 (want a Go duration such as "30s")`)
	}
	return d
}
