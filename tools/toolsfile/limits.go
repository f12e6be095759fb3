package toolsfile

import (
	"encoding/json"

	"github.com/docketrun/docket/tools"
)

// maxRate is the largest "rate.limit": the ledger keeps the start time of
// each of a tool's last limit calls (ledger.MaxRate).
const maxRate = 1000

// rateFields are the fields of a tool's "rate" block.
var rateFields = []string{"per", "limit"}

// limits parses a tool's "max_in_flight" (a whole number of at least 1) and
// "rate" ({"per": a positive duration, "limit": a whole number from 1 to
// 1000}) into tools.Spec.Limits; where is the tool's place ("" for an HTTP
// tool, whose problems are named by the tool).
func (p *parser) limits(m map[string]json.RawMessage, where string) tools.Limits {
	var l tools.Limits
	if v, ok := m["max_in_flight"]; ok {
		if err := json.Unmarshal(v, &l.MaxInFlight); err != nil || l.MaxInFlight < 1 {
			p.add(join(where, "max_in_flight"), "must be a whole number of at least 1 (how many calls of the tool may be in flight at once), got %s", v)
			l.MaxInFlight = 0
		}
	}
	raw, ok := m["rate"]
	if !ok {
		return l
	}
	rw := join(where, "rate")
	r := p.object(raw, rw, rateFields, rateFields)
	if r == nil {
		return l
	}
	if v, ok := r["limit"]; ok {
		if err := json.Unmarshal(v, &l.Rate); err != nil || l.Rate < 1 || l.Rate > maxRate {
			p.add(join(rw, "limit"), "must be a whole number from 1 to %d (how many calls may start in any window of per), got %s", maxRate, v)
			l.Rate = 0
		}
	}
	if _, ok := r["per"]; ok {
		l.Per = p.positiveDuration(r, rw, "per")
	}
	if l.Rate == 0 || l.Per == 0 {
		l.Rate, l.Per = 0, 0
	}
	return l
}
